"""The scale table's figures: exact match against model size, and SCAN's curves per size.

`write_figures(records, run_infos, out_dir)` draws, from a table whose runs differ in
model size (configs/ablations/scale.py):

* `FIGURE_FILES["size"]`: one panel per task; per scheme, the pooled exact match
  of each run (mean over seeds with its 95% interval, `main_table.cell`: column
  `pooled (L, 2L]`, for SCAN `pooled test split`) against the run's parameter
  count (log axis), the runs of one scheme, training budget and head dim joined by
  a line; a longer budget or another head dim (the heads control) is its own line
  style and marker (`palette.arm_style`);
* `FIGURE_FILES["scan"]`: SCAN's exact match per test length, one panel per
  (d_model, budget), one line per scheme (mean over seeds, min–max band).

The parameter count is Kaplan et al. 2020's N: the parameters that do not grow
with the vocabulary (`non_embedding_parameters`), so a size sits at one x on
every task. A run missing from the records is simply absent from its panel; a
run with a seed below its validation threshold (†) is drawn with a hollow
marker, since its numbers measure the budget, not the scheme.
"""

from __future__ import annotations

import functools
import json
import os
from typing import Any, Mapping, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from relpos_jax import architectures
from relpos_jax.experiments import main_table
from relpos_jax.experiments import plots
from relpos_jax.experiments import palette
from relpos_jax.experiments import tables

Record = tables.Record
FIGURE_FILES = {"size": "exact_match_vs_size.png", "scan": "scan_exact_match_by_size.png"}
_VOCAB = 16  # any vocabulary size: the count is taken at it and at _VOCAB + 1
_DODGE = 1.035  # sideways shift factor between the lines of one size (log x axis)


def non_embedding_parameters(model_config: Mapping[str, Any]) -> int:
  """Parameters of one replica that do not grow with the vocabulary, measured.

  A model's parameter count is linear in the vocabulary size V (the token
  embedding, tied or not with the output layer, and any output bias), P(V) =
  N + b·V, so N = P(V) − V·(P(V + 1) − P(V)) with both counts taken from the
  initialized model's shapes (`jax.eval_shape`: nothing is computed). N is the
  count Kaplan et al. 2020 ("Scaling Laws for Neural Language Models") scale by;
  it includes the positional scheme's own parameters (T5's bucket table, FIRE's MLP).

  Args:
    model_config: a run's `model` section (ConfigDict or its JSON data).

  Returns:
    N.
  """
  data = model_config.to_dict() if hasattr(model_config, "to_dict") else dict(model_config)
  return _non_embedding_parameters(json.dumps(data, sort_keys=True))


@functools.lru_cache(maxsize=None)
def _non_embedding_parameters(model_json: str) -> int:
  """`non_embedding_parameters` of a model section given as sorted JSON (cached)."""
  config = json.loads(model_json)
  count = lambda v: _parameters(config, v)
  return count(_VOCAB) - _VOCAB * (count(_VOCAB + 1) - count(_VOCAB))


def _parameters(config: Mapping[str, Any], vocab_size: int) -> int:
  """Parameter count of one replica of the model at `vocab_size`."""
  model = architectures.make_model(config, vocab_size=vocab_size)
  tokens_1x2 = jnp.ones((1, 2), jnp.int32)
  shapes = jax.eval_shape(model.init, jax.random.PRNGKey(0), tokens_1x2, tokens_1x2)["params"]
  return int(sum(np.prod(leaf.shape) for leaf in jax.tree_util.tree_leaves(shapes)))


def pooled_column(records: Sequence[Record]) -> str:
  """The main table's pooled column a run is compared by: SCAN's test split, else (L, 2L]."""
  return main_table.POOLED_TEST if main_table.is_scan(records) else main_table.POOLED_2X


def size_points(records: Sequence[Record], run_infos: Mapping[str, Mapping[str, Any]]
                ) -> dict[str, dict[tuple[str, int, int], list[dict[str, Any]]]]:
  """The points of the size figure: per task, per (scheme, training steps, head dim), by size.

  Args:
    records: the table's records.
    run_infos: run name -> its `runs/<run>.json` (the config gives size and steps).

  Returns:
    task -> (scheme, num_steps, head_dim) -> points sorted by parameter count, each
    `{"run", "d_model", "parameters", "interval" (main_table.cell; None if
    nothing to pool), "converged"}`. Runs without a run info (no config) and
    eval-time variants (`<run>@...`) are left out.
  """
  points: dict[str, dict[tuple[str, int, int], list[dict[str, Any]]]] = {}
  for run, recs in tables.by_run(records).items():
    info = run_infos.get(run)
    if info is None or "@" in run:
      continue
    config = info["config"]
    L = int(recs[0]["max_train_length"])
    lengths = sorted({int(r["length"]) for r in recs})
    ranges = main_table.pooled_ranges(lengths, L, main_table.is_scan(recs))
    key = (str(recs[0]["scheme"]), int(config["num_steps"]), int(config["model"]["head_dim"]))
    points.setdefault(str(recs[0]["task"]), {}).setdefault(key, []).append({
        "run": run, "d_model": int(config["model"]["d_model"]),
        "parameters": non_embedding_parameters(config["model"]),
        "column": pooled_column(recs),
        "interval": main_table.cell(recs, ranges[pooled_column(recs)]),
        "converged": tables.is_converged(recs)})
  for lines in points.values():
    for line in lines.values():
      line.sort(key=lambda p: p["parameters"])
  return points


def write_figures(records: Sequence[Record], run_infos: Mapping[str, Mapping[str, Any]],
                  out_dir: str) -> dict[str, str]:
  """Draws the size figure and, where the table has SCAN runs, SCAN's curves per size.

  Args:
    records: the table's records (any subset of its runs).
    run_infos: run name -> its `runs/<run>.json`.
    out_dir: the table folder.

  Returns:
    `FIGURE_FILES`' keys -> the written paths (none without records).
  """
  points = size_points(records, run_infos)
  if not points:
    return {}
  paths = {"size": plots.save_png(size_figure(points),
                                  os.path.join(out_dir, FIGURE_FILES["size"]))}
  scan = [r for r in records if main_table.is_scan([r]) and r["run"] in run_infos
          and "@" not in r["run"]]
  if scan:
    paths["scan"] = plots.save_png(scan_figure(scan, run_infos),
                                   os.path.join(out_dir, FIGURE_FILES["scan"]))
  return paths


def _short_count(n: float) -> str:
  """A parameter count as a tick label: `198k`, `3.2M`."""
  return f"{n / 1e6:.1f}M" if n >= 1e6 else f"{n / 1e3:.0f}k" if n >= 1e3 else f"{n:.0f}"


def _arm_styles(points: Mapping[str, Mapping[tuple[str, int, int], Any]]
                ) -> dict[tuple[int, int], int]:
  """Each (steps, head dim)'s arm: 0 (solid) the main runs' (shortest budget, usual head dim)."""
  keys = [(steps, head_dim) for lines in points.values() for _, steps, head_dim in lines]
  # the usual head dim is the one most runs have (not most lines: a control is one line)
  head_dims = [head_dim for lines in points.values() for (_, _, head_dim), line in lines.items()
               for _ in line]
  main = (min(s for s, _ in keys), _usual(head_dims))
  return {k: i for i, k in enumerate([main] + sorted(set(keys) - {main}))}


def _usual(values: Sequence[int]) -> int:
  """The most common value (the smallest of a tie): the main runs' head dim."""
  return max(sorted(set(values)), key=list(values).count)


def _arm_label(arm: tuple[int, int], main: tuple[int, int]) -> str:
  """What sets an arm apart from the main one: `24,000 steps`, `head dim 16`."""
  parts = [f"{arm[0]:,} steps"] if arm[0] != main[0] else []
  return ", ".join(parts + ([f"head dim {arm[1]}"] if arm[1] != main[1] else []))


def size_figure(points: Mapping[str, Mapping[tuple[str, int, int], Sequence[Mapping]]]):
  """The size figure from `size_points`: a panel per task, a line per (scheme, budget, head dim).

  Each line's `gid` is `<scheme>@<steps>` (`<scheme>@<steps>@head_dim=<e>` off the most
  common head dim); each point is an error bar (its 95% interval),
  hollow where the run has an unconverged seed; a run without an interval is left out.
  The lines of one size are shifted slightly sideways so their bars do not overlap.

  Args:
    points: `size_points`' result.

  Returns:
    The matplotlib figure.
  """
  arms = _arm_styles(points)
  main_arm = next(iter(arms))
  main_head_dim = main_arm[1]
  keys = list(dict.fromkeys(k for lines in points.values() for k in lines))
  # Lines of one size side by side, not on top of each other: a small sideways shift
  # on the log axis (the ticks give the sizes; a size's runs are ~4x from the next).
  shift = {k: _DODGE ** (i - (len(keys) - 1) / 2) for i, k in enumerate(keys)}
  fig = plots.new_figure(4.2 * len(points) + 2.2, 3.6)
  axes = [fig.add_subplot(1, len(points), i + 1) for i in range(len(points))]
  for ax, (task, lines) in zip(axes, points.items()):
    for (scheme, steps, head_dim), line in lines.items():
      style = palette.arm_style(scheme, arms[(steps, head_dim)])
      drawn = [p for p in line if p["interval"] is not None]
      x = [p["parameters"] * shift[(scheme, steps, head_dim)] for p in drawn]
      y = [p["interval"].mean for p in drawn]
      ax.plot(x, y, color=style.color, linestyle=style.linestyle, linewidth=1.3,
              gid=f"{scheme}@{steps}"
              + (f"@head_dim={head_dim}" if head_dim != main_head_dim else ""))
      for p, x_p in zip(drawn, x):
        interval = p["interval"]
        ax.errorbar([x_p], [interval.mean],
                    yerr=[[interval.mean - interval.lo], [interval.hi - interval.mean]],
                    color=style.color, marker=style.marker, markersize=5, capsize=3,
                    linewidth=1.0, markerfacecolor=style.color if p["converged"] else "none")
    sizes = {}
    for line in lines.values():
      for p in line:
        sizes.setdefault(p["d_model"], []).append(p["parameters"])
    ticks = sorted((float(np.median(v)), d) for d, v in sizes.items())
    ax.set_xscale("log")
    ax.set_xticks([t for t, _ in ticks], [f"{_short_count(t)}\nd {d}" for t, d in ticks])
    ax.minorticks_off()
    ax.set_ylim(-0.03, 1.03)
    ax.grid(alpha=0.3)
    columns = sorted({p["column"] for line in lines.values() for p in line})
    ax.set_title(f"{task}: {', '.join(columns)}", fontsize=9)
    ax.set_xlabel("non-embedding parameters (d_model)", fontsize=8)
    ax.tick_params(labelsize=8)
  axes[0].set_ylabel("exact match", fontsize=8)
  handles = [plots.legend_line(color=palette.scheme_color(s), linewidth=1.6, label=s)
             for s in dict.fromkeys(s for lines in points.values() for s, *_ in lines)]
  if len(arms) > 1:
    handles += [plots.legend_line(color="gray", linestyle=style.linestyle,
                                   marker=style.marker,
                                   label=_arm_label(arm, main_arm) if i else "main runs")
                for arm, i in arms.items() for style in [palette.arm_style("none", i)]]
  if any(not p["converged"] for lines in points.values() for line in lines.values()
         for p in line):
    handles.append(plots.legend_line(color="gray", marker="o", markerfacecolor="none",
                                      linestyle="none", label=f"hollow: {tables.UNCONVERGED}, "
                                      "some seed below its validation threshold"))
  axes[-1].legend(handles=handles, fontsize=7.5, loc="upper left", bbox_to_anchor=(1.03, 1.0),
                  borderaxespad=0.0, frameon=False)
  fig.suptitle("Pooled exact match against model size (mean over seeds, 95% interval: "
               "seeds and eval examples; a size's points spread sideways to stay apart)",
               fontsize=10, x=0.01, horizontalalignment="left")
  return fig


def scan_figure(records: Sequence[Record], run_infos: Mapping[str, Mapping[str, Any]]):
  """SCAN's exact match per test length: a panel per (budget, d_model, head dim), a line per scheme.

  Args:
    records: SCAN records of runs with a run info.
    run_infos: run name -> its `runs/<run>.json`.

  Returns:
    The matplotlib figure (each line's `gid` is its run).
  """
  panels: dict[tuple[int, int, int], dict[str, list[Record]]] = {}
  for run, recs in tables.by_run(records).items():
    model = run_infos[run]["config"]["model"]
    key = (int(run_infos[run]["config"]["num_steps"]), int(model["d_model"]),
           int(model["head_dim"]))
    panels.setdefault(key, {})[run] = recs
  order = sorted(panels)  # the shortest budget's sizes first, then longer budgets
  usual_head_dim = _usual([key[2] for key, runs in panels.items() for _ in runs])
  fig = plots.new_figure(3.4 * len(order) + 1.8, 3.2)
  axes = [fig.add_subplot(1, len(order), i + 1) for i in range(len(order))]
  schemes: dict[str, None] = {}
  for ax, (steps, d_model, head_dim) in zip(axes, order):
    for run, recs in panels[(steps, d_model, head_dim)].items():
      scheme = str(recs[0]["scheme"])
      schemes[scheme] = None
      lengths, _, values_SxL, _ = tables.seed_matrix(recs, "exact_match")
      faint = 1.0 if tables.is_converged(recs) else 0.4
      with np.errstate(all="ignore"):
        mean_L = np.nanmean(values_SxL, axis=0)
      color = palette.scheme_color(scheme)
      ax.plot(lengths, mean_L, color=color, marker="o", markersize=2.5, linewidth=1.3,
              alpha=faint, gid=run)
      if len(values_SxL) > 1:
        ax.fill_between(lengths, np.nanmin(values_SxL, axis=0), np.nanmax(values_SxL, axis=0),
                        color=color, alpha=0.13 * faint, linewidth=0)
    ax.set_title(f"d_model {d_model}, {steps:,} steps"
                 + (f", head dim {head_dim}" if head_dim != usual_head_dim else ""), fontsize=9)
    ax.set_ylim(-0.03, 1.03)
    ax.grid(alpha=0.3)
    ax.xaxis.get_major_locator().set_params(integer=True)  # lengths are whole actions
    ax.set_xlabel("target length (actions)", fontsize=8)
    ax.tick_params(labelsize=8)
  axes[0].set_ylabel("exact match", fontsize=8)
  handles = [plots.legend_line(color=palette.scheme_color(s), linewidth=1.6, label=s)
             for s in schemes]
  axes[-1].legend(handles=handles, fontsize=7.5, loc="upper left", bbox_to_anchor=(1.03, 1.0),
                  borderaxespad=0.0, frameon=False)
  splits = sorted({str(run_infos[r]["config"]["data"].get("scan_split", ""))
                   for r in tables.by_run(records)})
  fig.suptitle(f"SCAN {', '.join(splits)}: exact match per test length (mean over seeds, band: "
               "min–max over seeds; faint: †)", fontsize=10, x=0.01, horizontalalignment="left")
  return fig
