"""Tests of Transformer-XL relative positions (positions/xl.py) against naive references."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from relpos_jax import positions
from relpos_jax.positions import sinusoidal
from relpos_jax.positions import xl

B, H, K = 2, 3, 4
D = H * K


def _scheme(causal=False, d_model=D, **overrides):
  cfg = positions.default_config("xl")
  cfg.update(overrides)
  return positions.make_scheme(cfg, num_heads=H, head_dim=K, d_model=d_model, causal=causal)


def _inputs(Q, S, rel_dim=D, seed=0):
  """q, k, u, v, w_r."""
  rng = np.random.default_rng(seed)
  shapes = [(B, Q, H, K), (B, S, H, K), (H, K), (H, K), (rel_dim, H, K)]
  return tuple(jnp.asarray(rng.normal(size=s) * (0.3 if len(s) == 3 else 1.0), jnp.float32)
               for s in shapes)


def _sorted_positions(rng, shape, high):
  return jnp.asarray(np.sort(rng.integers(0, high, shape), axis=1), jnp.int32)


def _naive(q, k, qpos, kpos, u, v, w_r, clip):
  """Terms (b)-(d) with an explicit `B x Q x K x H x K` tensor of W_R R_{i-j}."""
  rel = qpos[:, :, None] - kpos[:, None, :]
  if clip:
    rel = jnp.clip(rel, -clip, clip)
  wr_BxQxSxHxK = jnp.einsum("bqsd,dhk->bqshk",
                            sinusoidal.sinusoidal_encoding(rel, w_r.shape[0]), w_r)
  term_b = jnp.einsum("bqhk,bqshk->bhqs", q, wr_BxQxSxHxK)
  term_c = jnp.einsum("hk,bshk->bhs", u, k)[:, :, None, :]
  term_d = jnp.einsum("hk,bqshk->bhqs", v, wr_BxQxSxHxK)
  return (term_b + term_c + term_d) / math.sqrt(q.shape[-1])


def _numpy_loops(q, k, qpos, kpos, u, v, w_r, clip):
  """The paper's eq. for terms (b)-(d), one (b, h, i, j) at a time, float64."""
  q, k, u, v, w_r = (np.asarray(a, np.float64) for a in (q, k, u, v, w_r))
  d = w_r.shape[0]
  out = np.zeros((q.shape[0], q.shape[2], q.shape[1], k.shape[1]))
  for b in range(q.shape[0]):
    for qi, i in enumerate(np.asarray(qpos[b])):
      for kj, j in enumerate(np.asarray(kpos[b])):
        r = int(i - j) if not clip else int(np.clip(i - j, -clip, clip))
        R = np.zeros(d)
        for f in range(d // 2):
          R[2 * f] = math.sin(r / 10000 ** (2 * f / d))
          R[2 * f + 1] = math.cos(r / 10000 ** (2 * f / d))
        for h in range(q.shape[2]):
          wr = R @ w_r[:, h, :]
          out[b, h, qi, kj] = (q[b, qi, h] @ wr + u[h] @ k[b, kj, h] + v[h] @ wr) / math.sqrt(
              q.shape[-1])
  return out


def _values_and_grads(f):
  """jit(args -> (f(args), grad of sum(sin(f)) w.r.t. every arg)), one compile."""
  def run(*args):
    out, vjp = jax.vjp(f, *args)
    return out, vjp(jnp.cos(out))
  return jax.jit(run)


@pytest.mark.parametrize("Q,S,high,rel_dim,clip", [
    (6, 6, 40, D, 0),  # self-attention: both signs of i - j
    (6, 6, 40, D, 3),
    (5, 9, 200, 6, 0),  # more keys than queries, R narrower than d_model
    (1, 8, 8, D, 3),  # a decode step: one query against the cache slots
])
def test_efficient_equals_naive_values_and_grads(Q, S, high, rel_dim, clip):
  rng = np.random.default_rng(Q * 100 + S + clip)
  qpos = _sorted_positions(rng, (B, Q), high)
  kpos = _sorted_positions(rng, (B, S), high)
  args = _inputs(Q, S, rel_dim)
  got, g_eff = _values_and_grads(
      lambda *a: xl.relative_logits(*a[:2], qpos, kpos, *a[2:], clip=clip))(*args)
  want, g_naive = _values_and_grads(lambda *a: _naive(*a[:2], qpos, kpos, *a[2:], clip))(*args)
  assert got.shape == (B, H, Q, S)
  np.testing.assert_allclose(got, want, atol=3e-5)
  np.testing.assert_allclose(got, _numpy_loops(*args[:2], qpos, kpos, *args[2:], clip),
                             atol=3e-5)
  for name, a, b in zip(("q", "k", "u", "v", "w_r"), g_eff, g_naive):
    np.testing.assert_allclose(a, b, atol=1e-4, err_msg=f"grad wrt {name}")


@pytest.mark.parametrize("clip", [0, 2])
@pytest.mark.parametrize("causal", [False, True])
def test_module_translation_invariant_at_arbitrary_positions(clip, causal):
  scheme = _scheme(causal, clip=clip)
  q, k = _inputs(5, 6)[:2]
  rng = np.random.default_rng(clip)
  qpos, kpos = _sorted_positions(rng, (B, 5), 300), _sorted_positions(rng, (B, 6), 300)
  variables = scheme.init(jax.random.PRNGKey(0), q, k, qpos, kpos, method="logit_bias")
  bias_fn = jax.jit(lambda qp, kp: scheme.apply(variables, q, k, qp, kp, method="logit_bias"))
  bias = bias_fn(qpos, kpos)
  for shift in (1, 1000, 123457):
    np.testing.assert_allclose(bias_fn(qpos + shift, kpos + shift), bias, atol=1e-6)


def test_module_params_and_bias():
  scheme = _scheme(clip=4)
  q, k = _inputs(5, 5)[:2]
  pos = jnp.broadcast_to(jnp.arange(5) * 3, (B, 5))
  variables = scheme.init(jax.random.PRNGKey(0), q, k, pos, pos, method="logit_bias")
  p = variables["params"]
  assert {n: v.shape for n, v in p.items()} == {"u": (H, K), "v": (H, K), "w_r": (D, H, K)}
  bias = scheme.apply(variables, q, k, pos, pos, method="logit_bias")
  np.testing.assert_allclose(bias, _naive(q, k, pos, pos, p["u"], p["v"], p["w_r"], clip=4),
                             atol=1e-5)
  assert positions.SCHEMES["xl"].is_relative
  assert not positions.SCHEMES["xl"].implements("value_term")


def test_rel_dim_sets_the_sinusoid_width():
  scheme = _scheme(rel_dim=8)
  q, k = _inputs(3, 3)[:2]
  pos = jnp.arange(3)[None].repeat(B, 0)
  shapes = jax.eval_shape(lambda: scheme.init(jax.random.PRNGKey(0), q, k, pos, pos,
                                              method="logit_bias"))
  assert shapes["params"]["w_r"].shape == (8, H, K)


def test_clipping_makes_far_distances_equal():
  q, k, u, v, w_r = _inputs(1, 4)
  qpos = jnp.full((B, 1), 50)
  kpos = jnp.broadcast_to(jnp.array([0, 10, 46, 47]), (B, 4))  # i - j = 50, 40, 4, 3
  logits = jax.jit(xl.relative_logits, static_argnames="clip")
  bias = logits(q, k * 0, qpos, kpos, u, v, w_r, clip=3)
  np.testing.assert_allclose(bias[..., 0], bias[..., 3], atol=1e-6)
  np.testing.assert_allclose(bias[..., 1], bias[..., 3], atol=1e-6)
  unclipped = logits(q, k * 0, qpos, kpos, u, v, w_r, clip=0)
  assert not np.allclose(unclipped[..., 0], unclipped[..., 3], atol=1e-3)


@pytest.mark.parametrize("overrides,d_model,match", [
    (dict(clip=-1), D, r"model\.position\.clip"),
    (dict(rel_dim=7), D, r"model\.position\.rel_dim"),
    (dict(rel_dim=-2), D, r"model\.position\.rel_dim"),
    (dict(), 9, r"model\.position\.rel_dim.*d_model"),
])
def test_bad_config_raises(overrides, d_model, match):
  scheme = _scheme(d_model=d_model, **overrides)
  q, k = _inputs(2, 2)[:2]
  pos = jnp.zeros((B, 2), jnp.int32)
  with pytest.raises(ValueError, match=match):
    scheme.init(jax.random.PRNGKey(0), q, k, pos, pos, method="logit_bias")
