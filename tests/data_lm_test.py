"""Language-model windows (data/lm.py): training windows, config errors, the shared eval span."""

import numpy as np
import numpy.testing as npt
import pytest

from relpos_jax.data import lm
from relpos_jax.data import pipeline
from relpos_jax.data.vocab import PAD_ID


def test_training_windows_are_a_pure_function_of_seed_and_step():
  ds = pipeline.make_dataset(task="lm:cpython", seed=3, train_length=32)
  batch = ds.train_batch(7, 5)
  assert batch["inputs"].shape == (5, 1) and (batch["inputs"] == PAD_ID).all()
  assert batch["targets"].shape == (5, 32) and batch["targets"].dtype == np.int32
  npt.assert_array_equal(batch["targets"], ds.train_batch(7, 5)["targets"])
  assert not np.array_equal(batch["targets"], ds.train_batch(8, 5)["targets"])
  other = pipeline.make_dataset(task="lm:cpython", seed=4, train_length=32)
  assert not np.array_equal(batch["targets"], other.train_batch(7, 5)["targets"])
  # Each row is a window of the training split.
  train = ds.split("train").astype(np.int32)
  row = batch["targets"][0]
  starts = np.flatnonzero(train[:len(train) - 31] == row[0])
  assert any(np.array_equal(train[s:s + 32], row) for s in starts)
  npt.assert_array_equal(ds.train_rows(7, 5, slice(1, 3))["targets"], batch["targets"][1:3])


def test_lm_config_errors():
  with pytest.raises(ValueError, match="sliding_stride"):
    pipeline.make_dataset(task="lm:cpython", seed=0, train_length=16, sliding_stride=5)
  with pytest.raises(ValueError, match="unknown language-model corpus"):
    pipeline.make_dataset(task="lm:wikipedia", seed=0)
  with pytest.raises(ValueError, match="fewer than one window"):
    pipeline.make_dataset(task="lm:cpython", seed=0, train_length=128, eval_bytes=1000)
  with pytest.raises(ValueError, match="unknown data config keys"):
    pipeline.make_dataset(task="copy", seed=0, train_length=16)


def test_eval_span_is_shared_by_every_context():
  assert lm.eval_span(10_000, 5_000, 1024) == 4096
  assert lm.eval_span(3_000, 5_000, 1024) == 2048
  with pytest.raises(ValueError):
    lm.eval_span(1000, 5000, 1024)
