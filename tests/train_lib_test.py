"""Training: learning, resume, determinism, NaN guard, multi-seed, config checks, full disk."""

import errno
import os
import shutil

import jax
import numpy as np
import orbax.checkpoint as ocp
import pytest

from configs import default
from relpos_jax import architectures
from relpos_jax import errors
from relpos_jax import evaluate
from relpos_jax import losses
from relpos_jax import metric_writers
from relpos_jax import optim
from relpos_jax import train_lib
from relpos_jax import workdir as workdir_lib
from relpos_jax.data import pipeline

TIMING_KEYS = {"steps_per_sec"}


def _smoke(**overrides):
  config = default.get_config("smoke")
  for key, value in overrides.items():
    node = config
    *path, leaf = key.split(".")
    for part in path:
      node = node[part]
    node[leaf] = value
  return config


def _metrics(workdir):
  return [{k: v for k, v in r.items() if k not in TIMING_KEYS}
          for r in metric_writers.read_metrics(str(workdir))]


def _params_close(a, b, atol=0.0):
  for x, y in zip(jax.tree_util.tree_leaves(a), jax.tree_util.tree_leaves(b)):
    np.testing.assert_allclose(np.asarray(x), np.asarray(y), atol=atol)


def test_optimizer_config_matches_make_optimizer():
  cfg = optim.optimizer_config()
  assert set(cfg) == {"learning_rate", "warmup_steps", "decay", "weight_decay",
                      "grad_clip_norm", "b1", "b2", "eps"}
  tx, schedule = optim.make_optimizer(num_steps=1000, **cfg)
  assert float(schedule(0)) == 0.0
  np.testing.assert_allclose(float(schedule(cfg.warmup_steps)), cfg.learning_rate, rtol=1e-6)
  assert float(schedule(999)) < 0.01 * cfg.learning_rate  # cosine reaches ~0
  _, rsqrt = optim.make_optimizer(num_steps=100, **{**cfg, "decay": "rsqrt"})
  np.testing.assert_allclose(float(rsqrt(4 * cfg.warmup_steps)),
                             cfg.learning_rate * np.sqrt(1 / 4), rtol=1e-5)
  with pytest.raises(ValueError, match="optimizer.decay"):
    optim.make_optimizer(num_steps=10, decay="linear")
  del tx


def test_cross_entropy_ignores_padding_and_smooths():
  logits = np.log(np.array([[[0.7, 0.1, 0.1, 0.1], [0.25, 0.25, 0.25, 0.25]]]))
  targets = np.array([[0, 0]])  # all PAD: nothing to learn
  loss, per_token = losses.cross_entropy(logits, np.array([[1, 0]]))
  np.testing.assert_allclose(loss, -np.log(0.1), rtol=1e-6)
  np.testing.assert_allclose(per_token[0, 1], 0.0)
  assert float(losses.cross_entropy(logits, targets)[0]) == 0.0
  smoothed, _ = losses.cross_entropy(logits, np.array([[1, 0]]), label_smoothing=0.4)
  want = -(0.7 * np.log(0.1) + 0.1 * (np.log(0.7) + 2 * np.log(0.1)))
  np.testing.assert_allclose(smoothed, want, rtol=1e-5)


@pytest.mark.slow  # trains for tens of seconds
def test_a_tiny_copy_model_learns_its_training_lengths(tmp_path):
  config = default.get_config("smoke,scheme=sinusoidal")
  config.data.update(max_train_length=5, eval_lengths=(3, 5), eval_examples_per_length=64,
                     vocab_size=6)
  config.model.update(d_model=32, num_heads=2, head_dim=16, d_ff=64)
  config.optimizer.update(learning_rate=3e-3, warmup_steps=50)
  config.update(num_steps=600, batch_size=32, log_every=100, eval_every=600,
                checkpoint_every=600)
  state = train_lib.train_and_evaluate(config, str(tmp_path))
  dataset = pipeline.make_dataset(seed=config.seed, **config.data)
  model = architectures.make_model(config.model, vocab_size=dataset.vocab.size)
  params = jax.tree_util.tree_map(lambda x: x[0], state.params)
  for length in (3, 5):
    record = evaluate.evaluate_length(model, params, dataset, length, batch_size=64)
    assert record["exact_match"] == 1.0, record


@pytest.mark.slow  # trains for tens of seconds
def test_resume_reaches_the_uninterrupted_state_and_metrics(tmp_path):
  # rsqrt decay does not depend on num_steps, so stopping at n is a prefix of 2n.
  config = _smoke(**{"optimizer.decay": "rsqrt"})
  config.update(num_steps=6, log_every=3, eval_every=3, checkpoint_every=3)
  full = train_lib.train_and_evaluate(config, str(tmp_path / "full"))
  config.num_steps = 3
  train_lib.train_and_evaluate(config, str(tmp_path / "resumed"))
  config.num_steps = 6
  resumed = train_lib.train_and_evaluate(config, str(tmp_path / "resumed"))
  _params_close(full.params, resumed.params)
  _params_close(full.opt_state, resumed.opt_state)
  assert _metrics(tmp_path / "full") == _metrics(tmp_path / "resumed")
  assert int(resumed.step[0]) == 6


@pytest.mark.slow  # trains for tens of seconds
def test_same_config_and_seed_give_identical_metrics(tmp_path, smoke_run):
  config = _smoke()  # smoke_run's config, trained again here (smoke_run may be another worker's)
  train_lib.train_and_evaluate(config, str(tmp_path / "b"))
  assert _metrics(smoke_run) == _metrics(tmp_path / "b")
  config.seed = 1
  train_lib.train_and_evaluate(config, str(tmp_path / "c"))
  assert _metrics(smoke_run) != _metrics(tmp_path / "c")


@pytest.mark.slow  # trains
def test_nan_loss_stops_with_the_step_and_saves_nothing(tmp_path):
  config = _smoke(**{"optimizer.learning_rate": 1e38, "optimizer.warmup_steps": 0,
                     "optimizer.grad_clip_norm": 0.0})
  with pytest.raises(FloatingPointError, match=r"non-finite .* at step \d+"):
    train_lib.train_and_evaluate(config, str(tmp_path))
  ckpts = tmp_path / "checkpoints"
  assert not ckpts.exists() or not [p for p in ckpts.iterdir() if p.name.isdigit()]


@pytest.mark.slow  # on a trained run
def test_a_workdir_with_a_different_model_is_refused(tmp_path, smoke_run):
  workdir = str(tmp_path / "run")
  shutil.copytree(smoke_run, workdir)  # a run of _smoke()
  other = _smoke(**{"model.d_model": 32, "model.head_dim": 16})
  with pytest.raises(ValueError, match=r"different config in \['model'\]"):
    train_lib.train_and_evaluate(other, workdir)


@pytest.mark.slow  # trains for tens of seconds
def test_replica_i_of_a_multi_seed_run_equals_the_single_run_with_seed_i(tmp_path):
  config = _smoke(num_seeds=3)
  stacked = train_lib.train_and_evaluate(config, str(tmp_path / "multi"))
  single = train_lib.train_and_evaluate(_smoke(seed=2), str(tmp_path / "single"))
  replica = jax.tree_util.tree_map(lambda x: x[2], stacked.params)
  _params_close(replica, jax.tree_util.tree_map(lambda x: x[0], single.params), atol=1e-5)
  seeds = {r["seed"] for r in metric_writers.read_metrics(str(tmp_path / "multi"))}
  assert seeds == {0, 1, 2}


def test_config_checks_fail_before_any_work(tmp_path):
  with pytest.raises(ValueError, match="checkpoint_every"):
    train_lib.train_and_evaluate(_smoke(checkpoint_every=4), str(tmp_path / "a"))
  for key, value in (("num_steps", -1), ("num_steps", 0), ("eval_every", 0),
                     ("log_every", -3), ("checkpoint_every", 0)):
    with pytest.raises(ValueError, match=f"{key} must be >= 1, got {value}; change config key"):
      train_lib.train_and_evaluate(_smoke(**{key: value}), str(tmp_path / "a"))
  bad = _smoke()
  bad.model.position = default.get_config("scheme=learned,smoke").model.position
  bad.model.position.max_len = 4
  with pytest.raises(ValueError, match=r"model\.position\.max_len"):
    train_lib.train_and_evaluate(bad, str(tmp_path / "b"))
  rand = default.get_config("scheme=learned,smoke,randomized")
  rand.model.position.max_len = 64
  with pytest.raises(ValueError, match=r"max_len.*at least 2048"):
    train_lib.train_and_evaluate(rand, str(tmp_path / "c"))
  assert not (tmp_path / "a").exists() and not (tmp_path / "c").exists()


@pytest.mark.slow  # trains for tens of seconds
def test_randomized_positions_train_every_scheme_quickly(tmp_path):
  config = default.get_config("scheme=shaw,smoke,randomized")
  state = train_lib.train_and_evaluate(config, str(tmp_path))
  assert int(state.step[0]) == config.num_steps


@pytest.mark.slow  # trains
def test_a_full_disk_is_one_line_and_the_previous_checkpoint_stays_loadable(tmp_path,
                                                                           monkeypatch):
  config = _smoke()  # 6 steps, checkpoints at 3 and 6
  workdir = str(tmp_path / "run")
  real_save = ocp.CheckpointManager.save

  def save_until_full(manager, step, *args, **kwargs):
    if step < 6:
      return real_save(manager, step, *args, **kwargs)
    os.makedirs(os.path.join(str(manager.directory), f"{step}.orbax-checkpoint-tmp-1"))
    raise RuntimeError("tensorstore write failed") from OSError(errno.ENOSPC,
                                                                "No space left on device")

  monkeypatch.setattr(ocp.CheckpointManager, "save", save_until_full)
  with pytest.raises(errors.WriteFailed) as e:
    train_lib.train_and_evaluate(config, workdir)
  assert str(e.value) == (
      f"cannot write checkpoint 6 to {workdir_lib.checkpoint_dir(workdir)}: No space left on "
      "device [ENOSPC]; checkpoint 3 is intact: make room and rerun the same command to resume")
  assert workdir_lib.partial_checkpoints(workdir) == []  # the half-written save is gone
  model = architectures.make_model(config.model, vocab_size=pipeline.make_dataset(
      seed=config.seed, **config.data).vocab.size)
  step, params = workdir_lib.load_params(workdir, config, model)
  assert step == 3 and jax.tree_util.tree_leaves(params)
  # A save cut off by a kill leaves its folder too: the next start removes it and resumes.
  monkeypatch.setattr(ocp.CheckpointManager, "save", real_save)
  os.makedirs(os.path.join(workdir_lib.checkpoint_dir(workdir), "6.orbax-checkpoint-tmp-2"))
  train_lib.train_and_evaluate(config, workdir)
  assert workdir_lib.checkpoint_steps(workdir) == [3, 6]
  assert workdir_lib.partial_checkpoints(workdir) == []
