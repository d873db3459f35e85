"""Addition with index hints (data/tasks.py: add_index_hints), with hand-worked examples."""

import numpy as np
import pytest

from relpos_jax.data import pipeline
from relpos_jax.data import tasks

TEN = 10  # base 10: symbols 0-9 are digits, 10 is "+", 11 + k is hint h_k


class _ScriptedRng:
  """Returns scripted draws in order (each `integers` call takes the next one)."""

  def __init__(self, *draws):
    self.draws = list(draws)

  def integers(self, low, high=None, size=None, dtype=None):
    out = self.draws.pop(0)
    if size is not None:
      assert len(out) == size and all(low <= v < high for v in out)
      return np.asarray(out, dtype or np.int64)
    assert low <= out < high
    return out


def test_add_digits_hand_worked():
  np.testing.assert_array_equal(tasks.add_digits(np.array([9, 9]), np.array([3]), 10), [2, 0, 1])
  np.testing.assert_array_equal(tasks.add_digits(np.array([1]), np.array([2]), 10), [3, 0])
  np.testing.assert_array_equal(tasks.add_digits(np.array([1, 1]), np.array([1]), 2), [0, 0, 1])


def test_index_hinted_hand_worked():
  np.testing.assert_array_equal(tasks.index_hinted(np.array([7, 0]), 3, TEN), [14, 7, 15, 0])


def test_57_plus_8_with_hints_from_h3():
  """n_a = 2, a = 57 -> [7, 5], b = 8 -> [8], sum 65 -> [5, 6, 0]; offset 3: hints h3, h4, h5."""
  rng = _ScriptedRng(2, [7, 5], [8], 3)
  inputs, targets = tasks.add_index_hints(rng, 7, TEN)
  h3, h4, h5 = 14, 15, 16
  np.testing.assert_array_equal(inputs, [h3, 7, h4, 5, TEN, h3, 8])
  np.testing.assert_array_equal(targets, [h3, 5, h4, 6, h5, 0])
  words = tasks.symbols("add_index_hints", TEN)
  assert " ".join(words[s] for s in inputs) == "h3 7 h4 5 + h3 8"
  assert " ".join(words[s] for s in targets) == "h3 5 h4 6 h5 0"


def test_carry_into_a_new_digit_keeps_the_hints_aligned():
  """999 + 1 (hints from h0): [9,9,9] + [1] = [0,0,0,1]."""
  rng = _ScriptedRng(3, [9, 9, 9], [1], 0)
  inputs, targets = tasks.add_index_hints(rng, 9, TEN)
  np.testing.assert_array_equal(inputs, [11, 9, 12, 9, 13, 9, TEN, 11, 1])
  np.testing.assert_array_equal(targets, [11, 0, 12, 0, 13, 0, 14, 1])


def _value(tokens, base=TEN):
  """(digits, hints) of a hinted number, digits least significant first."""
  tokens = np.asarray(tokens)
  return tokens[1::2], tokens[0::2] - base - 1


@pytest.mark.parametrize("length", [5, 11, 41, 81])
def test_random_examples_are_correct_sums_with_consecutive_aligned_hints(length):
  for x, y in tasks.eval_examples("add_index_hints", length=length, num_examples=30,
                                  vocab_size=TEN):
    assert len(x) == length and len(y) <= tasks.TASKS["add_index_hints"].max_target_length(length)
    plus = int(np.flatnonzero(x == TEN)[0])
    (a, ha), (b, hb), (s, hs) = _value(x[:plus]), _value(x[plus + 1:]), _value(y)
    num = lambda digits: sum(int(d) * TEN ** i for i, d in enumerate(digits))
    assert num(s) == num(a) + num(b) and len(s) == max(len(a), len(b)) + 1
    start = hs[0]
    np.testing.assert_array_equal(hs, start + np.arange(len(s)))
    np.testing.assert_array_equal(ha, hs[:len(a)])
    np.testing.assert_array_equal(hb, hs[:len(b)])
    assert 0 <= start and hs[-1] < tasks.NUM_INDEX_HINTS


def test_training_sees_every_hint_symbol_and_only_odd_lengths():
  seen, lengths = set(), set()
  for step in range(30):
    for x, y in tasks.train_examples("add_index_hints", seed=0, step=step, batch_size=32,
                                     vocab_size=TEN, min_length=5, max_length=42):
      seen |= set(_value(y)[1].tolist())
      lengths.add(len(x))
  assert seen == set(range(tasks.NUM_INDEX_HINTS))
  assert lengths == set(range(5, 42, 2))


def test_vocabulary_has_the_hints_and_pipeline_builds():
  data = pipeline.make_dataset(task="add_index_hints", seed=0, vocab_size=TEN,
                               min_train_length=5, max_train_length=21, eval_lengths=(11, 41, 81),
                               eval_examples_per_length=4)
  assert data.vocab.size == 4 + TEN + 1 + tasks.NUM_INDEX_HINTS
  assert data.vocab.tokens[-1] == f"h{tasks.NUM_INDEX_HINTS - 1}"
  batch = next(data.eval_batches(81, 4))
  assert batch["inputs"].shape[1] >= 81
  assert data.vocab.decode(batch["inputs"][0])[0].startswith("h")


@pytest.mark.parametrize("kwargs,match", [
    (dict(eval_lengths=[10, 11]), r"eval lengths \[10\].*odd"),
    (dict(eval_lengths=[259]), r"longer than 257"),
    (dict(max_length=300), r"longer than 257"),
    (dict(min_length=6, max_length=6), "cannot produce any input length"),
    (dict(min_length=3), "min_train_length >= 5"),
])
def test_check_config_refuses_lengths_it_cannot_make(kwargs, match):
  args = dict(min_length=5, max_length=21, eval_lengths=[11, 41])
  args.update(kwargs)
  with pytest.raises(ValueError, match=match):
    tasks.check_config("add_index_hints", TEN, args["min_length"], args["max_length"],
                       args["eval_lengths"])


def test_add_is_already_the_reversed_format_and_unchanged():
  """`add` (no hints): 57 + 8 is input [7, 5, +, 8], target [5, 6, 0]."""
  rng = _ScriptedRng(2, [7, 5], [8])
  inputs, targets = tasks.add(rng, 4, TEN)
  np.testing.assert_array_equal(inputs, [7, 5, TEN, 8])
  np.testing.assert_array_equal(targets, [5, 6, 0])
