"""Scoring, and evaluating whole workdirs: every replica, every length, n/a lengths."""

import json
import math
import os
import pathlib

import numpy as np
import pytest

from relpos_jax import evaluate
from relpos_jax import sweep
from relpos_jax import tables
from relpos_jax import train_lib
from relpos_jax.data import pipeline
from relpos_jax.data import vocab

DEFAULT = sweep.load_module(
    str(pathlib.Path(__file__).resolve().parents[1] / "configs" / "default.py"))
E, P = vocab.EOS_ID, vocab.PAD_ID
LEARNED_ROWS = 16  # smoke eval lengths 4 and 8 pad to <= 16; length 16 pads to 32


# ------------------------------------------------------------------ scoring

def test_score_batch_separates_content_and_stop_errors():
  targets = np.array([[5, 6, 7, E, P]] * 4)
  tokens = np.array([[5, 6, 7, E, P],    # exact
                     [5, 9, 7, E, P],    # a wrong token: content
                     [5, 6, E, P, P],    # stops early, shared tokens right: stop
                     [5, 6, 7, 8, E]])   # stops late: stop
  lengths = np.array([3, 3, 2, 4])
  s = evaluate.score_batch(tokens, lengths, targets)
  np.testing.assert_array_equal(s["exact"], [True, False, False, False])
  np.testing.assert_array_equal(s["content_error"], [False, True, False, False])
  np.testing.assert_array_equal(s["stop_error"], [False, False, True, True])
  np.testing.assert_array_equal(s["first_error"], [4, 1, 2, 3])
  np.testing.assert_array_equal(s["length_correct"], [True, True, False, False])
  np.testing.assert_allclose(s["token_correct"], [1.0, 0.75, 0.5, 0.75])


# ------------------------------------------------------------------ records

def test_records_round_trip_nan_as_null(tmp_path):
  records = [{"run": "a", "length": 4, "exact_match": 0.5, "error": None},
             {"run": "a", "length": 40, "exact_match": float("nan"), "error": "too long"}]
  path = str(tmp_path / "x" / "records.jsonl")
  evaluate.write_records(records, path)
  text = pathlib.Path(path).read_text()
  assert "NaN" not in text and json.loads(text.splitlines()[1])["exact_match"] is None
  back = evaluate.read_records(path)
  assert back[0] == records[0] and math.isnan(back[1]["exact_match"])


def test_run_names_disambiguate_equal_basenames():
  assert evaluate.run_names(["runs/a", "runs/b/"]) == ["a", "b"]
  assert evaluate.run_names(["x/run", "y/run", "z"]) == ["x/run", "y/run", "z"]


def test_train_length_range_of_scan_is_measured():
  dataset = pipeline.make_dataset(task="scan", seed=0)
  assert evaluate.train_length_range(None, dataset) == (1, 22)  # Lake & Baroni: <= 22 actions


# ------------------------------------------------------------- whole workdirs

@pytest.fixture(scope="module")
def learned_workdir(tmp_path_factory):
  """A 2-replica learned-positions smoke run whose table has 16 rows."""
  config = DEFAULT.get_config("smoke,scheme=learned,num_seeds=2,steps=3")
  config.model.position.max_len = LEARNED_ROWS
  workdir = str(tmp_path_factory.mktemp("runs") / "learned16")
  train_lib.train_and_evaluate(config, workdir)
  return workdir


def test_evaluate_workdir_every_replica_and_na_lengths(learned_workdir):
  records = evaluate.evaluate_workdir(learned_workdir, lengths=[4, 8, 16])
  assert [(r["seed"], r["length"]) for r in records] == [
      (s, n) for s in (0, 1) for n in (4, 8, 16)]
  for r in records:
    assert (r["run"], r["scheme"], r["task"], r["step"]) == ("learned16", "learned", "copy", 3)
    assert (r["min_train_length"], r["max_train_length"]) == (1, 6)
    if r["length"] == 16:  # beyond the 16-row table: n/a, not a crash
      assert math.isnan(r["exact_match"]) and r["num_examples"] == 0
      assert "model.position.max_len" in r["error"]
    else:
      assert 0.0 <= r["exact_match"] <= 1.0 and r["error"] is None and r["num_examples"] == 8
      assert r["content_errors"] + r["stop_errors"] == pytest.approx(1.0 - r["exact_match"])
  saved = evaluate.read_records(os.path.join(learned_workdir, "eval", "records.jsonl"))
  assert len(saved) == 6 and math.isnan(saved[2]["exact_match"])
  assert [r["exact_match"] for r in saved[:2]] == [r["exact_match"] for r in records[:2]]
  table = tables.exact_match_table(records)
  assert "| n/a |" in table and "cannot encode" in table


def test_evaluate_runs_skips_untrained_and_writes_the_report(learned_workdir, tmp_path):
  untrained = tmp_path / "untrained"
  untrained.mkdir()
  (untrained / "config.json").write_text(
      pathlib.Path(learned_workdir, "config.json").read_text())
  out = str(tmp_path / "report")
  records = evaluate.evaluate_runs([learned_workdir, str(untrained)], out)
  assert {r["run"] for r in records} == {"learned16"}
  assert sorted(r["length"] for r in records) == [4, 4, 8, 8]  # the config's eval lengths
  for name in evaluate.REPORT_FILES.values():
    assert os.path.getsize(os.path.join(out, name)) > 0
  assert "| learned16 | learned | 2 | 1–6 |" in pathlib.Path(out, "exact_match.md").read_text()
  with pytest.raises(ValueError, match="nothing to evaluate"):
    evaluate.evaluate_runs([str(untrained)], out)
