"""Tests of KERPLE-log (positions/kerple.py) against the paper's formula in numpy."""

import math

import jax
import jax.numpy as jnp
import numpy as np

from relpos_jax import positions
from relpos_jax.positions import kerple

B, L, H, K = 2, 6, 3, 4


def _scheme(causal=True, **overrides):
  cfg = positions.default_config("kerple")
  cfg.update(overrides)
  return positions.make_scheme(cfg, num_heads=H, head_dim=K, d_model=H * K, causal=causal)


def _numpy_bias(qpos, kpos, r1, r2):
  """Chi et al. 2022, the logarithmic kernel: -r1 log(1 + r2 |m - n|), one entry at a time."""
  out = np.zeros((qpos.shape[0], len(r1), qpos.shape[1], kpos.shape[1]))
  for b in range(qpos.shape[0]):
    for h in range(len(r1)):
      for i, m in enumerate(qpos[b]):
        for j, n in enumerate(kpos[b]):
          out[b, h, i, j] = -r1[h] * math.log(1 + r2[h] * abs(int(m) - int(n)))
  return out


def test_bias_hand_worked():
  qpos = jnp.array([[3]])
  kpos = jnp.array([[3, 2, 0, 6]])
  got = kerple.kerple_log_bias(qpos, kpos, jnp.array([1.0, 2.0]), jnp.array([1.0, 0.5]))
  want = [[0, -math.log(2), -math.log(4), -math.log(4)],           # r1 = 1, r2 = 1
          [0, -2 * math.log(1.5), -2 * math.log(2.5), -2 * math.log(2.5)]]  # r1 = 2, r2 = .5
  np.testing.assert_allclose(got[0, :, 0], want, rtol=1e-6)


def test_module_bias_matches_numpy_formula_with_its_parameters():
  scheme = _scheme()
  rng = np.random.default_rng(0)
  qpos = rng.integers(0, 50, (B, L))
  kpos = rng.integers(0, 50, (B, L + 1))
  q, k = jnp.zeros((B, L, H, K)), jnp.zeros((B, L + 1, H, K))
  variables = scheme.init(jax.random.PRNGKey(3), q, k, qpos, kpos, method="logit_bias")
  got = scheme.apply(variables, q, k, qpos, kpos, method="logit_bias")
  p = variables["params"]
  r1 = np.log1p(np.exp(np.asarray(p["rho1"], np.float64)))  # softplus, independently
  r2 = np.log1p(np.exp(np.asarray(p["rho2"], np.float64)))
  assert got.shape == (B, H, L, L + 1)
  np.testing.assert_allclose(got, _numpy_bias(qpos, kpos, r1, r2), rtol=1e-5, atol=1e-6)


def test_init_matches_reference_ranges_and_stays_positive():
  """r1 ~ U(0.01, 2), r2 ~ U(0.01, 1), as the reference's init after its clamp at 0.01."""
  scheme = _scheme()
  r1s, r2s = [], []
  for seed in range(40):
    p = scheme.init(jax.random.PRNGKey(seed), method=lambda m: m.kernel_parameters())["params"]
    r1, r2 = scheme.apply({"params": p}, method=lambda m: m.kernel_parameters())
    r1s.append(r1), r2s.append(r2)
  r1s, r2s = np.concatenate(r1s), np.concatenate(r2s)
  assert 0.01 <= r1s.min() and r1s.max() < 2.0 + 1e-5 and r1s.max() > 1.5
  assert 0.01 <= r2s.min() and r2s.max() < 1.0 + 1e-5 and r2s.max() > 0.75
  r1, r2 = scheme.apply({"params": {"rho1": jnp.full((H,), -30.0), "rho2": jnp.full((H,), -30.0)}},
                        method=lambda m: m.kernel_parameters())
  assert np.all(np.asarray(r1) > 0) and np.all(np.asarray(r2) > 0)


def test_bias_is_symmetric_and_decreasing_in_distance():
  pos = jnp.arange(8)[None]
  bias = np.asarray(kerple.kerple_log_bias(pos, pos, jnp.ones(2), jnp.ones(2)))[0]
  np.testing.assert_array_equal(bias, np.swapaxes(bias, -1, -2))
  assert np.all(np.diff(bias[:, 0, :], axis=-1) < 0)
