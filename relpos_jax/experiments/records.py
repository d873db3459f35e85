"""The record contract: `EvalRecord` (one run × seed × length) and the `METRICS` registry.

The runner builds every seq2seq eval record through `EvalRecord` (`runner.py`);
results/, tables, plots and the comparisons read them back through `read_jsonl`.
A metric is declared once, in `METRICS`: its key (the JSON key `scoring` emits),
its label, whether higher is better, whether tables pool it over a length range,
whether `report.markdown` gives it a table of its own, and how many digits it is
shown with. Adding a metric is one `Metric` line plus the code that computes it.

Schema 1 is the record as written since the first committed table: a flat JSON
object per line, NaN written as null. It carries no version key (records on disk
stay byte for byte what they were); a later schema writes `"schema": <n>`, and
`EvalRecord.from_dict` refuses a schema newer than it knows.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
from typing import Any, Iterable, Mapping, Sequence

SCHEMA_VERSION = 1


@dataclasses.dataclass(frozen=True)
class Metric:
  """One metric of an eval record.

  Attributes:
    key: the record's JSON key.
    label: what the metric is, as a table's title says it.
    higher_is_better: True / False; None for a descriptive share (failure anatomy).
    poolable: tables pool it over a length range (a rate over examples).
    in_main_table: `report.markdown` gives it a table of its own.
    digits: decimals it is shown with (None: the table's default).
    column: its column header in the failure-anatomy table (None: not there).
    oracle: only present when evaluated with `oracle_length`.
  """

  key: str
  label: str
  higher_is_better: bool | None
  poolable: bool
  in_main_table: bool
  digits: int | None = None
  column: str | None = None
  oracle: bool = False


# In the order the records hold them (and `scoring.summarize_scores` emits them).
METRICS: tuple[Metric, ...] = (
    Metric("exact_match", "Exact match (greedy decoding; every target token and the EOS right)",
           True, poolable=True, in_main_table=True),
    Metric("token_accuracy", "Token accuracy (greedy decoding; fraction of target positions, "
           "EOS included, right)", True, poolable=True, in_main_table=True),
    Metric("loss", "Teacher-forced loss (cross-entropy per target token, EOS included; nats)",
           False, poolable=False, in_main_table=True),
    Metric("length_accuracy", "Length accuracy (EOS at the right position)",
           True, poolable=True, in_main_table=False),
    Metric("content_errors", "Content errors (a wrong token before either sequence ends; "
           "fraction of all examples)", False, poolable=True, in_main_table=False),
    Metric("stop_errors", "Stop errors (every shared token right, EOS too early or too late; "
           "fraction of all examples)", False, poolable=True, in_main_table=False),
    Metric("fail_too_short", "Share of the failures that stop too early",
           None, poolable=False, in_main_table=False, column="too short"),
    Metric("fail_too_long", "Share of the failures that stop too late",
           None, poolable=False, in_main_table=False, column="too long"),
    Metric("fail_right_length", "Share of the failures that have the right length",
           None, poolable=False, in_main_table=False, column="right length"),
    Metric("fail_pure_stop", "Share of the failures that are pure stopping errors",
           None, poolable=False, in_main_table=False, column="pure stop"),
    Metric("first_wrong_median", "Median index of the first wrong token among the failures",
           None, poolable=False, in_main_table=False, digits=1,
           column="first wrong (median)"),
    Metric("oracle_exact_match", "Oracle-length exact match (EOS forbidden before the true "
           "length and forced there: content alone)", True, poolable=True, in_main_table=True,
           oracle=True),
    Metric("oracle_token_accuracy", "Oracle-length token accuracy (EOS forced at the true "
           "length)", True, poolable=True, in_main_table=True, oracle=True),
)
BY_KEY: dict[str, Metric] = {m.key: m for m in METRICS}
KEYS = tuple(m.key for m in METRICS)
LABELS = {m.key: m.label for m in METRICS}
POOLABLE = tuple(m.key for m in METRICS if m.poolable)
MAIN_TABLE = tuple(m.key for m in METRICS if m.in_main_table)
ANATOMY_COLUMNS = {m.key: m.column for m in METRICS if m.column is not None}


def metric_keys(*, oracle_length: bool) -> tuple[str, ...]:
  """The metric keys a record of an evaluation holds (the oracle ones only with oracle_length)."""
  return tuple(m.key for m in METRICS if oracle_length or not m.oracle)


_OPTIONAL = ("valid_positions", "checkpoint_valid_positions", "checkpoint_valid_exact_match",
             "position_draws", "exact_counts", "exact_match_draws")


@dataclasses.dataclass(frozen=True)
class EvalRecord:
  """One eval record: a run's replica evaluated at one length (docs/evaluation.md).

  Field order is the JSON key order; `metrics` (keys of `METRICS`) sit between
  `num_examples` and `position_draws`; keys this schema does not name go to
  `extra` and are written back last. `_OPTIONAL` fields are omitted when None
  (older records lack them); `error` is always written (None: scored).
  """

  run: str
  scheme: str
  task: str
  workdir: str
  min_train_length: int
  max_train_length: int
  checkpoint_rule: str
  converged_at: float
  valid_source: str
  overrides: list[str]
  eval_positions: str
  valid_positions: str | None
  checkpoint_valid_positions: str | None
  provenance: dict[str, Any]
  seed: int
  replica: int
  step: int
  final_step: int
  valid_exact_match: float
  valid_token_accuracy: float
  valid_num_examples: int
  checkpoint_valid_exact_match: float | None
  best_valid_exact_match: float
  best_valid_step: int
  converged: bool
  length: int
  num_examples: int
  metrics: dict[str, float]
  position_draws: int | None
  exact_counts: list[int] | None
  exact_match_draws: list[float] | None
  num_available: int
  eval_seed: int
  error: str | None
  extra: dict[str, Any] = dataclasses.field(default_factory=dict)
  schema: int = SCHEMA_VERSION

  @classmethod
  def from_dict(cls, data: Mapping[str, Any]) -> EvalRecord:
    """A record from its JSON object (null metrics become NaN).

    Raises:
      ValueError: a schema newer than this code, or a required key missing (named).
    """
    schema = int(data.get("schema", 1))
    if schema > SCHEMA_VERSION:
      raise ValueError(f"eval record of schema {schema}; this code reads up to "
                       f"{SCHEMA_VERSION}: update relpos_jax")
    names = [f.name for f in dataclasses.fields(cls) if f.name not in ("metrics", "extra",
                                                                       "schema")]
    missing = [n for n in names if n not in data and n not in _OPTIONAL]
    if missing:
      raise ValueError(f"eval record of run {data.get('run')!r} lacks {missing}")
    metrics = {k: float("nan") if data[k] is None else data[k] for k in KEYS if k in data}
    known = set(names) | set(KEYS) | {"schema"}
    return cls(**{n: data.get(n) for n in names}, metrics=metrics,
               extra={k: v for k, v in data.items() if k not in known}, schema=schema)

  def to_dict(self) -> dict[str, Any]:
    """The JSON object of the record, keys in the schema's order (see the class)."""
    out: dict[str, Any] = {}
    if self.schema != 1:
      out["schema"] = self.schema
    for field in dataclasses.fields(self):
      name = field.name
      if name in ("extra", "schema"):
        continue
      if name == "metrics":
        out.update({k: self.metrics[k] for k in KEYS if k in self.metrics})
        continue
      value = getattr(self, name)
      if value is None and name in _OPTIONAL:
        continue
      out[name] = value
    out.update(self.extra)
    return out


def write_jsonl(records: Iterable[Mapping[str, Any]], path: str) -> None:
  """Writes records (dicts) as JSON lines (NaN as null, so any JSON reader can load them).

  Args:
    records: flat dicts (`EvalRecord.to_dict`, or an LM record).
    path: the .jsonl file (its folder is created).
  """
  os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
  with open(path, "w") as f:
    for record in records:
      f.write(jsonl_line(record))


def jsonl_line(record: Mapping[str, Any]) -> str:
  """One record as `write_jsonl` writes it: a JSON object (NaN as null) and a newline."""
  clean = {k: None if isinstance(v, float) and math.isnan(v) else v for k, v in record.items()}
  return json.dumps(clean, allow_nan=False) + "\n"


def read_jsonl(path: str) -> list[dict[str, Any]]:
  """Reads `write_jsonl`'s file; null metrics (of `METRICS`) come back as NaN.

  Args:
    path: a .jsonl of records.

  Returns:
    The records as dicts, in file order.
  """
  with open(path) as f:
    records = [json.loads(line) for line in f if line.strip()]
  for record in records:
    for key in KEYS:
      if key in record and record[key] is None:
        record[key] = float("nan")
  return records


def read_eval_records(path: str) -> list[EvalRecord]:
  """`read_jsonl` as typed records (ValueError naming the file on a malformed one)."""
  try:
    return [EvalRecord.from_dict(r) for r in read_jsonl(path)]
  except ValueError as e:
    raise ValueError(f"{path}: {e}") from e


def to_dicts(records: Sequence[EvalRecord]) -> list[dict[str, Any]]:
  """The JSON objects of typed records (what tables and plots read)."""
  return [r.to_dict() for r in records]
