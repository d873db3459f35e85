"""Sinusoidal absolute positions (Vaswani et al. 2017, "Attention Is All You Need", §3.5;
d2l.ai §11.6.3 "Positional Encoding").

Interleaved convention, as in d2l:

    P[pos, 2j]   = sin(pos / base**(2j / dim))
    P[pos, 2j+1] = cos(pos / base**(2j / dim))

and the encoder/decoder input is `X + P` (d2l adds P to the embeddings without the
`sqrt(d_model)` factor of Vaswani et al.; the model decides about that scale).
P is computed from integer positions, so any length (and any position, e.g.
randomized ones) is encoded without a table.
"""

from __future__ import annotations

from typing import Mapping

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from relpos_jax.positions import base

Array = jax.Array


def sinusoidal_encoding(pos: Array, dim: int, base: float = 10000.0) -> Array:
  """The d2l / Vaswani sinusoid of integer positions.

  Args:
    pos: integer positions, any shape `S`.
    dim: encoding width; must be even.
    base: wavelength base (10000 in the paper).

  Returns:
    float32 array of shape `S + (dim,)` with `[..., 2j] = sin(pos / base**(2j/dim))`
    and `[..., 2j+1] = cos(pos / base**(2j/dim))`.

  Raises:
    ValueError: if `dim` is odd or not positive.
  """
  if dim <= 0 or dim % 2:
    raise ValueError(f"sinusoidal_encoding needs an even, positive dim; got {dim}. "
                     "Use an even d_model (config key model.d_model).")
  inv_freq_J = base ** (-jnp.arange(0, dim, 2, dtype=jnp.float32) / dim)
  angle_SxJ = jnp.asarray(pos, jnp.float32)[..., None] * inv_freq_J
  # Interleave: [sin_0, cos_0, sin_1, cos_1, ...].
  return jnp.stack([jnp.sin(angle_SxJ), jnp.cos(angle_SxJ)], axis=-1).reshape(
      angle_SxJ.shape[:-1] + (dim,))


class Sinusoidal(base.PositionScheme):
  """Adds `sinusoidal_encoding(pos, d_model, base)` to the input embeddings.

  Attributes:
    base: wavelength base of the sinusoid.
  """

  base: float = 10000.0

  def embed(self, x_BxLxD: Array, pos_BxL: Array) -> Array:
    """`x + P(pos)`, added in float32 (one rounding to x's dtype)."""
    p_BxLxD = sinusoidal_encoding(pos_BxL, self.d_model, self.base)
    return (x_BxLxD.astype(jnp.float32) + p_BxLxD).astype(x_BxLxD.dtype)

  @nn.nowrap
  def figures(self, params: Mapping[str, Array], *,
              max_train_distance: int | None = None) -> list[base.FigurePanel]:
    """"sinusoid": the encoding as an image, positions × dimensions.

    Positions reach 4 × (max_train_distance + 1) (128 if not given), the last
    position seen in training marked.
    """
    del params  # nothing learned
    num_positions = 4 * (max_train_distance + 1) if max_train_distance else 128
    pos_P = np.arange(num_positions)
    return [base.FigurePanel(
        figure="sinusoid", figure_title=f"sinusoidal encoding (dim={self.d_model}, "
        f"base={self.base:g})", title="", x_label="position",
        y_label="dimension (even: sin, odd: cos)", x_X=pos_P,
        marks=({"last position seen in training": (max_train_distance + 0.5,)}
               if max_train_distance else {}),
        image_XxC=np.asarray(sinusoidal_encoding(jnp.asarray(pos_P), self.d_model, self.base)))]
