"""Records -> files: the JSON lines, the markdown tables, the CSV and the figures.

`write_report(records, out_dir)` writes an evaluation's `REPORT_FILES` (the
failure-anatomy figure once per task when the records span several);
`scheme_figures` draws the figures a run's scheme offers (`PositionScheme.figures`:
T5's bias per distance, Shaw's key-row norms, the sinusoid heatmap). Records are
written NaN-as-null so any JSON reader can load them.
"""

from __future__ import annotations

import os
import re
from typing import Sequence

import ml_collections

from relpos_jax.data import pipeline
from relpos_jax.data import vocab
from relpos_jax.experiments import anatomy_table
from relpos_jax.experiments import plots
from relpos_jax.experiments import records as records_lib
from relpos_jax.experiments import table_csv
from relpos_jax.experiments import tables

Record = tables.Record

REPORT_FILES = {"records": "extrapolation.jsonl", "tables": "extrapolation.md",
                "csv": "extrapolation.csv", "plot": "accuracy_vs_length.png",
                "anatomy": "failure_anatomy.png"}
PREDICTIONS_FILE = "predictions.jsonl"


def train_distance(model, dataset: pipeline.Dataset, num_examples: int = 512) -> int:
  """The largest position (= |key − query| distance) self-attention sees in training.

  Measured on the first `num_examples` training examples: the longest real
  input and target (EOS included), positions counted from 0; a model over one
  running sequence (`joint_positions`, decoder-only) sees both in one sequence.

  Args:
    model: the model.
    dataset: its data.
    num_examples: how many training examples to measure.

  Returns:
    The distance.
  """
  batch = dataset.train_batch(0, min(num_examples, dataset.num_train_examples or num_examples))
  longest_s = int((batch["inputs"] != vocab.PAD_ID).sum(1).max())
  longest_t = int((batch["targets"] != vocab.PAD_ID).sum(1).max())
  if model.joint_positions:
    return longest_s + longest_t - 1
  return max(longest_s, longest_t) - 1


def scheme_figures(model, params, config: ml_collections.ConfigDict, out_dir: str,
                   max_train_distance: int) -> dict[str, str]:
  """Draws the figures the model's scheme modules offer (`plots.scheme_figures`), if any.

  Returns:
    figure name (e.g. "t5_bias") -> its PNG in `out_dir`.
  """
  return plots.scheme_figures(model, params, out_dir, max_train_distance=max_train_distance,
                              seed=config.seed)


def markdown(records: Sequence[Record], *, digits: int = 2) -> str:
  """Every table of an evaluation: each main metric present, then the failure anatomy.

  Args:
    records: records of one or more runs.
    digits: decimals.

  Returns:
    Markdown: exact match, token accuracy, loss and (oracle mode) the oracle
    metrics in `tables.exact_match_table`'s layout, then `anatomy_table.error_table`.
  """
  present = set(tables.metric_keys(records))
  parts = [tables.exact_match_table(records, metric=m, digits=digits)
           for m in records_lib.MAIN_TABLE if m in present]
  return "\n".join(parts + [anatomy_table.error_table(records, digits=digits)])


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
  records_lib.write_jsonl(records, paths["records"])
  with open(paths["tables"], "w") as f:
    f.write(markdown(records))
  table_csv.write_csv(records, paths["csv"])
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
