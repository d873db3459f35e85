"""T5 bucketed relative attention bias (Raffel et al. 2020, "Exploring the Limits of
Transfer Learning with a Unified Text-to-Text Transformer", JMLR, §2.1; the
bucketing is mesh-tensorflow's / HF transformers' `_relative_position_bucket`).

    score_ij = q_i · k_j / sqrt(E) + b[bucket(j - i), h]

One learned scalar per (bucket, head). Distances below `max_exact` get their own
bucket; larger ones share log-spaced buckets up to `max_distance`, beyond which
everything falls in the last bucket (which is why T5's bias can be evaluated at
any length). T5 itself has no `1/sqrt(E)` (it folds the scale into the
initialisation); this codebase scales `q·k` for every scheme and leaves the bias
unscaled. One table per stack (encoder, decoder) shared by all its layers, as in
T5; `share_across_layers=False` gives each layer its own.
"""

from __future__ import annotations

import math
from typing import Mapping

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from relpos_jax.positions import base

Array = jax.Array


def _check_buckets(bidirectional: bool, num_buckets: int, max_distance: int) -> None:
  """Raises ValueError for settings the bucketing formula cannot handle."""
  if num_buckets < 2:
    raise ValueError(f"T5 num_buckets must be >= 2 (config key model.position.num_buckets); "
                     f"got {num_buckets}.")
  half = num_buckets // 2 if bidirectional else num_buckets
  max_exact = half // 2
  if max_exact < 1:
    raise ValueError(f"T5 num_buckets={num_buckets} leaves no exact bucket "
                     f"(bidirectional halves them); use num_buckets >= 4 "
                     "(config key model.position.num_buckets).")
  if max_distance <= max_exact:
    raise ValueError(
        f"T5 max_distance={max_distance} must exceed max_exact={max_exact} "
        f"(= num_buckets{'/2' if bidirectional else ''}/2); raise config key "
        "model.position.max_distance.")


def relative_position_bucket(relative_position: Array, *, bidirectional: bool,
                             num_buckets: int = 32, max_distance: int = 128) -> Array:
  """T5's bucket of each relative position (key_pos - query_pos).

  Bidirectional: half the buckets for keys at or left of the query
  (`key <= query`), half (offset by num_buckets/2) for keys to its right.
  Unidirectional: every future key (rel > 0) goes to bucket 0. Within a half,
  `n = |rel|` (or `-min(rel, 0)`) below `max_exact = half // 2` is its own bucket;
  larger n goes to `max_exact + floor(log(n / max_exact) / log(max_distance /
  max_exact) * (half - max_exact))`, clamped to `half - 1`.

  Args:
    relative_position: int array, key position minus query position.
    bidirectional: encoder (True) or causal decoder (False).
    num_buckets: total buckets.
    max_distance: distance at which the last bucket starts.

  Returns:
    int32 array of the same shape, values in `[0, num_buckets)`.
  """
  _check_buckets(bidirectional, num_buckets, max_distance)
  rel = jnp.asarray(relative_position, jnp.int32)
  buckets = jnp.zeros_like(rel)
  if bidirectional:
    num_buckets //= 2
    buckets = buckets + (rel > 0).astype(jnp.int32) * num_buckets
    n = jnp.abs(rel)
  else:
    n = -jnp.minimum(rel, 0)
  max_exact = num_buckets // 2
  is_small = n < max_exact
  n_large = jnp.maximum(n, max_exact).astype(jnp.float32)  # avoids log(0) in the unused branch
  if_large = max_exact + (
      jnp.log(n_large / max_exact) / math.log(max_distance / max_exact)
      * (num_buckets - max_exact)).astype(jnp.int32)
  if_large = jnp.minimum(if_large, num_buckets - 1)
  return buckets + jnp.where(is_small, n, if_large)


def bucket_edges(rel_R: np.ndarray, *, bidirectional: bool, num_buckets: int,
                 max_distance: int) -> np.ndarray:
  """Where the bucket changes along a range of relative distances.

  Args:
    rel_R: increasing consecutive distances (key − query).
    bidirectional, num_buckets, max_distance: `relative_position_bucket`'s.

  Returns:
    The edges, half-way between the two distances whose buckets differ.
  """
  bucket_R = np.asarray(relative_position_bucket(
      jnp.asarray(rel_R), bidirectional=bidirectional, num_buckets=num_buckets,
      max_distance=max_distance))
  return rel_R[1:][bucket_R[1:] != bucket_R[:-1]] - 0.5


class T5Bias(base.PositionScheme):
  """A learned scalar bias per (relative-position bucket, head).

  Attributes:
    num_buckets: buckets (split in two halves when bidirectional).
    max_distance: distance from which everything shares the last bucket.
    share_across_layers: one table per stack (T5) or one per layer.
  """

  is_relative = True
  num_buckets: int = 32
  max_distance: int = 128
  share_across_layers: bool = True

  def setup(self):
    _check_buckets(not self.causal, self.num_buckets, self.max_distance)
    self.table = self.param("rel_bias", nn.initializers.normal(0.02),
                            (self.num_buckets, self.num_heads))

  def logit_bias(self, q_BxQxHxE, k_BxKxHxE, qpos_BxQ, kpos_BxK):
    """`b[bucket(kpos - qpos), h]` as `[B, H, Q, K]`."""
    del k_BxKxHxE
    rel_BxQxK = kpos_BxK[:, None, :].astype(jnp.int32) - qpos_BxQ[:, :, None].astype(jnp.int32)
    bucket_BxQxK = relative_position_bucket(
        rel_BxQxK, bidirectional=not self.causal, num_buckets=self.num_buckets,
        max_distance=self.max_distance)
    bias_BxQxKxH = jnp.take(self.table, bucket_BxQxK, axis=0)
    return jnp.transpose(bias_BxQxKxH, (0, 3, 1, 2))  # float32, like the table

  def shared_across_layers(self) -> bool:
    """One table per stack unless `share_across_layers=False`."""
    return self.share_across_layers

  @nn.nowrap
  def figures(self, params: Mapping[str, Array], *,
              max_train_distance: int | None = None) -> list[base.FigurePanel]:
    """"t5_bias": the learned bias b(key − query) per head, a step per bucket.

    Distances reach 1.5 × max_distance (keys at or before the query if causal), so
    the flat last bucket shows; the bucket edges are marked.
    """
    if "rel_bias" not in params:
      return []
    bias_NxH = np.asarray(params["rel_bias"])
    reach = int(1.5 * self.max_distance)
    rel_R = np.arange(-reach, 1 if self.causal else reach + 1)
    settings = dict(bidirectional=not self.causal, num_buckets=self.num_buckets,
                    max_distance=self.max_distance)
    bucket_R = np.asarray(relative_position_bucket(jnp.asarray(rel_R), **settings))
    return [base.FigurePanel(
        figure="t5_bias",
        figure_title=(f"T5 relative bias (num_buckets={self.num_buckets}, "
                      f"max_distance={self.max_distance})"),
        title="causal" if self.causal else "bidirectional",
        x_label="key − query position", y_label="bias", x_X=rel_R,
        curves={f"head {h}": bias_NxH[bucket_R, h] for h in range(bias_NxH.shape[1])},
        marks={"bucket edges": tuple(bucket_edges(rel_R, **settings).tolist())},
        shade=base.training_span(max_train_distance, self.causal), steps=True)]

