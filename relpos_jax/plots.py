"""Figures: accuracy vs length, T5's learned bias curves, the sinusoid heatmap.

Each function writes one PNG. Figures are drawn on matplotlib's Agg canvas
directly (no `pyplot`), so importing this module never changes a notebook's or
a GUI's backend and nothing needs a display.
"""

from __future__ import annotations

import os
from typing import Any, Mapping, Sequence

import jax.numpy as jnp
from matplotlib.backends import backend_agg
from matplotlib import figure as figure_lib
import numpy as np

from relpos_jax import tables
from relpos_jax.positions import sinusoidal
from relpos_jax.positions import t5

Record = dict[str, Any]


def accuracy_vs_length(records: Sequence[Record], path: str, *,
                       metric: str = "exact_match") -> str:
  """One curve per run: the metric's mean over seeds vs eval length, ±std shaded.

  A dashed vertical line marks the longest training length (one per distinct
  value when runs differ). n/a lengths (NaN) break the curve.

  Args:
    records: records of one or more runs (see `tables`).
    path: the PNG to write (its folder is created).
    metric: the metric on the y axis.

  Returns:
    `path`.
  """
  fig = _figure(7.0, 4.2)
  ax = fig.add_subplot()
  groups = tables.by_run(records)
  for run, recs in groups.items():
    lengths_L, mean_L, std_L, count_L = tables.length_stats(recs, metric)
    seeds = len({r["seed"] for r in recs})
    label = run if seeds == 1 else f"{run} ({seeds} seeds)"
    (line,) = ax.plot(lengths_L, mean_L, marker="o", markersize=3, label=label)
    if (count_L > 1).any():
      ax.fill_between(lengths_L, mean_L - std_L, mean_L + std_L, color=line.get_color(),
                      alpha=0.2, linewidth=0)
  max_trains = sorted({int(r["max_train_length"]) for r in records})
  for i, max_train in enumerate(max_trains):
    ax.axvline(max_train, color="gray", linestyle="--", linewidth=1,
               label="longest training length" if i == 0 else None)
  ax.set_xlabel("eval length")
  ax.set_ylabel(metric.replace("_", " "))
  if metric != "mean_first_error":
    ax.set_ylim(-0.03, 1.03)
  tasks = sorted({str(r.get("task", "")) for r in records} - {""})
  ax.set_title(f"{metric.replace('_', ' ')} vs length" + (f" ({', '.join(tasks)})" if tasks else ""))
  ax.grid(alpha=0.3)
  ax.legend(fontsize=7, loc="center left", bbox_to_anchor=(1.01, 0.5))
  return _save(fig, path)


def t5_bias_tables(params: Mapping[str, Any]) -> dict[str, dict[str, np.ndarray]]:
  """The T5 `rel_bias` tables of one replica's parameters.

  Args:
    params: one replica's params (no leading seed axis).

  Returns:
    `{stack: {module name: bias_NxH}}` for the encoder and decoder stacks that
    hold one (`position` when shared by the stack's layers, `position_<i>` per
    layer otherwise).
  """
  out: dict[str, dict[str, np.ndarray]] = {}
  for stack in ("encoder", "decoder"):
    found = {name: np.asarray(module["rel_bias"])
             for name, module in params.get(stack, {}).items()
             if name.startswith("position") and isinstance(module, Mapping)
             and "rel_bias" in module}
    if found:
      out[stack] = dict(sorted(found.items(), key=lambda kv: _layer_index(kv[0])))
  return out


def learned_bias_curves(params: Mapping[str, Any], config, path: str, *,
                        max_relative: int | None = None, max_train_length: int | None = None,
                        seed: int | None = None) -> str:
  """T5's learned bias per head vs relative distance (key − query), per stack.

  The encoder is bidirectional (distances of both signs); the decoder is causal
  (keys at or before the query only). Each bucket's bias is drawn at every
  distance that falls in it, so the log-spaced buckets show as steps.

  Args:
    params: one replica's params.
    config: the run's config (reads `model.position.num_buckets`, `max_distance`).
    path: the PNG to write.
    max_relative: the largest |distance| drawn (default 1.5 × max_distance).
    max_train_length: if given, shades the distances seen in training
      (|distance| < max_train_length).
    seed: the replica's seed, for the title.

  Returns:
    `path`.

  Raises:
    ValueError: the params hold no T5 bias table.
  """
  tables_ = t5_bias_tables(params)
  if not tables_:
    raise ValueError("these params hold no T5 `rel_bias` table (encoder/decoder position*); "
                     f"the run's scheme is {config.model.position.name!r}")
  position = config.model.position
  max_relative = max_relative or int(1.5 * position.max_distance)
  columns = max(len(t) for t in tables_.values())
  fig = _figure(4.2 * columns + 1.5, 3.0 * len(tables_))
  for row, (stack, by_module) in enumerate(tables_.items()):
    causal = stack == "decoder"
    rel_R = np.arange(-max_relative, 1 if causal else max_relative + 1)
    bucket_R = np.asarray(t5.relative_position_bucket(
        jnp.asarray(rel_R), bidirectional=not causal, num_buckets=position.num_buckets,
        max_distance=position.max_distance))
    for col, (name, bias_NxH) in enumerate(by_module.items()):
      ax = fig.add_subplot(len(tables_), columns, row * columns + col + 1)
      for h in range(bias_NxH.shape[1]):
        ax.plot(rel_R, bias_NxH[bucket_R, h], linewidth=1, label=f"head {h}")
      if max_train_length:
        ax.axvspan(-(max_train_length - 1), 0 if causal else max_train_length - 1,
                   color="gray", alpha=0.12, label="training distances")
      shared = name == "position"
      ax.set_title(f"{stack} ({'all layers' if shared else name.replace('position_', 'layer ')})"
                   f"{'' if causal else ', bidirectional'}", fontsize=9)
      ax.set_xlabel("key − query position")
      ax.set_ylabel("bias")
      ax.grid(alpha=0.3)
      if row == 0 and col == columns - 1:
        ax.legend(fontsize=7, loc="center left", bbox_to_anchor=(1.01, 0.5))
  fig.suptitle(f"T5 relative bias (num_buckets={position.num_buckets}, "
               f"max_distance={position.max_distance})"
               + ("" if seed is None else f", seed {seed}"), fontsize=10)
  return _save(fig, path)


def encoding_heatmap(path: str, *, num_positions: int = 128, dim: int = 64,
                     base: float = 10000.0, max_train_length: int | None = None) -> str:
  """The sinusoidal encoding as an image: positions × dimensions.

  Args:
    path: the PNG to write.
    num_positions: positions 0..num_positions-1 (rows).
    dim: encoding dimensions (columns; interleaved sin/cos).
    base: the sinusoid's base.
    max_train_length: if given, a line below the last position seen in training.

  Returns:
    `path`.
  """
  pos_P = jnp.arange(num_positions)
  enc_PxD = np.asarray(sinusoidal.sinusoidal_encoding(pos_P, dim, base))
  fig = _figure(6.0, 4.5)
  ax = fig.add_subplot()
  image = ax.imshow(enc_PxD, aspect="auto", cmap="RdBu_r", vmin=-1, vmax=1,
                    interpolation="nearest")
  fig.colorbar(image, ax=ax)
  if max_train_length:
    ax.axhline(max_train_length - 0.5, color="black", linestyle="--", linewidth=1,
               label="longest training length")
    ax.legend(fontsize=7, loc="lower right")
  ax.set_xlabel("dimension (even: sin, odd: cos)")
  ax.set_ylabel("position")
  ax.set_title(f"sinusoidal encoding (dim={dim}, base={base:g})")
  return _save(fig, path)


def _figure(width: float, height: float) -> figure_lib.Figure:
  """A figure on an Agg canvas."""
  fig = figure_lib.Figure(figsize=(width, height), layout="constrained")
  backend_agg.FigureCanvasAgg(fig)
  return fig


def _save(fig: figure_lib.Figure, path: str) -> str:
  """Writes the figure as PNG, creating its folder."""
  os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
  fig.savefig(path, dpi=110, bbox_inches="tight", format="png")
  return path


def _layer_index(name: str) -> int:
  """`position_<i>` -> i; the shared `position` first."""
  tail = name.rpartition("_")[2]
  return int(tail) if tail.isdigit() else -1
