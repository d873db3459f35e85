"""One look per scheme in every figure: its colour, and per variant a style and shade.

A scheme's colour is fixed by its place in the registry (`positions.SCHEMES`): the
i-th scheme gets tab10's i-th colour, so a scheme has the same colour in every
figure of the project, whichever runs a figure holds. A run's *arm* is what its name
says beyond its scheme and task (`rope+randomized+copy@random_positions` → arm
`randomized@random_positions`; a Shaw-clipping run `max_relative_position=4` → that;
`arms_and_names`);
the arms of a table are numbered in order of first appearance, and arm i draws the
scheme's colour with its own line style, marker and shade (`arm_style`), so the
variants of one scheme in one panel stay apart and keep their look across its tasks.
"""

from __future__ import annotations

import dataclasses
from typing import Mapping, Sequence

from relpos_jax import positions

# matplotlib's tab10 (its default colour cycle), as RGB: importing matplotlib here
# would cost every importer ~0.6 s (see `plots.new_figure`).
_TAB10 = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd",
          "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf")
# Past ten schemes: tab20b's darker colours, unlike any of tab10.
_MORE = ("#393b79", "#637939", "#8c6d31", "#843c39", "#7b4173",
         "#5254a3", "#8ca252", "#bd9e39", "#ad494a", "#a55194")
_LINESTYLES = ("-", "--", ":", "-.")
_MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*")
# Blend towards white (> 0) or black (< 0); one more shade per four arms.
_SHADES = (0.0, -0.35, 0.35, -0.6)


@dataclasses.dataclass(frozen=True)
class Style:
  """How one run is drawn."""

  color: tuple[float, float, float]
  linestyle: str
  marker: str


def scheme_color(scheme: str) -> tuple[float, float, float]:
  """The scheme's colour (RGB in [0, 1]), by its place in `positions.SCHEMES`.

  Args:
    scheme: a registered scheme name.

  Returns:
    The colour.

  Raises:
    ValueError: the name is not registered.
  """
  names = list(positions.SCHEMES)
  if scheme not in names:
    raise ValueError(f"no colour for unknown scheme {scheme!r}; registered: {', '.join(names)}")
  palette = _TAB10 + _MORE
  return _rgb(palette[names.index(scheme) % len(palette)])


def arm_style(scheme: str, arm_index: int) -> Style:
  """Arm `arm_index`'s look in the scheme's colour: arm 0 solid with circles, the plain shade.

  Args:
    scheme: a registered scheme name.
    arm_index: the arm's number in its table (0, 1, ...).

  Returns:
    The style: no two of the first 16 arms share line style and shade.
  """
  shade = _SHADES[(arm_index // len(_LINESTYLES)) % len(_SHADES)]
  base = scheme_color(scheme)
  target = 1.0 if shade > 0 else 0.0
  color = tuple(c + abs(shade) * (target - c) for c in base)
  return Style(color, _LINESTYLES[arm_index % len(_LINESTYLES)],
               _MARKERS[arm_index % len(_MARKERS)])


def arms_and_names(runs: Mapping[str, tuple[str, str]]) -> dict[str, tuple[str, str]]:
  """Each run's arm and short name, from the `+`-separated tokens of the run names.

  The tokens every run of a task shares name the task (`copy`, `scan_length`; the
  task itself when it has one run) and are dropped from both; the arm also drops the
  run's scheme. An `@variant` suffix is kept.

  Args:
    runs: run name -> `(scheme, task)`, e.g. `rope+randomized+copy@random_positions`
      -> `("rope", "copy")`.

  Returns:
    run name -> `(arm, short name)`, e.g. `("randomized@random_positions",
    "rope+randomized@random_positions")`; `("", "rope")` for the plain `rope+copy`.
  """
  tokens = {run: run.partition("@")[0].split("+") for run in runs}
  by_task: dict[str, list[str]] = {}
  for run, (_, task) in runs.items():
    by_task.setdefault(task, []).append(run)
  common = {task: ({task} if len(members) == 1
                   else set.intersection(*(set(tokens[r]) for r in members)) | {task})
            for task, members in by_task.items()}
  named = {}
  for run, (scheme, task) in runs.items():
    variant = run[len(run.partition("@")[0]):]
    kept = [t for t in tokens[run] if t not in common[task] or t == scheme]
    arm = "+".join(t for t in kept if t != scheme) + variant
    named[run] = (arm, "+".join(kept) + variant if kept else run)
  return named


def arm_indices(arms: Sequence[str]) -> dict[str, int]:
  """Each distinct arm's number, in order of first appearance."""
  numbers: dict[str, int] = {}
  for a in arms:
    numbers.setdefault(a, len(numbers))
  return numbers


def _rgb(hex_color: str) -> tuple[float, float, float]:
  """`"#rrggbb"` as floats in [0, 1]."""
  return tuple(int(hex_color[i:i + 2], 16) / 255 for i in (1, 3, 5))
