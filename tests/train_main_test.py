"""train.py end to end, in processes: smoke, flag errors, kill -9 and resume, 8 devices.

The runs that are not signalled are forked by cli_harness (the same script as `__main__` in a
process of its own, without the import); the killed one starts a fresh interpreter, as do
the signalled runs of preemption_test and multihost_test: train.py's cold start stays tested.
"""

import json
import os
import pathlib
import re
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

import cli_harness  # pytest puts tests/ on the path

pytestmark = pytest.mark.slow  # starts subprocesses; `pytest -m "not slow"` skips them

ROOT = pathlib.Path(__file__).resolve().parents[1]


def _train(workdir, *flags, env=None):
  return cli_harness.run(["train.py", "--workdir", workdir, *flags], cwd=ROOT, timeout=300,
                         env={**os.environ, **(env or {})})


def _records(workdir, kind="train"):
  with open(pathlib.Path(workdir) / "metrics.jsonl") as f:
    return [r for r in map(json.loads, f) if r["kind"] == kind]


def test_smoke_run_writes_metrics_checkpoints_and_tensorboard(tmp_path):
  proc = _train(tmp_path, "--config", "configs/default.py:smoke,scheme=shaw,task=reverse",
                "--config.model.num_heads=4", "--config.model.head_dim=4")
  assert proc.returncode == 0, proc.stderr[-3000:]
  assert [r["step"] for r in _records(tmp_path)] == [3, 6]
  assert {"loss", "token_accuracy", "exact_match", "learning_rate", "grad_norm",
          "steps_per_sec"} <= set(_records(tmp_path)[0])
  assert _records(tmp_path, "eval")
  assert sorted(p.name for p in (tmp_path / "checkpoints").iterdir() if p.name.isdigit()) == [
      "3", "6"]
  assert list((tmp_path / "tensorboard").glob("events.out.tfevents.*"))
  config = json.loads((tmp_path / "config.json").read_text())
  assert config["model"]["num_heads"] == 4 and config["data"]["task"] == "reverse"
  assert (tmp_path / "vocab.json").exists()
  assert "steps/s" in proc.stderr and "ETA" in proc.stderr


def test_bad_overrides_fail_at_once_with_the_flag_message(tmp_path):
  proc = _train(tmp_path, "--config", "configs/default.py:smoke", "--config.model.no_such_key=3")
  assert proc.returncode != 0 and "no_such_key" in proc.stderr
  proc = _train(tmp_path, "--config", "configs/default.py:smoke", "--config.model.num_heads=x")
  assert proc.returncode != 0 and "num_heads" in proc.stderr
  assert not (tmp_path / "metrics.jsonl").exists()
  # A bad config-file argument (scheme=rotary): test_config_mistakes_are_one_line_naming_the_key.


def test_kill_9_mid_run_then_restart_finishes_from_the_last_checkpoint(tmp_path):
  # One input length (one train-step program) and no eval before the end: less to compile.
  flags = ["--config", "configs/default.py:smoke,steps=200", "--config.log_every=20",
           "--config.checkpoint_every=20", "--config.eval_every=1000",
           "--config.keep_checkpoints=3", "--config.data.min_train_length=6"]
  cmd = [sys.executable, str(ROOT / "train.py"), "--workdir", str(tmp_path), *flags]
  proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
  ckpts = tmp_path / "checkpoints"
  deadline = time.time() + 120
  while time.time() < deadline and not (ckpts.exists() and any(
      p.name.isdigit() and int(p.name) >= 40 for p in ckpts.iterdir())):
    time.sleep(0.2)
  proc.send_signal(signal.SIGKILL)
  proc.wait()
  saved = max(int(p.name) for p in ckpts.iterdir() if p.name.isdigit())
  assert 40 <= saved < 200, saved
  done = _train(tmp_path, *flags)
  assert done.returncode == 0, done.stderr[-3000:]
  assert f"resuming {tmp_path} from step" in done.stderr
  steps = [r["step"] for r in _records(tmp_path)]
  assert steps == list(range(20, 201, 20)), steps  # nothing lost, nothing twice
  assert not list(ckpts.glob("*tmp*"))
  # The same run uninterrupted ends in the same place.
  fresh = _train(tmp_path / "fresh", *flags)
  assert fresh.returncode == 0
  np.testing.assert_allclose([r["loss"] for r in _records(tmp_path)],
                             [r["loss"] for r in _records(tmp_path / "fresh")], rtol=1e-6)


def test_eight_simulated_devices_give_the_same_losses(tmp_path):
  flags = ["--config", "configs/default.py:smoke,steps=9", "--config.eval_every=1000",
           "--config.data.min_train_length=6"]  # less to compile, as above
  one = _train(tmp_path / "one", *flags)
  eight = _train(tmp_path / "eight", *flags,
                 env={"XLA_FLAGS": os.environ.get("XLA_FLAGS", "") +
                      " --xla_force_host_platform_device_count=8"})
  assert one.returncode == 0 and eight.returncode == 0, eight.stderr[-3000:]
  losses = lambda w: [r["loss"] for r in _records(w)]
  np.testing.assert_allclose(losses(tmp_path / "one"), losses(tmp_path / "eight"), atol=1e-5)


def _messages(stderr):
  """stderr without absl's log lines (`I1201 10:00:00.000 ...`) and orbax's warnings."""
  return [line for line in stderr.splitlines()
          if line.strip() and not re.match(r"[IWEF]\d{4} |WARNING:", line)]


def test_config_mistakes_are_one_line_naming_the_key(tmp_path):
  cases = [
      (["--config", "configs/default.py:smoke,scheme=rotary"], {}, "unknown scheme 'rotary'"),
      (["--config", "configs/default.py:smoke", "--config.num_steps=-1"], {},
       "num_steps must be >= 1, got -1; change config key num_steps"),
      (["--config", "configs/default.py:smoke", "--config.eval_every=0"], {},
       "config key eval_every"),
      (["--config", "configs/default.py:smoke", "--config.data.task=scan",
        "--config.data.scan_split=bogus"], {}, "unknown SCAN split 'bogus'"),
      (["--config", "configs/default.py:smoke"], {"JAX_COORDINATOR_ADDRESS": "127.0.0.1:1"},
       "JAX_NUM_PROCESSES, JAX_PROCESS_ID not"),
  ]
  for flags, env, message in cases:
    proc = _train(tmp_path / "w", *flags, env=env)
    assert proc.returncode == 1, (flags, proc.stderr[-2000:])
    lines = _messages(proc.stderr)
    assert len(lines) == 1 and lines[0].startswith("error: ") and message in lines[0], (
        flags, proc.stderr[-3000:])
    assert "Traceback" not in proc.stderr
  assert not (tmp_path / "w" / "metrics.jsonl").exists()
  proc = cli_harness.run(["eval.py", "--workdir", tmp_path / "w"], cwd=ROOT, timeout=300)
  assert proc.returncode == 1 and "Traceback" not in proc.stderr
  assert _messages(proc.stderr) == [
      f"error: nothing to evaluate: none of ['{tmp_path / 'w'}'] holds a checkpoint"]


def test_sweep_shards_under_a_multi_task_slurm_step_train_independently(tmp_path):
  # srun -n 4 python train.py ... --sweep_shard $SLURM_PROCID/4: four independent shards;
  # joining one jax.distributed job would wait for the other three tasks forever.
  slurm = {"SLURM_JOB_ID": "1", "SLURM_NTASKS": "4", "SLURM_STEP_NUM_TASKS": "4",
           "SLURM_PROCID": "0", "SLURM_LOCALID": "0", "SLURM_STEP_NODELIST": "localhost"}
  proc = _train(tmp_path, "--config", "configs/ablations/schemes.py:smoke,num_seeds=1,steps=2",
                "--sweep_shard", "0/40", env=slurm)  # shard 0 of 40: only the first run
  assert proc.returncode == 0, proc.stderr[-3000:]
  assert "training as an independent process" in proc.stderr
  assert (tmp_path / "none+copy" / "checkpoints" / "2").exists()
