"""Multi-head attention that asks a positional scheme for its terms.

    q, k, v = x_q W_Q, x_kv W_K, x_kv W_V                    (per head, dim K)
    q, k    = scheme.rotate(q, qpos), scheme.rotate(k, kpos)
    logits  = q·k / sqrt(E) + scheme.logit_bias(q, k, qpos, kpos)
    logits  = logits * log(n) / log(n_train)                (optional, see `length_scale`)
    w       = softmax(logits masked)                        (dropout on w)
    out     = (w·v + scheme.value_term(w, qpos, kpos)) W_O

Positions are explicit int arrays. With `decode=True` the module keeps a cache
(`cache` collection: keys, values, their positions and the next slot index) as in
the Flax examples: the first call (inside `init`) sizes it from a full-length
input, every later call appends one step and attends to the filled slots.
Cross-attention passes `scheme=None` and precomputed keys/values (`cacheable_kv`),
so the encoder's keys and values are computed once per decoded sequence.

Layout. The two attention matmuls are batched over (batch, head), which XLA wants
as leading dims; keys and values are therefore consumed head-major, `[B, H, K, E]`.
The decode cache and the precomputed cross-attention keys/values are stored that
way, so a decoding step reads them in place instead of transposing the whole
cache (and the encoder's keys/values) at every generated token.

Precision. Queries, keys and values (and so the cache), which only matmuls read,
are in the compute dtype (`dtype`: float32 or bfloat16). The logits `q·k`
accumulate in float32 and stay float32: the scheme's terms (float32,
`positions.base`), the length scale, the mask and the softmax all act on float32;
the weights are cast back to the compute dtype for `w·v`, which accumulates in
float32 too; the output projection returns float32 (the residual stream's dtype).
Every matmul (projections, `q·k`, `w·v`) goes through `dots`; in bfloat16 the
head-major transposes are row-major copies (`heads_first`), so that forward and
backward compile to native bf16 dots.
"""

from __future__ import annotations

import math
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp

from relpos_jax import dots
from relpos_jax import dropout as dropout_lib
from relpos_jax.positions import base

Array = jax.Array

_MASKED = -1e30  # finite, so rows with every key masked stay NaN-free


def length_scale(num_keys_BxQ: Array, train_keys: int) -> Array:
  """`log(n) / log(n_train)`: the logit multiplier of length-scaled attention.

  Chiang & Cholak 2022 ("Overcoming a Theoretical Limitation of Self-Attention",
  ACL) multiply the attention logits by log n, n the number of keys, so that
  attention can stay as sharp on long inputs as on short ones; Scalable-Softmax
  (Nakanishi 2025) is the same with a learned factor. Dividing by log n_train makes
  the multiplier 1 at the training length, so a model trained without the scale sees
  nearly unscaled logits there. n counts the keys each query may attend to (its
  unmasked keys: a causal query at position t of an unpadded sequence sees t + 1),
  floored at 1 (log 1 = 0: a query with one key attends to it whatever the logits).
  E.g. n_train = 16: n = 1, 4, 16, 64 give 0, 0.5, 1, 1.5.

  Args:
    num_keys_BxQ: keys each query sees (int or float).
    train_keys: n_train >= 2.

  Returns:
    float32 `[B, Q]`.
  """
  n_BxQ = jnp.maximum(jnp.asarray(num_keys_BxQ, jnp.float32), 1.0)
  return jnp.log(n_BxQ) / math.log(train_keys)


def dot_product_attention(q_BxQxHxE: Array, k_BxKxHxE: Array, v_BxKxHxE: Array,
                          qpos_BxQ: Array | None, kpos_BxK: Array | None,
                          mask_BxQxK: Array | None, scheme: base.PositionScheme | None,
                          dropout: nn.Module | None = None, length_scale_train_keys: int = 0
                          ) -> Array:
  """Scaled dot-product attention with a scheme's logit and value terms.

  Args:
    q_BxQxHxE, k_BxKxHxE, v_BxKxHxE: queries, keys (already rotated), values.
    qpos_BxQ, kpos_BxK: int positions (unused when `scheme` is None).
    mask_BxQxK: True where query i may attend to key j (None: everywhere).
    scheme: the positional scheme, or None (cross-attention).
    dropout: a dropout (`dropout_lib.Dropout`) applied to the weights, or None.
    length_scale_train_keys: n_train of `length_scale` (0: no length scaling).

  Returns:
    `[B, Q, H, E]` attention output before the output projection.
  """
  return _attend(q_BxQxHxE, heads_first(k_BxKxHxE), heads_first(v_BxKxHxE), qpos_BxQ,
                 kpos_BxK, mask_BxQxK, scheme, dropout, length_scale_train_keys)


def heads_first(x_BxLxHxE: Array) -> Array:
  """`[B, L, H, E] -> [B, H, L, E]` (and back): the layout the attention matmuls read in place.

  A bf16 array is transposed into a row-major copy (`dots.row_major_transpose`): a
  dot XLA:CPU would otherwise see a permuted operand of runs in float32.
  """
  if dots.is_bf16(x_BxLxHxE.dtype):
    return dots.row_major_transpose(x_BxLxHxE, (0, 2, 1, 3))
  return jnp.swapaxes(x_BxLxHxE, 1, 2)


def _attend(q_BxQxHxE, k_BxHxKxE, v_BxHxKxE, qpos_BxQ, kpos_BxK, mask_BxQxK, scheme,
            dropout, length_scale_train_keys=0):
  """`dot_product_attention` with head-major keys and values `[B, H, K, E]`.

  Both matmuls run head-major (batch dims leading), so XLA needs no transposes
  beyond the query's and the output's; with one query (a decoding step) those are free.
  """
  scale = q_BxQxHxE.shape[-1] ** -0.5
  dtype = v_BxHxKxE.dtype
  logits_BxHxQxK = dots.einsum("bhqk,bhsk->bhqs", heads_first(q_BxQxHxE), k_BxHxKxE,
                               dtype) * scale
  if scheme is not None and scheme.implements("logit_bias"):
    # Schemes see keys in the documented [B, K, H, E] layout; those that ignore them
    # (all but Transformer-XL) leave the transpose to dead-code elimination.
    bias_BxHxQxK = scheme.logit_bias(q_BxQxHxE, jnp.swapaxes(k_BxHxKxE, 1, 2), qpos_BxQ,
                                     kpos_BxK)
    if bias_BxHxQxK is not None:
      logits_BxHxQxK = logits_BxHxQxK + bias_BxHxQxK.astype(jnp.float32)
  if length_scale_train_keys:
    B, H, Q, K = logits_BxHxQxK.shape
    n_BxQ = jnp.full((B, Q), K) if mask_BxQxK is None else mask_BxQxK.sum(axis=-1)
    scale_BxQ = length_scale(n_BxQ, length_scale_train_keys)
    logits_BxHxQxK = logits_BxHxQxK * scale_BxQ[:, None, :, None]
  if mask_BxQxK is not None:
    logits_BxHxQxK = jnp.where(mask_BxQxK[:, None], logits_BxHxQxK, _MASKED)
  w_BxHxQxK = jax.nn.softmax(logits_BxHxQxK, axis=-1).astype(dtype)
  if dropout is not None:
    w_BxHxQxK = dropout(w_BxHxQxK)
  out_BxHxQxE = dots.einsum("bhqs,bhsk->bhqk", w_BxHxQxK, v_BxHxKxE, dtype)
  extra_BxQxHxE = None
  if scheme is not None and scheme.implements("value_term"):
    extra_BxQxHxE = scheme.value_term(w_BxHxQxK, qpos_BxQ, kpos_BxK)
  return _query_major(out_BxHxQxE, extra_BxQxHxE, dtype)


def _query_major(out_BxHxQxE, extra_BxQxHxE, dtype):
  """`[B, H, Q, E]` float32 (+ a scheme's `[B, Q, H, E]` value term) -> `[B, Q, H, E]` in `dtype`.

  In bf16 the result is rounded first and then transposed as a row-major copy, the
  operand form the output projection's bf16 dot needs; float32 keeps the order it
  always had (same values either way: a transpose is exact).
  """
  if dots.is_bf16(dtype):
    if extra_BxQxHxE is not None:
      out_BxHxQxE = out_BxHxQxE + heads_first(extra_BxQxHxE.astype(jnp.float32))
    return heads_first(out_BxHxQxE.astype(dtype))
  out_BxQxHxE = heads_first(out_BxHxQxE)
  if extra_BxQxHxE is not None:
    out_BxQxHxE = out_BxQxHxE + extra_BxQxHxE.astype(jnp.float32)
  return out_BxQxHxE.astype(dtype)


class Attention(nn.Module):
  """Multi-head attention with an optional positional scheme and decode cache.

  Attributes:
    num_heads: H.
    head_dim: K.
    d_model: output width D.
    dropout_rate: dropout on the attention weights.
    scheme: positional scheme (shared or per layer; None for cross-attention).
    length_scale_train_keys: n_train of length-scaled attention (`length_scale`;
      0: off). With `decode`, n counts the cached keys too, as the full pass does.
    dtype: compute dtype of the projections' matmuls, the queries, keys, values and
      cache (parameters, logits, softmax and the output are float32 whatever it is).
  """

  num_heads: int
  head_dim: int
  d_model: int
  dropout_rate: float = 0.0
  scheme: base.PositionScheme | None = None
  length_scale_train_keys: int = 0
  dtype: Any = jnp.float32

  def setup(self):
    dense = lambda name: nn.DenseGeneral((self.num_heads, self.head_dim), use_bias=False,
                                         dtype=self.dtype, param_dtype=jnp.float32, name=name,
                                         **dots.dense_kwargs(self.dtype))
    self.query = dense("query")
    self.key = dense("key")
    self.value = dense("value")
    self.out = nn.DenseGeneral(self.d_model, axis=(-2, -1), use_bias=False, dtype=self.dtype,
                               param_dtype=jnp.float32, name="out",
                               **dots.dense_kwargs(self.dtype, out_dtype=jnp.float32))
    self.dropout = dropout_lib.Dropout(self.dropout_rate)
    self.cache = KVCache()

  def project_kv(self, x_BxKxD: Array) -> tuple[Array, Array]:
    """Keys and values `[B, K, H, E]` of `x` (unrotated): cross-attention's cacheable part."""
    return self.key(x_BxKxD), self.value(x_BxKxD)

  def cacheable_kv(self, x_BxKxD: Array) -> tuple[Array, Array]:
    """`project_kv` head-major, `[B, H, K, E]`: what `__call__(kv=...)` takes."""
    k_BxKxHxE, v_BxKxHxE = self.project_kv(x_BxKxD)
    return heads_first(k_BxKxHxE), heads_first(v_BxKxHxE)

  def _rotate(self, x_BxLxHxE: Array, pos_BxL: Array) -> Array:
    """Applies the scheme's rotation when it has one."""
    if self.scheme is not None and self.scheme.implements("rotate"):
      return self.scheme.rotate(x_BxLxHxE, pos_BxL)
    return x_BxLxHxE

  def __call__(self, x_BxQxD: Array, qpos_BxQ: Array | None, *,
               kv: tuple[Array, Array] | None = None, x_kv_BxKxD: Array | None = None,
               kpos_BxK: Array | None = None, mask_BxQxK: Array | None = None,
               decode: bool = False, deterministic: bool = True) -> Array:
    """Attends from `x` to `x_kv` (self-attention when both kv and x_kv are None).

    Args:
      x_BxQxD: query inputs.
      qpos_BxQ: query positions.
      kv: precomputed head-major `(k, v)`, `[B, H, K, E]`, from `cacheable_kv`
        (cross-attention).
      x_kv_BxKxD: key/value inputs (default: `x`).
      kpos_BxK: key positions (default: `qpos`).
      mask_BxQxK: True where attention is allowed; with `decode`, among the new
        keys only (earlier cache slots are visible when valid, see `KVCache`).
      decode: use and update the cache (self-attention only).
      deterministic: disables dropout.

    Returns:
      `[B, Q, D]`.
    """
    q_BxQxHxE = self._rotate(self.query(x_BxQxD), qpos_BxQ)
    if kv is not None:
      k_BxHxKxE, v_BxHxKxE = kv
    else:
      x_kv_BxKxD = x_BxQxD if x_kv_BxKxD is None else x_kv_BxKxD
      kpos_BxK = qpos_BxQ if kpos_BxK is None else kpos_BxK
      k_BxKxHxE, v_BxKxHxE = self.project_kv(x_kv_BxKxD)
      k_BxKxHxE = self._rotate(k_BxKxHxE, kpos_BxK)
      if decode:
        k_BxHxKxE, v_BxHxKxE, kpos_BxK, mask_BxQxK = self.cache(
            k_BxKxHxE, v_BxKxHxE, kpos_BxK, mask_BxQxK)
      else:
        k_BxHxKxE, v_BxHxKxE = heads_first(k_BxKxHxE), heads_first(v_BxKxHxE)
    dropout = None if deterministic or self.dropout_rate == 0.0 else (
        lambda w: self.dropout(w, deterministic=False))
    out_BxQxHxE = _attend(q_BxQxHxE, k_BxHxKxE, v_BxHxKxE, qpos_BxQ, kpos_BxK, mask_BxQxK,
                          self.scheme, dropout, self.length_scale_train_keys)
    return self.out(out_BxQxHxE)


class KVCache(nn.Module):
  """The decode cache: keys, values, their positions and validity, and the next slot.

  Keys and values are stored head-major, `[B, H, M, E]` (M slots), the layout the
  attention matmuls read in place, in their own (compute) dtype: a bfloat16 model
  caches exactly the rounded keys and values its full forward pass uses. A call
  writes L new columns: one per decoding step, or a whole prompt at once
  (decoder-only prefill). A slot stays visible to later queries iff its key was
  valid (some query of its own call could attend to it; PAD keys never), so a
  padded prompt's PAD slots stay masked.
  """

  @nn.compact
  def __call__(self, k_BxLxHxE, v_BxLxHxE, kpos_BxL, mask_BxLxL):
    """Writes L slots; returns every slot (head-major), their positions and the query mask.

    Args:
      k_BxLxHxE, v_BxLxHxE: the new keys (rotated) and values.
      kpos_BxL: their positions.
      mask_BxLxL: which new keys each new query may see (None: all, causally);
        earlier slots are visible when valid.

    Returns:
      `(k_BxHxMxE, v_BxHxMxE, kpos_BxM, mask_BxLxM)`. On the sizing call (inside
      `init`, where the cache does not exist yet) it creates the cache with the
      full-length shapes of its inputs and returns them unchanged (head-major).
    """
    initialized = self.has_variable("cache", "cached_key")
    k_BxHxLxE, v_BxHxLxE = heads_first(k_BxLxHxE), heads_first(v_BxLxHxE)
    cached_k = self.variable("cache", "cached_key", jnp.zeros, k_BxHxLxE.shape, k_BxHxLxE.dtype)
    cached_v = self.variable("cache", "cached_value", jnp.zeros, v_BxHxLxE.shape,
                             v_BxHxLxE.dtype)
    cached_pos = self.variable("cache", "cached_pos", jnp.zeros, kpos_BxL.shape, jnp.int32)
    cached_valid = self.variable("cache", "cached_valid", jnp.zeros, kpos_BxL.shape, bool)
    index = self.variable("cache", "cache_index", lambda: jnp.array(0, jnp.int32))
    if not initialized:
      return k_BxHxLxE, v_BxHxLxE, kpos_BxL, mask_BxLxL
    B, M = cached_pos.value.shape
    L = kpos_BxL.shape[1]
    if mask_BxLxL is None:
      mask_BxLxL = jnp.broadcast_to(jnp.tril(jnp.ones((L, L), bool)), (B, L, L))
    i = index.value
    cached_k.value = jax.lax.dynamic_update_slice(cached_k.value, k_BxHxLxE, (0, 0, i, 0))
    cached_v.value = jax.lax.dynamic_update_slice(cached_v.value, v_BxHxLxE, (0, 0, i, 0))
    cached_pos.value = jax.lax.dynamic_update_slice(
        cached_pos.value, kpos_BxL.astype(jnp.int32), (0, i))
    earlier_BxLxM = jnp.broadcast_to(
        cached_valid.value[:, None, :] & (jnp.arange(M) < i)[None, None, :], (B, L, M))
    mask_BxLxM = jax.lax.dynamic_update_slice(earlier_BxLxM, mask_BxLxL, (0, 0, i))
    cached_valid.value = jax.lax.dynamic_update_slice(cached_valid.value,
                                                      mask_BxLxL.any(axis=1), (0, i))
    index.value = i + L
    return cached_k.value, cached_v.value, cached_pos.value, mask_BxLxM
