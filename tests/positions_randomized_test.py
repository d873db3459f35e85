"""Randomized positions: sorted, unique, in range, reproducible."""

import jax
import numpy as np
import pytest

from relpos_jax.positions import randomized


@pytest.mark.parametrize("per_example", [True, False])
def test_sorted_unique_in_range(per_example):
  pos = np.asarray(randomized.sample_positions(jax.random.PRNGKey(0), 16, 40,
                                               max_random_position=64, per_example=per_example))
  assert pos.shape == (16, 40) and pos.dtype == np.int32
  assert np.all(np.diff(pos, axis=1) > 0)  # sorted and unique
  assert pos.min() >= 0 and pos.max() < 64
  rows_differ = len({tuple(r) for r in pos}) > 1
  assert rows_differ == per_example


def test_reproducible_by_seed_and_covers_the_range():
  a = randomized.sample_positions(jax.random.PRNGKey(3), 4, 10, max_random_position=2048)
  b = randomized.sample_positions(jax.random.PRNGKey(3), 4, 10, max_random_position=2048)
  c = randomized.sample_positions(jax.random.PRNGKey(4), 4, 10, max_random_position=2048)
  np.testing.assert_array_equal(a, b)
  assert not np.array_equal(a, c)
  many = np.asarray(randomized.sample_positions(jax.random.PRNGKey(5), 512, 5,
                                                max_random_position=100))
  counts = np.bincount(many.ravel(), minlength=100)
  assert counts.min() > 0  # every position is drawn
  assert counts.max() < 3 * counts.mean()  # roughly uniform


def test_full_range_is_a_permutation_and_too_long_raises():
  pos = np.asarray(randomized.sample_positions(jax.random.PRNGKey(0), 2, 8, max_random_position=8))
  np.testing.assert_array_equal(pos, np.broadcast_to(np.arange(8), (2, 8)))
  with pytest.raises(ValueError, match="max_random_position"):
    randomized.sample_positions(jax.random.PRNGKey(0), 2, 9, max_random_position=8)


def test_disabled_gives_none():
  assert randomized.RandomizedPositions().train_positions(jax.random.PRNGKey(0), 2, 3) is None
  cfg = randomized.RandomizedPositions(enabled=True, max_random_position=50)
  assert cfg.train_positions(jax.random.PRNGKey(0), 2, 3).shape == (2, 3)
