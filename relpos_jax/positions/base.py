"""The interface every positional scheme implements.

A scheme is a thin Flax (Linen) module that holds its parameters (if any) in
`setup()` and exposes up to four hooks. Each hook defaults to a no-op, so a scheme
overrides only what it needs:

| hook          | shapes                                                    |
|---------------|-----------------------------------------------------------|
| `embed`       | `(x_BxLxD, pos_BxL) -> x_BxLxD`                            |
| `rotate`      | `(x_BxLxHxE, pos_BxL) -> x_BxLxHxE` (applied to q and k)   |
| `logit_bias`  | `(q_BxQxHxE, k_BxKxHxE, qpos_BxQ, kpos_BxK) -> bias_BxHxQxK or None` |
| `value_term`  | `(w_BxHxQxK, qpos_BxQ, kpos_BxK) -> out_BxQxHxE or None`   |

Shape letters, one legend for the whole package (tensor names end in `_` and their
dims joined by `x`, e.g. `q_BxQxHxE`): B batch, S source length, T target length,
L any sequence length, Q query length, K key length, M cache slots, H heads, E head
dim, D model dim, F MLP dim, V vocab, N replicas (seeds), R relative rows (Shaw's
table). A digit is a literal size (`Bx1xD`).

Attention computes `logits = q·k / sqrt(E) + logit_bias(q, k, qpos, kpos)`, a
masked softmax `w`, then `out = w·v + value_term(w, qpos, kpos)`.

Positions are explicit int32 arrays, never array indices: at decode step t the
query position is t, randomized positions are just other integers, and left
padding needs no special case.

Precision. Hooks receive activations in the model's compute dtype (`model.dtype`:
float32 or bfloat16) and keep their own parameters in float32. `logit_bias` and
`value_term` return float32 (attention adds them to its float32 logits and
float32-accumulated output), computed from float32 positions and parameters;
`embed` and `rotate` compute their angles and tables in float32 and return their
input's dtype.

Beyond the hooks, a scheme may describe itself for figures: `figures(params, ...)`
returns `FigurePanel`s (named curves or an image over relative distance or position,
e.g. T5's learned bias per head) that `plots.scheme_figures` draws, so no code outside
this package needs to know which scheme has which figure.

The model supplies the context fields (`num_heads`, `head_dim`, `d_model`,
`causal`); every other dataclass field of a scheme is a user config key, declared
once here with its default (see `positions.default_config`).
"""

from __future__ import annotations

import dataclasses
from typing import ClassVar, Mapping

import flax.linen as nn
import jax
import numpy as np

Array = jax.Array

EMBED_HOOKS = ("embed",)
ATTENTION_HOOKS = ("rotate", "logit_bias", "value_term")
CONTEXT_FIELDS = ("num_heads", "head_dim", "d_model", "causal")


@dataclasses.dataclass(frozen=True)
class FigurePanel:
  """One panel of a figure a scheme offers about itself (drawn by `plots.scheme_figures`).

  The panels of every scheme module of a model that share `figure` form one figure
  (`<figure>.png`); panels of several modules that share `title` too are drawn in one
  axes, each curve's label prefixed with its module's path.

  Attributes:
    figure: the figure's file stem, e.g. "t5_bias".
    figure_title: the figure's title.
    title: the panel's title.
    x_label: the x axis' label.
    y_label: the y axis' label.
    x_X: the x values, increasing.
    curves: label -> values over `x_X` (one line each).
    marks: label -> x values marked by vertical lines (e.g. bucket edges).
    shade: `(low, high)` on x shaded as "training distances" (None: nothing shaded).
    steps: draw the curves as steps (a value per bucket) rather than lines.
    image_XxC: instead of curves, an image whose rows are `x_X` (drawn top to bottom,
      `x_label` on the vertical axis, marks as horizontal lines), columns `y_label`.
  """

  figure: str
  figure_title: str
  title: str
  x_label: str
  y_label: str
  x_X: np.ndarray
  curves: Mapping[str, np.ndarray] = dataclasses.field(default_factory=dict)
  marks: Mapping[str, tuple[float, ...]] = dataclasses.field(default_factory=dict)
  shade: tuple[float, float] | None = None
  steps: bool = False
  image_XxC: np.ndarray | None = None


def training_span(max_train_distance: int | None, causal: bool) -> tuple[float, float] | None:
  """The relative distances seen in training, for `FigurePanel.shade`.

  Args:
    max_train_distance: the largest |key − query| seen in training (None: unknown).
    causal: keys only at or before the query.

  Returns:
    `(-d, 0)` if causal, else `(-d, d)`; None if `max_train_distance` is not given.
  """
  if not max_train_distance:
    return None
  return (-max_train_distance, 0 if causal else max_train_distance)


class PositionScheme(nn.Module):
  """Base class: every hook is the identity / None.

  Attributes:
    num_heads: attention heads H (supplied by the model).
    head_dim: per-head dimension K (supplied by the model).
    d_model: model width D (supplied by the model).
    causal: True for decoder self-attention (keys never lie in the future),
      False for bidirectional encoder self-attention (supplied by the model).
  """

  num_heads: int
  head_dim: int
  d_model: int
  causal: bool

  # Absolute schemes are "relative" = False; the model uses this in tests only.
  is_relative: ClassVar[bool] = False

  def embed(self, x_BxLxD: Array, pos_BxL: Array) -> Array:
    """Adds/merges position information into token embeddings (identity)."""
    del pos_BxL
    return x_BxLxD

  def rotate(self, x_BxLxHxE: Array, pos_BxL: Array) -> Array:
    """Rotates queries or keys by their positions (identity)."""
    del pos_BxL
    return x_BxLxHxE

  def logit_bias(self, q_BxQxHxE: Array, k_BxKxHxE: Array, qpos_BxQ: Array,
                 kpos_BxK: Array) -> Array | None:
    """Additive attention-logit term (None: no term)."""
    del q_BxQxHxE, k_BxKxHxE, qpos_BxQ, kpos_BxK
    return None

  def value_term(self, w_BxHxQxK: Array, qpos_BxQ: Array,
                 kpos_BxK: Array) -> Array | None:
    """Additive attention-output term from the weights (None: no term)."""
    del w_BxHxQxK, qpos_BxQ, kpos_BxK
    return None

  def shared_across_layers(self) -> bool:
    """Whether one instance serves every layer of a stack (T5) or each layer has its own."""
    return False

  def check_positions(self, max_position: int) -> None:
    """Raises ValueError if positions up to `max_position` (exclusive) cannot be encoded."""
    del max_position

  @nn.nowrap
  def figures(self, params: Mapping[str, Array], *,
              max_train_distance: int | None = None) -> list[FigurePanel]:
    """The panels this module's figures are made of (none by default).

    Called on a module found in a model (its settings filled in) with its own
    parameters; no-wrap, so it runs outside `apply` without a scope.

    Args:
      params: this module's parameters (`{}` if it has none), one replica's.
      max_train_distance: the largest relative distance (or position) seen in
        training, shaded or marked if given.

    Returns:
      The panels (empty: the scheme has no figure).
    """
    del params, max_train_distance
    return []

  @classmethod
  def implements(cls, hook: str) -> bool:
    """Whether this scheme overrides `hook` (the model skips hooks that are no-ops)."""
    return getattr(cls, hook) is not getattr(PositionScheme, hook)

  @classmethod
  def uses_attention(cls) -> bool:
    """Whether any attention hook is overridden."""
    return any(cls.implements(h) for h in ATTENTION_HOOKS)
