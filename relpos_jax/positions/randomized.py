"""Randomized positions (Ruoss et al. 2023, "Randomized Positional Encodings Boost
Length Generalization of Transformers", ACL, §3).

A switch that applies to every scheme, because schemes are functions of explicit
positions: during training a sequence of length L gets the positions

    sort(sample_without_replacement([0, max_random_position), L))

instead of 0..L-1, so the model sees position values (and gaps) of every size up
to `max_random_position` while training only on short sequences. At evaluation
positions are 0..L-1. A learned table must then have `max_random_position` rows
(checked by the trainer).
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import ml_collections

Array = jax.Array


def sample_positions(rng: Array, batch: int, length: int, *, max_random_position: int,
                     per_example: bool = True) -> Array:
  """Sorted random positions without replacement.

  Args:
    rng: PRNG key.
    batch: B.
    length: L (<= max_random_position).
    max_random_position: positions are drawn from [0, max_random_position).
    per_example: a fresh sample per row (True) or one sample shared by the batch.

  Returns:
    int32 `[B, L]`, each row strictly increasing, values in range.

  Raises:
    ValueError: if L > max_random_position.
  """
  if length > max_random_position:
    raise ValueError(f"cannot draw {length} distinct positions from [0, {max_random_position}); "
                     "raise config key randomized.max_random_position.")

  def one_row(key):
    # Top-L of uniform noise = a uniform L-subset without replacement.
    noise = jax.random.uniform(key, (max_random_position,))
    _, idx = jax.lax.top_k(noise, length)
    return jnp.sort(idx).astype(jnp.int32)

  if per_example:
    return jax.vmap(one_row)(jax.random.split(rng, batch))
  return jnp.broadcast_to(one_row(rng), (batch, length))


@dataclasses.dataclass(frozen=True)
class RandomizedPositions:
  """The `randomized` config: whether and how training positions are randomized.

  Attributes:
    enabled: randomize training positions (evaluation always uses 0..L-1).
    max_random_position: positions are drawn from [0, max_random_position).
    per_example: a fresh sample per example (True) or one per batch.
  """

  enabled: bool = False
  max_random_position: int = 2048
  per_example: bool = True

  def train_positions(self, rng: Array, batch: int, length: int) -> Array | None:
    """Training positions `[B, L]`, or None for the default 0..L-1."""
    if not self.enabled:
      return None
    return sample_positions(rng, batch, length, max_random_position=self.max_random_position,
                            per_example=self.per_example)


def default_config() -> ml_collections.ConfigDict:
  """The `randomized` config: `RandomizedPositions`' fields with their defaults."""
  return ml_collections.ConfigDict(
      {f.name: f.default for f in dataclasses.fields(RandomizedPositions)})
