"""End to end: `python eval.py` on a trained smoke workdir and on a folder of two runs.

The run on one workdir starts a fresh interpreter; the others are forked by cli_harness
(the same script as `__main__` in a process of its own, without the import).
"""

import csv
import os
import pathlib
import shutil

import pytest

from relpos_jax import train_lib
from relpos_jax import workdir as workdir_lib
from relpos_jax.experiments import records as records_lib
from relpos_jax.experiments import report
from relpos_jax.experiments import results
from relpos_jax.experiments import sweep
from relpos_jax.experiments import sweep_spec

import cli_harness  # pytest puts tests/ on the path

pytestmark = pytest.mark.slow  # starts subprocesses; `pytest -m "not slow"` skips them

REPO = pathlib.Path(__file__).resolve().parents[1]
DEFAULT = sweep_spec.load_module(str(REPO / "configs" / "default.py"))
RUNS = ["sinusoidal", "t5"]
SEEDS = (0, 1)  # the replicas of conftest's learned_smoke_run
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def _eval_main(*args, fresh=False):
  """Runs eval.py with the arguments; returns the finished process."""
  env = {**os.environ, "JAX_PLATFORMS": "cpu"}
  return cli_harness.run(["eval.py", *args], cwd=REPO, env=env, timeout=300, fresh=fresh)


def _assert_png(path):
  with open(path, "rb") as f:
    assert f.read(8) == PNG_SIGNATURE
  assert os.path.getsize(path) > 5000


@pytest.fixture(scope="module")
def workdir(learned_smoke_run, tmp_path_factory):
  """A copy of the 2-replica learned-positions smoke run (a 16-row table), named learned."""
  directory = str(tmp_path_factory.mktemp("runs") / "learned")
  shutil.copytree(learned_smoke_run, directory)
  return directory


def test_eval_main_on_one_workdir(workdir):
  result = _eval_main("--workdir", workdir, "--lengths", "4,8,16", "--num_examples", "3",
                      "--oracle_length", "--dump_predictions",
                      fresh=True)  # eval.py's one run from a cold start
  assert result.returncode == 0, result.stderr[-3000:]
  out = os.path.join(workdir, "eval")
  records = records_lib.read_jsonl(os.path.join(out, "extrapolation.jsonl"))
  assert [(r["run"], r["seed"], r["length"]) for r in records] == [
      ("learned", s, n) for s in SEEDS for n in (4, 8, 16)]
  assert [r["num_examples"] for r in records] == [3, 3, 0] * len(SEEDS)
  assert all(bool(r["error"]) == (r["length"] == 16) for r in records)
  for key in records_lib.KEYS:
    assert key in records[0], key
  table = pathlib.Path(out, "extrapolation.md").read_text()
  assert "### Oracle exact match vs length" in table and "### Failure anatomy" in table
  assert "n/a: not representable" in table
  assert table in result.stdout  # the tables are printed too
  with open(os.path.join(out, "extrapolation.csv")) as f:
    (row,) = list(csv.DictReader(f))
  assert row["oracle_exact_match_L16_mean"] == "n/a" and row["loss_L4_mean"] != ""
  _assert_png(os.path.join(out, "accuracy_vs_length.png"))
  assert "eval 6/6 | run learned seed 1 length 16: n/a" in result.stderr  # progress
  assert "ETA" in result.stderr
  predictions = records_lib.read_jsonl(os.path.join(out, report.PREDICTIONS_FILE))
  assert [(p["run"], p["seed"], p["length"]) for p in predictions] == [
      ("learned", s, n) for s in SEEDS for n in (4, 8) for _ in range(3)
  ]  # length 16 is not representable: nothing decoded
  for p in predictions:
    assert set(p) == {"run", "seed", "length", "input", "target", "output", "exact",
                      "first_wrong"}
    assert len(p["input"].split()) == p["length"] and p["exact"] == (p["output"] == p["target"])
    assert (p["first_wrong"] is None) == p["exact"]
  for record in records:  # the records' exact match is the predictions' mean
    if record["length"] == 16:
      continue
    rows = [p for p in predictions
            if (p["seed"], p["length"]) == (record["seed"], record["length"])]
    assert record["exact_match"] == pytest.approx(sum(p["exact"] for p in rows) / len(rows))
  # 3 sampled from each length's set of the config's size (smoke: 8), with seed 0.
  size = workdir_lib.load_config(workdir).data.eval_examples_per_length
  assert all(r["num_available"] == size == 8 and r["eval_seed"] == 0 for r in records)


def test_eval_main_refuses_ambiguous_flags(workdir):
  for args in ([], ["--workdir", workdir, "--sweep_dir", workdir],
               ["--workdir", workdir, "--workdir", workdir]):
    result = _eval_main(*args)
    assert result.returncode != 0
    assert "--workdir" in result.stderr


@pytest.fixture(scope="module")
def sweep_dir(tmp_path_factory):
  """A sweep folder of two 2-seed smoke runs (sinusoidal, t5), trained 3 steps each."""
  directory = tmp_path_factory.mktemp("sweep")
  for scheme in RUNS:
    config = DEFAULT.get_config(f"smoke,scheme={scheme},num_seeds=2,steps=3")
    train_lib.train_and_evaluate(config, str(directory / scheme))
  return str(directory)


def test_eval_main_on_a_sweep_dir(sweep_dir):
  result = _eval_main("--sweep_dir", sweep_dir)
  assert result.returncode == 0, result.stderr[-3000:]
  out = os.path.join(sweep_dir, "eval")
  records = records_lib.read_jsonl(os.path.join(out, "extrapolation.jsonl"))
  assert [(r["run"], r["seed"], r["length"]) for r in records] == [
      (run, seed, n) for run in RUNS for seed in (0, 1) for n in (4, 8)]
  table = pathlib.Path(out, "extrapolation.md").read_text()
  for run in RUNS:
    assert f"| {run} | 2 | 1–6 |" in table
    assert f"| {run} | 8 | 1.3 |" in table  # its failure-anatomy row at length 8
    assert os.path.exists(os.path.join(sweep_dir, run, "eval", "extrapolation.jsonl"))
  assert ("| run | scheme | seeds | train | conv. | valid | in-dist | 1.5× | 2× | 4× | extrap "
          "| pooled | 4 | 8 |" in result.stdout)
  assert pathlib.Path(out, "extrapolation.csv").read_text().count("\n") == 1 + len(RUNS)
  for png in (os.path.join(out, "accuracy_vs_length.png"),
              os.path.join(sweep_dir, "t5", "eval", "t5_bias.png"),
              os.path.join(sweep_dir, "sinusoidal", "eval", "sinusoid.png")):
    _assert_png(png)
  assert "eval 8/8 | run t5 seed 1 length 8" in result.stderr  # progress over every item


def test_eval_main_stores_a_sweep_under_results(sweep_dir, tmp_path):
  table = tmp_path / "results" / "smoke"
  with open(os.path.join(sweep_dir, sweep.SWEEP_FILE), "w") as f:
    f.write('{"config": "configs/ablations/x.py", "runs": [{"name": "sinusoidal"}, '
            '{"name": "t5"}, {"name": "rope"}]}')
  result = _eval_main("--sweep_dir", sweep_dir, "--results_dir", str(table),
                      "--allow_dirty")  # a subprocess: the checkout may have edits
  assert result.returncode == 0, result.stderr[-3000:]
  assert sorted(os.listdir(table / "records")) == ["sinusoidal.jsonl", "t5.jsonl"]
  assert sorted(os.listdir(table / "runs")) == ["sinusoidal.json", "t5.json"]
  assert (table / "extrapolation.md").exists() and (table / "accuracy_vs_length.png").exists()
  from relpos_jax.experiments import results
  assert results.table_status(str(table)) == (2, 3)
