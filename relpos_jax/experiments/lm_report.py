"""Language-model records -> the bits-per-byte table, the passkey table, CSVs and figures.

`write_report(records, out_dir)` writes `REPORT_FILES`: the records (JSON lines,
NaN as null, as `records_lib.write_jsonl`), a markdown table of bits per byte by
eval context (one row per run, one column per multiple of L; mean over seeds with
its 95% interval over seeds and test blocks, `bpb_interval`: every seed, row and
context is scored on the same test bytes, cut into blocks of the longest context
that are the interval's eval examples; "n/a" where the scheme cannot encode the
context), the same as CSV, bits per byte
against context (log-2 axis) and the loss by position within the longest window
(seeds averaged). Both figures draw one line per run in stacked panels that share
their axes (`lm_figures.figure_panels`): the runs as trained first, then their eval-time
variants, so that a full table (ten schemes, each length-scaled, and RoPE's
scalings) stays readable.

`write_passkey_report(records, out_dir)` writes `PASSKEY_FILES`: passkey accuracy
by eval context x key depth per run, mean over seeds with its 95% interval over
seeds and eval examples (`stats.mean_interval`, the seq2seq tables' hierarchical
bootstrap: a record's accuracy and `num_examples` give its examples' outcomes), as
markdown, CSV and a heatmap. `results_markdown` is a results/ table's section of
RESULTS.md (`python -m relpos_jax.results`).
"""

from __future__ import annotations

import collections
import csv
import json
import math
import os
from typing import Any, Sequence

import numpy as np

from relpos_jax.experiments import lm_figures
from relpos_jax.experiments import plots
from relpos_jax.experiments import records as records_lib
from relpos_jax.experiments import stats

Record = dict[str, Any]
PASSKEY_FILES = {"records": "passkey.jsonl", "tables": "passkey.md", "csv": "passkey.csv",
                 "plot": "passkey_heatmap.png"}
REPORT_FILES = {"records": "lm_context.jsonl", "tables": "lm_context.md",
                "csv": "lm_context.csv", "plot": "bpb_vs_context.png",
                "position_plot": "loss_vs_position.png"}
NA = "n/a"
HEATMAP_COLUMNS = 5  # panels per row of the passkey heatmap
NULLABLE = ("loss", "bits_per_byte", "perplexity", "accuracy")  # NaN, stored as null


def is_lm_records(records: Sequence[Record]) -> bool:
  """Whether records are language-model records (bits per byte or passkey accuracy by context)."""
  return bool(records) and all(("bits_per_byte" in r or "accuracy" in r) and "context" in r
                               for r in records)


def from_stored(records: Sequence[Record]) -> list[Record]:
  """Records read back from JSON lines with their null metrics (`NULLABLE`) as NaN again."""
  return [{k: float("nan") if v is None and k in NULLABLE else v for k, v in r.items()}
          for r in records]


def any_markdown(records: Sequence[Record]) -> str:
  """The bits-per-byte tables of LM records and the passkey table of passkey records."""
  passkey = [r for r in records if "accuracy" in r]
  lm_records = [r for r in records if "accuracy" not in r]
  return ((markdown(lm_records) if lm_records else "")
          + (passkey_markdown(passkey) if passkey else ""))


def bpb_samples(group: Sequence[Record]) -> dict[Any, np.ndarray]:
  """Seed -> its per-block bits per byte (the eval "examples"), for the scored records.

  A record without blocks (written before they were stored) contributes its one
  value, so its interval holds the seeds' spread only.
  """
  return {r.get("seed"): np.asarray(r.get("block_bits_per_byte") or [r["bits_per_byte"]],
                                    np.float64)
          for r in group if not r.get("error")}


def bpb_interval(group: Sequence[Record]) -> stats.Interval | None:
  """Mean bits per byte over seeds and its 95% interval over seeds and test blocks
  (`stats.mean_interval`, unbounded above); None when no seed was scored."""
  samples = list(bpb_samples(group).values())
  return stats.mean_interval(samples, bounds=(0.0, math.inf)) if samples else None


def _groups(records: Sequence[Record]) -> dict[tuple[str, str, int], list[Record]]:
  """(run, mode, context) -> its records (one per seed), in first-seen order."""
  out: dict[tuple[str, str, int], list[Record]] = collections.OrderedDict()
  for r in records:
    out.setdefault((r["run"], r["mode"], int(r["context"])), []).append(r)
  return out


# ------------------------------------------------------------ comparisons

SLIDING = " sliding"


def column_name(multiple: float, mode: str = "nonoverlapping") -> str:
  """A comparison column: '4×L' (non-overlapping windows, or passkey) or '4×L sliding'."""
  return f"{multiple:g}×L" + (SLIDING if mode == "sliding" else "")


def columns(records: Sequence[Record]) -> list[str]:
  """The columns `column_samples` accepts for these records, in table order."""
  keys = sorted({(r.get("mode", "nonoverlapping") != "nonoverlapping", float(r["multiple"]))
                 for r in records})
  return [column_name(m, "sliding" if sliding else "nonoverlapping") for sliding, m in keys]


def column_samples(records: Sequence[Record], column: str) -> dict[Any, np.ndarray]:
  """Seed -> its eval examples' values on one column (`columns`): bits per byte of each
  test block, or (passkey) each example's 0/1 outcome over every key depth.

  Raises:
    ValueError: a column these records do not have.
  """
  if column not in columns(records):
    raise ValueError(f"unknown column {column!r}; these records have: "
                     f"{', '.join(columns(records))}")
  mine = [r for r in records
          if column_name(float(r["multiple"]), r.get("mode", "nonoverlapping")) == column]
  if "accuracy" in mine[0]:
    by_seed: dict[Any, list[Record]] = collections.OrderedDict()
    for r in mine:
      by_seed.setdefault(r.get("seed"), []).append(r)
    return {seed: sample for seed, group in by_seed.items()
            for sample in _passkey_samples(group)}
  return bpb_samples(mine)


def eval_set(records: Sequence[Record]) -> tuple[Any, ...]:
  """What a paired comparison needs equal in both runs: objective, corpus, test bytes, blocks."""
  first = records[0]
  return ("accuracy" in first, json.dumps(first.get("manifest"), sort_keys=True),
          first.get("eval_bytes"), first.get("block_bytes"))


def summary_rows(records: Sequence[Record]) -> list[dict[str, Any]]:
  """One row per (run, mode, context): seeds, mean bits per byte, its 95% interval, error."""
  rows = []
  nan = float("nan")
  for (run, mode, context), group in _groups(records).items():
    errors = [r.get("error") for r in group if r.get("error")]
    good = [r for r in group if not r.get("error")]
    interval = bpb_interval(group)
    rows.append({"run": run, "scheme": group[0].get("scheme"), "mode": mode,
                 "context": context, "multiple": context / group[0]["train_length"],
                 "num_seeds": len(good),
                 "bits_per_byte": interval.mean if interval else nan,
                 "ci95_low": interval.lo if interval else nan,
                 "ci95_high": interval.hi if interval else nan,
                 "perplexity": float(np.mean([r["perplexity"] for r in good])) if good else nan,
                 "error": errors[0] if errors else None})
  return rows


def _cell(row: dict[str, Any]) -> str:
  """'1.234 [1.200, 1.268]', '1.234' (nothing to spread over) or 'n/a'."""
  if row["error"] and not row["num_seeds"]:
    return NA
  if row["ci95_low"] == row["ci95_high"]:
    return f"{row['bits_per_byte']:.3f}"
  return stats.format_interval(stats.Interval(row["bits_per_byte"], row["ci95_low"],
                                              row["ci95_high"], row["num_seeds"]), digits=3)


def markdown(records: Sequence[Record]) -> str:
  """The bits-per-byte tables (one per mode): rows = runs, columns = eval context / L."""
  rows = summary_rows(records)
  out = []
  for mode in dict.fromkeys(r["mode"] for r in rows):
    mine = [r for r in rows if r["mode"] == mode]
    multiples = sorted({r["multiple"] for r in mine})
    runs = list(dict.fromkeys(r["run"] for r in mine))
    stride = next((r.get("stride") for r in records if r["mode"] == mode), 0)
    title = "non-overlapping windows" if mode == "nonoverlapping" else \
        f"sliding windows (each scores its last {stride} bytes)"
    span = next(r["eval_bytes"] for r in records if r["mode"] == mode)
    out.append(f"### Bits per byte by eval context, {title}\n\n"
               f"Same {span:,} test bytes at every context; mean over seeds [95% interval over "
               "seeds and test blocks]; n/a: the scheme cannot encode that context.\n")
    out.append("| run | " + " | ".join(f"{m:g}×L" for m in multiples) + " |")
    out.append("|---|" + "---|" * len(multiples))
    by_key = {(r["run"], r["multiple"]): r for r in mine}
    for run in runs:
      cells = [_cell(by_key[(run, m)]) if (run, m) in by_key else "—" for m in multiples]
      out.append(f"| {run} | " + " | ".join(cells) + " |")
    out.append("")
  return "\n".join(out) + "\n"


def write_csv(records: Sequence[Record], path: str) -> None:
  """`summary_rows` as CSV."""
  rows = summary_rows(records)
  os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
  with open(path, "w", newline="") as f:
    writer = csv.DictWriter(f, fieldnames=list(rows[0]) if rows else ["run"])
    writer.writeheader()
    writer.writerows(rows)


def write_report(records: Sequence[Record], out_dir: str) -> dict[str, str]:
  """Writes `REPORT_FILES` to `out_dir` (created); returns key -> path."""
  os.makedirs(out_dir, exist_ok=True)
  paths = {k: os.path.join(out_dir, v) for k, v in REPORT_FILES.items()}
  records_lib.write_jsonl(records, paths["records"])
  with open(paths["tables"], "w") as f:
    f.write(markdown(records))
  write_csv(records, paths["csv"])
  lm_figures.bpb_vs_context(summary_rows(records), [r["train_length"] for r in records],
                            paths["plot"])
  lm_figures.loss_vs_position(records, paths["position_plot"])
  return paths


# -------------------------------------------------------------------- passkey

def _passkey_samples(group: Sequence[Record]) -> list[np.ndarray]:
  """Per seed, the 0/1 outcome of each of its examples (from accuracy x num_examples).

  A seed's records at several depths are pooled into one sample.
  """
  by_seed: dict[Any, list[np.ndarray]] = collections.OrderedDict()
  for r in group:
    if r.get("error") or not r.get("num_examples"):
      continue
    n = int(r["num_examples"])
    correct = int(round(float(r["accuracy"]) * n))
    by_seed.setdefault(r.get("seed"), []).append(np.repeat([1.0, 0.0], [correct, n - correct]))
  return [np.concatenate(parts) for parts in by_seed.values()]


def _passkey_row(group: Sequence[Record], **key: Any) -> dict[str, Any]:
  """One cell of a passkey table: seeds, mean accuracy and its 95% interval, error."""
  samples = _passkey_samples(group)
  interval = stats.mean_interval(samples) if samples else None
  errors = [r["error"] for r in group if r.get("error")]
  nan = float("nan")
  return {**key, "num_seeds": len(samples),
          "num_examples": int(sum(len(s) for s in samples)),
          "accuracy": interval.mean if interval else nan,
          "ci95_low": interval.lo if interval else nan,
          "ci95_high": interval.hi if interval else nan,
          "error": errors[0] if errors else None}


def passkey_rows(records: Sequence[Record]) -> list[dict[str, Any]]:
  """One row per (run, context, depth): seeds, mean accuracy, its 95% interval, error."""
  groups: dict[tuple[str, int, float], list[Record]] = collections.OrderedDict()
  for r in records:
    groups.setdefault((r["run"], int(r["context"]), float(r["depth"])), []).append(r)
  return [_passkey_row(group, run=run, context=context,
                       multiple=context / group[0]["train_length"], depth=depth)
          for (run, context, depth), group in groups.items()]


def passkey_context_rows(records: Sequence[Record]) -> list[dict[str, Any]]:
  """One row per (run, context): accuracy over every depth's examples, its 95% interval."""
  groups: dict[tuple[str, int], list[Record]] = collections.OrderedDict()
  for r in records:
    groups.setdefault((r["run"], int(r["context"])), []).append(r)
  return [_passkey_row(group, run=run, context=context,
                       multiple=context / group[0]["train_length"])
          for (run, context), group in groups.items()]


def _accuracy_cell(row: dict[str, Any]) -> str:
  """'0.75 [0.50, 0.94]' or 'n/a'."""
  if not row["num_seeds"]:
    return NA
  return stats.format_interval(stats.Interval(row["accuracy"], row["ci95_low"],
                                              row["ci95_high"], row["num_seeds"]))


def passkey_markdown(records: Sequence[Record]) -> str:
  """Passkey accuracy: one table per run, rows = eval context, columns = depth."""
  rows = passkey_rows(records)
  out = []
  for run in dict.fromkeys(r["run"] for r in rows):
    mine = [r for r in rows if r["run"] == run]
    depths = sorted({r["depth"] for r in mine})
    out.append(f"### Passkey accuracy, {run} (mean over seeds [95% interval over seeds and "
               "examples]; n/a: context not encodable)\n")
    out.append("| context | " + " | ".join(f"depth {d:g}" for d in depths) + " |")
    out.append("|---|" + "---|" * len(depths))
    for context in sorted({r["context"] for r in mine}):
      cells = []
      for d in depths:
        row = next((r for r in mine if r["context"] == context and r["depth"] == d), None)
        cells.append("—" if row is None else _accuracy_cell(row))
      out.append(f"| {context} ({context / _train(records):g}×L) | "
                 + " | ".join(cells) + " |")
    out.append("")
  return "\n".join(out) + "\n"


def passkey_summary_markdown(records: Sequence[Record]) -> str:
  """Passkey accuracy over all depths: rows = runs, columns = eval context / L."""
  rows = passkey_context_rows(records)
  multiples = sorted({r["multiple"] for r in rows})
  depths = sorted({float(r["depth"]) for r in records})
  out = ["### Passkey accuracy by eval context, all depths\n",
         f"Share of prompts whose 5 generated digits are the key, pooled over key depths "
         f"{', '.join(f'{d:g}' for d in depths)}; mean over seeds [95% interval over seeds "
         "and examples]; n/a: the scheme cannot encode that context.\n",
         "| run | " + " | ".join(f"{m:g}×L" for m in multiples) + " |",
         "|---|" + "---|" * len(multiples)]
  by_key = {(r["run"], r["multiple"]): r for r in rows}
  for run in dict.fromkeys(r["run"] for r in rows):
    cells = [_accuracy_cell(by_key[(run, m)]) if (run, m) in by_key else "—" for m in multiples]
    out.append(f"| {run} | " + " | ".join(cells) + " |")
  return "\n".join(out) + "\n"


def _train(records: Sequence[Record]) -> int:
  """The training context of the records (the first one's)."""
  return int(records[0]["train_length"])


def passkey_heatmap(records: Sequence[Record], path: str) -> str:
  """Accuracy by eval context (rows) x depth (columns), one panel per run (up to 5 a row);
  n/a cells grey."""
  rows = passkey_rows(records)
  runs = list(dict.fromkeys(r["run"] for r in rows))
  ncols = max(1, min(HEATMAP_COLUMNS, len(runs)))
  nrows = max(1, math.ceil(len(runs) / ncols))
  fig = plots.new_figure(3.2 * ncols + 0.8, 3.2 * nrows + 0.4)
  axes = fig.subplots(nrows, ncols, squeeze=False).reshape(-1)
  image = None
  for ax in axes[len(runs):]:
    ax.set_axis_off()
  for ax, run in zip(axes, runs):
    mine = [r for r in rows if r["run"] == run]
    contexts = sorted({r["context"] for r in mine})
    depths = sorted({r["depth"] for r in mine})
    grid = np.full((len(contexts), len(depths)), np.nan)
    for r in mine:
      grid[contexts.index(r["context"]), depths.index(r["depth"])] = r["accuracy"]
    ax.set_facecolor("0.85")  # shows through NaN (n/a) cells
    image = ax.imshow(grid, vmin=0.0, vmax=1.0, cmap="viridis", aspect="auto", origin="lower")
    for i in range(len(contexts)):
      for j in range(len(depths)):
        ax.text(j, i, NA if np.isnan(grid[i, j]) else f"{grid[i, j]:.2f}", ha="center",
                va="center", fontsize=7, color="white" if grid[i, j] < 0.6 else "black")
    ax.set_xticks(range(len(depths)), [f"{d:g}" for d in depths])
    ax.set_yticks(range(len(contexts)), [str(c) for c in contexts])
    ax.set_xlabel("key depth")
    ax.set_ylabel("eval context (bytes)")
    ax.set_title(run, loc="left", fontsize=9)
  if image is not None:
    fig.colorbar(image, ax=list(axes), label="passkey accuracy (mean over seeds)")
  return plots.save_png(fig, path)


def write_passkey_report(records: Sequence[Record], out_dir: str) -> dict[str, str]:
  """Writes `PASSKEY_FILES` (records, table, CSV, heatmap) to `out_dir`; returns key -> path."""
  os.makedirs(out_dir, exist_ok=True)
  paths = {k: os.path.join(out_dir, v) for k, v in PASSKEY_FILES.items()}
  records_lib.write_jsonl(records, paths["records"])
  with open(paths["tables"], "w") as f:
    f.write(passkey_markdown(records))
  rows = passkey_rows(records)
  with open(paths["csv"], "w", newline="") as f:
    writer = csv.DictWriter(f, fieldnames=list(rows[0]) if rows else ["run"])
    writer.writeheader()
    writer.writerows(rows)
  passkey_heatmap(records, paths["plot"])
  return paths


def write_reports(records: Sequence[Record], out_dir: str) -> None:
  """The passkey report of the passkey records and the bits-per-byte report of the rest."""
  passkey = [r for r in records if "accuracy" in r]
  if passkey:
    write_passkey_report(passkey, out_dir)
  if len(passkey) < len(records):
    write_report([r for r in records if "accuracy" not in r], out_dir)


def results_markdown(records: Sequence[Record], table: str) -> str:
  """A results/ table's section of RESULTS.md: bits per byte and passkey accuracy by context.

  Args:
    records: the table's stored records (`from_stored`).
    table: the table folder's name (for the links to its report files).

  Returns:
    Markdown: the bits-per-byte tables, the passkey accuracy over all depths, and
    where the per-depth table, the CSVs and the figures are.
  """
  passkey = [r for r in records if "accuracy" in r]
  lm_records = [r for r in records if "accuracy" not in r]
  parts, files = [], []
  if lm_records:
    parts.append(markdown(lm_records).rstrip())
    files += [REPORT_FILES["tables"], REPORT_FILES["csv"], REPORT_FILES["plot"],
              REPORT_FILES["position_plot"]]
  if passkey:
    parts.append(passkey_summary_markdown(passkey).rstrip())
    files += [PASSKEY_FILES["tables"], PASSKEY_FILES["csv"], PASSKEY_FILES["plot"]]
  parts.append("Per-seed records, tables (passkey: per key depth), CSVs and figures: "
               + ", ".join(f"`results/{table}/{name}`" for name in files) + ".")
  return "\n\n".join(parts) + "\n"
