"""Records -> files: the JSON lines, the markdown tables, the CSV and the figures.

`write_report(records, out_dir)` writes an evaluation's `REPORT_FILES` (and one
accuracy figure per task when the records span several); `scheme_figures`
draws the figures a run's scheme offers (T5's bias per distance, Shaw's key-row
norms, the sinusoid heatmap). Records are written NaN-as-null so any JSON
reader can load them.
"""

from __future__ import annotations

import json
import math
import os
import re
from typing import Sequence

import ml_collections

from relpos_jax import plots
from relpos_jax import tables
from relpos_jax.positions import shaw
from relpos_jax.positions import sinusoidal
from relpos_jax.positions import t5

Record = tables.Record

METRIC_KEYS = ("exact_match", "token_accuracy", "loss", "length_accuracy", "content_errors",
               "stop_errors", "fail_too_short", "fail_too_long", "fail_right_length",
               "fail_pure_stop", "first_wrong_median")
ORACLE_KEYS = ("oracle_exact_match", "oracle_token_accuracy")
REPORT_FILES = {"records": "extrapolation.jsonl", "tables": "extrapolation.md",
                "csv": "extrapolation.csv", "plot": "accuracy_vs_length.png"}
PREDICTIONS_FILE = "predictions.jsonl"
SCHEME_PLOTS = {"t5": "t5_bias.png", "shaw": "shaw_key_norms.png",
                "sinusoidal": "sinusoid.png"}


def scheme_figures(model, params, config: ml_collections.ConfigDict, out_dir: str,
                  max_train_distance: int) -> None:
  """Draws the figures of the scheme modules the model holds (T5, Shaw keys, sinusoid), if any."""
  modules = [module for _, module in plots.scheme_instances(model, params)]
  if any(isinstance(m, t5.T5Bias) for m in modules):
    plots.learned_bias_curves(model, params, os.path.join(out_dir, SCHEME_PLOTS["t5"]),
                              max_train_distance=max_train_distance, seed=config.seed)
  if any(isinstance(m, shaw.Shaw) and m.use_keys for m in modules):
    plots.shaw_key_norms(model, params, os.path.join(out_dir, SCHEME_PLOTS["shaw"]),
                         max_train_distance=max_train_distance, seed=config.seed)
  sinusoids = [m for m in modules if isinstance(m, sinusoidal.Sinusoidal)]
  if sinusoids:
    plots.encoding_heatmap(os.path.join(out_dir, SCHEME_PLOTS["sinusoidal"]),
                           num_positions=4 * (max_train_distance + 1),
                           dim=sinusoids[0].d_model, base=sinusoids[0].base,
                           max_train_position=max_train_distance)


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
    also `plot_<task>` -> that task's own figure (`accuracy_vs_length_<task>.png`),
    since curves of different tasks in one panel are hard to read.
  """
  os.makedirs(out_dir, exist_ok=True)
  paths = {k: os.path.join(out_dir, v) for k, v in REPORT_FILES.items()}
  write_records(records, paths["records"])
  with open(paths["tables"], "w") as f:
    f.write(tables.report(records))
  tables.write_csv(records, paths["csv"])
  plots.accuracy_vs_length(records, paths["plot"])
  tasks = sorted({r["task"] for r in records})
  for task in tasks if len(tasks) > 1 else []:
    stem, ext = os.path.splitext(paths["plot"])
    paths[f"plot_{task}"] = f"{stem}_{re.sub(r'[^A-Za-z0-9._-]', '_', task)}{ext}"
    plots.accuracy_vs_length([r for r in records if r["task"] == task], paths[f"plot_{task}"])
  return paths
