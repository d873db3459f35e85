"""The language-model figures: bits per byte against eval context, loss by position.

Both draw one line per run in stacked panels on shared axes (`figure_panels`): the
runs as trained, then each eval-time variant across schemes, then the variants of one
run beside a faint copy of it, so that a full lm_context table (ten schemes, each
length-scaled, and RoPE's scalings) stays readable. Each run's colour is its scheme's
(`palette`), each eval variant its own line style. The tables and the passkey heatmap
are `lm_report`'s.
"""

from __future__ import annotations

import math
from typing import Any, Sequence

import numpy as np

from relpos_jax.experiments import palette
from relpos_jax.experiments import plots

Record = dict[str, Any]


def figure_panels(runs: Sequence[str]) -> list[tuple[str, list[str], list[str]]]:
  """The LM figures' panels: `(title, runs drawn, runs drawn faint for reference)`.

  The runs as trained come first, one line per scheme. The eval-time variants
  (`<run>@<label>`) follow, one panel per label (length-scaled attention of every
  scheme, compared against the first panel's lines on the shared axes); labels whose
  runs all vary one trained run are that run's panel (RoPE's PI, NTK and YaRN), with
  the trained run drawn faint beside them.

  Args:
    runs: run names, in table order.

  Returns:
    The panels in order; one panel when no run is a variant.
  """
  plain = [r for r in runs if "@" not in r]
  by_label: dict[str, list[str]] = {}
  for run in runs:
    if "@" in run:
      by_label.setdefault(run.partition("@")[2], []).append(run)
  panels = [("as trained", plain, [])] if plain else []
  by_base: dict[str, list[str]] = {}
  for label, members in by_label.items():
    bases = {m.partition("@")[0] for m in members}
    if len(bases) == 1:
      by_base.setdefault(bases.pop(), []).extend(members)
    else:
      panels.append((f"eval-time @{label}", members, []))
  for base, members in by_base.items():
    labels = ", ".join("@" + m.partition("@")[2] for m in members)
    faint = [base] if base in plain else []
    note = f" (faint: {base} as trained)" if faint else ""
    panels.append((f"{base} at eval: {labels}{note}", members, faint))
  return panels


def _panel_figure(count: int):
  """A figure of `count` stacked axes sharing x and y; (figure, axes)."""
  fig = plots.new_figure(7.4, 0.6 + 2.9 * count)
  axes = fig.subplots(count, 1, sharex=True, sharey=True, squeeze=False)[:, 0]
  return fig, list(axes)


def _emphasis(run: str, faint: Sequence[str]) -> dict[str, Any]:
  """A line's label and alpha: a faint reference run is marked "(as trained)"."""
  return {"alpha": 0.35, "label": f"{run} (as trained)"} if run in faint else {"label": run}


def _finish_panel(ax, title: str, runs: Sequence[str], train_lengths: set[int]) -> None:
  """The training contexts dotted, the panel's title, its legend beside the data."""
  for length in train_lengths:
    ax.axvline(length, color="gray", linestyle=":", linewidth=1)
  ax.set_title(title, loc="left", fontsize=9)
  if runs:
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))


def bpb_vs_context(summary: Sequence[Record], train_lengths: Sequence[int], path: str) -> str:
  """Bits per byte against eval context (log-2 axis), one line per run (non-overlapping),
  in the panels of `figure_panels`.

  Args:
    summary: `lm_report.summary_rows` of the records (one per run, context and mode).
    train_lengths: the runs' training contexts L (a dotted line each).
    path: the PNG to write.

  Returns:
    `path`.
  """
  rows = [r for r in summary if r["mode"] == "nonoverlapping"]
  drawn = [run for run in dict.fromkeys(r["run"] for r in rows)
           if any(r["run"] == run and r["num_seeds"] for r in rows)]
  panels = figure_panels(drawn) or [("", [], [])]
  fig, axes = _panel_figure(len(panels))
  contexts = sorted({r["context"] for r in rows})
  for ax, (title, runs, faint) in zip(axes, panels):
    for run in [*faint, *runs]:
      mine = [r for r in rows if r["run"] == run and r["num_seeds"]]
      x = [r["context"] for r in mine]
      y = np.array([r["bits_per_byte"] for r in mine])
      style = _style(run, mine[0]["scheme"], rows)
      ax.plot(x, y, **{"marker": "o", **style, **_emphasis(run, faint)})
      lo, hi = (np.array([r[k] for r in mine]) for k in ("ci95_low", "ci95_high"))
      if run not in faint and (hi > lo).any():
        ax.fill_between(x, lo, hi, alpha=0.15, color=style.get("color"))
    _finish_panel(ax, title, runs, set(train_lengths))
    ax.set_xscale("log", base=2)
    ax.set_ylabel("bits per byte (test)")
  ax.set_xticks(contexts, [str(c) for c in contexts])
  ax.minorticks_off()
  ax.set_xlabel("eval context (bytes; dotted: training context)")
  fig.suptitle("Bits per byte against eval context", x=0.02, ha="left")
  return plots.save_png(fig, path)


def loss_vs_position(records: Sequence[Record], path: str) -> str:
  """Mean loss (bits) at each position of the longest non-overlapping window, one line per
  run, in the panels of `figure_panels`."""
  usable = [r for r in records if r["mode"] == "nonoverlapping" and r.get("position_loss")]
  longest = max((int(r["context"]) for r in usable), default=0)
  drawn = [run for run in dict.fromkeys(r["run"] for r in usable)
           if any(r["run"] == run and int(r["context"]) == longest for r in usable)]
  panels = figure_panels(drawn) or [("", [], [])]
  fig, axes = _panel_figure(len(panels))
  for ax, (title, runs, faint) in zip(axes, panels):
    for run in [*faint, *runs]:
      mine = [r for r in usable if r["run"] == run and int(r["context"]) == longest]
      curve = np.mean([r["position_loss"] for r in mine], axis=0) / math.log(2.0)
      style = {k: v for k, v in _style(run, mine[0].get("scheme"), usable).items()
               if k != "marker"}
      ax.plot(np.arange(len(curve)), _smooth(curve), linewidth=1, **style,
              **_emphasis(run, faint))
    _finish_panel(ax, title, runs, {r["train_length"] for r in records})
    ax.set_ylabel("loss (bits), moving mean of 16")
  ax.set_xlabel(f"position within a window of {longest} bytes (dotted: training context)")
  fig.suptitle("Loss by position in the window", x=0.02, ha="left")
  return plots.save_png(fig, path)


def _style(run: str, scheme: str | None, rows: Sequence[Record]) -> dict[str, Any]:
  """A run's plot keywords: its scheme's colour (`palette`), each eval variant its own style.

  The variants (`@label`) of the figure's runs are numbered in order of appearance
  (the plain run is variant 0); a scheme the registry does not know draws in
  matplotlib's own colours.
  """
  arms = palette.arm_indices([r["run"].partition("@")[2] for r in rows])
  try:
    style = palette.arm_style(scheme, arms[run.partition("@")[2]])
  except ValueError:
    return {}
  return {"color": style.color, "linestyle": style.linestyle, "marker": style.marker}


def _smooth(curve: np.ndarray, width: int = 16) -> np.ndarray:
  """Moving mean over up to `width` positions (shorter at the start)."""
  cumulative = np.concatenate([[0.0], np.cumsum(curve)])
  idx = np.arange(1, len(curve) + 1)
  lo = np.maximum(0, idx - width)
  return (cumulative[idx] - cumulative[lo]) / (idx - lo)
