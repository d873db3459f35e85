"""relpos_jax/dropout.py: inverted dropout from 32-bit random integers."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from relpos_jax import dropout as dropout_lib


def test_the_mask_compares_16_bit_halves_of_the_threefry_words_with_the_threshold():
  rng, x = jax.random.PRNGKey(3), jax.random.normal(jax.random.PRNGKey(4), (7, 33))
  out = np.asarray(dropout_lib.dropout(rng, x, 0.3))
  words = np.asarray(jax.random.bits(rng, ((x.size + 1) // 2,), jnp.uint32))
  halves = np.stack([words & 0xFFFF, words >> 16], axis=-1).reshape(-1)[:x.size]
  threshold = round(0.3 * 2 ** 16)
  keep = halves.reshape(x.shape) >= threshold
  np.testing.assert_allclose(out, np.where(keep, np.asarray(x) / (1 - threshold / 2 ** 16), 0.0),
                             rtol=1e-6)


def test_keep_rate_and_scale_match_the_rate():
  out = np.asarray(dropout_lib.dropout(jax.random.PRNGKey(0), jnp.ones((1000, 1000)), 0.1))
  kept = out != 0
  # 1e6 draws: the kept fraction's std is 3e-4
  np.testing.assert_allclose(kept.mean(), 0.9, atol=1.5e-3)
  p = dropout_lib.keep_threshold(0.1) / 2 ** 16
  assert abs(p - 0.1) <= 2 ** -17  # the rate, to 16-bit resolution
  np.testing.assert_allclose(out[kept], 1 / (1 - p), rtol=1e-6)
  np.testing.assert_allclose(out.mean(), 1.0, atol=2e-3)  # expectation kept


def test_edge_rates_dtypes_and_bad_rates():
  x = jnp.arange(6, dtype=jnp.bfloat16).reshape(2, 3)
  np.testing.assert_array_equal(dropout_lib.dropout(jax.random.PRNGKey(0), x, 0.0), x)
  np.testing.assert_array_equal(dropout_lib.dropout(jax.random.PRNGKey(0), x, 1.0),
                                np.zeros((2, 3)))
  assert dropout_lib.dropout(jax.random.PRNGKey(0), x, 0.5).dtype == jnp.bfloat16
  assert dropout_lib.keep_threshold(1.0) == 2 ** 16 - 1
  for rate in (-0.1, 1.5):
    with pytest.raises(ValueError, match="dropout rate"):
      dropout_lib.keep_threshold(rate)


def test_the_module_uses_the_dropout_stream_and_is_off_when_deterministic():
  module = dropout_lib.Dropout(0.5)
  x = jnp.ones((4, 8))
  np.testing.assert_array_equal(module.apply({}, x, deterministic=True), x)
  a, b, c = (module.apply({}, x, deterministic=False, rngs={"dropout": jax.random.PRNGKey(k)})
             for k in (1, 1, 2))
  np.testing.assert_array_equal(a, b)  # a pure function of the key
  assert not np.array_equal(a, c)
  assert set(np.unique(np.asarray(a))) <= {0.0, 2.0}
