"""Tests of the synthetic tasks: targets by independent rules, lengths, determinism, errors."""

import collections

import numpy as np
import pytest

from relpos_jax.data import tasks

VOCAB = 7


def _expected_copy(x):
  return list(x)


def _expected_reverse(x):
  return [x[len(x) - 1 - i] for i in range(len(x))]


def _expected_duplicate(x):
  return list(x) + list(x)


def _expected_odds_first(x):
  return [t for i, t in enumerate(x) if i % 2 == 1] + [t for i, t in enumerate(x) if i % 2 == 0]


def _is_sorted_permutation(x, y):
  return collections.Counter(x.tolist()) == collections.Counter(y.tolist()) and all(
      a <= b for a, b in zip(y[:-1], y[1:]))


RULES = {
    "copy": lambda x, y: y.tolist() == _expected_copy(x.tolist()),
    "reverse": lambda x, y: y.tolist() == _expected_reverse(x.tolist()),
    "sort": _is_sorted_permutation,
    "duplicate": lambda x, y: y.tolist() == _expected_duplicate(x.tolist()),
    "odds_first": lambda x, y: y.tolist() == _expected_odds_first(x.tolist()),
}


def _number(digits, base):
  """Little-endian digits -> int, by Python's big ints."""
  return sum(int(d) * base**i for i, d in enumerate(digits))


def test_registry_has_the_issue_tasks():
  assert set(tasks.TASKS) == {"copy", "reverse", "sort", "duplicate", "odds_first", "add",
                              "add_index_hints"}


@pytest.mark.parametrize("name", sorted(RULES))
def test_targets_follow_their_rule(name):
  rng = np.random.default_rng(0)
  for length in list(range(1, 12)) + [37, 64]:
    x, y = tasks.TASKS[name].fn(rng, length, VOCAB)
    assert len(x) == length
    assert x.dtype == np.int32 and y.dtype == np.int32
    assert x.min() >= 0 and x.max() < VOCAB
    assert RULES[name](x, y), (name, x, y)


def test_rules_reject_wrong_targets():
  x = np.array([3, 1, 2, 0], np.int32)
  assert not RULES["reverse"](x, x)
  assert not RULES["sort"](x, x)
  assert not RULES["odds_first"](x, x)
  assert RULES["odds_first"](x, np.array([1, 0, 3, 2]))  # odd indices 1, 3 first


@pytest.mark.parametrize("base", [2, 7, 10, 16])
def test_add_target_is_the_sum(base):
  rng = np.random.default_rng(1)
  for length in [3, 4, 5, 9, 30, 61]:
    for _ in range(20):
      x, y = tasks.add(rng, length, base)
      assert len(x) == length
      (plus,) = np.flatnonzero(x == base)  # exactly one "+"
      a, b = x[:plus], x[plus + 1:]
      assert len(a) >= 1 and len(b) >= 1
      assert np.all(a < base) and np.all(b < base) and np.all(y < base)
      assert len(y) == max(len(a), len(b)) + 1
      assert _number(y, base) == _number(a, base) + _number(b, base)


def test_add_handles_carries_through_every_digit():
  # 999 + 1 = 1000: digits least significant first.
  rng = np.random.default_rng(0)
  seen_full_carry = False
  for _ in range(3000):
    x, y = tasks.add(rng, 5, 2)  # base 2, small numbers: all carry patterns occur
    plus = int(np.flatnonzero(x == 2)[0])
    assert _number(y, 2) == _number(x[:plus], 2) + _number(x[plus + 1:], 2)
    seen_full_carry |= bool(y[-1] == 1)
  assert seen_full_carry


def test_symbols_name_every_symbol():
  assert tasks.symbols("copy", 3) == ["0", "1", "2"]
  assert tasks.symbols("add", 3) == ["0", "1", "2", "+"]


@pytest.mark.parametrize("name", sorted(tasks.TASKS))
def test_train_lengths_are_uniform_in_the_configured_range(name):
  lo, hi = 3, 9
  lengths = collections.Counter()
  for step in range(40):
    for x, y in tasks.train_examples(name, seed=0, step=step, batch_size=32, vocab_size=VOCAB,
                                     min_length=lo, max_length=hi):
      lengths[len(x)] += 1
      assert len(y) <= tasks.TASKS[name].max_target_length(len(x))
  made = [n for n in range(lo, hi + 1) if tasks.TASKS[name].makes(n)]  # add_index_hints: odd
  assert set(lengths) == set(made)
  counts = np.array([lengths[n] for n in made])
  assert counts.min() > 0.6 * counts.mean()  # 1280 draws over 7 lengths: ~183 each


@pytest.mark.parametrize("name", sorted(tasks.TASKS))
def test_eval_set_has_exactly_its_length_and_size(name):
  examples = tasks.eval_examples(name, length=13, num_examples=50, vocab_size=VOCAB)
  assert len(examples) == 50
  assert {len(x) for x, _ in examples} == {13}


def _flatten(examples):
  return [np.concatenate([x, [-1], y]).tolist() for x, y in examples]


def test_training_stream_is_a_pure_function_of_seed_and_step():
  kw = dict(batch_size=16, vocab_size=VOCAB, min_length=1, max_length=20)
  a = tasks.train_examples("reverse", seed=3, step=5, **kw)
  b = tasks.train_examples("reverse", seed=3, step=5, **kw)
  assert _flatten(a) == _flatten(b)
  assert _flatten(a) != _flatten(tasks.train_examples("reverse", seed=4, step=5, **kw))
  assert _flatten(a) != _flatten(tasks.train_examples("reverse", seed=3, step=6, **kw))


def test_eval_set_is_fixed_and_has_its_own_seed():
  a = tasks.eval_examples("copy", length=30, num_examples=64, vocab_size=VOCAB)
  b = tasks.eval_examples("copy", length=30, num_examples=64, vocab_size=VOCAB)
  assert _flatten(a) == _flatten(b)
  other = tasks.eval_examples("copy", length=30, num_examples=64, vocab_size=VOCAB, eval_seed=1)
  assert _flatten(a) != _flatten(other)
  # The eval rng is not the training rng of any small seed/step.
  train = tasks.train_examples("copy", seed=0, step=0, batch_size=64, vocab_size=VOCAB,
                               min_length=30, max_length=30)
  assert _flatten(a) != _flatten(train)


def test_eval_sets_of_different_lengths_are_independent():
  a = tasks.eval_examples("copy", length=30, num_examples=8, vocab_size=VOCAB)
  b = tasks.eval_examples("copy", length=31, num_examples=8, vocab_size=VOCAB)
  assert all(x[:30].tolist() != y[:30].tolist() for (x, _), (y, _) in zip(a, b))


def test_unknown_task_lists_valid_ones():
  with pytest.raises(ValueError, match="unknown task 'cpy'.*copy.*reverse.*odds_first.*add"):
    tasks.get_task("cpy")


@pytest.mark.parametrize("kwargs, match", [
    (dict(min_length=5, max_length=4), "min_train_length=5 > max_train_length=4"),
    (dict(eval_lengths=[0, 5]), r"eval lengths \[0\].*eval_lengths >= 1"),
    (dict(vocab_size=1), "vocab_size >= 2"),
    (dict(name="add", min_length=3, eval_lengths=[2, 10]), r"eval lengths \[2\].*>= 3"),
    (dict(name="add", min_length=1), "min_train_length >= 3"),
])
def test_check_config_errors(kwargs, match):
  args = dict(name="copy", vocab_size=VOCAB, min_length=1, max_length=10, eval_lengths=[5, 40])
  args.update(kwargs)
  with pytest.raises(ValueError, match=match):
    tasks.check_config(**args)


def test_check_config_accepts_valid_settings():
  tasks.check_config("add", 10, 3, 20, [3, 40])  # does not raise
