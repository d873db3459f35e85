"""Records -> files: the JSON lines, the markdown tables, the CSV and the figures.

`write_report(records, out_dir)` writes an evaluation's `REPORT_FILES` (the
failure-anatomy figure once per task when the records span several);
`scheme_figures` draws the figures a run's scheme offers (`PositionScheme.figures`:
T5's bias per distance, Shaw's key-row norms, the sinusoid heatmap). Records are
written NaN-as-null so any JSON reader can load them.
"""

from __future__ import annotations

import json
import math
import os
import re
from typing import Sequence

import ml_collections

from relpos_jax.experiments import plots
from relpos_jax.experiments import tables

Record = tables.Record

METRIC_KEYS = ("exact_match", "token_accuracy", "loss", "length_accuracy", "content_errors",
               "stop_errors", "fail_too_short", "fail_too_long", "fail_right_length",
               "fail_pure_stop", "first_wrong_median")
ORACLE_KEYS = ("oracle_exact_match", "oracle_token_accuracy")
REPORT_FILES = {"records": "extrapolation.jsonl", "tables": "extrapolation.md",
                "csv": "extrapolation.csv", "plot": "accuracy_vs_length.png",
                "anatomy": "failure_anatomy.png"}
PREDICTIONS_FILE = "predictions.jsonl"


def scheme_figures(model, params, config: ml_collections.ConfigDict, out_dir: str,
                   max_train_distance: int) -> dict[str, str]:
  """Draws the figures the model's scheme modules offer (`plots.scheme_figures`), if any.

  Returns:
    figure name (e.g. "t5_bias") -> its PNG in `out_dir`.
  """
  return plots.scheme_figures(model, params, out_dir, max_train_distance=max_train_distance,
                              seed=config.seed)


def write_records(records: Sequence[Record], path: str) -> None:
  """Writes records as JSON lines (NaN as null, so any JSON reader can load them).

  Args:
    records: flat dicts.
    path: the .jsonl file (its folder is created).
  """
  os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
  with open(path, "w") as f:
    for record in records:
      clean = {k: None if isinstance(v, float) and math.isnan(v) else v
               for k, v in record.items()}
      f.write(json.dumps(clean, allow_nan=False) + "\n")


def read_records(path: str) -> list[Record]:
  """Reads `write_records`' file; null metrics come back as NaN.

  Args:
    path: an extrapolation.jsonl.

  Returns:
    The records, in file order.
  """
  with open(path) as f:
    records = [json.loads(line) for line in f if line.strip()]
  for record in records:
    for key in METRIC_KEYS + ORACLE_KEYS:
      if key in record and record[key] is None:
        record[key] = float("nan")
  return records


def write_report(records: Sequence[Record], out_dir: str) -> dict[str, str]:
  """Writes the records, the markdown tables, the CSV and the accuracy figure.

  Args:
    records: records of one or more runs.
    out_dir: the folder (created).

  Returns:
    `REPORT_FILES`' keys -> the written paths; when the runs span several tasks,
    the failure anatomy is one figure per task instead: `anatomy_<task>` ->
    `failure_anatomy_<task>.png` (and no `anatomy`).
  """
  os.makedirs(out_dir, exist_ok=True)
  paths = {k: os.path.join(out_dir, v) for k, v in REPORT_FILES.items()}
  write_records(records, paths["records"])
  with open(paths["tables"], "w") as f:
    f.write(tables.report(records))
  tables.write_csv(records, paths["csv"])
  plots.accuracy_vs_length(records, paths["plot"])
  tasks = list(dict.fromkeys(r["task"] for r in records))
  anatomy = paths.pop("anatomy")
  for task in tasks:
    key, name = "anatomy", anatomy
    if len(tasks) > 1:
      stem, ext = os.path.splitext(anatomy)
      key, name = f"anatomy_{task}", f"{stem}_{re.sub(r'[^A-Za-z0-9._-]', '_', task)}{ext}"
    paths[key] = plots.failure_anatomy(records, task, name)
  return paths
