"""Rotary position embedding, RoPE (Su et al. 2021, "RoFormer: Enhanced Transformer
with Rotary Position Embedding", §3.4.2, eq. 34).

Queries and keys are rotated by angles proportional to their positions, pairwise
in 2-D planes with frequencies `theta_j = base**(-2j / d)`, j = 0..d/2-1:

    (x_j, x_{j+d/2}) -> (x_j cos(p theta_j) - x_{j+d/2} sin(p theta_j),
                         x_{j+d/2} cos(p theta_j) + x_j sin(p theta_j))

so `R(p_q) q · R(p_k) k = q · R(p_k - p_q) k` depends on positions only through
their difference, and attention's `q·k / sqrt(K)` becomes relative without any
logit term. Pairing follows the "rotate-half" convention of GPT-NeoX / LLaMA /
HF transformers (dim j with dim j + d/2); the paper's eq. 34 pairs adjacent dims
(2j, 2j+1), the "interleaved" convention. The two differ by a fixed permutation
of head dims, so they are equally expressive but their weights are not
interchangeable.

`fraction < 1` rotates only the first `int(head_dim * fraction)` dims of each
head and leaves the rest untouched (GPT-NeoX's `rotary_pct`); frequencies are
then computed over the rotated dims.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from relpos_jax.positions import base

Array = jax.Array


def apply_rope(x: Array, pos: Array, base: float = 10000.0) -> Array:
  """Rotates every (j, j + d/2) pair of `x`'s last dim by angle `pos * base**(-2j/d)`.

  Rotate-half convention (GPT-NeoX / LLaMA): with `x = [x1, x2]` split in halves,
  `out = [x1 cos - x2 sin, x2 cos + x1 sin]`. Computed in float32.

  Args:
    x: `[..., L, H, d]` (e.g. `q_BxLxHxK`); d must be even.
    pos: integer positions `[..., L]` (e.g. `pos_BxL`).
    base: wavelength base (10000 in the paper).

  Returns:
    The rotated `x`, same shape and dtype.

  Raises:
    ValueError: if the last dim of `x` is odd.
  """
  d = x.shape[-1]
  if d % 2:
    raise ValueError(f"apply_rope needs an even last dim to pair up; got {d}.")
  inv_freq_J = base ** (-jnp.arange(0, d, 2, dtype=jnp.float32) / d)
  angle_LxJ = jnp.asarray(pos, jnp.float32)[..., None, None] * inv_freq_J  # [..., L, 1, d/2]
  cos, sin = jnp.cos(angle_LxJ), jnp.sin(angle_LxJ)
  x1, x2 = jnp.split(x.astype(jnp.float32), 2, axis=-1)
  out = jnp.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin], axis=-1)
  return out.astype(x.dtype)


def rotary_dim(head_dim: int, fraction: float) -> int:
  """`int(head_dim * fraction)`, checked to be even and > 0 (ValueError otherwise)."""
  rot = int(head_dim * fraction)
  if not 0 < fraction <= 1 or rot <= 0 or rot % 2:
    raise ValueError(
        f"RoPE rotates int(head_dim * fraction) = int({head_dim} * {fraction}) = {rot} dims "
        "per head; that must be even and > 0 with 0 < fraction <= 1. Change config key "
        "model.position.fraction (or the head dim).")
  return rot


class RoPE(base.PositionScheme):
  """Rotates queries and keys by their positions (rotate-half convention).

  Attributes:
    base: wavelength base of the rotation frequencies.
    fraction: fraction of each head's dims that is rotated (the first
      `int(head_dim * fraction)`; must be even and > 0); the rest pass through.
  """

  is_relative = True
  base: float = 10000.0
  fraction: float = 1.0

  def setup(self):
    self.rot_dim = rotary_dim(self.head_dim, self.fraction)

  def rotate(self, x_BxLxHxK: Array, pos_BxL: Array) -> Array:
    """`apply_rope` on the first `rot_dim` dims of each head, the rest unchanged."""
    if self.rot_dim == x_BxLxHxK.shape[-1]:
      return apply_rope(x_BxLxHxK, pos_BxL, self.base)
    rot_BxLxHxR = apply_rope(x_BxLxHxK[..., :self.rot_dim], pos_BxL, self.base)
    return jnp.concatenate([rot_BxLxHxR, x_BxLxHxK[..., self.rot_dim:]], axis=-1)
