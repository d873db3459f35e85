"""Tests of the batching pipeline over synthetic tasks, SCAN and local TFDS datasets."""

import collections
import inspect
import json

import numpy as np
import numpy.testing as npt
import pytest

from relpos_jax.data import finite
from relpos_jax.data import pipeline
from relpos_jax.data import scan
from relpos_jax.data.vocab import EOS_ID, PAD_ID

BUCKETS = (8, 16, 32, 64, 128)


def _dataset(seed=0, **overrides):
  config = pipeline.default_config()
  config.update(overrides)
  return pipeline.make_dataset(seed=seed, **config)


def _unpad(row):
  """Tokens of one row before its first PAD."""
  row = list(row)
  return row[:row.index(PAD_ID)] if PAD_ID in row else row


def _target_tokens(row):
  """Target ids before EOS, checking that EOS is followed only by PAD."""
  row = list(row)
  end = row.index(EOS_ID)
  assert all(t == PAD_ID for t in row[end + 1:])
  return row[:end]


def _assert_same_batch(a, b):
  assert a.keys() == b.keys()
  for k in a:
    npt.assert_array_equal(a[k], b[k])


def test_default_config_is_the_signature_minus_seed():
  config = pipeline.default_config()
  params = inspect.signature(pipeline.make_dataset).parameters
  assert set(config) == set(params) - {"seed", "lm_options"}  # lm: tasks' own keys
  assert config.task == "copy" and config.vocab_size == 10
  assert (config.min_train_length, config.max_train_length) == (1, 20)
  assert tuple(config.eval_lengths) == tuple(range(5, 81, 5))
  assert config.eval_examples_per_length == 128
  assert config.num_validation_examples == 512 and config.validation_fraction == 0.1
  assert tuple(config.length_buckets) == (8, 16, 32, 64, 128, 256, 512, 1024)
  assert config.scan_split == "length" and not config.tfds_data_dir
  assert (config.tfds_input_key, config.tfds_target_key) == ("inputs", "targets")
  assert (config.tfds_train_split, config.tfds_eval_split) == ("train", "test")


def test_synthetic_batch_format():
  ds = _dataset(task="reverse", vocab_size=5, length_buckets=BUCKETS)
  assert ds.vocab.size == 4 + 5
  assert ds.vocab.tokens[4:] == ["0", "1", "2", "3", "4"]
  batch = ds.train_batch(7, 32)
  assert set(batch) == {"inputs", "targets"}
  inputs, targets = batch["inputs"], batch["targets"]
  assert inputs.dtype == np.int32 and targets.dtype == np.int32
  assert inputs.shape[0] == targets.shape[0] == 32
  longest_in = max(len(_unpad(r)) for r in inputs)
  longest_tgt = max(len(_target_tokens(r)) + 1 for r in targets)
  buckets = sorted(set(BUCKETS) | {20, 21})  # the training maxima are buckets too
  assert inputs.shape[1] == min(b for b in buckets if b >= longest_in)
  assert targets.shape[1] == min(b for b in buckets if b >= longest_tgt)
  assert ds.length_buckets == tuple(buckets)
  for x, y in zip(inputs, targets):
    x, y = _unpad(x), _target_tokens(y)
    assert 1 <= len(x) <= 20
    assert min(x) >= 4 and max(x) < 9  # symbols only: no BOS, EOS, UNK
    assert y == x[::-1]


def test_add_ids_decode_to_a_correct_sum():
  ds = _dataset(task="add", vocab_size=10, min_train_length=3, length_buckets=BUCKETS)
  batch = ds.train_batch(0, 16)
  def number(little_endian_digits):
    return int("".join(little_endian_digits)[::-1])

  for x, y in zip(batch["inputs"], batch["targets"]):
    tokens = ds.vocab.decode(x)
    plus = tokens.index("+")
    assert number(ds.vocab.decode(y)) == number(tokens[:plus]) + number(tokens[plus + 1:])


def test_train_batch_is_a_pure_function_of_seed_and_step():
  a, b, c = (_dataset(seed=s, length_buckets=BUCKETS) for s in (0, 0, 1))
  _assert_same_batch(a.train_batch(5, 16), b.train_batch(5, 16))
  assert not np.array_equal(a.train_batch(5, 16)["inputs"], c.train_batch(5, 16)["inputs"])
  assert not np.array_equal(a.train_batch(5, 16)["inputs"], a.train_batch(6, 16)["inputs"])


@pytest.mark.parametrize("task", ["copy", "scan"])
def test_a_resumed_run_sees_the_batches_from_step_k(task):
  ds = _dataset(task=task, seed=3)
  full = [ds.train_batch(step, 8) for step in range(7)]
  resumed = [_dataset(task=task, seed=3).train_batch(step, 8) for step in range(4, 7)]
  for a, b in zip(full[4:], resumed):
    _assert_same_batch(a, b)
  _assert_same_batch(full[2], ds.train_batch(2, 8))


def test_eval_batches_cover_the_fixed_set_with_weights():
  ds = _dataset(eval_lengths=(3, 40), eval_examples_per_length=10, length_buckets=BUCKETS)
  assert ds.eval_lengths == [3, 40]
  batches = list(ds.eval_batches(40, 4))
  assert len(batches) == 3
  for batch in batches:
    assert batch["inputs"].shape == (4, 64) and batch["targets"].shape == (4, 64)
    assert batch["weights"].dtype == np.float32
  npt.assert_array_equal(np.concatenate([b["weights"] for b in batches]),
                         [1.0] * 10 + [0.0] * 2)
  last = batches[-1]
  assert all(len(_unpad(r)) == 40 for r in last["inputs"])  # pad rows copy real rows
  real = np.concatenate([b["inputs"][b["weights"] > 0] for b in batches])
  assert len({r.tobytes() for r in real}) == 10
  # Same examples every time, and for every training seed.
  again = _dataset(seed=99, eval_lengths=(3, 40), eval_examples_per_length=10,
                   length_buckets=BUCKETS)
  for a, b in zip(batches, again.eval_batches(40, 4)):
    _assert_same_batch(a, b)


def test_held_out_eval_lengths_never_appear_in_training():
  ds = _dataset(min_train_length=2, max_train_length=6, eval_lengths=(7, 12),
                length_buckets=BUCKETS)
  train_lengths = {len(_unpad(r)) for step in range(30) for r in ds.train_batch(step, 32)["inputs"]}
  assert train_lengths == set(range(2, 7))
  for n in ds.eval_lengths:
    assert {len(_unpad(r)) for b in ds.eval_batches(n, 64) for r in b["inputs"]} == {n}


def test_max_padded_lengths_bound_every_batch():
  ds = _dataset(task="duplicate", max_train_length=20, eval_lengths=(10, 30),
                eval_examples_per_length=8, length_buckets=BUCKETS)
  s, t = ds.max_padded_lengths()
  assert (s, t) == (32, 64)  # inputs <= 30; targets <= 2 * 30 + EOS
  shapes = [b["targets"].shape[1] for n in ds.eval_lengths for b in ds.eval_batches(n, 8)]
  assert max(shapes) == t


def test_scan_source():
  ds = _dataset(task="scan", scan_split="length", vocab_size=3, max_train_length=2)
  assert ds.num_train_examples == 16_990 - 1_699  # 10% of the commands held out
  assert ds.eval_lengths == [24, 25, 26, 27, 28, 30, 32, 33, 36, 40, 48]
  assert ds.max_padded_lengths() == (16, 64)
  expected = {c: a for c, a in scan.load_split("length")["test"]}
  total = 0
  for n in ds.eval_lengths:
    for batch in ds.eval_batches(n, 64):
      for x, y, w in zip(batch["inputs"], batch["targets"], batch["weights"]):
        actions = ds.vocab.decode(y)
        assert len(actions) == n and len(_target_tokens(y)) == n
        assert expected[" ".join(ds.vocab.decode(x))] == " ".join(actions)
        total += int(w)
  assert total == 3_920


def test_scan_training_is_an_epochwise_shuffle():
  ds = _dataset(task="scan", scan_split="addprim_jump", seed=5)
  n = ds.num_train_examples
  batch_size = 1_000  # 13,204 examples: epoch 0 ends inside step 13
  rows = np.concatenate([ds.train_batch(s, batch_size)["inputs"][:, :16] for s in range(14)])
  first_epoch = {tuple(_unpad(r)) for r in rows[:n]}
  assert len(first_epoch) == n  # every training example exactly once
  decoded = {" ".join(ds.vocab.decode(r)) for r in rows[:n]}
  held_out = {" ".join(ds.vocab.decode(r)) for b in ds.validation_batches(1_000)
              for r in b["inputs"]}
  assert decoded == {c for c, _ in scan.load_split("addprim_jump")["train"]} - held_out
  epoch_1_start = [tuple(_unpad(r)) for r in rows[n:]]
  assert epoch_1_start != [tuple(_unpad(r)) for r in rows[:len(epoch_1_start)]]
  other = _dataset(task="scan", scan_split="addprim_jump", seed=6)
  assert not np.array_equal(other.train_batch(0, 64)["inputs"], ds.train_batch(0, 64)["inputs"])


def _build_toy_qa(data_dir):
  """Builds a tiny TFDS dataset with non-default keys and splits, as a user's own would be."""
  import tensorflow_datasets as tfds  # pylint: disable=g-import-not-at-top

  class ToyQa(tfds.core.GeneratorBasedBuilder, skip_registration=True):
    VERSION = tfds.core.Version("1.0.0")
    code_path = None

    def _info(self):
      return tfds.core.DatasetInfo(builder=self, features=tfds.features.FeaturesDict(
          {"question": tfds.features.Text(), "answer": tfds.features.Text()}))

    def _split_generators(self, dl_manager):
      return {"train": self._generate_examples(range(1, 9)),
              "validation": self._generate_examples(range(9, 13))}

    def _generate_examples(self, numbers):
      for i in numbers:
        yield i, {"question": f"count to {i}", "answer": " ".join(["x"] * i)}

  ToyQa(data_dir=data_dir, file_format="array_record").download_and_prepare()


@pytest.fixture(scope="module")
def toy_data_dir(tmp_path_factory):
  data_dir = str(tmp_path_factory.mktemp("tfds"))
  _build_toy_qa(data_dir)
  return data_dir


def _toy(data_dir, **overrides):
  kw = dict(task="tfds:toy_qa", tfds_data_dir=data_dir, tfds_input_key="question",
            tfds_target_key="answer", tfds_eval_split="validation", length_buckets=BUCKETS)
  kw.update(overrides)
  return _dataset(**kw)


def test_tfds_source_with_configured_keys(toy_data_dir):
  ds = _toy(toy_data_dir)
  assert ds.num_train_examples == 7  # one of the 8 held out for validation
  assert ds.validation_info()["num_examples"] == 1
  assert ds.eval_lengths == [9, 10, 11, 12]
  batch = next(ds.eval_batches(11, 2))
  npt.assert_array_equal(batch["weights"], [1.0, 0.0])
  assert ds.vocab.decode(batch["inputs"][0]) == ["count", "to", "<unk>"]  # "11" is not in train
  assert ds.vocab.decode(batch["targets"][0]) == ["x"] * 11
  epoch = [" ".join(ds.vocab.decode(r)) for r in ds.train_batch(0, 7)["inputs"]]
  held_out = [" ".join(ds.vocab.decode(r)) for r in next(ds.validation_batches(1))["inputs"]]
  assert sorted(epoch + held_out) == sorted(f"count to {i}" for i in range(1, 9))


def test_tfds_missing_keys_and_splits(toy_data_dir):
  with pytest.raises(ValueError, match=r"no key 'inputs'; their keys are \['answer', 'question'\]"
                                       ".*tfds_input_key"):
    _toy(toy_data_dir, tfds_input_key="inputs")
  with pytest.raises(ValueError, match="no key 'targets'.*tfds_target_key"):
    _toy(toy_data_dir, tfds_target_key="targets")
  with pytest.raises(ValueError, match="no split 'test'.*tfds_eval_split"):
    _toy(toy_data_dir, tfds_eval_split="test")


def test_tfds_dataset_not_found_names_the_path_and_the_fix(tmp_path):
  with pytest.raises(FileNotFoundError) as e:
    _dataset(task="tfds:relpos_scan/length", tfds_data_dir=str(tmp_path))
  message = str(e.value)
  assert str(tmp_path / "relpos_scan" / "length") in message
  assert "python -m relpos_jax.data.scan_tfds" in message and "tfds build" in message


@pytest.mark.parametrize("overrides, error, match", [
    (dict(task="cpy"), ValueError,
     "unknown task 'cpy'; choose one of: copy, .*add, scan, tfds:<name>"),
    (dict(task="tfds:"), ValueError, "unknown task"),
    (dict(min_train_length=9, max_train_length=3), ValueError, "min_train_length=9 > max"),
    (dict(eval_lengths=(0, 10)), ValueError, r"eval lengths \[0\]"),
    (dict(task="add", min_train_length=3, eval_lengths=(2,)), ValueError, r"eval lengths \[2\]"),
    (dict(task="scan", scan_split="lenght"), ValueError, "unknown SCAN split 'lenght'"),
    (dict(eval_lengths=(128,), length_buckets=BUCKETS), ValueError,
     "129 tokens is longer than the largest length bucket 128; add a bucket >= 129"),
    (dict(task="scan", length_buckets=(8, 16, 32)), ValueError, "largest length bucket 32"),
    (dict(seed=-1), ValueError, "non-negative"),
    (dict(length_buckets=()), ValueError, "length_buckets"),
    (dict(num_validation_examples=0), ValueError, "num_validation_examples=0"),
    (dict(task="scan", validation_fraction=1.0), ValueError, r"validation_fraction=1.0.*\(0, 1\)"),
])
def test_config_errors(overrides, error, match):
  with pytest.raises(error, match=match):
    _dataset(**overrides)


def test_config_errors_come_before_any_work(monkeypatch):
  def fail(*args, **kwargs):
    raise AssertionError("data was generated before the config was checked")
  monkeypatch.setattr(pipeline.tasks, "eval_examples", fail)
  monkeypatch.setattr(pipeline.tasks, "train_examples", fail)
  monkeypatch.setattr(pipeline.scan, "all_pairs", fail)
  with pytest.raises(ValueError, match="min_train_length"):
    _dataset(min_train_length=5, max_train_length=4)
  with pytest.raises(ValueError, match="unknown SCAN split"):
    _dataset(task="scan", scan_split="nope")


def test_eval_batches_errors():
  ds = _dataset(eval_lengths=(5,), length_buckets=BUCKETS)
  with pytest.raises(ValueError, match=r"no eval set at length 6; eval lengths are \[5\]"):
    ds.eval_batches(6, 4)  # raises at the call, not at the first batch


@pytest.mark.parametrize("source", [dict(task="copy"), dict(task="duplicate"),
                                    dict(task="scan", scan_split="length")])
def test_train_rows_are_exactly_the_rows_of_the_whole_batch(source):
  dataset = _dataset(seed=3, **source)
  for step in (0, 7):
    whole = dataset.train_batch(step, 8)
    for lo, hi in ((0, 4), (4, 8), (2, 3), (0, 8)):
      rows = dataset.train_rows(step, 8, slice(lo, hi))
      _assert_same_batch(rows, {k: v[lo:hi] for k, v in whole.items()})
  with pytest.raises(ValueError, match="select no example"):
    dataset.train_rows(0, 8, slice(8, 12))
def _decoded_rows(ds, batches):
  """The real rows' input texts, in order."""
  return [" ".join(ds.vocab.decode(r)) for b in batches
          for r, w in zip(b["inputs"], b["weights"]) if w]


def test_eval_sample_is_a_seeded_random_sample_not_a_prefix():
  ds = _dataset(task="scan", scan_split="length_cutoff_25")
  assert ds.eval_size(30) == 576
  full = _decoded_rows(ds, ds.eval_batches(30, 64))
  assert len(full) == 576 and len({c.split()[0] for c in full[:64]}) == 1  # a prefix: one word
  sample = _decoded_rows(ds, ds.eval_batches(30, 64, num_examples=64))
  assert len(sample) == 64 and len(set(sample)) == 64
  assert len({c.split()[0] for c in sample}) >= 4
  assert sample == [c for c in full if c in set(sample)]  # in the set's own order
  assert sample == _decoded_rows(ds, ds.eval_batches(30, 64, num_examples=64))
  seed_7 = _dataset(task="scan", scan_split="length_cutoff_25", seed=7)
  assert sample == _decoded_rows(seed_7, seed_7.eval_batches(30, 64, num_examples=64))
  other = _decoded_rows(ds, ds.eval_batches(30, 64, num_examples=64, sample_seed=1))
  assert set(other) != set(sample) and set(other) <= set(full)
  assert _decoded_rows(ds, ds.eval_batches(30, 64, num_examples=576)) == full
  assert _decoded_rows(ds, ds.eval_batches(30, 64, num_examples=10_000)) == full
  batches = list(ds.eval_batches(30, 48, num_examples=50))
  npt.assert_array_equal(np.concatenate([b["weights"] for b in batches]), [1.0] * 50 + [0.0] * 46)


def test_synthetic_eval_size_and_sample():
  ds = _dataset(eval_lengths=(30,), eval_examples_per_length=40, length_buckets=BUCKETS)
  assert ds.eval_size(30) == 40
  full = [r.tobytes() for b in ds.eval_batches(30, 8) for r in b["inputs"]]
  sample = [r.tobytes() for b in ds.eval_batches(30, 8, num_examples=8) for r in b["inputs"]]
  assert set(sample) <= set(full) and sample != full[:8]
  with pytest.raises(ValueError, match="num_examples must be >= 1"):
    ds.eval_batches(30, 8, num_examples=0)
  with pytest.raises(ValueError, match="sample_seed"):
    ds.eval_batches(30, 8, num_examples=4, sample_seed=-1)
  with pytest.raises(ValueError, match="no eval set at length 6"):
    ds.eval_size(6)


@pytest.mark.parametrize("task, min_length, lengths", [
    ("copy", 1, list(range(6, 21))), ("reverse", 1, list(range(6, 21))),
    ("add", 3, list(range(7, 21)))])
def test_synthetic_validation_lengths_follow_the_distinct_input_rule(task, min_length, lengths):
  assert pipeline.validation_lengths(task, vocab_size=10, min_length=min_length,
                                     max_length=20) == lengths
  ds = _dataset(task=task, min_train_length=min_length, length_buckets=BUCKETS)
  info = ds.validation_info()
  assert info["lengths"] == lengths and info["source"] == "held_out_stream"
  assert info["num_examples"] == 512
  rows = [r for b in ds.validation_batches(100) for r, w in zip(b["inputs"], b["weights"]) if w]
  assert len(rows) == 512
  counts = collections.Counter(len(_unpad(r)) for r in rows)
  assert sorted(counts) == lengths and max(counts.values()) - min(counts.values()) <= 1
  json.dumps(info)  # records can hold it


def test_synthetic_validation_is_its_own_stream():
  ds = _dataset(length_buckets=BUCKETS)
  rows = {r.tobytes() for b in ds.validation_batches(64) for r in b["inputs"]}
  for seed in (0, 1):  # the same set for every training seed, drawn apart from training
    again = {r.tobytes() for b in _dataset(seed=seed, length_buckets=BUCKETS)
             .validation_batches(64) for r in b["inputs"]}
    assert again == rows
  trained = {r.tobytes() for step in range(100) for r in ds.train_batch(step, 64)["inputs"]}
  assert not rows & trained
  evaluated = {r.tobytes() for n in ds.eval_lengths for b in ds.eval_batches(n, 128)
               for r in b["inputs"]}
  assert not rows & evaluated


def test_synthetic_validation_falls_back_to_the_longest_training_length():
  ds = _dataset(vocab_size=5, max_train_length=6, num_validation_examples=20,
                length_buckets=BUCKETS)
  info = ds.validation_info()
  assert info["lengths"] == [6] and info["num_examples"] == 20 and "likely seen" in info["rule"]


def test_scan_validation_is_a_held_out_tenth_of_the_training_commands():
  ds = _dataset(task="scan", scan_split="length", seed=3)
  info = ds.validation_info()
  assert info["source"] == "held_out_split" and info["num_examples"] == 1_699
  assert info["lengths"] == sorted(info["lengths"]) and max(info["lengths"]) <= 22
  validation = _decoded_rows(ds, ds.validation_batches(256))
  assert len(validation) == len(set(validation)) == 1_699
  training = set(_decoded_rows(ds, [{**ds.train_batch(0, ds.num_train_examples),
                                     "weights": np.ones(ds.num_train_examples)}]))
  assert len(training) == 15_291 and not training & set(validation)
  assert training | set(validation) == {c for c, _ in scan.load_split("length")["train"]}
  other_seed = _dataset(task="scan", scan_split="length", seed=4)
  assert _decoded_rows(other_seed, other_seed.validation_batches(256)) == validation
  batch = next(ds.validation_batches(8))
  for x, y in zip(batch["inputs"], batch["targets"]):
    assert scan.interpret(" ".join(ds.vocab.decode(x))) == " ".join(ds.vocab.decode(y))


def test_hold_out_is_independent_of_order_and_disjoint_for_repeated_inputs():
  inputs = [f"cmd {i}" for i in range(200)]
  held = finite.hold_out(inputs, 0.1)
  assert len(held) == 20 and held == finite.hold_out(inputs[::-1] + inputs[:5], 0.1)
  with pytest.raises(ValueError, match="distinct input"):
    finite.hold_out(["a", "a"], 0.1)


def test_validation_lengths_count_each_task_s_distinct_inputs():
  # 10 symbols: copy has 10^n inputs of n tokens (>= 10^6 from 6); add's "+" leaves n - 1
  # digits (from 7); add_index_hints has (n - 1) / 2 digits at odd n (from 13).
  kwargs = dict(vocab_size=10, min_length=1, max_length=21)
  assert pipeline.validation_lengths("copy", **kwargs) == list(range(6, 22))
  assert pipeline.validation_lengths("add", **kwargs) == list(range(7, 22))
  assert pipeline.validation_lengths("add_index_hints", **kwargs) == list(range(13, 22, 2))
  # Too short to qualify: the longest length the task makes, whatever training saw of it.
  assert pipeline.validation_lengths("add_index_hints", vocab_size=10, min_length=5,
                                     max_length=10) == [9]
