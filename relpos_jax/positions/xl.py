"""Transformer-XL relative positions (Dai et al. 2019, "Transformer-XL: Attentive
Language Models Beyond a Fixed-Length Context", ACL, §3.3).

The attention score of query i and key j is split in four terms:

    A_ij = q_i·k_j  +  q_i·W_R R_{i-j}  +  u·k_j  +  v·W_R R_{i-j}
           (a)         (b)                (c)       (d)

with `R_r = sinusoidal_encoding(r, rel_dim)` the (fixed) sinusoid of the
relative distance r = i - j (clipped to `[-clip, clip]` when `clip > 0`, the
`clamp_len` of the reference code), `W_R` a learned projection per layer
(`[rel_dim, H, E]`; the paper's `W_{k,R}` with `rel_dim = d_model`), and `u`, `v`
learned per head (`[H, E]`). Attention computes the content term (a) as
`q·k / sqrt(E)`; `logit_bias` returns (b) + (c) + (d) with the same `1/sqrt(E)`,
so the whole score is scaled as in the paper's code. Each layer owns its u, v
and W_R (the reference code's `untie_r=True`; its default ties u and v across
layers). In the encoder i - j takes both signs; a negative distance simply has
its sinusoid. The sinusoid is the interleaved d2l layout of
`sinusoidal.sinusoidal_encoding`, the reference code concatenates
`[sin, cos]`: a fixed permutation of R that W_R absorbs.

Efficient form. The paper evaluates (b) + (d) = `(q_i + v)·W_R R_{i-j}` for the
L + M - 1 distances of contiguous positions and "relative-shifts" them into
place. Positions here are explicit and arbitrary (randomized positions, a
decoding cache), so this module uses the angle-difference identity instead:
per frequency w, with `s_p = sin(p w)`, `c_p = cos(p w)`,

    a_s sin((i-j) w) + a_c cos((i-j) w)
        = (a_s s_i + a_c c_i) c_j + (a_c s_i - a_s c_i) s_j,

so with `a_i = W_Rᵀ (q_i + v)` (`[B, Q, H, rel_dim]`), rotating `a_i` by the
query's angles gives a vector whose dot product with the *key's* sinusoid
`R_{kpos_j}` is the term: one matmul, exact for any positions, no `L x L x d`
tensor. Clipped distances (`|i - j| > clip`) take `(q_i + v)·W_R R_{±clip}`,
computed once per query. Positions are offset by their per-row minimum before
the sinusoids (exact integer arithmetic), which makes the result exactly
translation invariant and keeps the angles small. Extra memory:
`O(B·Q·H·rel_dim + B·(Q+K)·rel_dim + B·H·Q·K)`, i.e. `O(L·H·d + L²·H)`.
"""

from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp

from relpos_jax.positions import base
from relpos_jax.positions import sinusoidal

Array = jax.Array


def check_config(clip: int, rel_dim: int) -> None:
  """Raises ValueError for a negative `clip` or a `rel_dim` that is odd or not positive."""
  if clip < 0:
    raise ValueError(f"Transformer-XL clip must be >= 0 (0: no clipping; config key "
                     f"model.position.clip); got {clip}.")
  if rel_dim <= 0 or rel_dim % 2:
    raise ValueError(
        f"Transformer-XL needs an even, positive sinusoid width rel_dim (config key "
        f"model.position.rel_dim; 0 means d_model, which must then be even); got a width of {rel_dim}.")


def _query_angles_dot_keys(a_BxQxHxD: Array, qpos_BxQ: Array, kpos_BxK: Array) -> Array:
  """`a_i · R_{qpos_i - kpos_j}` via the angle-difference identity, as `[B, H, Q, K]`."""
  d = a_BxQxHxD.shape[-1]
  origin_Bx1 = jnp.minimum(qpos_BxQ.min(axis=1, keepdims=True),
                           kpos_BxK.min(axis=1, keepdims=True))
  pq_BxQxD = sinusoidal.sinusoidal_encoding(qpos_BxQ - origin_Bx1, d)
  pk_BxKxD = sinusoidal.sinusoidal_encoding(kpos_BxK - origin_Bx1, d)
  s_BxQx1xJ, c_BxQx1xJ = pq_BxQxD[:, :, None, 0::2], pq_BxQxD[:, :, None, 1::2]
  a_s, a_c = a_BxQxHxD[..., 0::2], a_BxQxHxD[..., 1::2]
  # Coefficients of the key's sin (even slots) and cos (odd slots), interleaved like R.
  rot_BxQxHxD = jnp.stack([a_c * s_BxQx1xJ - a_s * c_BxQx1xJ,
                           a_s * s_BxQx1xJ + a_c * c_BxQx1xJ], axis=-1).reshape(a_BxQxHxD.shape)
  return jnp.einsum("bqhd,bsd->bhqs", rot_BxQxHxD, pk_BxKxD)


def position_logits(qv_BxQxHxE: Array, w_r_DxHxE: Array, qpos_BxQ: Array, kpos_BxK: Array,
                    clip: int = 0) -> Array:
  """`(q_i + v) · W_R R_{clip(i - j)}`: terms (b) + (d), unscaled.

  Args:
    qv_BxQxHxE: queries plus the per-head bias v.
    w_r_DxHxE: the projection W_R of the sinusoid (D = rel_dim, even).
    qpos_BxQ: integer query positions i.
    kpos_BxK: integer key positions j.
    clip: clip i - j to `[-clip, clip]`; 0: no clipping.

  Returns:
    `[B, H, Q, K]`, in O(B·Q·H·D + B·H·Q·K) memory (see the module docstring).
  """
  d = w_r_DxHxE.shape[0]
  check_config(clip, d)
  qpos_BxQ = jnp.asarray(qpos_BxQ, jnp.int32)
  kpos_BxK = jnp.asarray(kpos_BxK, jnp.int32)
  a_BxQxHxD = jnp.einsum("bqhk,dhk->bqhd", qv_BxQxHxE, w_r_DxHxE)
  out_BxHxQxK = _query_angles_dot_keys(a_BxQxHxD, qpos_BxQ, kpos_BxK)
  if clip:
    ends_2xD = sinusoidal.sinusoidal_encoding(jnp.array([-clip, clip]), d)
    end_BxHxQx2 = jnp.einsum("bqhd,rd->bhqr", a_BxQxHxD, ends_2xD.astype(a_BxQxHxD.dtype))
    rel_Bx1xQxK = (qpos_BxQ[:, :, None] - kpos_BxK[:, None, :])[:, None]
    out_BxHxQxK = jnp.where(rel_Bx1xQxK < -clip, end_BxHxQx2[..., :1],
                            jnp.where(rel_Bx1xQxK > clip, end_BxHxQx2[..., 1:], out_BxHxQxK))
  return out_BxHxQxK


def relative_logits(q_BxQxHxE: Array, k_BxKxHxE: Array, qpos_BxQ: Array, kpos_BxK: Array,
                    u_HxE: Array, v_HxE: Array, w_r_DxHxE: Array, clip: int = 0) -> Array:
  """Terms (b) + (c) + (d) of Transformer-XL's score, divided by sqrt(E).

  Args:
    q_BxQxHxE: queries.
    k_BxKxHxE: keys.
    qpos_BxQ: integer query positions i.
    kpos_BxK: integer key positions j.
    u_HxE: the content bias u of term (c).
    v_HxE: the position bias v of term (d).
    w_r_DxHxE: the projection W_R of the relative sinusoid, D = rel_dim.
    clip: clip i - j to `[-clip, clip]`; 0: no clipping.

  Returns:
    bias `[B, H, Q, K]`: `(q_i·W_R R_{i-j} + u·k_j + v·W_R R_{i-j}) / sqrt(E)`.
  """
  scale = q_BxQxHxE.shape[-1] ** -0.5
  content_BxHx1xK = jnp.einsum("hk,bshk->bhs", u_HxE, k_BxKxHxE)[:, :, None, :]
  position_BxHxQxK = position_logits(q_BxQxHxE + v_HxE, w_r_DxHxE, qpos_BxQ, kpos_BxK, clip)
  return (content_BxHx1xK + position_BxHxQxK) * scale


class TransformerXL(base.PositionScheme):
  """Transformer-XL's relative sinusoid with learned u, v and W_R (terms (b)-(d)).

  Attributes:
    clip: clip the relative distance i - j to `[-clip, clip]`; 0: no clipping.
    rel_dim: width of the relative sinusoid R (even); 0 means d_model, as in
      the paper.
  """

  is_relative = True
  clip: int = 0
  rel_dim: int = 0

  def setup(self):
    d = self.rel_dim or self.d_model
    check_config(self.clip, d)
    init = nn.initializers.normal(0.02)
    self.u = self.param("u", init, (self.num_heads, self.head_dim))
    self.v = self.param("v", init, (self.num_heads, self.head_dim))
    self.w_r = self.param("w_r", init, (d, self.num_heads, self.head_dim))

  def logit_bias(self, q_BxQxHxE, k_BxKxHxE, qpos_BxQ, kpos_BxK):
    """`(q_i·W_R R_{i-j} + u·k_j + v·W_R R_{i-j}) / sqrt(E)` as float32 `[B, H, Q, K]`.

    Computed in float32 in either compute dtype, like the other schemes' terms:
    the angle-difference identity sums products of absolute-position sinusoids
    that partly cancel to the relative term, so it is kept out of bfloat16.
    """
    f32 = lambda x: x.astype(jnp.float32)
    return relative_logits(f32(q_BxQxHxE), f32(k_BxKxHxE), qpos_BxQ, kpos_BxK, f32(self.u),
                           f32(self.v), f32(self.w_r), self.clip)
