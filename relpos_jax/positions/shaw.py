"""Shaw-style relative positions (Shaw, Uszkoreit & Vaswani 2018, "Self-Attention
with Relative Position Representations", NAACL, eqs. 3-5).

Two tables of `2k+1` learned vectors of head dimension, shared by all heads of a
layer (each layer has its own), indexed by the clipped distance

    rel(i, j) = clip(j - i, -k, k) + k           (i: query, j: key position)

enter attention as

    e_ij = q_i · (k_j + a^K_rel(i,j)) / sqrt(K)
    z_i  = sum_j w_ij (v_j + a^V_rel(i,j))

The naive form gathers an `L x L x K` tensor of table rows. This module computes
the same numbers in O(L·k) extra memory: `q · (a^K)ᵀ` once (`B x H x Q x (2k+1)`)
and a gather of those logits by relative index; for values, a scatter-add of the
weights into `2k+1` buckets and one matmul with `a^V`.
"""

from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp

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


def key_logits(q_BxQxHxK: Array, table_RxK: Array, idx_BxQxK: Array) -> Array:
  """`q_i · a^K_rel(i,j) / sqrt(K)` in O(L·R) extra memory.

  Args:
    q_BxQxHxK: queries.
    table_RxK: the key table `a^K`, R = 2k+1 rows.
    idx_BxQxK: `relative_index(...)`.

  Returns:
    bias `[B, H, Q, K]`.
  """
  scale = q_BxQxHxK.shape[-1] ** -0.5
  qa_BxHxQxR = jnp.einsum("bqhk,rk->bhqr", q_BxQxHxK, table_RxK) * scale
  B, H, Q, _ = qa_BxHxQxR.shape
  idx_BxHxQxK = jnp.broadcast_to(idx_BxQxK[:, None], (B, H, Q, idx_BxQxK.shape[-1]))
  return jnp.take_along_axis(qa_BxHxQxR, idx_BxHxQxK, axis=-1)


def value_output(w_BxHxQxK: Array, table_RxK: Array, idx_BxQxK: Array) -> Array:
  """`sum_j w_ij a^V_rel(i,j)` in O(L·R) extra memory.

  Args:
    w_BxHxQxK: attention weights.
    table_RxK: the value table `a^V`, R = 2k+1 rows.
    idx_BxQxK: `relative_index(...)`.

  Returns:
    `[B, Q, H, K]`.
  """
  B, H, Q, K = w_BxHxQxK.shape
  R = table_RxK.shape[0]
  b = jnp.arange(B)[:, None, None, None]
  h = jnp.arange(H)[None, :, None, None]
  q = jnp.arange(Q)[None, None, :, None]
  wb_BxHxQxR = jnp.zeros((B, H, Q, R), w_BxHxQxK.dtype).at[
      b, h, q, idx_BxQxK[:, None]].add(w_BxHxQxK)
  return jnp.einsum("bhqr,rk->bqhk", wb_BxHxQxR, table_RxK.astype(w_BxHxQxK.dtype))


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

  def logit_bias(self, q_BxQxHxK, k_BxKxHxK, qpos_BxQ, kpos_BxK):
    """`q_i · a^K_rel(i,j) / sqrt(K)`, or None without `use_keys`."""
    del k_BxKxHxK
    if not self.use_keys:
      return None
    idx_BxQxK = relative_index(qpos_BxQ, kpos_BxK, self.max_relative_position)
    return key_logits(q_BxQxHxK, self.key_table.astype(q_BxQxHxK.dtype), idx_BxQxK)

  def value_term(self, w_BxHxQxK, qpos_BxQ, kpos_BxK):
    """`sum_j w_ij a^V_rel(i,j)`, or None without `use_values`."""
    if not self.use_values:
      return None
    idx_BxQxK = relative_index(qpos_BxQ, kpos_BxK, self.max_relative_position)
    return value_output(w_BxHxQxK, self.value_table, idx_BxQxK)
