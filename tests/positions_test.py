"""Tests of the scheme interface, the registry and the seed schemes' math."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from relpos_jax import positions
from relpos_jax.positions import base
from relpos_jax.positions import shaw
from relpos_jax.positions import sinusoidal
from relpos_jax.positions import t5

B, L, H, K = 2, 7, 3, 4
D = H * K


def _scheme(name, causal=False, **overrides):
  cfg = positions.default_config(name)
  cfg.update(overrides)
  return positions.make_scheme(cfg, num_heads=H, head_dim=K, d_model=D, causal=causal)


def _qk(seed=0):
  kq, kk, kx = jax.random.split(jax.random.PRNGKey(seed), 3)
  return (jax.random.normal(kq, (B, L, H, K)), jax.random.normal(kk, (B, L, H, K)),
          jax.random.normal(kx, (B, L, D)))


def _all_terms(scheme, shift, seed=0):
  """Every hook's output with positions 0..L-1 shifted by `shift`."""
  q, k, x = _qk(seed)
  pos = jnp.broadcast_to(jnp.arange(L) + shift, (B, L))
  w = jax.nn.softmax(jnp.einsum("bqhk,bshk->bhqs", q, k), axis=-1)
  variables = scheme.init(jax.random.PRNGKey(1), x, pos, method=lambda m, x, p: (
      m.embed(x, p), m.rotate(q, p), m.logit_bias(q, k, p, p), m.value_term(w, p, p)))
  return scheme.apply(variables, x, pos, method=lambda m, x, p: (
      m.embed(x, p), m.rotate(q, p), m.logit_bias(q, k, p, p), m.value_term(w, p, p),
      jnp.einsum("bqhk,bshk->bhqs", m.rotate(q, p), m.rotate(k, p))))


# ---------------------------------------------------------------- registry

def test_unknown_scheme_lists_valid_names():
  with pytest.raises(ValueError, match="unknown scheme 'nope'.*choose one of:.*shaw.*t5"):
    positions.make_scheme({"name": "nope"}, num_heads=1, head_dim=2, d_model=2, causal=False)


def test_unknown_scheme_key_names_valid_keys():
  with pytest.raises(ValueError, match="no config key.*num_buckets.*max_relative_position"):
    positions.make_scheme({"name": "shaw", "num_buckets": 8}, num_heads=1, head_dim=2,
                          d_model=2, causal=False)


@pytest.mark.parametrize("name", sorted(positions.SCHEMES))
def test_default_config_round_trips(name):
  scheme = positions.make_scheme(positions.default_config(name), num_heads=H, head_dim=K,
                                 d_model=D, causal=True)
  assert isinstance(scheme, base.PositionScheme)


def test_base_hooks_are_no_ops():
  q, k, x = _qk()
  pos = jnp.broadcast_to(jnp.arange(L), (B, L))
  out = _all_terms(_scheme("none"), 0)
  np.testing.assert_array_equal(out[0], x)
  np.testing.assert_array_equal(out[1], q)
  assert out[2] is None and out[3] is None
  assert not any(positions.SCHEMES["none"].implements(h) for h in ("embed", "rotate",
                                                                    "logit_bias", "value_term"))
  del k, pos


# ---------------------------------------------------------- translation

@pytest.mark.parametrize("name", sorted(positions.SCHEMES))
@pytest.mark.parametrize("causal", [False, True])
def test_relative_schemes_are_translation_invariant(name, causal):
  cls = positions.SCHEMES[name]
  overrides = {"max_len": 64} if name == "learned" else {}
  a = _all_terms(_scheme(name, causal, **overrides), 0)
  b = _all_terms(_scheme(name, causal, **overrides), 13)
  # rotate's outputs move with the positions; for RoPE only the rotated q·k (index 4) is relative.
  idx = (2, 3, 4) if cls.implements("rotate") else (2, 3)
  attention_terms = [(a[i], b[i]) for i in idx if a[i] is not None]
  if cls.is_relative:
    assert attention_terms, f"{name} is relative but has no attention term"
    for u, v in attention_terms:
      np.testing.assert_allclose(u, v, atol=1e-6)
  if cls.implements("embed"):  # absolute: shifting changes the encoding
    assert not np.allclose(a[0], b[0], atol=1e-3)


# ---------------------------------------------------------- sinusoidal

def _numpy_sinusoid(pos, dim, base_=10000.0):
  out = np.zeros((len(pos), dim))
  for p_i, p in enumerate(pos):
    for j in range(dim // 2):
      out[p_i, 2 * j] = math.sin(p / base_ ** (2 * j / dim))
      out[p_i, 2 * j + 1] = math.cos(p / base_ ** (2 * j / dim))
  return out


@pytest.mark.parametrize("dim,base_", [(8, 10000.0), (32, 10000.0), (6, 100.0)])
def test_sinusoid_matches_numpy(dim, base_):
  pos = np.array([0, 1, 2, 5, 17, 100, 1000])
  np.testing.assert_allclose(sinusoidal.sinusoidal_encoding(jnp.asarray(pos), dim, base_),
                             _numpy_sinusoid(pos, dim, base_), atol=2e-5)


def test_sinusoid_offset_is_a_fixed_rotation():
  """d2l §11.6.3: [p_{i+δ,2j}, p_{i+δ,2j+1}] = R(δ ω_j) [p_{i,2j}, p_{i,2j+1}] for every i."""
  dim = 16
  P = np.asarray(sinusoidal.sinusoidal_encoding(jnp.arange(60), dim), np.float64)
  omega = 10000.0 ** (-np.arange(0, dim, 2) / dim)
  for delta in (1, 3, 11):
    for j in range(dim // 2):
      c, s = math.cos(delta * omega[j]), math.sin(delta * omega[j])
      rot = np.array([[c, s], [-s, c]])  # rows act on (sin, cos) pairs
      pairs_i = P[:-delta, 2 * j:2 * j + 2]
      pairs_shift = P[delta:, 2 * j:2 * j + 2]
      np.testing.assert_allclose(pairs_i @ rot.T, pairs_shift, atol=1e-4)


def test_sinusoid_any_length_and_shape():
  enc = sinusoidal.sinusoidal_encoding(jnp.zeros((2, 3), jnp.int32) + 5000, 8)
  assert enc.shape == (2, 3, 8)


@pytest.mark.parametrize("dim", [7, 0, -2])
def test_sinusoid_odd_dim_raises(dim):
  with pytest.raises(ValueError, match="even"):
    sinusoidal.sinusoidal_encoding(jnp.arange(3), dim)


# --------------------------------------------------------------- learned

def test_learned_position_past_table_raises_naming_key():
  scheme = _scheme("learned", max_len=5)
  x = jnp.zeros((1, 6, D))
  pos_ok = jnp.arange(5)[None]
  variables = scheme.init(jax.random.PRNGKey(0), x[:, :5], pos_ok, method="embed")
  with pytest.raises(ValueError, match=r"model\.position\.max_len"):
    scheme.apply(variables, x, jnp.arange(6)[None], method="embed")
  with pytest.raises(ValueError, match=r"model\.position\.max_len.*at least 9"):
    scheme.check_positions(9)
  scheme.check_positions(5)


def test_learned_traced_out_of_range_is_nan_not_clamped():
  """JAX indexing would clamp position 6 to row 4; the scheme must not."""
  scheme = _scheme("learned", max_len=5)
  pos = jnp.arange(5)[None]
  variables = scheme.init(jax.random.PRNGKey(0), jnp.zeros((1, 5, D)), pos, method="embed")
  table = variables["params"]["table"]
  clamped = table[jnp.array([6])]  # what plain JAX indexing does
  np.testing.assert_array_equal(clamped, table[4:5])
  out = jax.jit(lambda p: scheme.apply(variables, jnp.zeros((1, 2, D)), p, method="embed"))(
      jnp.array([[3, 6]]))
  np.testing.assert_allclose(out[0, 0], table[3])
  assert np.isnan(np.asarray(out[0, 1])).all()


# ------------------------------------------------------------------ shaw

def test_relative_index_clips():
  q = jnp.array([[0, 5]])
  k = jnp.arange(10)[None]
  idx = shaw.relative_index(q, k, 3)
  np.testing.assert_array_equal(idx[0, 0], np.clip(np.arange(10), -3, 3) + 3)
  np.testing.assert_array_equal(idx[0, 1], np.clip(np.arange(10) - 5, -3, 3) + 3)
  with pytest.raises(ValueError, match="max_relative_position"):
    shaw.relative_index(q, k, -1)


def _naive_shaw(q, w, table_k, table_v, idx):
  """The L x L x K gather form of Shaw's eqs. (3)-(5)."""
  a_k = table_k[idx]  # B x Q x K x Kd
  a_v = table_v[idx]
  bias = jnp.einsum("bqhd,bqsd->bhqs", q, a_k) / math.sqrt(q.shape[-1])
  out = jnp.einsum("bhqs,bqsd->bqhd", w, a_v)
  return bias, out


@pytest.mark.parametrize("k_clip", [0, 1, 3, 20])
def test_shaw_efficient_equals_naive_values_and_grads(k_clip):
  q, k, _ = _qk(3)
  w = jax.nn.softmax(jnp.einsum("bqhk,bshk->bhqs", q, k), axis=-1)
  rng = np.random.default_rng(0)
  qpos = jnp.asarray(np.sort(rng.choice(50, (B, L), replace=True), axis=1))
  kpos = jnp.asarray(np.sort(rng.choice(50, (B, L), replace=True), axis=1))
  tk = jax.random.normal(jax.random.PRNGKey(5), (2 * k_clip + 1, K))
  tv = jax.random.normal(jax.random.PRNGKey(6), (2 * k_clip + 1, K))
  idx = shaw.relative_index(qpos, kpos, k_clip)

  def efficient(q, w, tk, tv):
    return shaw.key_logits(q, tk, idx), shaw.value_output(w, tv, idx)

  def naive(q, w, tk, tv):
    return _naive_shaw(q, w, tk, tv, idx)

  for a, b in zip(efficient(q, w, tk, tv), naive(q, w, tk, tv)):
    np.testing.assert_allclose(a, b, atol=1e-5)
  loss = lambda f: lambda *args: sum(jnp.sum(jnp.sin(t)) for t in f(*args))
  ga = jax.grad(loss(efficient), argnums=(0, 1, 2, 3))(q, w, tk, tv)
  gb = jax.grad(loss(naive), argnums=(0, 1, 2, 3))(q, w, tk, tv)
  for a, b in zip(ga, gb):
    np.testing.assert_allclose(a, b, atol=1e-4)


@pytest.mark.parametrize("use_keys,use_values", [(True, True), (True, False), (False, True),
                                                 (False, False)])
def test_shaw_switches(use_keys, use_values):
  scheme = _scheme("shaw", max_relative_position=2, use_keys=use_keys, use_values=use_values)
  variables = jax.eval_shape(lambda: scheme.init(jax.random.PRNGKey(0), *_qk()[:1] * 2,
                                                 jnp.zeros((B, L), jnp.int32),
                                                 jnp.zeros((B, L), jnp.int32),
                                                 method="logit_bias"))
  names = set(variables.get("params", {}))
  assert ("key_table" in names) == use_keys
  assert ("value_table" in names) == use_values
  for table in variables.get("params", {}).values():
    assert table.shape == (5, K)
  out = _all_terms(scheme, 0)
  assert (out[2] is None) != use_keys
  assert (out[3] is None) != use_values


def test_shaw_k0_carries_no_position_information():
  """With k = 0 every pair shares one row, so permuting key positions changes nothing."""
  scheme = _scheme("shaw", max_relative_position=0)
  q, k, _ = _qk()
  pos = jnp.broadcast_to(jnp.arange(L), (B, L))
  variables = scheme.init(jax.random.PRNGKey(0), q, k, pos, pos, method="logit_bias")
  b1 = scheme.apply(variables, q, k, pos, pos, method="logit_bias")
  b2 = scheme.apply(variables, q, k, pos, pos[:, ::-1] * 7, method="logit_bias")
  np.testing.assert_allclose(b1, b2, atol=1e-6)
  assert variables["params"]["key_table"].shape == (1, K)


# -------------------------------------------------------------------- t5

@pytest.mark.parametrize("rel,bucket", [(-1, 1), (0, 0), (1, 17), (-8, 8), (-9, 8), (-16, 10),
                                        (-64, 14), (-91, 15), (-1000, 15), (7, 23), (200, 31)])
def test_t5_bidirectional_known_values(rel, bucket):
  assert int(t5.relative_position_bucket(jnp.array(rel), bidirectional=True)) == bucket


@pytest.mark.parametrize("rel,bucket", [(1, 0), (5, 0), (1000, 0), (0, 0), (-15, 15), (-16, 16),
                                        (-20, 17), (-113, 31)])
def test_t5_unidirectional_known_values(rel, bucket):
  assert int(t5.relative_position_bucket(jnp.array(rel), bidirectional=False)) == bucket


def _hf_bucket(rel, bidirectional, num_buckets, max_distance):
  """HF transformers' `_relative_position_bucket`, transcribed to plain Python."""
  ret = 0
  n = rel
  if bidirectional:
    num_buckets //= 2
    ret += (n > 0) * num_buckets
    n = abs(n)
  else:
    n = -min(n, 0)
  max_exact = num_buckets // 2
  if n < max_exact:
    return ret + n
  large = max_exact + int(math.log(n / max_exact) / math.log(max_distance / max_exact)
                          * (num_buckets - max_exact))
  return ret + min(large, num_buckets - 1)


@pytest.mark.parametrize("seed", range(6))
def test_t5_random_settings_range_monotone_and_reference(seed):
  rng = np.random.default_rng(seed)
  bidirectional = bool(seed % 2)
  num_buckets = int(rng.choice([4, 8, 16, 32, 64]))
  max_exact = (num_buckets // 2 if bidirectional else num_buckets) // 2
  max_distance = int(max_exact + 1 + rng.integers(0, 300))
  rel = np.arange(-600, 601)
  got = np.asarray(t5.relative_position_bucket(jnp.asarray(rel), bidirectional=bidirectional,
                                               num_buckets=num_buckets,
                                               max_distance=max_distance))
  want = np.array([_hf_bucket(int(r), bidirectional, num_buckets, max_distance) for r in rel])
  np.testing.assert_array_equal(got, want)
  assert got.min() >= 0 and got.max() < num_buckets
  past = got[rel <= 0][::-1]  # in order of increasing |rel|
  assert np.all(np.diff(past) >= 0)
  if bidirectional:
    future = got[rel > 0]
    assert np.all(np.diff(future) >= 0) and future.min() >= num_buckets // 2


@pytest.mark.parametrize("kwargs,match", [
    (dict(num_buckets=1, max_distance=128), "num_buckets"),
    (dict(num_buckets=2, max_distance=128), "num_buckets"),
    (dict(num_buckets=32, max_distance=8), "max_distance"),
])
def test_t5_invalid_settings_raise(kwargs, match):
  with pytest.raises(ValueError, match=match):
    t5.relative_position_bucket(jnp.arange(3), bidirectional=True, **kwargs)


def test_t5_bias_gathers_table_by_bucket():
  scheme = _scheme("t5", num_buckets=8, max_distance=16)
  q, k, _ = _qk()
  pos = jnp.broadcast_to(jnp.arange(L), (B, L))
  variables = scheme.init(jax.random.PRNGKey(0), q, k, pos, pos, method="logit_bias")
  table = np.asarray(variables["params"]["rel_bias"])
  assert table.shape == (8, H)
  bias = np.asarray(scheme.apply(variables, q, k, pos, pos, method="logit_bias"))
  for i in range(L):
    for j in range(L):
      bkt = _hf_bucket(j - i, True, 8, 16)
      np.testing.assert_allclose(bias[:, :, i, j], np.broadcast_to(table[bkt], (B, H)))
