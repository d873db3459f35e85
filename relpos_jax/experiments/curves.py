"""A run's training curve, read from its metrics.jsonl and kept in its `runs/<run>.json`.

`store.write_run` adds `training_curve` to a stored run's info: one entry per
replica seed (ascending), each the seed's logged training loss and teacher-forced
token accuracy by step, and its validation exact match at each periodic eval
(`eval_every`) where the run logged one:

    {"seed": 0, "step": [100, 200, ...], "loss": [...], "token_accuracy": [...],
     "valid_step": [6000], "valid_exact_match": [1.0]}

A key the log lacks is left out (a language model logs no validation exact match).
Curves stay small: at most `MAX_POINTS` points per seed and series (evenly spaced
over the logged lines, the first and last always kept) and `DIGITS` significant
digits. The training metrics of one logged line are the mean over the steps since
the previous line (`train_lib`), so a point is a window's mean, not one step's value.
Records stored before curves existed have none; readers treat it as absent.
"""

from __future__ import annotations

import math
from typing import Any, Mapping, Sequence

import numpy as np

from relpos_jax import metric_writers

Curve = list[dict[str, Any]]
MAX_POINTS = 200
DIGITS = 5
TRAIN_KEYS = ("loss", "token_accuracy")
EVAL_KEYS = ("valid_exact_match",)
EVAL_STEP = "valid_step"


def subsample(n: int, max_points: int = MAX_POINTS) -> np.ndarray:
  """Indices of at most `max_points` of `n` evenly spaced items, the first and last included.

  Args:
    n: how many items there are.
    max_points: the most to keep (at least 2).

  Returns:
    Ascending indices into the items (all of them when `n <= max_points`).

  Raises:
    ValueError: `max_points` below 2 (the first and last could not both be kept).
  """
  if max_points < 2:
    raise ValueError(f"a curve keeps its first and last points: max_points must be >= 2, "
                     f"got {max_points}")
  if n <= max_points:
    return np.arange(n)
  return np.unique(np.round(np.linspace(0, n - 1, max_points)).astype(int))


def _rounded(value: Any) -> float | None:
  """`value` to `DIGITS` significant digits (None where it is not finite: JSON has no NaN)."""
  value = float(value)
  return float(f"{value:.{DIGITS}g}") if math.isfinite(value) else None


def _series(lines: Sequence[Mapping[str, Any]], keys: Sequence[str], step_key: str,
            max_points: int) -> dict[str, list]:
  """`{step_key: steps, key: values}` of the lines (the last line of a step wins), subsampled."""
  by_step = {int(line["step"]): line for line in lines}
  steps = sorted(by_step)
  keys = [k for k in keys if all(k in by_step[s] for s in steps)]
  if not steps or not keys:
    return {}
  kept = [steps[i] for i in subsample(len(steps), max_points)]
  return {step_key: kept, **{k: [_rounded(by_step[s][k]) for s in kept] for k in keys}}


def from_metrics(lines: Sequence[Mapping[str, Any]], max_points: int = MAX_POINTS
                 ) -> Curve | None:
  """The training curve of metrics.jsonl's records (module docstring).

  Args:
    lines: the records of a run's metrics.jsonl (`metric_writers.read_metrics`).
    max_points: the most points kept per seed and series.

  Returns:
    One entry per seed (ascending) that logged training loss or accuracy; None
    if none did.
  """
  by_seed: dict[int, dict[str, list]] = {}
  for line in lines:
    if line.get("kind") in ("train", "eval"):
      by_seed.setdefault(int(line["seed"]), {"train": [], "eval": []})[line["kind"]].append(line)
  curve = []
  for seed in sorted(by_seed):
    train = _series(by_seed[seed]["train"], TRAIN_KEYS, "step", max_points)
    if train:
      curve.append({"seed": seed, **train,
                    **_series(by_seed[seed]["eval"], EVAL_KEYS, EVAL_STEP, max_points)})
  return curve or None


def training_curve(workdir: str, max_points: int = MAX_POINTS) -> Curve | None:
  """The training curve of a workdir's metrics.jsonl (None without one, or without train lines)."""
  try:
    lines = metric_writers.read_metrics(workdir)
  except FileNotFoundError:
    return None
  return from_metrics(lines, max_points)


def merge(curves: Sequence[Curve | None]) -> Curve | None:
  """One run's curve from its seed parts' curves (`seed_parts.merge_parts`).

  Args:
    curves: each part's curve.

  Returns:
    Their seeds' entries together, by seed; None if some part has no curve
    (a partial curve would look like fewer seeds).

  Raises:
    ValueError: two parts hold the same seed.
  """
  if not curves or any(not c for c in curves):
    return None
  entries = sorted((e for c in curves for e in c), key=lambda e: e["seed"])
  seeds = [e["seed"] for e in entries]
  if len(set(seeds)) != len(seeds):
    raise ValueError(f"the parts' training curves repeat a seed ({seeds}): not one run's parts")
  return entries
