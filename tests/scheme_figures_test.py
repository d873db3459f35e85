"""The `PositionScheme.figures` hook: what each scheme says about itself, as data."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from relpos_jax import positions
from relpos_jax.positions import sinusoidal
from relpos_jax.positions import t5

CONTEXT = dict(num_heads=2, head_dim=4, d_model=8)


def _scheme(name, causal=False, **fields):
  return positions.make_scheme({"name": name, **fields}, causal=causal, **CONTEXT)


@pytest.mark.parametrize("name", ["none", "learned", "rope", "alibi", "xl", "kerple"])
def test_a_scheme_without_figures_offers_none(name):
  assert _scheme(name).figures({}, max_train_distance=20) == []


def _fire_params(scheme):
  """FIRE's parameters, moved off their init (c, threshold and the MLP)."""
  params = scheme.init(jax.random.PRNGKey(0), jnp.zeros((1, 1, 2, 4)), jnp.zeros((1, 1, 2, 4)),
                       jnp.zeros((1, 1), jnp.int32), jnp.zeros((1, 1), jnp.int32),
                       method="logit_bias")["params"]
  return jax.tree_util.tree_map(
      lambda p: p + 0.3 * jax.random.normal(jax.random.PRNGKey(1), p.shape), params)


@pytest.mark.parametrize("causal", [False, True])
def test_fire_bias_panels_follow_the_formula_at_three_query_positions(causal):
  scheme = _scheme("fire", causal=causal, init_threshold=12.0)
  params = _fire_params(scheme)
  panels = scheme.figures(params, max_train_distance=4)
  assert [p.figure for p in panels] == ["fire_bias"] * 3
  c = abs(float(params["c"]))
  threshold = abs(float(params["threshold_multiplier"]) * 12.0)
  w1, b1 = (np.asarray(params["mlp_hidden"][k], np.float64) for k in ("kernel", "bias"))
  w2, b2 = (np.asarray(params["mlp_out"][k], np.float64) for k in ("kernel", "bias"))
  for panel, query in zip(panels, (4, 19, 79)):  # last positions of 1, 4, 16 × span 5
    assert panel.title.startswith(f"query at position {query} ")
    np.testing.assert_array_equal(panel.x_X, np.arange(-query, 1 if causal else query + 1))
    assert panel.shade == ((-4, 0) if causal else (-4, 4))
    for rel in (-query, -3, 0) + (() if causal else (2, query)):
      x = math.log(c * abs(rel) + 1) / (math.log(c * max(threshold, query) + 1) + 1e-6)
      x = -x if rel > 0 else x  # a later key: the bidirectional form's sign
      want_H = np.maximum(x * w1[0] + b1, 0) @ w2 + b2
      got_H = [curve[list(panel.x_X).index(rel)] for curve in panel.curves.values()]
      np.testing.assert_allclose(got_H, want_H, rtol=1e-4, atol=1e-5)
  assert list(panels[0].curves)[0] == f"head 0 (L = {threshold:.0f}, |c| = {c:.3g})"


def test_fire_without_its_parameters_offers_nothing():
  assert _scheme("fire").figures({}, max_train_distance=20) == []


@pytest.mark.parametrize("causal", [False, True])
def test_t5_bias_curves_read_the_table_by_bucket(causal):
  scheme = _scheme("t5", causal=causal, num_buckets=8, max_distance=16)
  bias_NxH = np.arange(16, dtype=np.float32).reshape(8, 2)
  (panel,) = scheme.figures({"rel_bias": bias_NxH}, max_train_distance=5)
  assert panel.figure == "t5_bias" and panel.steps
  rel_R = panel.x_X
  assert rel_R[0] == -24 and rel_R[-1] == (0 if causal else 24)  # 1.5 × max_distance
  buckets_R = np.asarray(t5.relative_position_bucket(rel_R, bidirectional=not causal,
                                                      num_buckets=8, max_distance=16))
  np.testing.assert_array_equal(panel.curves["head 1"], bias_NxH[buckets_R, 1])
  assert list(panel.curves) == ["head 0", "head 1"]
  assert panel.shade == ((-5, 0) if causal else (-5, 5))
  edges = np.asarray(panel.marks["bucket edges"])
  jumps = rel_R[1:][buckets_R[1:] != buckets_R[:-1]] - 0.5
  np.testing.assert_array_equal(edges, jumps)


def test_t5_without_its_table_offers_nothing():
  assert _scheme("t5").figures({}) == []


def test_bucket_edges_of_t5_defaults():
  edges = t5.bucket_edges(np.arange(-192, 193), bidirectional=True, num_buckets=32,
                          max_distance=128)
  assert len(edges) == 30  # 16 buckets left (15 edges), 0 -> 1 changes half, 15 right (14)
  exact = np.concatenate([np.arange(-7.5, 0, 1), np.arange(0.5, 8, 1)])  # |d| < 8: one each
  np.testing.assert_array_equal(edges[(edges > -8) & (edges < 8)], exact)
  causal = t5.bucket_edges(np.arange(-192, 1), bidirectional=False, num_buckets=32,
                           max_distance=128)
  assert len(causal) == 31 and causal[-1] == -0.5


@pytest.mark.parametrize("causal", [False, True])
def test_shaw_key_norms_clip_at_k(causal):
  scheme = _scheme("shaw", causal=causal, max_relative_position=2)
  table_RxE = np.zeros((5, 4), np.float32)
  table_RxE[:, 0] = [3.0, 1.0, 2.0, 5.0, 7.0]  # rows for d = -2 .. 2
  (panel,) = scheme.figures({"key_table": table_RxE}, max_train_distance=3)
  assert panel.figure == "shaw_key_norms"
  np.testing.assert_array_equal(panel.x_X, np.arange(-6, 1 if causal else 7))  # k + 4
  expected = {-6: 3.0, -2: 3.0, -1: 1.0, 0: 2.0, 1: 5.0, 6: 7.0}
  (norms,) = panel.curves.values()
  for d, norm in expected.items():
    if d in panel.x_X:
      assert norms[list(panel.x_X).index(d)] == norm
  assert list(panel.marks.values()) == [(-2,) if causal else (-2, 2)]


def test_shaw_without_key_table_offers_nothing():
  assert _scheme("shaw", use_keys=False).figures({"value_table": np.zeros((33, 4))}) == []


def test_sinusoid_image_is_the_encoding():
  (panel,) = _scheme("sinusoidal", base=100.0).figures({}, max_train_distance=9)
  assert panel.figure == "sinusoid" and panel.image_XxC.shape == (40, 8)  # 4 × (9 + 1)
  np.testing.assert_allclose(
      panel.image_XxC, sinusoidal.sinusoidal_encoding(np.arange(40), 8, 100.0), atol=1e-6)
  assert panel.marks == {"last position seen in training": (9.5,)}
