"""The bf16 calibration of results/precision/: each bfloat16 run against its float32 run.

The precision table (configs/ablations/precision.py) holds pairs of runs named
`<base>+dtype=float32` and `<base>+dtype=bfloat16` whose configs differ only in
`model.dtype`. bf16 gives the same science when every pooled exact match of a bf16
run lies inside its f32 run's 95% interval (issue #52, DESIGN.md "Precision").
`python -m relpos_jax.results` renders, through `results.TABLE_FIGURES`:

* `markdown(records, run_infos, runs)`, in RESULTS.md: a row per pair and pooled
  column (`main_table.pooled_ranges`: (L, 2L], and (L, 4L] or SCAN's test split where
  the grid has them): the f32 and bf16 pooled exact match with their intervals
  (`main_table.cell`), whether the bf16 mean lies inside the f32 interval, and the
  paired bf16 − f32 difference over their shared seeds and eval examples with its
  interval and p (`stats.paired_difference`, as `python -m relpos_jax.compare`);
  then the verdict. A run not stored yet is "not run", never a value; a pair whose
  stored configs differ beyond `model.dtype` is "not comparable" and named.
* `write_figures(records, run_infos, out_dir)`: `FIGURE_FILES["curves"]`, a panel
  column per pair, rows training loss (log scale), training token accuracy and, where
  logged, validation exact match, against step; colour and line style = dtype (f32
  solid, bf16 dashed), a thin line per seed, from the `training_curve` of each run's
  `runs/<run>.json` (`curves.py`).
"""

from __future__ import annotations

import dataclasses
import os
from typing import Any, Mapping, Sequence

import numpy as np

from relpos_jax.experiments import main_table
from relpos_jax.experiments import plots
from relpos_jax.experiments import stats
from relpos_jax.experiments import store
from relpos_jax.experiments import tables

Record = tables.Record
REFERENCE, CANDIDATE = "float32", "bfloat16"
DTYPE_PART = "dtype="  # the run-name part `sweep_spec.run_name` makes of `model.dtype`
NOT_RUN = "not run"
NOT_COMPARABLE = "not comparable"
FIGURE_FILES = {"curves": "training_curves.png"}
STYLES = {REFERENCE: ("#1f77b4", "-"), CANDIDATE: ("#ff7f0e", "--")}  # a bf16 line on
# top of its f32 line stays visible
CURVE_ROWS = (("loss", "training loss"), ("token_accuracy", "training token accuracy"),
              ("valid_exact_match", "validation exact match"))


def split_run(run: str) -> tuple[str, str] | None:
  """`"t5+copy+dtype=bfloat16"` -> `("t5+copy", "bfloat16")`; None without a dtype part."""
  parts = run.split("+")
  dtypes = [p for p in parts if p.startswith(DTYPE_PART)]
  if len(dtypes) != 1 or "@" in run:
    return None
  return "+".join(p for p in parts if p != dtypes[0]), dtypes[0][len(DTYPE_PART):]


def pairs(runs: Sequence[str]) -> dict[str, dict[str, str]]:
  """base -> {dtype: run} of the run names that carry a dtype, in order of first appearance."""
  out: dict[str, dict[str, str]] = {}
  for run in runs:
    if split := split_run(run):
      out.setdefault(split[0], {})[split[1]] = run
  return out


@dataclasses.dataclass(frozen=True)
class Row:
  """One pair on one pooled column.

  Attributes:
    base: the pair's name without its dtype part.
    column: the main table's pooled column.
    reference, candidate: the f32 and bf16 runs' pooled intervals (None: not
      stored, or nothing to pool).
    stored: whether each run's records are stored (f32, bf16).
    convergence: each run's (seeds converged, seeds) (None: not stored).
    difference: bf16 − f32, paired (None unless both are stored and comparable).
    problem: why the pair is not comparable (None: it is).
  """

  base: str
  column: str
  reference: stats.Interval | None
  candidate: stats.Interval | None
  stored: tuple[bool, bool]
  convergence: tuple[tuple[int, int] | None, tuple[int, int] | None]
  difference: stats.Interval | None = None
  problem: str | None = None

  @property
  def inside(self) -> bool | None:
    """Whether the bf16 mean lies in the f32 interval (None: not both, or not comparable)."""
    if self.problem or self.reference is None or self.candidate is None:
      return None
    return bool(self.reference.lo <= self.candidate.mean <= self.reference.hi)

  @property
  def unconverged(self) -> tuple[bool, bool]:
    """Whether each run has a seed below its validation threshold."""
    return tuple(c is not None and c[0] < c[1] for c in self.convergence)


def _differences(a: Any, b: Any, prefix: str = "") -> list[str]:
  """The dotted keys at which two JSON values differ."""
  if isinstance(a, dict) and isinstance(b, dict):
    return [d for k in sorted(set(a) | set(b))
            for d in _differences(a.get(k), b.get(k), f"{prefix}{k}.")]
  return [] if a == b else [prefix.rstrip(".") or "(whole config)"]


def config_problem(reference: Mapping[str, Any] | None,
                   candidate: Mapping[str, Any] | None) -> str | None:
  """Why two stored run infos are not a calibration pair, or None.

  Each run must have trained in its arm's dtype, and their configs must be
  the same run but `model.dtype` (`store.run_identity`: provenance and logging
  aside).

  Args:
    reference, candidate: the f32 and bf16 runs' `runs/<run>.json` (None: not stored).

  Returns:
    A sentence, or None.
  """
  problems, identities = [], []
  for info, dtype in ((reference, REFERENCE), (candidate, CANDIDATE)):
    if info is None:
      continue
    identity = store.run_identity(info["config"])
    if identity["model"]["dtype"] != dtype:
      problems.append(f"{info['run']} trained in model.dtype {identity['model']['dtype']}, "
                      f"not {dtype}")
    identities.append({**identity, "model": {k: v for k, v in identity["model"].items()
                                             if k != "dtype"}})
  if len(identities) == 2 and (differ := _differences(*identities)):
    problems.append(f"configs differ beyond model.dtype in {', '.join(differ)}")
  return "; ".join(problems) or None


def _columns(records: Sequence[Record]) -> dict[str, list[int]]:
  """The pooled columns a run's grid covers and their lengths ((L, 2L] alone if not stored)."""
  if not records:
    return {main_table.POOLED_2X: []}
  lengths = sorted({int(r["length"]) for r in records})
  ranges = main_table.pooled_ranges(lengths, int(records[0]["max_train_length"]),
                                    main_table.is_scan(records))
  return {column: covered for column, covered in ranges.items() if covered}


def paired(reference: Sequence[Record], candidate: Sequence[Record],
           lengths: Sequence[int]) -> stats.Interval | None:
  """bf16 − f32 over `lengths`, their shared seeds and (where listed) examples; None: no seed."""
  seeds = {int(r["seed"]) for r in reference} & {int(r["seed"]) for r in candidate}
  a_S = main_table.seed_samples([r for r in candidate if int(r["seed"]) in seeds], lengths)
  b_S = main_table.seed_samples([r for r in reference if int(r["seed"]) in seeds], lengths)
  if not seeds or not a_S or len(a_S) != len(b_S):
    return None
  examples = (all(r.get("exact_counts") is not None for r in [*reference, *candidate])
              and all(a.shape == b.shape for a, b in zip(a_S, b_S)))
  return stats.paired_difference(a_S, b_S, paired_examples=examples)


def _convergence(records: Sequence[Record]) -> tuple[int, int] | None:
  """(seeds converged, seeds) of a run (None: no records)."""
  return main_table.row_convergence(records)[:2] if records else None


def calibration_rows(records: Sequence[Record], run_infos: Mapping[str, Mapping[str, Any]],
                     runs: Sequence[str] = ()) -> list[Row]:
  """Every pair's rows, pairs in the order of `runs` (the sweep's), then any other stored ones.

  Args:
    records: the table's records.
    run_infos: run name -> its `runs/<run>.json`.
    runs: the sweep's run names (`table.json`), stored or not.

  Returns:
    The rows (module docstring): one per pair and pooled column.
  """
  by_run = tables.by_run(records)
  rows = []
  for base, arms in pairs([*runs, *by_run]).items():
    ref, cand = by_run.get(arms.get(REFERENCE), []), by_run.get(arms.get(CANDIDATE), [])
    problem = config_problem(run_infos.get(arms.get(REFERENCE)) if ref else None,
                             run_infos.get(arms.get(CANDIDATE)) if cand else None)
    ref_columns, cand_columns = _columns(ref), _columns(cand)
    if ref and cand and ref_columns != cand_columns:
      problem = "; ".join(filter(None, [problem, "their eval grids differ"]))
    for column, lengths in (ref_columns if ref else cand_columns).items():
      ref_cell = main_table.cell(ref, lengths) if ref else None
      cand_cell = main_table.cell(cand, cand_columns.get(column, [])) if cand else None
      difference = paired(ref, cand, lengths) if ref and cand and not problem else None
      rows.append(Row(base, column, ref_cell, cand_cell, (bool(ref), bool(cand)),
                      (_convergence(ref), _convergence(cand)), difference, problem))
  return rows


def _value(interval: stats.Interval | None, stored: bool, unconverged: bool) -> str:
  """A pooled cell: the interval (marked † if a seed did not converge), or "not run"."""
  if not stored:
    return NOT_RUN
  return stats.format_interval(interval) + (f" {tables.UNCONVERGED}" if unconverged else "")


def verdict(rows: Sequence[Row]) -> str:
  """Calibrated, not calibrated (naming the rows outside), or not decided yet, in a sentence.

  The criterion is the pooled values alone (issue #52); the sentence adds the
  pairs whose arms converged on different numbers of seeds, and any unconverged run.
  """
  compared = [r for r in rows if r.inside is not None]
  outside = [f"{r.base} {r.column}" for r in compared if not r.inside]
  missing = sum(not s for r in rows for s in r.stored)
  problems = sorted({r.base for r in rows if r.problem})
  so_far = (f"; so far {len(compared) - len(outside)} of {len(compared)} pooled bf16 values "
            "lie inside their f32 intervals" if compared else "")
  if outside:
    return (f"**Not calibrated**: {len(outside)} of {len(compared)} pooled bf16 values lie "
            f"outside their f32 run's 95% interval ({'; '.join(outside)}).")
  if problems:
    return f"**Not decided**: pairs not comparable ({', '.join(problems)}){so_far}."
  if missing or not compared:
    return f"**Not decided**: runs not stored yet (\"{NOT_RUN}\" below){so_far}."
  differ = [f"{r.base} (f32 {r.convergence[0][0]}/{r.convergence[0][1]}, bf16 "
            f"{r.convergence[1][0]}/{r.convergence[1][1]} seeds converged)"
            for r in dict((r.base, r) for r in rows).values()
            if r.convergence[0] != r.convergence[1]]
  unconverged = any(any(r.unconverged) for r in rows)
  return (f"**Calibrated**: every pooled bf16 value lies inside its f32 run's 95% interval "
          f"({len(compared)} of {len(compared)})"
          + (f"; convergence differs: {'; '.join(differ)}" if differ else "")
          + (f"; some runs have seeds below their validation threshold ({tables.UNCONVERGED}),"
             " whose pooled values are not read as extrapolation" if unconverged else "")
          + ".")


def markdown(records: Sequence[Record], run_infos: Mapping[str, Mapping[str, Any]],
             runs: Sequence[str] = ()) -> str:
  """The calibration table with its verdict and legend (module docstring), as markdown.

  Args:
    records: the table's records (possibly none).
    run_infos: run name -> its `runs/<run>.json`.
    runs: the sweep's run names (`table.json`), stored or not.

  Returns:
    Markdown: a title, the verdict, the table and its legend.
  """
  rows = calibration_rows(records, run_infos, runs)
  header = ["run", "column", f"{REFERENCE} [95%]", f"{CANDIDATE} [95%]",
            "bf16 in f32 interval", "bf16 − f32, paired [95%], p"]
  body = []
  for row in rows:
    inside = (tables.EMPTY if row.inside is None and not row.problem
              else NOT_COMPARABLE if row.problem else "yes" if row.inside else "**no**")
    body.append([row.base, row.column, _value(row.reference, row.stored[0], row.unconverged[0]),
                 _value(row.candidate, row.stored[1], row.unconverged[1]), inside,
                 stats.format_difference(row.difference) if row.difference else tables.EMPTY])
  legend = [
      "Exact match pooled over every eval example of the column's lengths (as in the main "
      "table), mean over seeds [95% interval: hierarchical bootstrap over seeds and eval "
      "examples, relpos_jax/experiments/stats.py]. bf16 in f32 interval: whether the "
      f"{CANDIDATE} run's mean lies inside its {REFERENCE} run's interval, the calibration's "
      "criterion. bf16 − f32: the paired difference over the seeds both runs have (the same "
      "eval examples where the records list them), its 95% interval and two-sided p "
      "(`stats.paired_difference`, as `python -m relpos_jax.compare`).",
      f"{NOT_RUN}: the run's records are not stored yet; no value stands in for them."]
  if any(any(r.unconverged) for r in rows):
    legend.append(f"{tables.UNCONVERGED}: some seed is below its validation threshold.")
  legend += [f"{NOT_COMPARABLE} ({base}): {problem}." for base, problem in
             dict.fromkeys((r.base, r.problem) for r in rows if r.problem)]
  text = tables.document("bf16 calibration: pooled exact match, bfloat16 against float32",
                         header, body, legend)
  title, rest = text.split("\n", 1)
  return f"{title}\n\n{verdict(rows)}\n{rest}"


# ------------------------------------------------------------------ the figure

def write_figures(records: Sequence[Record], run_infos: Mapping[str, Mapping[str, Any]],
                  out_dir: str) -> dict[str, str]:
  """Draws the training curves of the stored pairs (`FIGURE_FILES["curves"]`).

  Args:
    records: the table's records.
    run_infos: run name -> its `runs/<run>.json`.
    out_dir: the table folder.

  Returns:
    `{"curves": path}`; empty when no pair is stored.
  """
  runs = pairs([r for r in tables.by_run(records) if r in run_infos])
  if not runs:
    return {}
  curves = {base: {dtype: run_infos[run].get("training_curve") for dtype, run in arms.items()}
            for base, arms in runs.items()}
  return {"curves": plots.save_png(curves_figure(curves),
                                   os.path.join(out_dir, FIGURE_FILES["curves"]))}


def curves_figure(curves: Mapping[str, Mapping[str, Sequence[Mapping[str, Any]] | None]]):
  """The training-curves figure: a column per pair, a row per metric, a line per seed.

  Args:
    curves: base -> dtype -> that run's `training_curve` (None: stored without one).

  Returns:
    The matplotlib figure; each line's `gid` is `<base>/<dtype>/seed<s>/<metric>`.
  """
  rows = [(key, label) for key, label in CURVE_ROWS
          if any(key in e for arms in curves.values() for c in arms.values() for e in c or [])]
  rows = rows or list(CURVE_ROWS[:1])
  fig = plots.new_figure(3.3 * len(curves) + 1.6, 2.4 * len(rows))
  axes = fig.subplots(len(rows), len(curves), squeeze=False)
  for j, (base, arms) in enumerate(curves.items()):
    for i, (key, label) in enumerate(rows):
      ax = axes[i][j]
      for dtype, curve in arms.items():
        for entry in curve or []:
          if key not in entry:
            continue
          steps = entry["valid_step" if key == "valid_exact_match" else "step"]
          values = np.array([np.nan if v is None else v for v in entry[key]], float)
          color, linestyle = STYLES.get(dtype, ("gray", ":"))
          ax.plot(steps, values, color=color, linestyle=linestyle, linewidth=0.8, alpha=0.8,
                  marker="o" if key == "valid_exact_match" else None, markersize=2.5,
                  gid=f"{base}/{dtype}/seed{entry['seed']}/{key}")
      if key == "loss" and ax.lines:
        ax.set_yscale("log")
      elif key != "loss":
        ax.set_ylim(-0.03, 1.03)
      ax.grid(alpha=0.3)
      ax.tick_params(which="both", labelsize=7.5)
      if j == 0:
        ax.set_ylabel(label, fontsize=8)
      if i == len(rows) - 1:
        ax.set_xlabel("step", fontsize=8)
    missing = [f"{d}: {'no curve stored' if d in arms else NOT_RUN}"
               for d in (REFERENCE, CANDIDATE) if not arms.get(d)]
    if missing:
      axes[0][j].text(0.5, 0.5, "\n".join(missing), transform=axes[0][j].transAxes,
                      ha="center", va="center", fontsize=8, color="gray")
    axes[0][j].set_title(base, fontsize=9)
  handles = [plots.legend_line(color=color, linestyle=linestyle, linewidth=1.6, label=dtype)
             for dtype, (color, linestyle) in STYLES.items()]
  axes[0][-1].legend(handles=handles, fontsize=7.5, loc="upper left", bbox_to_anchor=(1.03, 1.0),
                     borderaxespad=0.0, frameon=False)
  fig.suptitle("Training curves, float32 against bfloat16 (a line per seed; training metrics "
               "are means over each logging window)", fontsize=10, x=0.01,
               horizontalalignment="left")
  return fig
