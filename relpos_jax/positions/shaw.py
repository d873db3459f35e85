"""Shaw-style relative positions (Shaw, Uszkoreit & Vaswani 2018, "Self-Attention
with Relative Position Representations", NAACL, eqs. 3-5).

Two tables of `2k+1` learned vectors of head dimension, shared by all heads of a
layer (each layer has its own), indexed by the clipped distance

    rel(i, j) = clip(j - i, -k, k) + k           (i: query, j: key position)

enter attention as

    e_ij = q_i · (k_j + a^K_rel(i,j)) / sqrt(E)
    z_i  = sum_j w_ij (v_j + a^V_rel(i,j))

The naive form gathers an `L x L x K` tensor of table rows. This module computes
the same numbers in O(L·k) extra memory: `q · (a^K)ᵀ` once (`B x Q x (2k+1) x H`)
and a gather of those logits by relative index; for values, a scatter-add of the
weights into `2k+1` buckets and one matmul with `a^V`.

Both index by (batch, query, bucket) rows that hold every head's value (heads
last), so one gathered or scattered element is a contiguous H-vector and the
index is a single flat row number: on CPU this is several times faster than
gathering scalars with one index array per dimension, in both directions (the
gradient of the gather is the scatter-add and vice versa).
"""

from __future__ import annotations

from typing import Mapping

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from relpos_jax.positions import base

Array = jax.Array


def relative_index(qpos: Array, kpos: Array, max_relative_position: int) -> Array:
  """Shaw's clipped relative index.

  Args:
    qpos: int query positions `[B, Q]`.
    kpos: int key positions `[B, K]`.
    max_relative_position: the clipping distance k >= 0.

  Returns:
    int32 `[B, Q, K]`: `clip(kpos - qpos, -k, k) + k`, in `[0, 2k]`.
  """
  if max_relative_position < 0:
    raise ValueError("Shaw clipping distance must be >= 0 (config key "
                     f"model.position.max_relative_position); got {max_relative_position}.")
  rel_BxQxK = kpos[:, None, :].astype(jnp.int32) - qpos[:, :, None].astype(jnp.int32)
  k = max_relative_position
  return jnp.clip(rel_BxQxK, -k, k) + k


def _row_index(idx_BxQxK: Array, num_buckets: int) -> Array:
  """Flat row numbers `(b·Q + q)·R + idx[b, q, j]` into a `[B·Q·R, ...]` table."""
  B, Q, _ = idx_BxQxK.shape
  rows_BxQx1 = jnp.arange(B * Q, dtype=jnp.int32).reshape(B, Q, 1) * num_buckets
  return rows_BxQx1 + idx_BxQxK.astype(jnp.int32)


def key_logits(q_BxQxHxE: Array, table_RxE: Array, idx_BxQxK: Array) -> Array:
  """`q_i · a^K_rel(i,j) / sqrt(E)` in O(L·R) extra memory.

  Args:
    q_BxQxHxE: queries.
    table_RxE: the key table `a^K`, R = 2k+1 rows.
    idx_BxQxK: `relative_index(...)`, values in `[0, R)`.

  Returns:
    float32 bias `[B, H, Q, K]` (the matmul accumulates in float32 whatever the
    inputs' dtype).
  """
  scale = q_BxQxHxE.shape[-1] ** -0.5
  R = table_RxE.shape[0]
  B, Q, H, _ = q_BxQxHxE.shape
  qa_BxQxRxH = jnp.einsum("bqhk,rk->bqrh", q_BxQxHxE, table_RxE,
                          preferred_element_type=jnp.float32) * scale
  rows_BxQxK = _row_index(idx_BxQxK, R)  # every index is in range: idx is clipped to [0, 2k]
  bias_BxQxKxH = qa_BxQxRxH.reshape(B * Q * R, H).at[rows_BxQxK].get(mode="promise_in_bounds")
  return jnp.transpose(bias_BxQxKxH, (0, 3, 1, 2))


def value_output(w_BxHxQxK: Array, table_RxE: Array, idx_BxQxK: Array) -> Array:
  """`sum_j w_ij a^V_rel(i,j)` in O(L·R) extra memory.

  Args:
    w_BxHxQxK: attention weights.
    table_RxE: the value table `a^V`, R = 2k+1 rows.
    idx_BxQxK: `relative_index(...)`, values in `[0, R)`.

  Returns:
    float32 `[B, Q, H, E]`: the buckets sum the weights in float32 (a clipped
    bucket collects up to K of them), whatever the weights' dtype.
  """
  B, H, Q, _ = w_BxHxQxK.shape
  R = table_RxE.shape[0]
  w_BxQxKxH = jnp.transpose(w_BxHxQxK, (0, 2, 3, 1)).astype(jnp.float32)
  rows_BxQxK = _row_index(idx_BxQxK, R)
  wb_BxQxRxH = jnp.zeros((B * Q * R, H), jnp.float32).at[rows_BxQxK].add(
      w_BxQxKxH, mode="promise_in_bounds").reshape(B, Q, R, H)
  return jnp.einsum("bqrh,rk->bqhk", wb_BxQxRxH, table_RxE.astype(jnp.float32))


class Shaw(base.PositionScheme):
  """Per-layer key/value relative tables, clipped at `max_relative_position`.

  Attributes:
    max_relative_position: the clipping distance k; `k = 0` leaves one shared
      row, i.e. no position information.
    use_keys: add `a^K` to the keys (logit term).
    use_values: add `a^V` to the values (output term).
  """

  is_relative = True
  max_relative_position: int = 16
  use_keys: bool = True
  use_values: bool = True

  def setup(self):
    rows = 2 * self.max_relative_position + 1
    init = nn.initializers.normal(0.02)
    if self.use_keys:
      self.key_table = self.param("key_table", init, (rows, self.head_dim))
    if self.use_values:
      self.value_table = self.param("value_table", init, (rows, self.head_dim))

  def logit_bias(self, q_BxQxHxE, k_BxKxHxE, qpos_BxQ, kpos_BxK):
    """`q_i · a^K_rel(i,j) / sqrt(E)`, or None without `use_keys`."""
    del k_BxKxHxE
    if not self.use_keys:
      return None
    idx_BxQxK = relative_index(qpos_BxQ, kpos_BxK, self.max_relative_position)
    return key_logits(q_BxQxHxE, self.key_table, idx_BxQxK)  # float32 table: float32 matmul

  def value_term(self, w_BxHxQxK, qpos_BxQ, kpos_BxK):
    """`sum_j w_ij a^V_rel(i,j)`, or None without `use_values`."""
    if not self.use_values:
      return None
    idx_BxQxK = relative_index(qpos_BxQ, kpos_BxK, self.max_relative_position)
    return value_output(w_BxHxQxK, self.value_table, idx_BxQxK)

  @nn.nowrap
  def figures(self, params: Mapping[str, Array], *,
              max_train_distance: int | None = None) -> list[base.FigurePanel]:
    """"shaw_key_norms": ‖a^K[clip(d, −k, k) + k]‖ against the relative distance d.

    Distances reach 2k (at least k + 4), so the flat continuation past the clipping
    distance shows; ±k is marked. None without a key table.
    """
    if "key_table" not in params:
      return []
    k = self.max_relative_position
    reach = max(2 * k, k + 4)
    rel_R = np.arange(-reach, 1 if self.causal else reach + 1)
    norms_R = np.linalg.norm(np.asarray(params["key_table"]), axis=-1)[np.clip(rel_R, -k, k) + k]
    return [base.FigurePanel(
        figure="shaw_key_norms", figure_title="Shaw key-table row norms vs relative distance",
        title="causal: keys at or before the query" if self.causal else "bidirectional",
        x_label="key − query position d", y_label="‖key-table row‖", x_X=rel_R,
        curves={"": norms_R},
        marks={f"clipping distance k = {k}": (-k,) if self.causal else (-k, k)},
        shade=base.training_span(max_train_distance, self.causal))]
