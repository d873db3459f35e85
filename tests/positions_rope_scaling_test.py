"""Eval-time RoPE scaling (positions/rope.py): linear PI, dynamic NTK, YaRN.

The expected frequencies are numbers TRANSCRIBED from HF transformers 5.24.0 (torch
2.13.0) `transformers.modeling_rope_utils`, run once in a throwaway environment:
`_compute_linear_scaling_rope_parameters`, `_compute_dynamic_ntk_parameters(config,
seq_len=eval_length)` (config.max_position_embeddings = original_max_position) and
`_compute_yarn_parameters` (rope_parameters.original_max_position_embeddings =
original_max_position, max_position_embeddings = factor * original; default attention
factor), on a LlamaConfig with head_dim = rotary_dim. HF computes in float32; these
are its float32 outputs printed exactly. This codebase computes in float64.
"""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import model_harness  # the model suite's helpers (pytest puts tests/ on the path)
from relpos_jax import architectures
from relpos_jax import positions
from relpos_jax.positions import rope

# (scaling, rotary_dim, base) -> (HF inv_freq, HF attention_factor)
HF_CASES = [
    ({"type": "linear", "factor": 2.0}, 8, 10000.0,
     [0.5, 0.05000000074505806, 0.004999999888241291, 0.0005000000237487257], 1.0),
    ({"type": "linear", "factor": 4.0}, 16, 500.0,
     [0.25, 0.11496581882238388, 0.0528685599565506, 0.02431231178343296, 0.011180340312421322,
      0.005141428206115961, 0.0023643539752811193, 0.0010872796410694718], 1.0),
    ({"type": "dynamic_ntk", "factor": 2.0, "original_max_position": 20, "eval_length": 80}, 8,
     10000.0, [1.0, 0.05227579548954964, 0.0027327588759362698, 0.0001428571413271129], 1.0),
    ({"type": "dynamic_ntk", "factor": 4.0, "original_max_position": 64, "eval_length": 100}, 16,
     500.0, [1.0, 0.38859978318214417, 0.15100979804992676, 0.05868237465620041,
             0.022803956642746925, 0.008861612528562546, 0.0034436206333339214,
             0.0013381903991103172], 1.0),
    ({"type": "dynamic_ntk", "factor": 2.0, "original_max_position": 20, "eval_length": 10}, 8,
     10000.0, [1.0, 0.10000000149011612, 0.009999999776482582, 0.0010000000474974513], 1.0),
    ({"type": "yarn", "factor": 4.0, "original_max_position": 20}, 8, 10000.0,
     [1.0, 0.02500000037252903, 0.0024999999441206455, 0.0002500000118743628],
     1.138629436111989),
    ({"type": "yarn", "factor": 4.0, "original_max_position": 2048}, 32, 10000.0,
     [1.0, 0.5623413324356079, 0.3162277638912201, 0.17782793939113617, 0.10000000149011612,
      0.05020904168486595, 0.02484646998345852, 0.012066896073520184, 0.0057142856530845165,
      0.0026108704041689634, 0.0011293849674984813, 0.00044456985779106617,
      0.0002500000118743628, 0.00014058532542549074, 7.905694656074047e-05,
      4.4456985051510856e-05], 1.138629436111989),
    ({"type": "yarn", "factor": 2.0, "original_max_position": 64, "beta_fast": 16.0,
      "beta_slow": 2.0}, 16, 500.0,
     [1.0, 0.3832193911075592, 0.14098283648490906, 0.04862462356686592, 0.022360680624842644,
      0.010282856412231922, 0.004728707950562239, 0.0021745592821389437], 1.0693147180559945),
]


@pytest.mark.parametrize("scaling,dim,base_,want,factor", HF_CASES,
                         ids=[f"{c[0]['type']}-{c[1]}-{i}" for i, c in enumerate(HF_CASES)])
def test_frequencies_match_hf_transformers(scaling, dim, base_, want, factor):
  inv_freq, attention_factor = rope.rope_frequencies(dim, base=base_, scaling=scaling)
  assert inv_freq.shape == (dim // 2,)
  np.testing.assert_allclose(inv_freq, want, rtol=1e-6)
  assert attention_factor == pytest.approx(factor, rel=1e-6)


def test_no_scaling_is_plain_rope():
  for scaling in (None, {"type": "none"}, {"type": "none", "factor": 8.0}):
    inv_freq, factor = rope.rope_frequencies(8, base=10000.0, scaling=scaling)
    np.testing.assert_allclose(inv_freq, [1.0, 0.1, 0.01, 0.001], rtol=1e-12)
    assert factor == 1.0


def test_yarn_attention_factor_is_hf_default():
  for s in (1.0, 2.0, 8.0, 32.0):
    _, factor = rope.rope_frequencies(8, scaling={"type": "yarn", "factor": s,
                                                  "original_max_position": 16})
    assert factor == pytest.approx(0.1 * math.log(s) + 1 if s > 1 else 1.0, rel=1e-12)


@pytest.mark.parametrize("scaling,match", [
    ({"type": "ntk"}, "scaling.type"),
    ({"type": "yarn", "factor": 2.0}, "original_max_position"),
    ({"type": "dynamic_ntk", "factor": 2.0, "original_max_position": 8}, "eval_length"),
    ({"type": "linear", "factor": 0.5}, "scaling.factor"),
    ({"type": "linear", "fctor": 2.0}, "model.position.scaling"),
])
def test_bad_scaling_names_the_config_key(scaling, match):
  with pytest.raises(ValueError, match=match):
    rope.rope_frequencies(8, scaling=scaling)


B, L, H, K = 2, 5, 2, 8


def _rope(**scaling):
  cfg = positions.default_config("rope")
  cfg.scaling.update(scaling)
  return positions.make_scheme(cfg, num_heads=H, head_dim=K, d_model=H * K, causal=True)


def test_scheme_with_scaling_none_is_bit_identical_to_apply_rope():
  x = jax.random.normal(jax.random.PRNGKey(0), (B, L, H, K))
  pos = jnp.arange(B * L).reshape(B, L) * 7
  got = _rope().apply({}, x, pos, method="rotate")
  np.testing.assert_array_equal(got, rope.apply_rope(x, pos))


def test_linear_scaling_rotates_position_p_as_p_over_factor():
  x = jax.random.normal(jax.random.PRNGKey(0), (B, L, H, K))
  pos = jnp.arange(B * L).reshape(B, L) * 4
  got = _rope(type="linear", factor=4.0).apply({}, x, pos, method="rotate")
  np.testing.assert_allclose(got, _rope().apply({}, x, pos // 4, method="rotate"), atol=1e-5)


def test_yarn_scales_logits_by_attention_factor_squared():
  """HF multiplies cos and sin by the factor, i.e. q and k both: q·k grows by factor²."""
  q = jax.random.normal(jax.random.PRNGKey(1), (B, L, H, K))
  k = jax.random.normal(jax.random.PRNGKey(2), (B, L, H, K))
  pos = jnp.broadcast_to(jnp.arange(L), (B, L))
  scaling = {"type": "yarn", "factor": 8.0, "original_max_position": 4}
  scheme = _rope(**scaling)
  inv_freq, factor = rope.rope_frequencies(K, scaling=scaling)
  logits = jnp.einsum("bqhk,bshk->bhqs", scheme.apply({}, q, pos, method="rotate"),
                      scheme.apply({}, k, pos, method="rotate"))
  unscaled = jnp.einsum("bqhk,bshk->bhqs", rope.apply_rope(q, pos, inv_freq=inv_freq),
                        rope.apply_rope(k, pos, inv_freq=inv_freq))
  np.testing.assert_allclose(logits, factor ** 2 * unscaled, rtol=1e-5, atol=1e-5)


def test_partial_rotary_scales_only_the_rotated_dims():
  x = jax.random.normal(jax.random.PRNGKey(0), (B, L, H, K))
  pos = jnp.broadcast_to(jnp.arange(L), (B, L))
  cfg = positions.default_config("rope")
  cfg.fraction = 0.5
  cfg.scaling.update(type="yarn", factor=4.0, original_max_position=4)
  scheme = positions.make_scheme(cfg, num_heads=H, head_dim=K, d_model=H * K, causal=True)
  got = scheme.apply({}, x, pos, method="rotate")
  np.testing.assert_array_equal(got[..., K // 2:], x[..., K // 2:])
  inv_freq, factor = rope.rope_frequencies(K // 2, scaling=cfg.scaling)
  np.testing.assert_allclose(got[..., :K // 2],
                             factor * rope.apply_rope(x[..., :K // 2], pos, inv_freq=inv_freq),
                             rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("arch", ["encoder_decoder", "decoder_only"])
def test_a_plain_rope_checkpoint_loads_with_any_scaling(arch):
  """Same parameter tree; the scaled model runs on the plain model's parameters (hashable config)."""
  config = architectures.default_config(arch)
  config.update(d_model=16, num_heads=2, head_dim=8, d_ff=32)
  config.position = positions.default_config("rope")
  inputs = jnp.ones((1, 5), jnp.int32) + 3
  plain = architectures.make_model(config, vocab_size=11)
  params = plain.init(jax.random.PRNGKey(0), inputs, inputs)["params"]
  for kind in ("linear", "dynamic_ntk", "yarn"):
    config.position.scaling.update(type=kind, factor=2.0, original_max_position=4, eval_length=9)
    scaled = architectures.make_model(config, vocab_size=11)
    hash(scaled)
    shapes = lambda p: jax.tree_util.tree_map(jnp.shape, p)
    assert shapes(scaled.init(jax.random.PRNGKey(0), inputs, inputs)["params"]) == shapes(params)
    out = scaled.apply({"params": params}, inputs, inputs)
    assert np.all(np.isfinite(out))
    assert not np.allclose(out, plain.apply({"params": params}, inputs, inputs), atol=1e-6)


@pytest.mark.parametrize("arch", ["encoder_decoder", "decoder_only", "prefix_lm"])
@pytest.mark.parametrize("kind", model_harness.quick_first(["yarn", "linear", "dynamic_ntk"]))
def test_cached_decoding_matches_full_forward_with_scaling(kind, arch):
  scaling = dict(type=kind, factor=4.0, original_max_position=6, eval_length=30)
  model = model_harness.tiny_model("rope", arch, scaling=scaling)
  assert model.position["scaling"]["type"] == kind
  inputs, targets = model_harness.batch()
  params = model_harness.init(model, inputs, targets)
  full = model.apply({"params": params}, inputs, targets)
  np.testing.assert_allclose(model_harness.cached_logits(model, params, inputs, targets), full,
                             atol=1e-5)
