"""Tests of RoPE (positions/rope.py) against an independent numpy rotate-half."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from relpos_jax import positions
from relpos_jax.positions import rope

B, L, H, K = 2, 5, 3, 8


def _scheme(head_dim=K, **overrides):
  cfg = positions.default_config("rope")
  cfg.update(overrides)
  return positions.make_scheme(cfg, num_heads=H, head_dim=head_dim, d_model=H * head_dim,
                               causal=True)


def _rotate(scheme, x, pos):
  return scheme.apply({}, x, pos, method="rotate")


def _numpy_rotate_half(x, pos, base=10000.0):
  """GPT-NeoX / LLaMA rotary embedding, one (j, j + d/2) pair at a time, float64."""
  x = np.asarray(x, np.float64)
  out = x.copy()
  d = x.shape[-1]
  for b in range(x.shape[0]):
    for l in range(x.shape[1]):
      for j in range(d // 2):
        theta = pos[b, l] * base ** (-2 * j / d)
        c, s = math.cos(theta), math.sin(theta)
        x1, x2 = x[b, l, :, j], x[b, l, :, j + d // 2]
        out[b, l, :, j] = x1 * c - x2 * s
        out[b, l, :, j + d // 2] = x2 * c + x1 * s
  return out


def _x(seed=0, shape=(B, L, H, K)):
  return jnp.asarray(np.random.default_rng(seed).normal(size=shape), jnp.float32)


@pytest.mark.parametrize("d,base_", [(8, 10000.0), (2, 10000.0), (16, 500.0)])
def test_apply_rope_matches_numpy_rotate_half(d, base_):
  x = _x(shape=(B, L, H, d))
  pos = np.array([[0, 1, 2, 7, 40], [3, 3, 100, 1000, 5000]])
  got = rope.apply_rope(x, jnp.asarray(pos), base_)
  np.testing.assert_allclose(got, _numpy_rotate_half(x, pos, base_), atol=2e-4)


def test_apply_rope_position_zero_is_identity_and_norms_are_kept():
  x = _x()
  np.testing.assert_allclose(rope.apply_rope(x, jnp.zeros((B, L), jnp.int32)), x, atol=1e-6)
  out = rope.apply_rope(x, jnp.arange(B * L).reshape(B, L) * 17)
  np.testing.assert_allclose(jnp.linalg.norm(out, axis=-1), jnp.linalg.norm(x, axis=-1),
                             rtol=1e-5)


def test_apply_rope_keeps_dtype():
  x = _x().astype(jnp.bfloat16)
  assert rope.apply_rope(x, jnp.zeros((B, L), jnp.int32)).dtype == jnp.bfloat16


@pytest.mark.parametrize("fraction", [1.0, 0.5])
def test_rotated_dot_product_depends_only_on_distance(fraction):
  scheme = _scheme(fraction=fraction)
  q, k = _x(1), _x(2)
  rng = np.random.default_rng(0)
  qpos = jnp.asarray(rng.integers(0, 60, (B, L)))
  kpos = jnp.asarray(rng.integers(0, 60, (B, L)))
  logits = lambda qp, kp: jnp.einsum("bqhk,bshk->bhqs", _rotate(scheme, q, qp),
                                     _rotate(scheme, k, kp))
  base_logits = logits(qpos, kpos)
  for shift in (1, 13, 250):
    np.testing.assert_allclose(logits(qpos + shift, kpos + shift), base_logits, atol=2e-4)
  # Same distance reached from different absolute positions, pair by pair.
  dist = kpos[:, None, :] - qpos[:, :, None]
  explicit = jnp.einsum("bqhk,bqshk->bhqs", q, jnp.stack(
      [_rotate(scheme, k, dist[:, i]) for i in range(L)], axis=1))
  np.testing.assert_allclose(base_logits, explicit, atol=2e-4)


def test_fraction_rotates_only_the_leading_dims():
  scheme = _scheme(fraction=0.5)
  x = _x(3)
  pos = jnp.broadcast_to(jnp.arange(L) * 5 + 1, (B, L))
  out = _rotate(scheme, x, pos)
  np.testing.assert_array_equal(out[..., K // 2:], x[..., K // 2:])
  np.testing.assert_allclose(out[..., :K // 2], rope.apply_rope(x[..., :K // 2], pos),
                             atol=1e-6)
  assert not np.allclose(out[..., :K // 2], x[..., :K // 2], atol=1e-3)


def test_default_fraction_rotates_all_dims_with_config_base():
  scheme = _scheme(base=100.0)
  x, pos = _x(4), jnp.broadcast_to(jnp.arange(L), (B, L))
  np.testing.assert_allclose(_rotate(scheme, x, pos), rope.apply_rope(x, pos, 100.0))


def test_rope_has_no_params_and_only_the_rotate_hook():
  cls = positions.SCHEMES["rope"]
  assert cls.is_relative
  assert [h for h in ("embed", "rotate", "logit_bias", "value_term") if cls.implements(h)] == [
      "rotate"]
  variables = _scheme().init(jax.random.PRNGKey(0), _x(), jnp.zeros((B, L), jnp.int32),
                             method="rotate")
  assert not variables.get("params")


@pytest.mark.parametrize("head_dim,fraction", [(8, 0.25 * 0.5), (8, 0.375), (6, 0.5),
                                               (8, 0.0), (8, 0.1), (8, 1.5), (8, -1.0)])
def test_bad_fraction_raises_naming_the_key(head_dim, fraction):
  scheme = _scheme(head_dim=head_dim, fraction=fraction)
  x = _x(shape=(1, 2, H, head_dim))
  with pytest.raises(ValueError, match=r"model\.position\.fraction"):
    scheme.apply({}, x, jnp.zeros((1, 2), jnp.int32), method="rotate")


def test_apply_rope_odd_dim_raises():
  with pytest.raises(ValueError, match="even"):
    rope.apply_rope(_x(shape=(1, 2, 1, 5)), jnp.zeros((1, 2), jnp.int32))
