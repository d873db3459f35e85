"""Learned absolute positions: a trainable table of `max_len` rows added to the
input embeddings (Gehring et al. 2017, "Convolutional Sequence to Sequence
Learning"; the variant Vaswani et al. 2017 compare against in Table 3 (E); BERT).

    x'_i = x_i + E[pos_i],   E in R^{max_len x d_model}

The table cannot encode a position >= max_len. JAX clamps out-of-range gathers
silently, so this module refuses them: concrete positions raise `ValueError`
naming the config key, and positions traced inside `jit` gather with
`mode="fill"` (NaN), so the loss turns NaN (and the trainer stops) instead of
silently reusing the last row.
"""

from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from relpos_jax.positions import base

Array = jax.Array

_KEY = "model.position.max_len"


def check_table_positions(pos, max_len: int) -> None:
  """Raises ValueError if concrete `pos` holds a position outside `[0, max_len)`.

  Traced positions (inside `jit`) cannot be inspected and are left alone.
  """
  if isinstance(pos, jax.core.Tracer):
    return
  pos = np.asarray(pos)
  if pos.size and (pos.max() >= max_len or pos.min() < 0):
    raise ValueError(
        f"learned positions: got position {int(pos.max())} but the table has only "
        f"{max_len} rows (positions 0..{max_len - 1}); raise config key {_KEY} "
        f"to at least {int(pos.max()) + 1}.")


class Learned(base.PositionScheme):
  """Adds a learned row per absolute position to the input embeddings.

  Attributes:
    max_len: rows of the table: the largest encodable position is max_len - 1.
  """

  max_len: int = 512

  def setup(self):
    self.table = self.param("table", nn.initializers.normal(0.02),
                            (self.max_len, self.d_model))

  def embed(self, x_BxLxD: Array, pos_BxL: Array) -> Array:
    """`x + E[pos]`, added in float32; out-of-range positions raise (eager) or give NaN (traced)."""
    check_table_positions(pos_BxL, self.max_len)
    e_BxLxD = jnp.take(self.table, pos_BxL, axis=0, mode="fill", fill_value=jnp.nan)
    return (x_BxLxD.astype(jnp.float32) + e_BxLxD.astype(jnp.float32)).astype(x_BxLxD.dtype)

  def check_positions(self, max_position: int) -> None:
    """Raises ValueError unless positions `0..max_position-1` fit in the table."""
    if max_position > self.max_len:
      raise ValueError(
          f"learned positions: need positions up to {max_position - 1} but the table "
          f"has {self.max_len} rows; raise config key {_KEY} to at least {max_position}.")
