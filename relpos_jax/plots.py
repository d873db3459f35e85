"""Figures: accuracy and failure anatomy vs length, T5's learned bias, Shaw's key
table, the sinusoid heatmap.

Each function writes one PNG. Figures are drawn on matplotlib's Agg canvas
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
from typing import TYPE_CHECKING, Any, Mapping, Sequence

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from relpos_jax import tables
from relpos_jax.positions import base
from relpos_jax.positions import shaw
from relpos_jax.positions import sinusoidal
from relpos_jax.positions import t5

if TYPE_CHECKING:  # matplotlib itself is imported where a figure is drawn (`_figure`)
  from matplotlib import figure as figure_lib
  from matplotlib import lines as lines_lib

Record = tables.Record
Path = tuple[str, ...]

# The run legend's footnote when some run is marked (the tables' legend says the same).
UNCONVERGED_NOTE = (f"{tables.UNCONVERGED} some seed did not learn the task in\ndistribution: "
                    "not a measure of extrapolation")


# ------------------------------------------------------------ accuracy vs length

def accuracy_vs_length(records: Sequence[Record], path: str) -> str:
  """The extrapolation figure: four panels vs eval length, one colour per run.

  (a) exact match, (b) token accuracy: mean over seeds (±std shaded), dashed
  the oracle-length metric when the records have it; crosses at 0 mark lengths
  that are not representable. (c) failure anatomy: the shares of the failures
  that are pure stopping errors (solid), too short (dashed), too long
  (dotted). (d) the median position of the first wrong token among failures.
  The training lengths are shaded. NaN values (n/a, or no failures) break the
  curves.

  Args:
    records: records of one or more runs (see `tables`).
    path: the PNG to write (its folder is created).

  Returns:
    `path`.
  """
  groups = tables.by_run(records)
  has_oracle = any("oracle_exact_match" in r for r in records)
  fig = _figure(12.0, 7.5)
  (ax_exact, ax_token), (ax_anatomy, ax_first) = fig.subplots(2, 2, sharex=True)
  run_handles = []
  for i, (run, recs) in enumerate(groups.items()):
    color, marker = _run_style(i, len(groups))
    run_handles.append(_legend_line(color=color, marker=marker, markersize=3,
                                    label=_run_label(run, recs)))
    for ax, metric in ((ax_exact, "exact_match"), (ax_token, "token_accuracy")):
      _curve(ax, recs, metric, color, "-", band=True, marker=marker)
      if has_oracle:
        _curve(ax, recs, f"oracle_{metric}", color, "--")
    _mark_not_representable(ax_exact, recs, color)
    for metric, style in (("fail_pure_stop", "-"), ("fail_too_short", "--"),
                          ("fail_too_long", ":")):
      _curve(ax_anatomy, recs, metric, color, style, marker=marker)
    _curve(ax_first, recs, "first_wrong_median", color, "-", marker=marker)
  lengths = sorted({int(r["length"]) for r in records})
  ax_first.plot(lengths, lengths, color="gray", linewidth=0.8, label="y = eval length")
  for ax in (ax_exact, ax_token, ax_anatomy, ax_first):
    _shade_training(ax, records)
    ax.grid(alpha=0.3)
  for ax in (ax_exact, ax_token, ax_anatomy):
    ax.set_ylim(-0.03, 1.03)
  ax_exact.set_title("(a) exact match", fontsize=10)
  ax_token.set_title("(b) token accuracy", fontsize=10)
  ax_anatomy.set_title("(c) failure anatomy: share of the failures", fontsize=10)
  ax_first.set_title("(d) first wrong token among failures (median position)", fontsize=10)
  for ax in (ax_anatomy, ax_first):
    ax.set_xlabel("eval length")
  greedy = [_style("-", "greedy decoding")]
  if has_oracle:
    greedy.append(_style("--", "oracle length"))
  if any(r.get("error") for r in records):
    greedy.append(_legend_line(color="black", marker="x", linestyle="none",
                               label="not representable"))
  ax_exact.legend(handles=greedy + _training_handle(), fontsize=7, loc="best")
  ax_anatomy.legend(handles=[_style("-", "pure stopping error"), _style("--", "too short"),
                             _style(":", "too long")], fontsize=7, loc="best")
  ax_first.legend(fontsize=7, loc="upper left")
  if not all(tables.is_converged(recs) for recs in groups.values()):
    run_handles.append(_legend_line(color="none", label=UNCONVERGED_NOTE))
  fig.legend(handles=run_handles, fontsize=8, loc="outside right upper")
  # Left-aligned: centred over the whole figure, a long title (several tasks) ran
  # into the run legend, which starts at the figure's top right.
  fig.suptitle("Length extrapolation" + tables.task_suffix(records), fontsize=11,
               x=0.01, horizontalalignment="left")
  return _save(fig, path)


def _run_label(run: str, records: Sequence[Record]) -> str:
  """A run's legend entry: its name, `†` if unconverged, and its seeds (converged of all)."""
  if not tables.is_converged(records):
    converged, seeds = tables.convergence(records)
    return f"{tables.marked_run(run, records)} ({converged}/{seeds} seeds converged)"
  seeds = tables.num_seeds(records)
  return run if seeds == 1 else f"{run} ({seeds} seeds)"


_MARKERS = ("o", "s", "^", "D")


def _run_style(i: int, num_runs: int) -> tuple[Any, str]:
  """Run i's colour and marker: matplotlib's 10-colour cycle up to 10 runs, else tab20.

  Past 10 runs the default cycle would repeat a colour, so tab20 takes over: its 10
  saturated colours for runs 0-9, then their light twins; past 20 runs each further 20
  change the marker: up to 80 runs, no two look alike.
  """
  if num_runs <= 10:
    return f"C{i}", _MARKERS[0]
  from matplotlib import colormaps  # pylint: disable=g-import-not-at-top  (see `_figure`)
  k = i % 20
  return colormaps["tab20"](2 * k % 20 + k // 10), _MARKERS[(i // 20) % len(_MARKERS)]


def _curve(ax, records: Sequence[Record], metric: str, color: Any, style: str,
           band: bool = False, marker: str = "o") -> None:
  """One run's metric vs length (mean over seeds; ±std shaded if `band` and several seeds)."""
  if not any(metric in r for r in records):
    return
  lengths_L, mean_L, std_L, count_L = tables.length_stats(records, metric)
  ax.plot(lengths_L, mean_L, color=color, linestyle=style, marker=marker if style == "-" else None,
          markersize=3, linewidth=1.2)
  if band and (count_L > 1).any():
    ax.fill_between(lengths_L, mean_L - std_L, mean_L + std_L, color=color, alpha=0.15,
                    linewidth=0)


def _mark_not_representable(ax, records: Sequence[Record], color: Any) -> None:
  """Crosses at y = 0 on the lengths where every seed of the run is not representable."""
  lengths, _, _, na_SxL = tables.seed_matrix(records, "exact_match")
  na_lengths = [n for n, na in zip(lengths, na_SxL.all(axis=0)) if na]
  if na_lengths:
    ax.plot(na_lengths, [0.0] * len(na_lengths), linestyle="none", marker="x", color=color,
            markersize=7)


def _shade_training(ax, records: Sequence[Record]) -> None:
  """Shades each distinct training length range."""
  ranges = sorted({(int(r.get("min_train_length", 1)), int(r["max_train_length"]))
                   for r in records})
  for low, high in ranges:
    ax.axvspan(low, high, color="gray", alpha=0.12, linewidth=0)


def _training_handle() -> list[Any]:
  """The legend entry of the training-range shading."""
  from matplotlib import patches  # pylint: disable=g-import-not-at-top
  return [patches.Patch(color="gray", alpha=0.25, label="training lengths")]


def _style(linestyle: str, label: str) -> lines_lib.Line2D:
  """A black legend line explaining a line style."""
  return _legend_line(color="black", linestyle=linestyle, linewidth=1.2, label=label)


def _legend_line(**style: Any) -> lines_lib.Line2D:
  """A line with no data, for a legend entry."""
  from matplotlib import lines  # pylint: disable=g-import-not-at-top  (see `_figure`)
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


def _scheme_tables(model: nn.Module, params: Mapping[str, Any], cls: type,
                   name: str) -> list[tuple[Path, Any, np.ndarray]]:
  """`(path, module, its param `name`)` for every `cls` scheme module of the model that has it."""
  return [(p, m, np.asarray(_param_subtree(params, p)[name]))
          for p, m in scheme_instances(model, params)
          if isinstance(m, cls) and name in _param_subtree(params, p)]


def _shade_distances(ax, max_distance: int, causal: bool) -> None:
  """Shades the relative distances seen in training (keys at or before the query if causal)."""
  ax.axvspan(-max_distance, 0 if causal else max_distance, color="gray", alpha=0.12,
             label="training distances")


def _panel_title(path: Path, causal: bool) -> str:
  """`"decoder/position_0 (causal)"`."""
  return f"{'/'.join(path)} ({'causal' if causal else 'bidirectional'})"


def bucket_edges(rel_R: np.ndarray, *, bidirectional: bool, num_buckets: int,
                 max_distance: int) -> np.ndarray:
  """Where T5's bucket changes along a range of relative distances.

  Args:
    rel_R: increasing consecutive distances (key − query).
    bidirectional, num_buckets, max_distance: `t5.relative_position_bucket`'s.

  Returns:
    The edges, half-way between the two distances whose buckets differ.
  """
  bucket_R = np.asarray(t5.relative_position_bucket(
      jnp.asarray(rel_R), bidirectional=bidirectional, num_buckets=num_buckets,
      max_distance=max_distance))
  return rel_R[1:][bucket_R[1:] != bucket_R[:-1]] - 0.5


def learned_bias_curves(model: nn.Module, params: Mapping[str, Any], path: str, *,
                        max_relative: int | None = None, max_train_distance: int | None = None,
                        seed: int | None = None) -> str:
  """T5's learned bias b(key − query) per head vs relative distance, per bias table.

  One panel per T5 module (rows: the modules' parent, e.g. a stack; a table
  shared by the layers of a stack is one panel). A bidirectional table is drawn
  for distances of both signs, a causal one for keys at or before the query.
  Each bucket's bias is drawn at every distance that falls in it (steps), and
  the bucket edges are marked by dotted lines.

  Args:
    model: the run's model (any architecture).
    params: one replica's params.
    path: the PNG to write.
    max_relative: the largest |distance| drawn (default 1.5 × max_distance).
    max_train_distance: if given, shades the distances seen in training
      (|distance| <= max_train_distance; see `evaluate.train_distance`).
    seed: the replica's seed, for the title.

  Returns:
    `path`.

  Raises:
    ValueError: the model holds no T5 bias table.
  """
  found = _scheme_tables(model, params, t5.T5Bias, "rel_bias")
  if not found:
    raise ValueError("this model holds no T5 bias table (`rel_bias` of a T5Bias module); "
                     "learned_bias_curves needs model.position.name == 't5'")
  rows: dict[Path, list] = {}
  for item in found:
    rows.setdefault(item[0][:-1], []).append(item)
  columns = max(len(r) for r in rows.values())
  fig = _figure(4.4 * columns + 1.5, 3.0 * len(rows))
  first = found[0][1]
  for row, items in enumerate(rows.values()):
    for col, (module_path, module, bias_NxH) in enumerate(items):
      ax = fig.add_subplot(len(rows), columns, row * columns + col + 1)
      reach = max_relative or int(1.5 * module.max_distance)
      rel_R = np.arange(-reach, 1 if module.causal else reach + 1)
      bucket_R = np.asarray(t5.relative_position_bucket(
          jnp.asarray(rel_R), bidirectional=not module.causal,
          num_buckets=module.num_buckets, max_distance=module.max_distance))
      for h in range(bias_NxH.shape[1]):
        ax.plot(rel_R, bias_NxH[bucket_R, h], linewidth=1, drawstyle="steps-mid",
                label=f"head {h}")
      edges_E = bucket_edges(rel_R, bidirectional=not module.causal,
                             num_buckets=module.num_buckets, max_distance=module.max_distance)
      for i, edge in enumerate(edges_E):
        ax.axvline(edge, color="gray", linestyle=":", linewidth=0.6,
                   label="bucket edges" if i == 0 else None)
      if max_train_distance:
        _shade_distances(ax, max_train_distance, module.causal)
      ax.set_title(_panel_title(module_path, module.causal), fontsize=9)
      ax.set_xlabel("key − query position")
      ax.set_ylabel("bias")
      ax.grid(alpha=0.3)
      if row == 0 and col == len(items) - 1:
        ax.legend(fontsize=7, loc="center left", bbox_to_anchor=(1.01, 0.5))
  fig.suptitle(f"T5 relative bias (num_buckets={first.num_buckets}, "
               f"max_distance={first.max_distance})"
               + ("" if seed is None else f", seed {seed}"), fontsize=10)
  return _save(fig, path)


def shaw_key_norms(model: nn.Module, params: Mapping[str, Any], path: str, *,
                   max_train_distance: int | None = None, seed: int | None = None) -> str:
  """Norms of Shaw's key-table rows ‖a^K[clip(d, −k, k) + k]‖ vs relative distance d.

  One curve per Shaw module (one per layer), a panel for the bidirectional
  modules (encoder) and one for the causal ones (keys at or before the query).
  Distances are drawn to 2k (at least k + 4), so the flat continuation past the
  clipping distance shows; ±k is marked.

  Args:
    model: the run's model (any architecture).
    params: one replica's params.
    path: the PNG to write.
    max_train_distance: if given, shades the distances seen in training
      (|d| <= max_train_distance).
    seed: the replica's seed, for the title.

  Returns:
    `path`.

  Raises:
    ValueError: the model holds no Shaw key table.
  """
  found = _scheme_tables(model, params, shaw.Shaw, "key_table")
  if not found:
    raise ValueError("this model holds no Shaw key table (`key_table` of a Shaw module with "
                     "use_keys); shaw_key_norms needs model.position.name == 'shaw'")
  panels = {causal: [f for f in found if f[1].causal == causal] for causal in (False, True)}
  panels = {causal: items for causal, items in panels.items() if items}
  fig = _figure(5.5 * len(panels) + 1.5, 3.6)
  for col, (causal, items) in enumerate(panels.items()):
    ax = fig.add_subplot(1, len(panels), col + 1)
    clips = sorted({m.max_relative_position for _, m, _ in items})
    reach = max(2 * clips[-1], clips[-1] + 4)
    rel_R = np.arange(-reach, 1 if causal else reach + 1)
    for module_path, module, table_RxE in items:
      k = module.max_relative_position
      norms_R = np.linalg.norm(table_RxE, axis=-1)[np.clip(rel_R, -k, k) + k]
      ax.plot(rel_R, norms_R, linewidth=1.2, marker="o", markersize=2,
              label="/".join(module_path))
    for k in clips:
      for edge in ([-k] if causal else [-k, k]):
        ax.axvline(edge, color="black", linestyle="--", linewidth=0.8,
                   label=f"clipping distance k = {k}" if edge == -k else None)
    if max_train_distance:
      _shade_distances(ax, max_train_distance, causal)
    ax.set_title("causal (keys at or before the query)" if causal else "bidirectional",
                 fontsize=9)
    ax.set_xlabel("key − query position d")
    ax.set_ylabel("‖key-table row‖")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="best")
  fig.suptitle("Shaw key-table row norms vs relative distance"
               + ("" if seed is None else f", seed {seed}"), fontsize=10)
  return _save(fig, path)


def encoding_heatmap(path: str, *, num_positions: int = 128, dim: int = 64,
                     base: float = 10000.0, max_train_position: int | None = None) -> str:
  """The sinusoidal encoding as an image: positions × dimensions.

  Args:
    path: the PNG to write.
    num_positions: positions 0..num_positions-1 (rows).
    dim: encoding dimensions (columns; interleaved sin/cos).
    base: the sinusoid's base.
    max_train_position: if given, a line below the last position seen in training.

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
  if max_train_position is not None:
    ax.axhline(max_train_position + 0.5, color="black", linestyle="--", linewidth=1,
               label="last position seen in training")
    ax.legend(fontsize=7, loc="lower right")
  ax.set_xlabel("dimension (even: sin, odd: cos)")
  ax.set_ylabel("position")
  ax.set_title(f"sinusoidal encoding (dim={dim}, base={base:g})")
  return _save(fig, path)


def _figure(width: float, height: float) -> figure_lib.Figure:
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


def _save(fig: figure_lib.Figure, path: str) -> str:
  """Writes the figure as PNG, creating its folder."""
  os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
  fig.savefig(path, dpi=110, bbox_inches="tight", format="png")
  return path
