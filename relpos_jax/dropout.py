"""Dropout drawn from 16-bit random integers: `flax.linen.Dropout`'s semantics, half the hashing.

Inverted dropout (Srivastava et al. 2014): each element is kept with probability
1 − p and scaled by 1 / (1 − p), so its expectation is unchanged:

    dropout(x)_i = x_i / (1 − p) · [u_i ≥ t],   u_i ~ uniform over {0, ..., 2^16 − 1},
    t = round(rate · 2^16),                      p = t / 2^16 (= rate to within 2^-17).

`nn.Dropout` draws `jax.random.bernoulli(rng, 1 − rate, shape)`: one 32-bit
threefry output per element, turned into a float in [0, 1) and compared. On
XLA:CPU that hashing is most of dropout's cost, and T5-style dropout masks a lot
of elements (every attention weight, [B, H, Q, K], and every MLP hidden unit): at
the RPE benchmark's size dropout 0.1 made the train step about a third slower
than dropout 0 (benchmarks/records/rpe/). Here each 32-bit output gives two 16-bit
draws, so half as many are hashed; in that benchmark our step went from 1.33–1.35×
to 1.18× the peer's (`sinusoidal`, same-run ratios, RESULTS.md against
RESULTS_uint16_dropout.md there). The masks differ from `nn.Dropout`'s for the
same key; training stays a pure function of (seed, step).
"""

from __future__ import annotations

import math

import flax.linen as nn
import jax
import jax.numpy as jnp

Array = jax.Array
_TWO_16 = 2 ** 16


def keep_threshold(rate: float) -> int:
  """t of the module doc: an element is kept iff its uint16 draw is ≥ t (t ≤ 2^16 − 1)."""
  if not 0.0 <= rate <= 1.0:
    raise ValueError(f"dropout rate must be in [0, 1], got {rate}")
  return min(round(rate * _TWO_16), _TWO_16 - 1)


def random_uint16(rng: Array, shape: tuple[int, ...]) -> Array:
  """Uniform uint16 draws: each 32-bit threefry output split in two halves."""
  n = math.prod(shape)
  words = jax.random.bits(rng, ((n + 1) // 2,), jnp.uint32)
  return jax.lax.bitcast_convert_type(words, jnp.uint16).reshape(-1)[:n].reshape(shape)


def dropout(rng: Array, x: Array, rate: float) -> Array:
  """Inverted dropout of `x` (module doc).

  Args:
    rng: PRNG key.
    x: any shape and float dtype.
    rate: the drop probability, in [0, 1] (1: all zeros).

  Returns:
    `x`'s shape and dtype: each element zeroed with probability t / 2^32, the
    others divided by 1 − t / 2^32.
  """
  if rate == 0.0:
    return x
  if rate == 1.0:
    return jnp.zeros_like(x)
  threshold = keep_threshold(rate)
  keep = random_uint16(rng, x.shape) >= jnp.uint16(threshold)
  keep_prob = 1.0 - threshold / _TWO_16
  return jnp.where(keep, x / jnp.asarray(keep_prob, x.dtype), jnp.zeros((), x.dtype))


class Dropout(nn.Module):
  """`dropout` with the `"dropout"` rng stream, as `nn.Dropout` (same call signature)."""

  rate: float

  @nn.compact
  def __call__(self, x: Array, deterministic: bool) -> Array:
    if deterministic or self.rate == 0.0:
      return x
    return dropout(self.make_rng("dropout"), x, self.rate)
