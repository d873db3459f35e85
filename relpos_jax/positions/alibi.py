"""ALiBi: attention with linear biases (Press, Smith & Lewis 2022, "Train Short, Test
Long: Attention with Linear Biases Enables Input Length Extrapolation", ICLR, §3).

Each head h adds a fixed, non-learned penalty proportional to the query-key
distance:

    score_ij = q_i · k_j / sqrt(E) - m_h · |i - j|      (i: query, j: key position)

with head slopes `m_h` a geometric sequence (`alibi_slopes`). The paper defines
ALiBi for causal language models, where every unmasked key has j <= i and the
bias is `-m_h (i - j)`; `|i - j|` is the same number there and gives the
symmetric form used for bidirectional (encoder) attention. This module uses
`-m_h |i - j|` in both settings: in a causal decoder the future keys (j > i)
are masked by attention, and get the finite value `-m_h (j - i) <= 0` here.

The paper adds the bias without a scale; so does this module (`q·k` alone is
scaled by `1/sqrt(E)`). There are no parameters.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np

from relpos_jax.positions import base

Array = jax.Array


def _power_of_2_slopes(n: int) -> list[float]:
  """`2**(-8 (h+1) / n)` for h = 0..n-1 (n a power of 2)."""
  return [2.0 ** (-8.0 * (h + 1) / n) for h in range(n)]


def alibi_slopes(num_heads: int) -> np.ndarray:
  """The head slopes of Press et al.'s reference code (`get_slopes`).

  For n a power of 2: `start = 2**(-8/n)` and slope h is `start**(h+1)`, i.e.
  `2**(-8/n), 2**(-16/n), ..., 2**(-8)`. Otherwise, with `c` the largest power of
  2 below n: the c slopes of `c` heads, then every other slope of `2c` heads
  (`get_slopes(2c)[0::2]`) up to n in total. E.g. 12 heads: `2**-1 ... 2**-8`,
  then `2**-0.5, 2**-1.5, 2**-2.5, 2**-3.5`.

  Args:
    num_heads: number of heads n >= 1.

  Returns:
    float32 numpy array `[num_heads]` (a constant: nothing is learned).

  Raises:
    ValueError: if `num_heads < 1`.
  """
  if num_heads < 1:
    raise ValueError(f"alibi_slopes needs num_heads >= 1; got {num_heads}.")
  if math.log2(num_heads).is_integer():
    return np.asarray(_power_of_2_slopes(num_heads), np.float32)
  closest = 2 ** math.floor(math.log2(num_heads))
  extra = alibi_slopes(2 * closest)[0::2][:num_heads - closest]
  return np.concatenate([np.asarray(_power_of_2_slopes(closest), np.float32), extra])


def alibi_bias(qpos_BxQ: Array, kpos_BxK: Array, slopes_H: Array) -> Array:
  """`-m_h |qpos_i - kpos_j|`.

  Args:
    qpos_BxQ: integer query positions.
    kpos_BxK: integer key positions.
    slopes_H: head slopes `m_h` (`alibi_slopes`).

  Returns:
    float32 bias `[B, H, Q, K]`.
  """
  dist_BxQxK = jnp.abs(qpos_BxQ[:, :, None].astype(jnp.int32)
                       - kpos_BxK[:, None, :].astype(jnp.int32))
  slopes_H = jnp.asarray(slopes_H, jnp.float32)
  return -slopes_H[None, :, None, None] * dist_BxQxK[:, None].astype(jnp.float32)


class ALiBi(base.PositionScheme):
  """A fixed per-head linear penalty `-m_h |i - j|` on the attention logits."""

  is_relative = True

  def logit_bias(self, q_BxQxHxE, k_BxKxHxE, qpos_BxQ, kpos_BxK):
    """`-m_h |qpos_i - kpos_j|` as float32 `[B, H, Q, K]`."""
    del q_BxQxHxE, k_BxKxHxE
    return alibi_bias(qpos_BxQ, kpos_BxK, alibi_slopes(self.num_heads))
