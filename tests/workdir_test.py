"""The run directory under faults: corrupt checkpoints, cut-off metrics, readers during a save."""

import glob
import json
import logging
import os
import shutil

import jax
import numpy as np
import pytest

from configs import default
from relpos_jax import architectures
from relpos_jax import metric_writers
from relpos_jax import run_identity
from relpos_jax import train_lib
from relpos_jax import workdir as workdir_lib
from relpos_jax.data import pipeline


def _config(**updates):
  config = default.get_config("smoke")  # 6 steps, checkpoints at 3 and 6, keep 2
  config.update(updates)
  return config


@pytest.fixture(scope="module")
def trained(smoke_run):
  """conftest's finished smoke run (checkpoints 3 and 6) and its final parameters."""
  config = workdir_lib.load_config(smoke_run)
  step, params = workdir_lib.load_params(smoke_run, config, _model(config))
  assert step == 6
  return smoke_run, jax.device_get(params)


@pytest.fixture
def run(trained, tmp_path):
  """A private copy of the trained run."""
  directory = str(tmp_path / "run")
  shutil.copytree(trained[0], directory)
  return directory


def _model(config):
  dataset = pipeline.make_dataset(seed=config.seed, **config.data)
  return architectures.make_model(config.model, vocab_size=dataset.vocab.size)


def _corrupt(workdir, step):
  """Overwrites every array file of checkpoint `step` (a disk fault or a partial copy)."""
  files = glob.glob(os.path.join(workdir, "checkpoints", str(step), "**", "d", "*"),
                    recursive=True)
  assert files
  for path in files:
    size = os.path.getsize(path)
    with open(path, "wb") as f:
      f.write(b"\x00corrupt" * (size // 8 + 1))


def _snapshot(directory):
  out = {}
  for root, dirs, files in os.walk(directory):
    for name in dirs + files:
      path = os.path.join(root, name)
      stat = os.stat(path)
      out[os.path.relpath(path, directory)] = (stat.st_size, stat.st_mtime_ns)
  return out


def _close(a, b):
  for x, y in zip(jax.tree_util.tree_leaves(a), jax.tree_util.tree_leaves(b)):
    np.testing.assert_allclose(np.asarray(x), np.asarray(y), atol=1e-6)


@pytest.mark.slow  # on a trained run (the fixture trains)
def test_resume_falls_back_past_a_corrupt_newest_checkpoint(run, trained, caplog):
  _corrupt(run, 6)
  caplog.set_level(logging.WARNING)
  state = train_lib.train_and_evaluate(_config(), run)  # resumes from 3, retrains 4..6
  warnings = " ".join(r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING)
  assert "checkpoints/6 cannot be read" in warnings and "DATA_LOSS" in warnings
  assert int(state.step[0]) == 6
  _close(state.params, trained[1])  # the same parameters as the uninterrupted run
  assert workdir_lib.checkpoint_steps(run) == [3, 6]
  assert os.path.isdir(os.path.join(run, workdir_lib.UNREADABLE, "6"))  # kept, not deleted
  config = workdir_lib.load_config(run)
  assert workdir_lib.load_params(run, config, _model(config))[0] == 6  # the new one reads
  steps = [(r["step"], r["kind"]) for r in metric_writers.read_metrics(run)]
  assert steps == [(3, "train"), (3, "eval"), (6, "train"), (6, "eval")]  # nothing twice


@pytest.mark.slow  # on a trained run (the fixture trains)
def test_readers_fall_back_and_fail_clearly_when_nothing_is_readable(run):
  config = workdir_lib.load_config(run)
  model = _model(config)
  _corrupt(run, 6)
  before = _snapshot(run)
  step, params = workdir_lib.load_params(run, config, model)
  assert step == 3 and jax.tree_util.tree_leaves(params)[0].shape[0] == config.num_seeds
  _corrupt(run, 3)
  with pytest.raises(workdir_lib.UnreadableCheckpoints,
                     match=r"no readable checkpoint .*step 6: .*DATA_LOSS.*step 3: "):
    workdir_lib.load_params(run, config, model)
  with pytest.raises(workdir_lib.UnreadableCheckpoints, match="checkpoint 6 of"):
    workdir_lib.load_params(run, config, model, step=6)
  with pytest.raises(FileNotFoundError, match="no checkpoint of step 4"):
    workdir_lib.load_params(run, config, model, step=4)
  assert set(_snapshot(run)) == set(before)  # a reader moves nothing aside
  # The trainer refuses too, with one error, and moves nothing either.
  with pytest.raises(workdir_lib.UnreadableCheckpoints, match="no readable checkpoint"):
    train_lib.train_and_evaluate(_config(), run)
  assert workdir_lib.checkpoint_steps(run) == [3, 6]


@pytest.mark.slow  # on a trained run (the fixture trains)
def test_readers_never_write_or_delete_in_checkpoints(run):
  # A save in progress: orbax writes into a temporary folder, then renames it.
  in_progress = os.path.join(run, "checkpoints", "9.orbax-checkpoint-tmp-1234567")
  os.makedirs(os.path.join(in_progress, "default"))
  with open(os.path.join(in_progress, "default", "partial"), "w") as f:
    f.write("half a checkpoint")
  before = _snapshot(os.path.join(run, "checkpoints"))
  config = workdir_lib.load_config(run)
  assert workdir_lib.load_params(run, config, _model(config))[0] == 6
  manager = workdir_lib.checkpoint_manager(run, read_only=True)
  assert manager.latest_step() == 6
  manager.close()
  assert _snapshot(os.path.join(run, "checkpoints")) == before
  with pytest.raises(FileNotFoundError):
    workdir_lib.load_params(os.path.join(run, "nothing"), config, _model(config))
  assert not os.path.exists(os.path.join(run, "nothing"))


@pytest.mark.slow  # on a trained run (the fixture trains)
def test_a_cut_off_metrics_line_is_dropped_on_resume(run, caplog):
  with open(os.path.join(run, metric_writers.METRICS_FILE), "a") as f:
    f.write('{"step": 7, "kind": "tra')  # kill -9 in the middle of a write
  assert [r["step"] for r in metric_writers.read_metrics(run)] == [3, 3, 6, 6]
  caplog.set_level(logging.WARNING)
  train_lib.train_and_evaluate(_config(num_steps=9), run)
  assert "not complete JSON records" in caplog.text
  records = metric_writers.read_metrics(run)
  assert [r["step"] for r in records] == [3, 3, 6, 6, 9, 9]
  with open(os.path.join(run, metric_writers.METRICS_FILE)) as f:
    assert all(json.loads(line) for line in f)


@pytest.mark.slow  # on a trained run (the fixture trains)
def test_config_json_carries_provenance_outside_the_run_identity(run):
  saved = json.load(open(os.path.join(run, workdir_lib.CONFIG_FILE)))
  prov = saved[workdir_lib.PROVENANCE_KEY]
  assert set(prov["versions"]) == {"jax", "jaxlib", "flax", "optax", "orbax-checkpoint",
                                   "numpy"}
  assert prov["versions"]["jax"] == jax.__version__ and prov["backend"] == "cpu"
  assert "commit" in prov["git"]
  saved[workdir_lib.PROVENANCE_KEY] = {"versions": {"jax": "0.0.1"}, "git": {}}
  with open(os.path.join(run, workdir_lib.CONFIG_FILE), "w") as f:
    json.dump(saved, f)
  run_identity.check_identity(_config(), run)  # provenance is not identity
  workdir_lib.save_run_files(_config(), run, pipeline.make_dataset(
      seed=0, **_config().data).vocab)
  again = json.load(open(os.path.join(run, workdir_lib.CONFIG_FILE)))
  assert again["provenance_earlier"][0]["versions"] == {"jax": "0.0.1"}
  assert again[workdir_lib.PROVENANCE_KEY]["versions"]["jax"] == jax.__version__


def test_a_model_key_added_since_a_run_was_saved_counts_as_its_default():
  """A run saved before `model.dtype` existed resumes; another dtype or size is another run."""
  saved = workdir_lib.config_json(_config())
  del saved["model"]["dtype"]
  assert run_identity.identity_changes(saved, _config()) == []
  bf16 = _config()
  bf16.model.dtype = "bfloat16"
  assert run_identity.identity_changes(saved, bf16) == ["model"]
  saved["model"]["d_model"] += 1
  assert run_identity.identity_changes(saved, _config()) == ["model"]
