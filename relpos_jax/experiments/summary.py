"""The one-glance answer: schemes × tasks, pooled exact match over (L, 2L] with its interval.

`results/summary.png` and `results/summary.md`, rendered from the stored records by
`python -m relpos_jax.results` (`make results`). A column is one task of one table
(`COLUMNS`, grouped by architecture); a row is a registered scheme; a cell is that
scheme's plain run (trained and decoded at 0..L−1, no eval-time variant) in that
table, its exact match pooled over every example with L < length ≤ 2L (the
definition every table shares, `main_table`), mean over seeds [95% interval]. A run
with a seed below its validation threshold is marked † and greyed: it did not learn
the task, so its cell is not read as extrapolation. An empty cell: the table has
no such run.
"""

from __future__ import annotations

import os
from typing import Sequence

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402 (after the backend is chosen)
import numpy as np  # noqa: E402

from relpos_jax import positions  # noqa: E402
from relpos_jax.experiments import main_table  # noqa: E402
from relpos_jax.experiments import records as records_lib  # noqa: E402
from relpos_jax.experiments import stats  # noqa: E402
from relpos_jax.experiments import tables  # noqa: E402

SUMMARY_MD, SUMMARY_PNG = "summary.md", "summary.png"
# (architecture, table folders (the first holding the run), run suffix after "<scheme>+",
# column label). kazemnejad and extrapolation_methods share identical NoPE/T5/ALiBi runs on
# copy and reverse (one config, one grid); the latter adds Kerple and FIRE.
COLUMNS = (
    ("encoder-decoder", ("schemes",), "copy", "copy"),
    ("encoder-decoder", ("schemes",), "reverse", "reverse"),
    ("encoder-decoder", ("schemes",), "scan_length", "SCAN length"),
    ("decoder-only", ("kazemnejad", "extrapolation_methods"), "copy", "copy"),
    ("decoder-only", ("kazemnejad", "extrapolation_methods"), "reverse", "reverse"),
    ("decoder-only", ("kazemnejad",), "scan_length_cutoff_25", "SCAN cutoff 25"),
    ("decoder-only", ("extrapolation_methods",), "add_index_hints", "addition"),
)


def summary_cells(root: str) -> dict[tuple[str, int], tuple[stats.Interval | None, bool]]:
  """(scheme, column index) -> (pooled (L, 2L] interval, converged) for every stored plain run."""
  cells = {}
  for j, (_, table_names, suffix, _) in enumerate(COLUMNS):
    for scheme in positions.SCHEMES:
      paths = [os.path.join(root, t, "records", f"{scheme}+{suffix}.jsonl") for t in table_names]
      path = next((p for p in paths if os.path.exists(p)), None)
      if path is None:
        continue
      records = records_lib.read_jsonl(path)
      lengths = sorted({int(r["length"]) for r in records})
      ranges = main_table.pooled_ranges(lengths, int(records[0]["max_train_length"]))
      done, total, _, _ = main_table.row_convergence(records)
      cells[(scheme, j)] = (main_table.cell(records, ranges[main_table.POOLED_2X]),
                            done == total)
  return cells


def markdown(cells) -> str:
  """The summary as a compact markdown table (rows: schemes with any stored cell)."""
  header = ["scheme"] + [_column_name(j) for j in range(len(COLUMNS))]
  rows = []
  for scheme in positions.SCHEMES:
    if not any((scheme, j) in cells for j in range(len(COLUMNS))):
      continue
    row = [scheme]
    for j in range(len(COLUMNS)):
      interval, ok = cells.get((scheme, j), (None, True))
      text = stats.format_interval(interval) if (scheme, j) in cells else ""
      row.append(text + ("" if ok else f" {tables.UNCONVERGED}"))
    rows.append(row)
  sources = "; ".join(f"{label} ({arch}): " + ", ".join(f"`results/{t}`" for t in names)
                      for arch, names, _, label in COLUMNS)
  legend = [
      "Exact match pooled over every eval example with L < length ≤ 2L (L: the longest "
      f"training length), mean over {_seeds_text(cells)} [95% interval over seeds and "
      "examples]; each scheme's plain run (0..L−1, no eval-time variant). Tables: "
      + sources + ".",
      f"{tables.UNCONVERGED}: some seed did not learn the task in distribution; not read as "
      "extrapolation. Empty: not in that table. Compare across columns only as rankings: "
      "the tasks, sizes and budgets differ (RESULTS.md).",
  ]
  return tables.document("Summary: who extrapolates where", header, rows, legend)


def _seeds_text(cells) -> str:
  """`3 seeds`, or `3 seeds (5: fire and xl on encoder: copy; ...)` for cells of other counts."""
  counts = {key: interval.n_seeds for key, (interval, _) in cells.items() if interval is not None}
  if not counts:
    return "seeds"
  common = max(sorted(set(counts.values())), key=list(counts.values()).count)
  groups: dict[tuple[int, int], list[str]] = {}  # (seeds, column) -> schemes
  for (scheme, j), n in sorted(counts.items(), key=lambda item: (item[0][1], item[0][0])):
    if n != common:
      groups.setdefault((n, j), []).append(scheme)
  text = f"{common} seed{'s' * (common > 1)}"
  if groups:
    text += " (" + "; ".join(f"{n}: {_and(schemes)} on {_column_name(j)}"
                             for (n, j), schemes in sorted(groups.items())) + ")"
  return text


def _column_name(j: int) -> str:
  """Column j's header, `encoder: copy`."""
  arch, _, _, label = COLUMNS[j]
  return f"{arch.split('-')[0]}: {label}"


def _and(names: list[str]) -> str:
  """`a`, `a and b`, `a, b and c`."""
  return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]


def figure(cells, path: str) -> None:
  """The summary heatmap: a cell per (scheme, task), colour = pooled exact match."""
  schemes = [s for s in positions.SCHEMES
             if any((s, j) in cells for j in range(len(COLUMNS)))]
  values = np.full((len(schemes), len(COLUMNS)), np.nan)
  for i, s in enumerate(schemes):
    for j in range(len(COLUMNS)):
      if (s, j) in cells and cells[(s, j)][0] is not None:
        values[i, j] = cells[(s, j)][0].mean
  fig, ax = plt.subplots(figsize=(1.45 * len(COLUMNS) + 1.8, 0.55 * len(schemes) + 1.9))
  image = ax.imshow(np.ma.masked_invalid(values), cmap="viridis", vmin=0, vmax=1,
                    aspect="auto")
  for i, s in enumerate(schemes):
    for j in range(len(COLUMNS)):
      if (s, j) not in cells:
        continue
      interval, ok = cells[(s, j)]
      if interval is None:
        continue
      text = f"{interval.mean:.2f}\n[{interval.lo:.2f}, {interval.hi:.2f}]"
      if not ok:
        text = f"{tables.UNCONVERGED} {text}"
        ax.add_patch(plt.Rectangle((j - 0.5, i - 0.5), 1, 1, color="0.85", zorder=2))
      colour = "black" if not ok or interval.mean > 0.6 else "white"
      ax.text(j, i, text, ha="center", va="center", fontsize=7, color=colour, zorder=3)
  ax.set_xticks(range(len(COLUMNS)), [label for _, _, _, label in COLUMNS], rotation=20,
                ha="right", fontsize=8)
  ax.set_yticks(range(len(schemes)), schemes, fontsize=8)
  archs = [arch for arch, _, _, _ in COLUMNS]
  for j in range(1, len(COLUMNS)):
    if archs[j] != archs[j - 1]:
      ax.axvline(j - 0.5, color="white", linewidth=3)
  for arch in dict.fromkeys(archs):
    cols = [j for j, a in enumerate(archs) if a == arch]
    ax.text(np.mean(cols), -0.58, arch, ha="center", va="bottom", fontsize=9,
            fontweight="bold")
  ax.set_title("Exact match pooled over (L, 2L] [95% interval]; † did not learn the task",
               fontsize=9, pad=30)
  fig.colorbar(image, ax=ax, fraction=0.03, pad=0.02)
  fig.tight_layout()
  fig.savefig(path, dpi=130, metadata={"Software": None})
  plt.close(fig)


def write(root: str) -> dict:
  """Writes `results/summary.{md,png}` from the stored records; returns the cells."""
  cells = summary_cells(root)
  with open(os.path.join(root, SUMMARY_MD), "w") as f:
    f.write(markdown(cells))
  figure(cells, os.path.join(root, SUMMARY_PNG))
  return cells


def schemes_in(cells) -> Sequence[str]:
  """The schemes with a cell, in registry order."""
  return [s for s in positions.SCHEMES if any(k[0] == s for k in cells)]
