"""Figures: accuracy and failure anatomy vs length; the figures schemes offer.

The record figures are small multiples: a row of panels per task (split by arm when
a task has more than `MAX_RUNS_PER_PANEL` runs), a run's colour its scheme's in
every figure (`palette`), its seeds' min–max shaded, the run legend beside each row,
never over data. The scheme figures (T5's learned bias, Shaw's key norms, FIRE's
bias at three query positions, the sinusoid) are described by the schemes themselves
(`PositionScheme.figures`) and drawn here without knowing which scheme is which.

Each function writes PNGs. Figures are drawn on matplotlib's Agg canvas
directly (no `pyplot`), so importing this module never changes a notebook's or
a GUI's backend and nothing needs a display.

The scheme figures find the scheme modules by running the model abstractly
(`scheme_instances`): whatever the architecture, every positional-scheme module
it calls is found with its path in the parameter tree and its settings (causal
or bidirectional, buckets, clipping distance), so no parameter name of a
particular model is assumed.
"""

from __future__ import annotations

import os
import warnings
from typing import TYPE_CHECKING, Any, Mapping, Sequence

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from relpos_jax.experiments import palette
from relpos_jax.experiments import tables
from relpos_jax.positions import base

if TYPE_CHECKING:  # matplotlib itself is imported where a figure is drawn (`new_figure`)
  from matplotlib import figure as figure_lib
  from matplotlib import lines as lines_lib

Record = tables.Record
Path = tuple[str, ...]

# The figure's footnote when some run is marked (the tables' legend says the same).
UNCONVERGED_NOTE = (f"{tables.UNCONVERGED} c/n: only c of the n seeds learned the task in "
                    "distribution: not a measure of extrapolation (drawn faint)")


# ------------------------------------------------------------ accuracy vs length

MAX_RUNS_PER_PANEL = 10  # a panel draws at most this many runs' lines (+ one grey reference)
ACCURACY_METRICS = {"exact_match": "exact match",
                    "oracle_exact_match": "exact match at the oracle length",
                    "token_accuracy": "token accuracy"}
ANATOMY_METRICS = {"fail_pure_stop": "pure stopping errors",
                   "fail_too_short": "too short", "fail_too_long": "too long",
                   "first_wrong_median": "first wrong token (median position)"}
REFERENCE = "reference"  # the gid of a panel's grey reference line (not a run)


def accuracy_vs_length(records: Sequence[Record], path: str) -> str:
  """The extrapolation figure: exact match (and oracle, token accuracy) vs eval length.

  Small multiples: one row of panels per task (a task with more than
  `MAX_RUNS_PER_PANEL` runs is split into several rows by arm, `panel_groups`),
  one column per metric; each run's mean over seeds with its min–max band, in its
  scheme's colour (`palette`). Crosses at 0 mark lengths that are not representable;
  the training lengths are shaded. Each row's run legend sits right of the row.

  Args:
    records: records of one or more runs (see `tables`).
    path: the PNG to write (its folder is created).

  Returns:
    `path`.
  """
  metrics = {k: v for k, v in ACCURACY_METRICS.items() if any(k in r for r in records)}
  return _small_multiples(records, panel_groups(records), metrics, path,
                          "Length extrapolation" + tables.task_suffix(records))


def failure_anatomy(records: Sequence[Record], task: str, path: str) -> str:
  """How one task's runs fail, vs eval length: the failure shares, the first wrong token.

  Rows as in `accuracy_vs_length` (its rows of `task`); columns: among the failed
  examples, the share of pure stopping errors (every emitted token right, EOS too
  early or too late), too short and too long, and the median position of the first
  wrong token (the grey line: the eval length). NaN (no failures) breaks a curve.

  Args:
    records: records of one or more runs; the runs' styles are numbered over all of
      them, so a run looks as in the table's other figures.
    task: the task drawn.
    path: the PNG to write.

  Returns:
    `path`.
  """
  rows = [g for g in panel_groups(records) if g[0] == task]
  if not rows:
    raise ValueError(f"no records of task {task!r}; tasks: "
                     f"{sorted({r['task'] for r in records})}")
  return _small_multiples(records, rows, ANATOMY_METRICS, path,
                          f"Failure anatomy — task {task}")


def panel_groups(records: Sequence[Record]) -> list[tuple[str, str, list[str]]]:
  """The rows of panels: per task, its runs, split by arm past `MAX_RUNS_PER_PANEL`.

  A task's arms (`palette.arm`) are packed into rows in order of first appearance,
  a new row whenever the next arm's runs would not fit; an arm with more runs than
  fit is cut into rows of `MAX_RUNS_PER_PANEL`.

  Args:
    records: records of one or more runs.

  Returns:
    `[(task, row title, runs)]`: the row title is the task, followed by the row's
    arms when the task takes several rows.
  """
  groups = tables.by_run(records)
  named = _names(groups)
  by_task: dict[str, dict[str, list[str]]] = {}
  for run, recs in groups.items():
    by_task.setdefault(str(recs[0].get("task", "")), {}).setdefault(
        named[run][0], []).append(run)
  rows = []
  for task, arms in by_task.items():
    packed: list[tuple[list[str], list[str]]] = []  # (arms, runs) per row
    for arm, runs in arms.items():
      for i in range(0, len(runs), MAX_RUNS_PER_PANEL):
        chunk = runs[i:i + MAX_RUNS_PER_PANEL]
        if packed and len(packed[-1][1]) + len(chunk) <= MAX_RUNS_PER_PANEL:
          packed[-1][0].append(arm)
          packed[-1][1].extend(chunk)
        else:
          packed.append(([arm], list(chunk)))
    for arm_names, runs in packed:
      title = task
      if len(packed) > 1:
        title += ": " + ", ".join(a or "plain" for a in dict.fromkeys(arm_names))
      rows.append((task, title, runs))
  return rows


def _small_multiples(records: Sequence[Record], rows: Sequence[tuple[str, str, list[str]]],
                     metrics: Mapping[str, str], path: str, title: str) -> str:
  """Draws `rows` × `metrics` panels of runs' curves vs length and writes the PNG.

  Each row of panels sits under a text-only axes holding the row's title (as wide
  as the row, so a long title never pushes the columns apart), its run legend right
  of its last panel.
  """
  groups = tables.by_run(records)
  styles, names = _run_styles(groups), _names(groups)
  seeds = {tables.num_seeds(recs) for recs in groups.values()}
  fig = new_figure(3.6 * len(metrics) + 2.6, 2.9 * len(rows) + 0.9)
  grid = fig.add_gridspec(2 * len(rows), len(metrics), height_ratios=[0.06, 1] * len(rows))
  for i, (_, row_title, runs) in enumerate(rows):
    heading = fig.add_subplot(grid[2 * i, :])
    heading.axis("off")
    heading.text(0.0, 0.0, row_title, fontsize=10, fontweight="bold", ha="left", va="bottom",
                 transform=heading.transAxes)
    row_records = [r for run in runs for r in groups[run]]
    row_axes = [fig.add_subplot(grid[2 * i + 1, j]) for j in range(len(metrics))]
    for ax, (metric, label) in zip(row_axes, metrics.items()):
      for run in runs:
        _curve(ax, groups[run], metric, styles[run], run)
        if metric in ACCURACY_METRICS:
          _mark_not_representable(ax, groups[run], metric, styles[run])
      if metric == "first_wrong_median":
        lengths = sorted({int(r["length"]) for r in row_records})
        ax.plot(lengths, lengths, color="gray", linewidth=0.8, gid=REFERENCE)
      else:
        ax.set_ylim(-0.03, 1.03)
      _shade_training(ax, row_records)
      ax.set_xlim(*_length_range(row_records))
      ax.grid(alpha=0.3)
      ax.set_title(label, fontsize=9)
      ax.tick_params(labelsize=8)
      if i == len(rows) - 1:
        ax.set_xlabel("eval length", fontsize=8)
    single_arm = len({names[run][0] for run in runs}) == 1
    handles = [legend_line(color=styles[run].color, linestyle=styles[run].linestyle,
                            marker=styles[run].marker, markersize=4, linewidth=1.4,
                            label=_run_label(_scheme(groups[run]) if single_arm
                                             else names[run][1], groups[run], len(seeds) > 1))
               for run in runs]
    row_axes[-1].legend(handles=handles, fontsize=7.5, loc="upper left",
                        bbox_to_anchor=(1.03, 1.0), borderaxespad=0.0, frameon=False)
  fig.legend(handles=_notes(records, metrics), fontsize=7.5, loc="outside lower left",
             ncols=3, frameon=False)
  seed_note = (f"mean of {seeds.pop()} seeds, band: min–max over seeds" if len(seeds) == 1
               else "mean over seeds, band: min–max over seeds")
  fig.suptitle(f"{title} ({seed_note})", fontsize=11, x=0.01, horizontalalignment="left")
  return save_png(fig, path)


def _names(groups: Mapping[str, Sequence[Record]]) -> dict[str, tuple[str, str]]:
  """Each run's `(arm, short name)` (`palette.arms_and_names`)."""
  return palette.arms_and_names({run: (str(recs[0].get("scheme", "")),
                                       str(recs[0].get("task", "")))
                                 for run, recs in groups.items()})


def _run_styles(groups: Mapping[str, Sequence[Record]]) -> dict[str, palette.Style]:
  """Each run's style: its scheme's colour, its arm's line style, marker and shade."""
  arms = {run: arm for run, (arm, _) in _names(groups).items()}
  numbers = palette.arm_indices(list(arms.values()))
  return {run: palette.arm_style(_scheme(recs), numbers[arms[run]])
          for run, recs in groups.items()}


def _scheme(records: Sequence[Record]) -> str:
  """The records' scheme; ValueError if they name none."""
  if "scheme" not in records[0]:
    raise ValueError(f"record of run {records[0].get('run')!r} has no 'scheme': its colour "
                     "comes from the scheme (see relpos_jax.experiments.palette)")
  return records[0]["scheme"]


def _run_label(name: str, records: Sequence[Record], with_seeds: bool) -> str:
  """A run's legend entry: its short name, `†` if unconverged, its seeds if asked."""
  if not tables.is_converged(records):
    converged, seeds = tables.convergence(records)
    return f"{name} {tables.UNCONVERGED} {converged}/{seeds}"
  seeds = tables.num_seeds(records)
  return f"{name} ({seeds} seed{'s' * (seeds > 1)})" if with_seeds else name


def _notes(records: Sequence[Record], metrics: Mapping[str, str]) -> list[Any]:
  """The figure's shared legend: training shading, crosses, the unconverged mark."""
  from matplotlib import patches  # pylint: disable=g-import-not-at-top  (see `new_figure`)
  notes = [patches.Patch(color="gray", alpha=0.25, label="training lengths")]
  if "first_wrong_median" in metrics:
    notes.append(legend_line(color="gray", linewidth=0.8, label="y = eval length"))
  if any(m in ACCURACY_METRICS for m in metrics) and any(r.get("error") for r in records):
    notes.append(legend_line(color="black", marker="x", linestyle="none",
                              label="not representable (every seed)"))
  if not all(tables.is_converged(recs) for recs in tables.by_run(records).values()):
    notes.append(legend_line(color="none", label=UNCONVERGED_NOTE))
  return notes


def _curve(ax, records: Sequence[Record], metric: str, style: palette.Style, run: str) -> None:
  """One run's metric vs length: mean over seeds, min–max over seeds shaded if several."""
  if not any(metric in r for r in records):
    return
  lengths, _, values_SxL, _ = tables.seed_matrix(records, metric)
  alpha = 1.0 if tables.is_converged(records) else 0.4
  with np.errstate(all="ignore"), warnings.catch_warnings():
    warnings.simplefilter("ignore", RuntimeWarning)  # all-NaN lengths: NaN, a gap
    mean_L = np.nanmean(values_SxL, axis=0)
    low_L, high_L = np.nanmin(values_SxL, axis=0), np.nanmax(values_SxL, axis=0)
  ax.plot(lengths, mean_L, color=style.color, linestyle=style.linestyle, marker=style.marker,
          markersize=2.5, linewidth=1.3, alpha=alpha, gid=run)
  if len(values_SxL) > 1:
    ax.fill_between(lengths, low_L, high_L, color=style.color, alpha=0.13 * alpha, linewidth=0)


def _mark_not_representable(ax, records: Sequence[Record], metric: str,
                            style: palette.Style) -> None:
  """Crosses at y = 0 on the lengths where every seed of the run is not representable."""
  if not any(metric in r for r in records):
    return
  lengths, _, _, na_SxL = tables.seed_matrix(records, metric)
  na_lengths = [n for n, na in zip(lengths, na_SxL.all(axis=0)) if na]
  if na_lengths:  # a scatter (a collection), not a line: it is not a curve of the panel
    ax.scatter(na_lengths, [0.0] * len(na_lengths), marker="x", color=style.color, s=30,
               linewidths=1.2)


def _length_range(records: Sequence[Record]) -> tuple[float, float]:
  """The x range: from the first eval length or the end of training, whichever is first.

  A task evaluated only past its training lengths (SCAN's length split) would
  otherwise spend half its panel on shading from length 1.
  """
  lengths = [int(r["length"]) for r in records]
  low = min(min(lengths), max(int(r["max_train_length"]) for r in records))
  margin = 0.04 * (max(lengths) - low or 1)
  return low - margin, max(lengths) + margin


def _shade_training(ax, records: Sequence[Record]) -> None:
  """Shades each distinct training length range."""
  ranges = sorted({(int(r.get("min_train_length", 1)), int(r["max_train_length"]))
                   for r in records})
  for low, high in ranges:
    ax.axvspan(low, high, color="gray", alpha=0.12, linewidth=0)


def legend_line(**style: Any) -> lines_lib.Line2D:
  """A line with no data, for a legend entry."""
  from matplotlib import lines  # pylint: disable=g-import-not-at-top  (see `new_figure`)
  return lines.Line2D([], [], **style)


# ------------------------------------------------------------ scheme modules

def scheme_instances(model: nn.Module, params: Mapping[str, Any]) -> list[tuple[Path, Any]]:
  """Every positional-scheme module the model calls, with its path in the param tree.

  The model is run abstractly (`jax.eval_shape`, a 1×2 batch) with a method
  interceptor that records each bound `PositionScheme`; a module shared by
  several layers appears once.

  Args:
    model: an unbound model of any architecture (`model.apply(variables,
      inputs, targets)`).
    params: one replica's parameters (no leading seed axis).

  Returns:
    `[(path, module)]` in call order; `module` carries the scheme's settings
    (`causal`, `num_buckets`, `max_relative_position`, ...).
  """
  found: dict[Path, Any] = {}

  def record(next_fun, args, kwargs, context):
    """Notes bound scheme modules, then calls through."""
    module = context.module
    if isinstance(module, base.PositionScheme) and module.scope is not None:
      found.setdefault(tuple(module.path), module)
    return next_fun(*args, **kwargs)

  tokens_1x2 = jnp.full((1, 2), 4, jnp.int32)  # any ids: nothing is computed
  with nn.intercept_methods(record):
    jax.eval_shape(lambda p: model.apply({"params": p}, tokens_1x2, tokens_1x2), params)
  return list(found.items())


def _param_subtree(params: Mapping[str, Any], path: Path) -> Mapping[str, Any]:
  """The parameters under `path` (empty if the module has none)."""
  for name in path:
    if not isinstance(params, Mapping) or name not in params:
      return {}
    params = params[name]
  return params


def scheme_figures(model: nn.Module, params: Mapping[str, Any], out_dir: str, *,
                   max_train_distance: int | None = None,
                   seed: int | None = None) -> dict[str, str]:
  """Draws the figures the model's scheme modules offer (`PositionScheme.figures`).

  Each module describes its panels from its own parameters; the panels sharing a
  figure name make one figure `<out_dir>/<figure>.png`, one axes per panel title,
  in call order (e.g. T5: the encoder's bidirectional table, then the decoder's
  causal one; Shaw: every layer's key norms, a curve each).

  Args:
    model: the run's model (any architecture).
    params: one replica's params.
    out_dir: the folder of the PNGs.
    max_train_distance: if given, the distances (positions) seen in training are
      shaded (see `report.train_distance`).
    seed: the replica's seed, for the titles.

  Returns:
    figure name -> the written path (empty: the scheme has no figure).
  """
  figures: dict[str, dict[str, list[tuple[Path, base.FigurePanel]]]] = {}
  for path, module in scheme_instances(model, params):
    for panel in module.figures(_param_subtree(params, path),
                                max_train_distance=max_train_distance):
      figures.setdefault(panel.figure, {}).setdefault(panel.title, []).append((path, panel))
  return {name: _draw_scheme_figure(list(panels.values()), seed,
                                    os.path.join(out_dir, f"{name}.png"))
          for name, panels in figures.items()}


def _draw_scheme_figure(axes_panels: Sequence[Sequence[tuple[Path, base.FigurePanel]]],
                        seed: int | None, path: str) -> str:
  """One axes per list of `(module path, panel)`, in a row, and writes the PNG."""
  image = axes_panels[0][0][1].image_XxC is not None
  fig = new_figure((6.0 if image else 4.6) * len(axes_panels) + 1.8, 4.2 if image else 3.4)
  axes = fig.subplots(1, len(axes_panels), squeeze=False)[0]
  for ax, items in zip(axes, axes_panels):
    first = items[0][1]
    if first.image_XxC is not None:
      shown = ax.imshow(first.image_XxC, aspect="auto", cmap="RdBu_r", vmin=-1, vmax=1,
                        interpolation="nearest",
                        extent=(-0.5, first.image_XxC.shape[1] - 0.5,
                                first.x_X[-1] + 0.5, first.x_X[0] - 0.5))
      fig.colorbar(shown, ax=ax)
      ax.set_xlabel(first.y_label)
      ax.set_ylabel(first.x_label)
    else:
      for module_path, panel in items:
        for label, values in panel.curves.items():
          name = "/".join(module_path) if len(items) > 1 or not label else None
          ax.plot(panel.x_X, values, linewidth=1.1,
                  drawstyle="steps-mid" if panel.steps else "default",
                  marker=None if panel.steps else "o", markersize=2,
                  label=": ".join(x for x in (name, label) if x))
      if first.shade:
        ax.axvspan(*first.shade, color="gray", alpha=0.12, label="training distances")
      ax.set_xlabel(first.x_label)
      ax.set_ylabel(first.y_label)
      ax.grid(alpha=0.3)
    _draw_marks(ax, [panel for _, panel in items], horizontal=first.image_XxC is not None)
    # Several modules in one image panel draw the same image (the first one's): no path.
    where = "/".join(items[0][0]) if len(items) == 1 else ""
    ax.set_title(f"{where} ({first.title})" if where and first.title else where or first.title,
                 fontsize=9)
    if ax.get_legend_handles_labels()[0]:  # beside the axes (below an image: its colour bar)
      ax.legend(fontsize=7, loc="upper left", frameon=False,
                bbox_to_anchor=(0.0, -0.13) if image else (1.02, 1.0), borderaxespad=0.0)
  fig.suptitle(axes_panels[0][0][1].figure_title
               + ("" if seed is None else f", seed {seed}"), fontsize=10)
  return save_png(fig, path)


def _draw_marks(ax, panels: Sequence[base.FigurePanel], horizontal: bool) -> None:
  """The panels' marks: dotted vertical lines, or dashed horizontal ones on an image."""
  drawn: set[tuple[str, float]] = set()
  for panel in panels:
    for label, values in panel.marks.items():
      for value in values:
        if (label, value) in drawn:
          continue
        first = not any(l == label for l, _ in drawn)
        drawn.add((label, value))
        if horizontal:
          ax.axhline(value, color="black", linestyle="--", linewidth=0.9,
                     label=label if first else None)
        else:
          ax.axvline(value, color="gray", linestyle=":", linewidth=0.7,
                     label=label if first else None)


def new_figure(width: float, height: float) -> figure_lib.Figure:
  """A figure on an Agg canvas."""
  # Imported here, not at the top: matplotlib takes ~0.6 s to import, and every
  # train.py and eval.py process imports this module (through `report`) whether or
  # not it draws.
  # pylint: disable=g-import-not-at-top
  from matplotlib import figure as figure_lib
  from matplotlib.backends import backend_agg
  # pylint: enable=g-import-not-at-top
  fig = figure_lib.Figure(figsize=(width, height), layout="constrained")
  backend_agg.FigureCanvasAgg(fig)
  return fig


def save_png(fig: figure_lib.Figure, path: str) -> str:
  """Writes the figure as PNG, creating its folder."""
  os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
  fig.savefig(path, dpi=110, bbox_inches="tight", format="png")
  return path
