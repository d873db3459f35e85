"""Tests of ALiBi (positions/alibi.py): the paper's slopes and the bias matrix."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from relpos_jax import positions
from relpos_jax.positions import alibi


def _paper_get_slopes(n):
  """Press et al.'s `get_slopes` (github.com/ofirpress/attention_with_linear_biases), transcribed."""
  def get_slopes_power_of_2(n):
    start = (2 ** (-2 ** -(math.log2(n) - 3)))
    ratio = start
    return [start * ratio ** i for i in range(n)]
  if math.log2(n).is_integer():
    return get_slopes_power_of_2(n)
  closest_power_of_2 = 2 ** math.floor(math.log2(n))
  return (get_slopes_power_of_2(closest_power_of_2)
          + _paper_get_slopes(2 * closest_power_of_2)[0::2][:n - closest_power_of_2])


_HAND_WRITTEN = {
    1: [2 ** -8],
    2: [2 ** -4, 2 ** -8],
    6: [2 ** -2, 2 ** -4, 2 ** -6, 2 ** -8, 2 ** -1, 2 ** -3],
    8: [2 ** -e for e in range(1, 9)],
    12: [2 ** -e for e in range(1, 9)] + [2 ** -0.5, 2 ** -1.5, 2 ** -2.5, 2 ** -3.5],
    16: [2 ** (-e / 2) for e in range(1, 17)],
}


@pytest.mark.parametrize("num_heads", sorted(_HAND_WRITTEN))
def test_slopes_hand_written(num_heads):
  got = alibi.alibi_slopes(num_heads)
  assert got.shape == (num_heads,) and got.dtype == np.float32
  np.testing.assert_allclose(got, _HAND_WRITTEN[num_heads], rtol=1e-6)


def test_slopes_match_paper_code_for_1_to_64_heads():
  for n in range(1, 65):
    np.testing.assert_allclose(alibi.alibi_slopes(n), _paper_get_slopes(n), rtol=1e-6,
                               err_msg=f"num_heads={n}")


def test_slopes_bad_heads_raise():
  with pytest.raises(ValueError, match="num_heads"):
    alibi.alibi_slopes(0)


def _numpy_bias(qpos, kpos, slopes, causal):
  """-m (i - j) for past keys; the module's documented -m (j - i) for future keys."""
  B, Q = qpos.shape
  out = np.zeros((B, len(slopes), Q, kpos.shape[1]))
  for b in range(B):
    for h, m in enumerate(slopes):
      for q_i, i in enumerate(qpos[b]):
        for k_j, j in enumerate(kpos[b]):
          if causal and j > i:
            out[b, h, q_i, k_j] = -m * (j - i)  # masked by attention; finite and <= 0
          elif causal:
            out[b, h, q_i, k_j] = -m * (i - j)
          else:
            out[b, h, q_i, k_j] = -m * abs(i - j)
  return out


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("num_heads", [1, 6, 8])
def test_bias_matches_numpy(causal, num_heads):
  scheme = positions.make_scheme(positions.default_config("alibi"), num_heads=num_heads,
                                 head_dim=4, d_model=4 * num_heads, causal=causal)
  rng = np.random.default_rng(num_heads)
  qpos = np.sort(rng.integers(0, 100, (2, 5)), axis=1)
  kpos = np.sort(rng.integers(0, 100, (2, 7)), axis=1)
  q = jnp.zeros((2, 5, num_heads, 4))
  k = jnp.zeros((2, 7, num_heads, 4))
  bias = scheme.apply({}, q, k, jnp.asarray(qpos), jnp.asarray(kpos), method="logit_bias")
  assert bias.shape == (2, num_heads, 5, 7) and bias.dtype == q.dtype
  want = _numpy_bias(qpos, kpos, _paper_get_slopes(num_heads), causal)
  np.testing.assert_allclose(bias, want, rtol=1e-6)


def test_decode_step_bias_is_minus_slope_times_distance():
  """One query at position t against cache slots 0..M-1."""
  H, t, M = 4, 5, 8
  bias = alibi.alibi_bias(jnp.array([[t]]), jnp.arange(M)[None], alibi.alibi_slopes(H))
  slopes = np.array(_paper_get_slopes(H))
  np.testing.assert_allclose(bias[0, :, 0, :t + 1],
                             -slopes[:, None] * (t - np.arange(t + 1))[None], rtol=1e-6)
  assert np.isfinite(np.asarray(bias)).all()


def test_alibi_has_no_params_and_no_config_keys():
  H, L = 4, 3
  scheme = positions.make_scheme(positions.default_config("alibi"), num_heads=H, head_dim=2,
                                 d_model=2 * H, causal=False)
  q = jnp.ones((1, L, H, 2))
  pos = jnp.arange(L)[None]
  variables = scheme.init(jax.random.PRNGKey(0), q, q, pos, pos, method="logit_bias")
  assert not variables.get("params")
  assert positions.config_fields("alibi") == {}
  assert positions.SCHEMES["alibi"].is_relative
