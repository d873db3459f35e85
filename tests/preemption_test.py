"""SIGTERM/SIGINT: the flag, the second signal, a sweep between runs, and train.py end to end."""

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

from configs import default
from relpos_jax import errors
from relpos_jax import preemption
from relpos_jax import train_lib

import cli_harness  # pytest puts tests/ on the path

ROOT = pathlib.Path(__file__).resolve().parents[1]


def test_the_first_signal_sets_the_flag_and_arms_the_default_for_the_second():
  before = signal.getsignal(signal.SIGTERM)
  with preemption.handling_signals():
    assert preemption.stop_signal() is None
    with preemption.handling_signals():  # nested (train.py around train_and_evaluate): shared
      os.kill(os.getpid(), signal.SIGINT)
    assert preemption.stop_signal() == "SIGINT"
    # The next one is not caught: it ends the process at once (even inside a save).
    assert signal.getsignal(signal.SIGTERM) == signal.SIG_DFL
    assert signal.getsignal(signal.SIGINT) == signal.SIG_DFL
  assert signal.getsignal(signal.SIGTERM) == before


def test_a_signal_between_runs_stops_before_the_next_one_starts(tmp_path):
  with preemption.handling_signals():
    os.kill(os.getpid(), signal.SIGTERM)
    with pytest.raises(errors.Preempted, match="stopped by SIGTERM before the next run started"):
      train_lib.train_and_evaluate(default.get_config("smoke"), str(tmp_path / "next"))
  assert not (tmp_path / "next").exists()  # nothing started, nothing written


def _records(workdir):
  with open(pathlib.Path(workdir) / "metrics.jsonl") as f:
    return [r for r in map(json.loads, f) if r["kind"] == "train"]


def _second_signal_during_the_stop(cmd, workdir, after_step):
  """Runs `cmd` on `workdir`, sends SIGTERM once it logged past `after_step`, and again as soon as
  it says it is stopping; returns its exit status."""
  proc = subprocess.Popen([*cmd, "--workdir", str(workdir)], cwd=ROOT, text=True,
                          stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
  deadline = time.time() + 120
  while time.time() < deadline and not [r for r in _records(workdir) if r["step"] > after_step]:
    time.sleep(0.05)
  proc.send_signal(signal.SIGTERM)
  for line in proc.stderr:  # the handler's line: it is finishing the step and saving
    if line.startswith("received SIGTERM"):
      proc.send_signal(signal.SIGTERM)
      break
  proc.communicate(timeout=120)
  return proc.returncode


@pytest.mark.slow  # four training subprocesses
def test_sigterm_saves_the_step_exits_75_and_the_rerun_equals_an_uninterrupted_run(tmp_path):
  # Logs every 5 steps, checkpoints every 1000: the stop step is (almost surely) neither,
  # so both the checkpoint at it and the half-filled log window must be kept.
  flags = ["--config", "configs/default.py:smoke,steps=1500", "--config.log_every=5",
           "--config.checkpoint_every=1000", "--config.eval_every=10000",
           "--config.data.min_train_length=6"]
  cmd = [sys.executable, str(ROOT / "train.py"), *flags]
  workdir = tmp_path / "stopped"
  proc = subprocess.Popen([*cmd, "--workdir", str(workdir)], cwd=ROOT, text=True,
                          stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
  deadline = time.time() + 120
  while time.time() < deadline and not (workdir / "metrics.jsonl").exists():
    time.sleep(0.05)
  proc.send_signal(signal.SIGTERM)
  _, stderr = proc.communicate(timeout=120)
  assert proc.returncode == errors.EXIT_PREEMPTED, stderr[-3000:]
  last = stderr.strip().splitlines()[-1]
  match = re.fullmatch(r"stopped at step (\d+) by SIGTERM; checkpoint saved; rerun the same "
                       r"command to resume", last)
  assert match, stderr[-3000:]
  step = int(match.group(1))
  assert 0 < step < 1500
  assert str(step) in os.listdir(workdir / "checkpoints")
  assert "Traceback" not in stderr
  # Resumed, then stopped twice: the second signal ends it at once (-15), or after the
  # stop if that was quicker (75); either way the last complete checkpoint is kept.
  assert _second_signal_during_the_stop(cmd, workdir, step + 10) in (-signal.SIGTERM, 75)
  # The runs that are not signalled: forked by cli_harness (train.py without the import).
  resumed = cli_harness.run([*cmd[1:], "--workdir", workdir], cwd=ROOT, timeout=300)
  assert resumed.returncode == 0, resumed.stderr[-3000:]
  assert re.search(rf"resuming {workdir} from step (\d+)", resumed.stderr)
  assert not [p for p in os.listdir(workdir / "checkpoints") if "tmp" in p]
  fresh = cli_harness.run([*cmd[1:], "--workdir", tmp_path / "fresh"], cwd=ROOT, timeout=300)
  assert fresh.returncode == 0, fresh.stderr[-3000:]
  got, want = _records(workdir), _records(tmp_path / "fresh")
  np.testing.assert_array_equal([r["step"] for r in got], list(range(5, 1501, 5)))
  np.testing.assert_array_equal([r["step"] for r in got], [r["step"] for r in want])
  for key in ("loss", "token_accuracy", "grad_norm"):
    np.testing.assert_allclose([r[key] for r in got], [r[key] for r in want], rtol=1e-6)
