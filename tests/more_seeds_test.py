"""The list of runs whose claims need more seeds: it names stored runs, and each can take them."""

import json
import pathlib

import numpy as np
import pytest

from relpos_jax.experiments import more_seeds
from relpos_jax.experiments import store

RESULTS = str(pathlib.Path(__file__).resolve().parents[1] / "results")


def test_every_listed_row_is_stored_and_every_run_can_take_the_seeds():
  for claim in more_seeds.CLAIMS:
    for table, row in claim.rows:
      values = more_seeds.seed_values(RESULTS, table, row, claim.column)
      assert len(values) >= 3, (table, row)
  runs = more_seeds.runs_to_extend(RESULTS)
  assert len(runs) == len(set(runs)) and ("schemes", "xl+reverse") in runs
  assert ("extrapolation_methods", "rope+copy") in runs  # its @yarn row's run
  for table, run in runs:
    verdict = more_seeds.check(RESULTS, table, run, 5)
    assert not verdict.startswith("refused"), (table, run, verdict)


def test_the_command_is_the_tables_own_asking_for_more_seeds():
  assert more_seeds.command(RESULTS, "t5_buckets", "num_buckets=8+max_distance=32", 5)[1:] == [
      "train.py", "--config", "configs/ablations/t5_buckets.py", "--workdir", "runs/t5_buckets",
      "--results_dir", f"{RESULTS}/t5_buckets", "--runs", "num_buckets=8+max_distance=32",
      "--config.num_seeds=5"]


def _info(table, name, *, train, evaluation, arch="encoder_decoder", parts=None, variant_of=None):
  info = {"run": name, "config": {"seed": 0, "num_seeds": 3, "model": {"arch": arch}},
          "train_seconds": train, "eval_seconds": evaluation}
  if parts:
    info["seed_parts"] = [{"seed": s, "train_seconds": t} for s, t in enumerate(parts)]
  if variant_of:
    info["variant_of"] = variant_of
  store.write_run_info(str(table), name, info)


def test_a_claim_needs_seeds_only_while_a_row_spreads_past_the_bar():
  high, low = ("schemes", "xl+reverse"), ("kazemnejad", "t5+reverse")  # std 0.17 and 0.02
  column = more_seeds.main_table.POOLED_2X
  for row in (high, low):
    values = more_seeds.seed_values(RESULTS, *row, column)
    assert more_seeds.seed_std(values) == pytest.approx(np.std(values, ddof=1))
  spread = more_seeds.Claim("t", "high vs low", column, (high, low))
  narrow = more_seeds.Claim("t", "low alone", column, (low,))
  assert more_seeds.needs_seeds(RESULTS, spread) and not more_seeds.needs_seeds(RESULTS, narrow)
  assert more_seeds.runs_to_extend(RESULTS, [spread, narrow]) == [
      ("schemes", "xl+reverse"), ("kazemnejad", "t5+reverse")]
  assert more_seeds.runs_to_extend(RESULTS, [narrow]) == []
  assert more_seeds.seed_std([0.5]) == 0.0


def test_the_estimate_rests_on_the_stored_times(tmp_path):
  table = tmp_path / "t"
  _info(table, "vmapped", train=2570.0, evaluation=30.0)
  _info(table, "vmapped@yarn", train=2570.0, evaluation=30.0, variant_of="vmapped")
  _info(table, "alone", train=600.0, evaluation=9.0, arch="decoder_only",
        parts=[100.0, 200.0, 300.0])
  train, evaluation, basis = more_seeds.estimated_seconds(str(tmp_path), "t", "vmapped", 5)
  assert train == pytest.approx(2 * 2570.0 / more_seeds.VMAP_SPEEDUP["encoder_decoder"])
  assert evaluation == pytest.approx(2 * (30.0 + 30.0) / 3)  # the run and its variant row
  assert basis == "its 3 vmapped seeds' time ÷ 2.57"
  train, evaluation, basis = more_seeds.estimated_seconds(str(tmp_path), "t", "alone", 4)
  assert (train, evaluation) == (pytest.approx(200.0), pytest.approx(3.0))
  assert basis == "mean of its 3 seeds trained alone"
  assert more_seeds.estimated_seconds(str(tmp_path), "t", "alone", 3)[:2] == (0.0, 0.0)


def test_the_list_renders_from_the_committed_records():
  text = more_seeds.markdown(RESULTS, 5)
  assert "schemes/xl+reverse: 0.21, 0.39, 0.89" in text  # seeds 0-2, however many are added
  for table, run in more_seeds.runs_to_extend(RESULTS):
    assert f"--runs {run} --config.num_seeds=5`" in text and f"| {table}/{run} |" in text
  with open(f"{RESULTS}/t5_buckets/{store.TABLE_FILE}") as f:
    assert json.load(f)["config"] in text
