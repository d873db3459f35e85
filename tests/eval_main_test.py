"""End to end: a 2-run smoke sweep, then `python eval.py --sweep_dir` on it."""

import json
import os
import pathlib
import subprocess
import sys

import pytest

from relpos_jax import evaluate
from relpos_jax import sweep

REPO = pathlib.Path(__file__).resolve().parents[1]
SWEEP = str(REPO / "configs" / "ablations" / "schemes.py") + ":smoke,steps=3,num_seeds=2"
RUNS = ["sinusoidal", "t5"]
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def sweep_dir(tmp_path_factory):
  """Two schemes of the schemes ablation, smoke-sized, trained (not evaluated)."""
  directory = str(tmp_path_factory.mktemp("schemes"))
  assert sweep.run_sweep(SWEEP, directory, only=RUNS, run_eval=False) == []
  return directory


def test_eval_main_on_a_sweep_dir(sweep_dir):
  env = {**os.environ, "JAX_PLATFORMS": "cpu"}
  result = subprocess.run([sys.executable, str(REPO / "eval.py"), "--sweep_dir", sweep_dir],
                          capture_output=True, text=True, cwd=REPO, env=env, timeout=300)
  assert result.returncode == 0, result.stderr[-3000:]
  out = os.path.join(sweep_dir, "eval")
  records = evaluate.read_records(os.path.join(out, "records.jsonl"))
  assert [(r["run"], r["seed"], r["length"]) for r in records] == [
      (run, seed, n) for run in RUNS for seed in (0, 1) for n in (4, 8)]
  table = pathlib.Path(out, "exact_match.md").read_text()
  for run in RUNS:
    assert f"| {run} | {run} | 2 | 1–6 |" in table
    assert f"| {run} | {run} | 2 |" in pathlib.Path(out, "errors.md").read_text()
  assert "| run | scheme | seeds | train | 4 | 8 | in-dist | extrap |" in result.stdout
  assert pathlib.Path(out, "results.csv").read_text().count("\n") == 1 + 2 * 2
  for png in (os.path.join(out, "accuracy_vs_length.png"),
              os.path.join(sweep_dir, "t5", "eval", "t5_bias.png"),
              os.path.join(sweep_dir, "sinusoidal", "eval", "sinusoid.png")):
    with open(png, "rb") as f:
      assert f.read(8) == PNG_SIGNATURE
    assert os.path.getsize(png) > 5000
  assert "run t5 seed 1 length 8" in result.stderr  # progress: a line per run/length


def test_rerunning_the_sweep_skips_finished_runs(sweep_dir):
  checkpoints = {run: os.listdir(os.path.join(sweep_dir, run, "checkpoints")) for run in RUNS}
  metrics = {run: pathlib.Path(sweep_dir, run, "metrics.jsonl").read_text() for run in RUNS}
  sweep.run_sweep(SWEEP, sweep_dir, only=RUNS, run_eval=False)
  for run in RUNS:
    assert os.listdir(os.path.join(sweep_dir, run, "checkpoints")) == checkpoints[run]
    assert pathlib.Path(sweep_dir, run, "metrics.jsonl").read_text() == metrics[run]
  with open(os.path.join(sweep_dir, sweep.SWEEP_FILE)) as f:
    listed = [r["name"] for r in json.load(f)["runs"]]
  assert set(RUNS) < set(listed)  # the sweep file lists every run, trained or not
  assert sweep.run_dirs(sweep_dir) == [os.path.join(sweep_dir, r) for r in RUNS]
