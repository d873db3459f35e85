"""Two processes on this machine train one run (README, "Multi-host"): same losses as one
process on two devices, one writer, kill both and rerun both, eval.py reads the result."""

import json
import os
import pathlib
import signal
import socket
import subprocess
import sys
import time

import numpy as np
import pytest

import cli_harness  # pytest puts tests/ on the path

ROOT = pathlib.Path(__file__).resolve().parents[1]
# The README's command (configs/default.py:smoke), with rsqrt decay so that a run cut
# short is a prefix of a longer one, checkpoints every 3 steps, and (to compile less)
# one input length and the in-training eval at the end only.
FLAGS = ["--config", "configs/default.py:smoke", "--config.optimizer.decay=rsqrt",
         "--config.log_every=3", "--config.eval_every=1000", "--config.checkpoint_every=3",
         "--config.data.min_train_length=6"]
STEPS = 9


JOB_VARS = ("JAX_COORDINATOR_ADDRESS", "JAX_NUM_PROCESSES", "JAX_PROCESS_ID",
            "JAX_LOCAL_DEVICE_IDS")


def _xla_flags(env, device_count):
  """`env`'s XLA_FLAGS with `device_count` host devices (None: the default)."""
  xla = [f for f in env.get("XLA_FLAGS", "").split() if "device_count" not in f]
  if device_count:
    xla.append(f"--xla_force_host_platform_device_count={device_count}")
  return " ".join(xla)


def _env(device_count=None, **extra):
  """This environment without JAX/SLURM job settings or a forced device count."""
  env = {k: v for k, v in os.environ.items() if not k.startswith(("JAX_", "SLURM_"))}
  return {**env, "XLA_FLAGS": _xla_flags(env, device_count), "JAX_PLATFORMS": "cpu", **extra}


def _one_process_env(device_count=None):
  """This environment for a run of one process (no JAX or SLURM job variables; the other
  settings, such as the compile cache, kept): what cli_harness can fork."""
  env = {k: v for k, v in os.environ.items()
         if k not in JOB_VARS and not k.startswith("SLURM_")}
  return {**env, "XLA_FLAGS": _xla_flags(env, device_count), "JAX_PLATFORMS": "cpu"}


def _free_port() -> int:
  with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    return s.getsockname()[1]


def _start_pair(workdir, steps, logs):
  """`train.py` as processes 0 and 1 of one job (the README's hand launch)."""
  port = _free_port()
  procs = []
  for index in (0, 1):
    env = _env(JAX_COORDINATOR_ADDRESS=f"127.0.0.1:{port}", JAX_NUM_PROCESSES="2",
               JAX_PROCESS_ID=str(index))
    out = open(logs / f"process{index}.{len(list(logs.iterdir()))}.log", "w")
    procs.append(subprocess.Popen(
        [sys.executable, "train.py", "--workdir", str(workdir), *FLAGS,
         f"--config.num_steps={steps}"], cwd=ROOT, env=env, stdout=out,
        stderr=subprocess.STDOUT))
  return procs


def _wait(procs, timeout=240):
  deadline = time.time() + timeout
  for proc in procs:
    proc.wait(timeout=max(deadline - time.time(), 1))
  return [proc.returncode for proc in procs]


def _records(workdir, kind="train"):
  with open(pathlib.Path(workdir) / "metrics.jsonl") as f:
    return [r for r in map(json.loads, f) if r["kind"] == kind]


def _checkpoints(workdir):
  directory = pathlib.Path(workdir) / "checkpoints"
  return sorted(int(p.name) for p in directory.iterdir() if p.name.isdigit()) \
      if directory.exists() else []


@pytest.mark.slow
def test_two_processes_train_one_run_like_one_process_on_two_devices(tmp_path):
  logs = tmp_path / "logs"
  logs.mkdir()
  # Reference: one process, two simulated devices, the same global batch.
  one = cli_harness.run(["train.py", "--workdir", tmp_path / "one", *FLAGS,
                         f"--config.num_steps={STEPS}"], cwd=ROOT, timeout=240,
                        env=_one_process_env(device_count=2))
  assert one.returncode == 0, one.stderr[-3000:]

  # Two processes, killed (kill -9, both) once they have saved a checkpoint.
  workdir = tmp_path / "two"
  procs = _start_pair(workdir, 200, logs)
  deadline = time.time() + 240
  while time.time() < deadline and not _checkpoints(workdir):
    assert all(p.poll() is None for p in procs), (logs / "process0.0.log").read_text()[-3000:]
    time.sleep(0.05)
  for proc in procs:
    proc.send_signal(signal.SIGKILL)
  _wait(procs)
  saved = _checkpoints(workdir)
  assert saved and saved[-1] < STEPS, saved

  # Rerun both: they resume from that checkpoint and finish.
  procs = _start_pair(workdir, STEPS, logs)
  codes = _wait(procs)
  texts = [(logs / f"process{i}.{2 + i}.log").read_text() for i in (0, 1)]
  assert codes == [0, 0], texts[0][-3000:] + texts[1][-3000:]
  assert all(f"resuming {workdir} from step {saved[-1]}" in t for t in texts)

  # The same losses as the one-process run (to float tolerance: gloo sums in another order).
  losses = lambda w: [(r["step"], r["loss"]) for r in _records(w)]
  assert [s for s, _ in losses(workdir)] == [3, 6, 9]  # each step logged once
  np.testing.assert_allclose([l for _, l in losses(workdir)],
                             [l for _, l in losses(tmp_path / "one")], rtol=1e-5)

  # One writer: one checkpoint directory, one TensorBoard file per launch, no stray files.
  assert _checkpoints(workdir) == [6, 9]
  assert len(list((workdir / "tensorboard").iterdir())) == 2
  assert sorted(p.name for p in workdir.iterdir()) == [
      "checkpoints", "config.json", "metrics.jsonl", "tensorboard", "train.lock", "vocab.json"]
  config = json.loads((workdir / "config.json").read_text())
  assert config["provenance"]["process_count"] == 2

  # eval.py (one process) reads the checkpoint the two processes wrote.
  proc = cli_harness.run(["eval.py", "--workdir", workdir, "--lengths", "4", "--num_examples", "2"],
                         cwd=ROOT, timeout=240, env=_one_process_env())
  assert proc.returncode == 0, proc.stderr[-3000:]
  records = [json.loads(line) for line in open(workdir / "eval" / "extrapolation.jsonl")]
  assert [(r["step"], r["length"]) for r in records] == [(STEPS, 4)]


@pytest.mark.slow
def test_sigterm_to_one_process_stops_both_at_the_same_step_with_a_checkpoint(tmp_path):
  logs = tmp_path / "logs"
  logs.mkdir()
  workdir = tmp_path / "run"
  procs = _start_pair(workdir, 3000, logs)
  deadline = time.time() + 240
  while time.time() < deadline and not (workdir / "metrics.jsonl").exists():
    assert all(p.poll() is None for p in procs), (logs / "process0.0.log").read_text()[-3000:]
    time.sleep(0.05)
  procs[1].send_signal(signal.SIGTERM)  # a scheduler may reach the tasks at different times
  codes = _wait(procs)
  texts = [(logs / f"process{i}.{i}.log").read_text() for i in (0, 1)]
  assert codes == [75, 75], texts[0][-3000:] + texts[1][-3000:]
  stops = [[line for line in t.splitlines() if line.startswith("stopped at step")] for t in texts]
  assert len(stops[0]) == 1 and stops[0] == stops[1], stops  # the same step on both
  step = int(stops[0][0].split()[3])
  assert 0 < step < 3000 and _checkpoints(workdir)[-1] == step
