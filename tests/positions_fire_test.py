"""Tests of FIRE (positions/fire.py) against the paper's formula in numpy."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from relpos_jax import positions
from relpos_jax.positions import fire

B, L, H, K = 2, 6, 3, 4


def _scheme(causal=True, **overrides):
  cfg = positions.default_config("fire")
  cfg.update(overrides)
  return positions.make_scheme(cfg, num_heads=H, head_dim=K, d_model=H * K, causal=causal)


def _numpy_fire(qpos, kpos, params, init_threshold, bidirectional):
  """Li et al. 2023, eq. 4 with the appendix module's parameterisation, float64, entry by entry:
  f(ψ(i - j) / ψ(max(L, i))), ψ(x) = log(|c| x + 1), L = |λ L0|, f = Dense-ReLU-Dense."""
  c = abs(float(params["c"]))
  L_ = abs(float(params["threshold_multiplier"]) * init_threshold)
  w1 = np.asarray(params["mlp_hidden"]["kernel"], np.float64)[0]
  b1 = np.asarray(params["mlp_hidden"]["bias"], np.float64)
  w2 = np.asarray(params["mlp_out"]["kernel"], np.float64)
  b2 = np.asarray(params["mlp_out"]["bias"], np.float64)
  psi = lambda x: math.log(c * x + 1)
  out = np.zeros((qpos.shape[0], w2.shape[1], qpos.shape[1], kpos.shape[1]))
  for b in range(qpos.shape[0]):
    for qi, i in enumerate(qpos[b]):
      for kj, j in enumerate(kpos[b]):
        x = psi(abs(int(i) - int(j))) / (psi(max(L_, float(i))) + 1e-6)
        if bidirectional and j > i:
          x = -x
        out[b, :, qi, kj] = np.maximum(x * w1 + b1, 0) @ w2 + b2
  return out


def test_inputs_hand_worked():
  """c = 1, L = 3: query 3 sees keys 3, 2, 0 at log 1/log 4, log 2/log 4, log 4/log 4."""
  qpos, kpos = jnp.array([[3, 7, 0]]), jnp.array([[3, 2, 0]])
  got = np.asarray(fire.fire_inputs(qpos, kpos, c=1.0, threshold=3.0, bidirectional=False))[0]
  np.testing.assert_allclose(got[0], [0.0, 0.5, 1.0], rtol=1e-5)
  np.testing.assert_allclose(got[1], [math.log(5) / math.log(8), math.log(6) / math.log(8), 1.0],
                             rtol=1e-5)  # query 7 > L: normalised by ψ(7) = log 8
  np.testing.assert_allclose(got[2], [1.0, math.log(3) / math.log(4), 0.0], rtol=1e-5)  # mirrored
  bi = np.asarray(fire.fire_inputs(qpos, kpos, c=1.0, threshold=3.0, bidirectional=True))[0]
  np.testing.assert_allclose(bi[2], [-1.0, -math.log(3) / math.log(4), 0.0], rtol=1e-5)
  np.testing.assert_allclose(bi[:2], got[:2], rtol=1e-6)  # keys at or before the query: same


def test_inputs_of_a_long_query_stay_in_unit_interval():
  """Progressive interpolation: every distance a query sees maps into [0, 1]."""
  pos = jnp.arange(2000)[None]
  x = fire.fire_inputs(pos[:, -1:], pos, c=0.1, threshold=512.0, bidirectional=False)
  assert float(x.max()) <= 1.0 and float(x.min()) >= 0.0 and float(x[0, 0, 0]) > 0.999


@pytest.mark.parametrize("causal", [True, False])
def test_module_bias_matches_numpy_formula_with_its_parameters(causal):
  scheme = _scheme(causal, init_threshold=8.0, init_c=0.7)
  rng = np.random.default_rng(0)
  qpos = rng.integers(0, 30, (B, L))
  kpos = rng.integers(0, 30, (B, L + 1))
  q, k = jnp.zeros((B, L, H, K)), jnp.zeros((B, L + 1, H, K))
  variables = scheme.init(jax.random.PRNGKey(3), q, k, qpos, kpos, method="logit_bias")
  params = jax.tree_util.tree_map(  # nonzero biases, threshold moved off its init
      lambda p: p + 0.3 * jax.random.normal(jax.random.PRNGKey(5), p.shape), variables["params"])
  got = scheme.apply({"params": params}, q, k, qpos, kpos, method="logit_bias")
  assert got.shape == (B, H, L, L + 1)
  want = _numpy_fire(qpos, kpos, params, 8.0, bidirectional=not causal)
  np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


def test_parameters_and_defaults_are_the_papers():
  scheme = _scheme()
  params = scheme.init(jax.random.PRNGKey(0), jnp.zeros((1, 1, H, K)), jnp.zeros((1, 1, H, K)),
                       jnp.zeros((1, 1), jnp.int32), jnp.zeros((1, 1), jnp.int32),
                       method="logit_bias")["params"]
  assert float(params["c"]) == pytest.approx(0.1)
  assert float(params["threshold_multiplier"]) == 1.0
  assert params["mlp_hidden"]["kernel"].shape == (1, 32)
  assert params["mlp_out"]["kernel"].shape == (32, H)


def test_threshold_and_c_are_learned():
  """The bias has a gradient with respect to c and the threshold multiplier (a query past L)."""
  scheme = _scheme(init_threshold=4.0)
  qpos, kpos = jnp.array([[2, 9]]), jnp.array([[0, 1, 2, 5, 9]])
  q, k = jnp.zeros((1, 2, H, K)), jnp.zeros((1, 5, H, K))
  params = scheme.init(jax.random.PRNGKey(1), q, k, qpos, kpos, method="logit_bias")["params"]
  loss = lambda p: scheme.apply({"params": p}, q, k, qpos, kpos, method="logit_bias").sum()
  grads = jax.grad(loss)(params)
  assert float(jnp.abs(grads["c"])) > 0 and float(jnp.abs(grads["threshold_multiplier"])) > 0
