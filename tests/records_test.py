"""The record contract: every committed record loads and writes back unchanged; one registry."""

import json
import pathlib

import numpy as np
import pytest

from relpos_jax import scoring
from relpos_jax.experiments import lm_report
from relpos_jax.experiments import records

ROOT = pathlib.Path(__file__).resolve().parents[1]
COMMITTED = sorted((ROOT / "results").glob("**/records/*.jsonl"))


def _is_lm(path):
  """Whether a records file holds language-model records (lm_report's, not EvalRecords)."""
  first = next(line for line in path.read_text().splitlines() if line.strip())
  return lm_report.is_lm_records([json.loads(first)])


LM = [p for p in COMMITTED if _is_lm(p)]
SEQ2SEQ = [p for p in COMMITTED if p not in LM]


def test_there_are_committed_records():
  assert len(COMMITTED) > 10


@pytest.mark.parametrize("path", SEQ2SEQ, ids=lambda p: str(p.relative_to(ROOT / "results")))
def test_every_committed_record_loads_and_writes_back_key_for_key(path):
  lines = [line for line in path.read_text().splitlines() if line.strip()]
  for line, record in zip(lines, records.read_eval_records(str(path)), strict=True):
    raw = json.loads(line)
    out = record.to_dict()
    assert list(out) == list(raw)  # same keys, same order
    clean = {k: None if isinstance(v, float) and np.isnan(v) else v for k, v in out.items()}
    assert json.dumps(clean) == json.dumps(raw)


@pytest.mark.parametrize("path", LM, ids=lambda p: str(p.relative_to(ROOT / "results")))
def test_every_committed_lm_record_reads_and_writes_back_byte_for_byte(path, tmp_path):
  back = lm_report.from_stored(records.read_jsonl(str(path)))
  records.write_jsonl(back, str(tmp_path / "r.jsonl"))
  assert (tmp_path / "r.jsonl").read_text() == path.read_text()


def _record(**changes):
  path = SEQ2SEQ[0]
  raw = json.loads(path.read_text().splitlines()[0])
  return {**raw, **changes}


def test_unknown_keys_are_kept_and_a_newer_schema_is_refused():
  record = records.EvalRecord.from_dict(_record(position_draws=8, something_new=[1, 2]))
  assert record.position_draws == 8 and record.extra == {"something_new": [1, 2]}
  assert record.to_dict()["something_new"] == [1, 2]
  with pytest.raises(ValueError, match="schema 2"):
    records.EvalRecord.from_dict(_record(schema=2))


def test_a_missing_key_is_named():
  raw = _record()
  del raw["eval_seed"]
  with pytest.raises(ValueError, match="eval_seed"):
    records.EvalRecord.from_dict(raw)


def test_null_metrics_read_back_as_nan(tmp_path):
  raw = _record(exact_match=float("nan"))
  records.write_jsonl([raw], str(tmp_path / "r.jsonl"))
  assert '"exact_match": null' in (tmp_path / "r.jsonl").read_text()
  back = records.read_eval_records(str(tmp_path / "r.jsonl"))[0]
  assert np.isnan(back.metrics["exact_match"])


def test_the_registry_names_exactly_what_scoring_emits():
  scores = {"exact": np.array([True, False]), "token_correct": np.array([1.0, 0.5]),
            "length_correct": np.array([True, False]), "content_error": np.array([False, True]),
            "stop_error": np.array([False, False]), "too_short": np.array([False, True]),
            "too_long": np.array([False, False]), "first_error": np.array([0, 1]),
            "loss_sum": np.array([1.0, 2.0]), "loss_tokens": np.array([2, 2]),
            "oracle_exact": np.array([True, True]),
            "oracle_token_correct": np.array([1.0, 1.0])}
  summary = scoring.summarize_scores(scores, np.ones(2))
  assert tuple(k for k in summary if k != "num_examples") == records.KEYS
  assert set(records.POOLABLE) <= set(records.KEYS)
  assert set(records.MAIN_TABLE) <= set(records.KEYS)
  assert records.metric_keys(oracle_length=False) == records.KEYS[:-2]
