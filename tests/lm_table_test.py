"""The language-model table (configs/ablations/lm_context.py): stored run by run, skipped, rendered."""

import json
import logging
import os
import pathlib
import re
import shutil
import subprocess
import sys

import numpy as np
import numpy.testing as npt
import pytest

from relpos_jax import positions
from relpos_jax import train_lib
from relpos_jax.experiments import lm_report
from relpos_jax.experiments import lm_runner
from relpos_jax.experiments import records as records_lib
from relpos_jax.experiments import results
from relpos_jax.experiments import stats
from relpos_jax.experiments import store
from relpos_jax.experiments import sweep
from relpos_jax.experiments import sweep_spec

REPO = pathlib.Path(__file__).resolve().parents[1]
CONFIG = str(REPO / "configs/ablations/lm_context.py")
SMOKE = CONFIG + ":smoke,num_seeds=2,steps=3"
L = 96  # the smoke L of both objectives (a passkey example needs more than 85 bytes)


def test_the_sweep_is_every_scheme_as_an_lm_then_as_a_passkey_model():
  base, overrides = sweep_spec.load_sweep(SMOKE)
  runs = dict(sweep_spec.expand(base, overrides))
  assert list(runs) == (list(positions.SCHEMES)
                        + [f"{s}+passkey" for s in positions.SCHEMES])
  plain, passkey = runs["learned"].to_dict(), runs["learned+passkey"].to_dict()
  assert (plain["data"]["objective"], passkey["data"]["objective"]) == ("lm", "passkey")
  passkey["data"]["objective"] = "lm"
  assert passkey == plain  # the same model, data and budget but the objective
  assert plain["data"]["train_length"] == L and plain["model"]["position"]["max_len"] == L + 1
  variants = sweep.eval_variants(SMOKE, list(runs.items()))
  assert list(variants["rope"]) == list(variants["rope+passkey"]) == [
      "length_scaled", "pi", "dynamic_ntk", "yarn"]
  assert list(variants["alibi+passkey"]) == ["length_scaled"]
  assert len(runs) + sum(len(v) for v in variants.values()) == 46  # the docstring's rows
  module = sweep_spec.load_module(CONFIG)
  full = module.get_config()
  assert (full.num_seeds, full.data.train_length) == (3, 128)
  assert full.model.dtype == "bfloat16" and {c.model.dtype for c in runs.values()} == {"bfloat16"}
  assert module.get_config("num_seeds=1").num_seeds == 1
  with pytest.raises(ValueError, match="trains both objectives"):
    module.get_config("objective=passkey")


def _passkey(run, seed, context, depth, correct, n=4, error=None):
  return {"run": run, "scheme": "alibi", "seed": seed, "context": context, "depth": depth,
          "train_length": 8, "accuracy": float("nan") if error else correct / n,
          "num_examples": 0 if error else n, "error": error}


def test_passkey_cells_carry_an_interval_over_seeds_and_examples():
  records = [_passkey("a", s, 8, d, c) for s, cs in ((0, (2, 4)), (1, (3, 1)))
             for d, c in zip((0.0, 1.0), cs)]
  records += [_passkey("a", s, 16, d, 0, error="too long") for s in (0, 1) for d in (0.0, 1.0)]
  rows = {(r["context"], r["depth"]): r for r in lm_report.passkey_rows(records)}
  # depth 0: seed 0 got 2 of 4 right, seed 1 3 of 4.
  want = stats.mean_interval([np.array([1, 1, 0, 0.0]), np.array([1, 1, 1, 0.0])])
  got = rows[(8, 0.0)]
  npt.assert_allclose([got["accuracy"], got["ci95_low"], got["ci95_high"]],
                      [want.mean, want.lo, want.hi])
  assert got["num_seeds"] == 2 and got["num_examples"] == 8
  assert rows[(16, 1.0)]["num_seeds"] == 0 and rows[(16, 1.0)]["error"] == "too long"
  # All depths pooled: seed 0 6 of 8, seed 1 4 of 8.
  pooled = {r["context"]: r for r in lm_report.passkey_context_rows(records)}
  want = stats.mean_interval([np.repeat([1.0, 0.0], [6, 2]), np.repeat([1.0, 0.0], [4, 4])])
  npt.assert_allclose(pooled[8]["accuracy"], 0.625)
  npt.assert_allclose([pooled[8]["ci95_low"], pooled[8]["ci95_high"]], [want.lo, want.hi])
  table = lm_report.passkey_summary_markdown(records)
  assert f"| a | {stats.format_interval(want)} | n/a |" in table
  assert "| 16 (2×L) | n/a | n/a |" in lm_report.passkey_markdown(records)


def _bpb(run, scheme, seed, context, bpb):
  error = None if bpb is not None else "learned positions: no row"
  return {"run": run, "scheme": scheme, "seed": seed, "replica": seed, "mode": "nonoverlapping",
          "stride": 0, "context": context, "train_length": 8, "eval_bytes": 32,
          "bits_per_byte": float("nan") if error else bpb,
          "perplexity": float("nan") if error else 2.0 ** bpb,
          "position_loss": None if error else [bpb] * context, "error": error}


def test_stored_lm_records_render_as_a_partly_filled_table(tmp_path):
  table = tmp_path / "results" / "lm_context"
  workdir = tmp_path / "runs" / "x"
  workdir.mkdir(parents=True)
  (workdir / "config.json").write_text(json.dumps({"num_steps": 10, "batch_size": 4}))
  store.write_table_meta(str(table), "configs/ablations/lm_context.py",
                         ["learned", "alibi", "alibi+passkey"])
  store.write_run(str(table), "learned", [
      _bpb("learned", "learned", s, c, 2.0 + s if c == 8 else None)
      for s in (0, 1) for c in (8, 16)], workdir=str(workdir), eval_seconds=1.0)
  store.write_run(str(table), "alibi+passkey", [
      _passkey("alibi+passkey", s, c, d, 3) for s in (0, 1) for c in (8, 16) for d in (0.0, 1.0)],
                  workdir=str(workdir), eval_seconds=1.0)
  assert results.write_table_report(str(table))
  text = results.render(str(tmp_path / "results"))
  section = text[text.index("## lm_context\n"):]
  assert ": 2 of 3 runs stored (the table is incomplete)." in section
  # Records without test blocks: the interval is the seeds' spread alone.
  want = stats.mean_interval([np.array([2.0]), np.array([3.0])], bounds=(0.0, np.inf))
  assert f"| learned | {stats.format_interval(want, digits=3)} | n/a |" in section
  assert "| alibi+passkey | 0.75 [" in section and "`results/lm_context/passkey_heatmap.png`" in section
  assert text == results.render(str(tmp_path / "results"))  # the same bytes every time
  for name in [*lm_report.REPORT_FILES.values(), *lm_report.PASSKEY_FILES.values()]:
    assert os.path.getsize(table / name) > 0, name


def _fail(*args, **kwargs):
  raise AssertionError("a stored run was trained or evaluated again")


@pytest.mark.slow  # trains four smoke runs, starts `python -m relpos_jax.results`
def test_a_smoke_table_is_stored_run_by_run_skipped_and_rendered(tmp_path, monkeypatch, caplog):
  root = tmp_path / "results"
  table = root / "lm_context"
  runs_dir = tmp_path / "runs"
  # One session: the LM run, its two seeds trained together; another: the passkey run,
  # one seed at a time (stored as parts, then merged).
  sweep.run_sweep(SMOKE, str(runs_dir), results_dir=str(table), only=["learned"])
  sweep.run_sweep(SMOKE, str(runs_dir), results_dir=str(table), only=["alibi+passkey"],
                  split_seeds=True)
  assert sorted(os.listdir(table / "records")) == [
      "alibi+passkey.jsonl", "alibi+passkey@length_scaled.jsonl", "learned.jsonl",
      "learned@length_scaled.jsonl"]
  learned = records_lib.read_jsonl(str(table / "records" / "learned.jsonl"))
  assert [(r["seed"], r["context"]) for r in learned] == [
      (s, c) for s in (0, 1) for c in (L, 2 * L, 4 * L)]
  for r in learned:  # a learned table of L + 1 rows: n/a beyond L, never clamped
    assert (r["error"] is None) == (r["context"] == L)
    assert (r["bits_per_byte"] is None) == (r["context"] > L)
    if r["error"] is None:  # the stored test blocks: the interval's eval examples
      npt.assert_allclose(np.mean(r["block_bits_per_byte"]), r["bits_per_byte"])
  passkey = records_lib.read_jsonl(str(table / "records" / "alibi+passkey.jsonl"))
  assert len(passkey) == 2 * 3 * 5 and {r["replica"] for r in passkey} == {0, 1}
  assert {r["run"] for r in passkey} == {"alibi+passkey"}
  info = json.loads((table / "runs" / "learned@length_scaled.json").read_text())
  assert info["variant_of"] == "learned"
  info = json.loads((table / "runs" / "alibi+passkey.json").read_text())
  assert [p["seed"] for p in info["seed_parts"]] == [0, 1]
  assert results.table_status(str(table)) == (2, 20)

  # A later session: runs/ is gone, and neither stored run is trained or evaluated again.
  shutil.rmtree(runs_dir)
  monkeypatch.setattr(train_lib, "train_and_evaluate", _fail)
  monkeypatch.setattr(lm_runner, "evaluate_workdir", _fail)
  with caplog.at_level(logging.INFO):
    again = sweep.run_sweep(SMOKE, str(runs_dir), results_dir=str(table),
                            only=["learned", "alibi+passkey"])
  assert again == [] and os.listdir(runs_dir) == [sweep.SWEEP_FILE]
  assert caplog.text.count("records stored in") == 2

  # The table's report, from the stored records.
  for name in [*lm_report.REPORT_FILES.values(), *lm_report.PASSKEY_FILES.values()]:
    assert os.path.getsize(table / name) > 0, name
  bpb = (table / "lm_context.md").read_text()
  for run in ("learned", "learned@length_scaled"):
    row = next(line for line in bpb.splitlines() if line.startswith(f"| {run} |"))
    cells = [c.strip() for c in row.strip("|").split("|")][1:]
    assert re.fullmatch(r"\d+\.\d{3} \[\d+\.\d{3}, \d+\.\d{3}\]", cells[0]), row
    assert cells[1:] == ["n/a", "n/a"], row
  pk = (table / "passkey.md").read_text()
  assert "### Passkey accuracy, alibi+passkey (" in pk
  assert "### Passkey accuracy, alibi+passkey@length_scaled (" in pk
  assert pk.count(f"| {4 * L} (4×L) | ") == 2
  assert len((table / "passkey.csv").read_text().splitlines()) == 1 + 2 * 3 * 5

  # RESULTS.md renders the partly filled table, and `--check` finds it byte for byte.
  (tmp_path / "README.md").write_text(
      f"# x\n{results.HEADLINE_BEGIN}\n{results.HEADLINE_END}\n")
  env = {**os.environ, "PYTHONPATH": str(REPO), "JAX_PLATFORMS": "cpu"}
  command = [sys.executable, "-m", "relpos_jax.results", "--root", "results",
             "--out", "RESULTS.md"]
  subprocess.run(command, cwd=tmp_path, env=env, check=True, capture_output=True)
  text = (tmp_path / "RESULTS.md").read_text()
  assert text == results.render(str(root))
  section = text[text.index("## lm_context\n"):]
  assert ": 2 of 20 runs stored (the table is incomplete)." in section
  assert "| learned | " in section and "| alibi+passkey@length_scaled | " in section
  assert "### Passkey accuracy by eval context, all depths" in section
  check = subprocess.run(command + ["--check"], cwd=tmp_path, env=env, capture_output=True,
                         text=True)
  assert check.returncode == 0, check.stderr
