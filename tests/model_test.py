"""The encoder-decoder and cached decoding, parameterised over every registered scheme."""

import json
import os
import pathlib

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from relpos_jax import decode
from relpos_jax import model as model_lib
from relpos_jax import positions
from relpos_jax.data import vocab

SCHEMES = sorted(positions.SCHEMES)
RELATIVE = [n for n in SCHEMES if positions.SCHEMES[n].is_relative]
SNAPSHOTS = pathlib.Path(__file__).parent / "snapshots"
V, B, S, T = 13, 2, 6, 9
LEARNED_MAX_LEN = 10


def _model(name, **overrides):
  position = positions.default_config(name)
  if name == "learned":
    position.max_len = LEARNED_MAX_LEN
  position.update(overrides)
  return model_lib.EncoderDecoder(vocab_size=V, d_model=16, num_heads=2, head_dim=8,
                                  num_encoder_layers=2, num_decoder_layers=2, d_ff=32,
                                  position=position)


def _batch(seed=0, s=S, t=T):
  rng = np.random.default_rng(seed)
  inputs = rng.integers(4, V, (B, s))
  inputs[1, s - 2:] = vocab.PAD_ID  # a shorter row
  targets = rng.integers(4, V, (B, t))
  targets[:, -1] = vocab.EOS_ID
  return jnp.asarray(inputs, jnp.int32), jnp.asarray(targets, jnp.int32)


def _init(model, inputs, targets):
  return model.init(jax.random.PRNGKey(0), inputs, targets)["params"]


def _cached_logits(model, params, inputs, targets, inputs_pos=None, targets_pos=None):
  """Teacher-forced logits computed one cached step at a time."""
  enc = model.apply({"params": params}, inputs, inputs_pos, method=model.encode)
  cross_kv = model.apply({"params": params}, enc, method=model.cross_kv)
  cache = decode.init_cache(model, inputs, targets.shape[1])
  decoder_input = model_lib.shift_right(targets)
  if targets_pos is None:
    targets_pos = model_lib.default_positions(targets)

  @jax.jit
  def step(cache, token_Bx1, pos_Bx1):
    return model.apply({"params": params, "cache": cache}, token_Bx1, pos_Bx1, inputs,
                       cross_kv=cross_kv, decode=True, mutable=["cache"], method=model.decode)

  out = []
  for t in range(targets.shape[1]):
    logits, new_vars = step(cache, decoder_input[:, t:t + 1], targets_pos[:, t:t + 1])
    cache = new_vars["cache"]
    out.append(logits)
  return jnp.concatenate(out, axis=1)


@pytest.mark.parametrize("name", SCHEMES)
def test_cached_decoding_matches_full_forward(name):
  model = _model(name)
  inputs, targets = _batch()
  params = _init(model, inputs, targets)
  full = model.apply({"params": params}, inputs, targets)
  np.testing.assert_allclose(_cached_logits(model, params, inputs, targets), full, atol=1e-5)


@pytest.mark.parametrize("name", [n for n in SCHEMES if n != "learned"])
def test_cached_decoding_matches_beyond_a_learned_table(name):
  """Lengths past LEARNED_MAX_LEN, with randomized-style sparse positions too."""
  model = _model(name)
  inputs, targets = _batch(1, s=4, t=3 * LEARNED_MAX_LEN)
  params = _init(model, inputs, targets)
  tpos = jnp.broadcast_to(jnp.arange(targets.shape[1]) * 3 + 5, targets.shape)
  full = model.apply({"params": params}, inputs, targets, None, tpos)
  np.testing.assert_allclose(_cached_logits(model, params, inputs, targets, None, tpos), full,
                             atol=1e-5)


@pytest.mark.parametrize("name", SCHEMES)
def test_decoder_is_causal(name):
  """d logits[t] / d (decoder input embedding at s) = 0 for every s > t."""
  model = _model(name)
  inputs, targets = _batch(2)
  params = _init(model, inputs, targets)

  def logits_of(delta_BxTxD):
    def add_delta(next_fun, args, kwargs, context):
      out = next_fun(*args, **kwargs)
      if (context.module.name == "embedding" and context.method_name == "__call__"
          and args[0].shape == targets.shape):
        out = out + delta_BxTxD
      return out
    with nn.intercept_methods(add_delta):
      return model.apply({"params": params}, inputs, targets)

  delta = jnp.zeros(targets.shape + (16,))
  jac = jax.jacrev(lambda d: logits_of(d).sum(-1))(delta)  # [B, T, B, T, D]
  jac_TxT = np.abs(np.asarray(jac)).sum(axis=(0, 2, 4))
  assert np.all(np.triu(jac_TxT, k=1) == 0.0), jac_TxT
  assert np.all(np.diag(jac_TxT) > 0)


@pytest.mark.parametrize("name", SCHEMES)
def test_padding_does_not_change_real_positions(name):
  model = _model(name)
  inputs, targets = _batch(3)
  params = _init(model, inputs, targets)
  base_logits = model.apply({"params": params}, inputs, targets)
  padded_inputs = jnp.pad(inputs, ((0, 0), (0, 3)))
  padded_targets = jnp.pad(targets, ((0, 0), (0, 1)))
  logits = model.apply({"params": params}, padded_inputs, padded_targets)
  np.testing.assert_allclose(logits[:, :T], base_logits, atol=1e-5)


@pytest.mark.parametrize("name", RELATIVE)
def test_relative_models_are_translation_invariant(name):
  model = _model(name)
  inputs, targets = _batch(4)
  params = _init(model, inputs, targets)
  ipos, tpos = model_lib.default_positions(inputs), model_lib.default_positions(targets)
  a = model.apply({"params": params}, inputs, targets, ipos, tpos)
  b = model.apply({"params": params}, inputs, targets, ipos + 37, tpos + 37)
  np.testing.assert_allclose(a, b, atol=1e-5)


@pytest.mark.parametrize("name", [n for n in SCHEMES if not positions.SCHEMES[n].is_relative
                                  and positions.SCHEMES[n].implements("embed")])
def test_absolute_models_see_the_shift(name):
  model = _model(name)
  inputs, targets = _batch(4)
  params = _init(model, inputs, targets)
  ipos, tpos = model_lib.default_positions(inputs), model_lib.default_positions(targets)
  a = model.apply({"params": params}, inputs, targets, ipos, tpos)
  b = model.apply({"params": params}, inputs, targets, ipos + 1, tpos + 1)
  assert not np.allclose(a, b, atol=1e-4)


def _shapes(tree, prefix=""):
  """Flattened `{path: shape}` of a params pytree."""
  out = {}
  for key, value in tree.items():
    path = f"{prefix}/{key}" if prefix else key
    if hasattr(value, "items"):
      out.update(_shapes(value, path))
    else:
      out[path] = list(value.shape)
  return out


@pytest.mark.parametrize("name", SCHEMES)
def test_parameter_shape_snapshot(name):
  """Set UPDATE_SNAPSHOTS=1 to rewrite tests/snapshots/params_<scheme>.json after a deliberate change."""
  model = _model(name)
  inputs, targets = _batch()
  shapes = _shapes(jax.eval_shape(lambda: _init(model, inputs, targets)))
  path = SNAPSHOTS / f"params_{name}.json"
  if os.environ.get("UPDATE_SNAPSHOTS"):
    SNAPSHOTS.mkdir(exist_ok=True)
    path.write_text(json.dumps(shapes, indent=1, sort_keys=True) + "\n")
  assert path.exists(), f"no snapshot {path}; run with UPDATE_SNAPSHOTS=1 once"
  assert shapes == json.loads(path.read_text())


def test_t5_has_one_table_per_stack_and_shaw_one_pair_per_layer():
  inputs, targets = _batch()
  t5 = _shapes(jax.eval_shape(lambda: _init(_model("t5"), inputs, targets)))
  assert {k: v for k, v in t5.items() if "rel_bias" in k} == {
      "encoder/position/rel_bias": [32, 2], "decoder/position/rel_bias": [32, 2]}
  t5_per_layer = _shapes(jax.eval_shape(
      lambda: _init(_model("t5", share_across_layers=False), inputs, targets)))
  assert sorted(k for k in t5_per_layer if "rel_bias" in k) == [
      f"{s}/position_{i}/rel_bias" for s in ("decoder", "encoder") for i in (0, 1)]
  shaw = _shapes(jax.eval_shape(
      lambda: _init(_model("shaw", max_relative_position=3), inputs, targets)))
  tables = {k: v for k, v in shaw.items() if "table" in k}
  assert len(tables) == 2 * 2 * 2  # (key, value) x layers x stacks
  assert all(v == [7, 8] for v in tables.values())


def test_learned_model_refuses_to_decode_past_its_table():
  model = _model("learned")
  inputs, targets = _batch()
  params = _init(model, inputs, targets)
  decode.greedy_decode(model, params, inputs, max_len=LEARNED_MAX_LEN)
  with pytest.raises(ValueError, match=r"model\.position\.max_len"):
    decode.greedy_decode(model, params, inputs, max_len=LEARNED_MAX_LEN + 1)
  with pytest.raises(ValueError, match=r"model\.position\.max_len"):
    model.apply({"params": params}, inputs, jnp.ones((B, LEARNED_MAX_LEN + 1), jnp.int32))


@pytest.mark.parametrize("name", ["t5", "shaw", "sinusoidal"])
def test_greedy_decode_equals_uncached_and_compiles_once(name):
  model = _model(name)
  inputs, targets = _batch(5)
  params = _init(model, inputs, targets)
  before = decode._greedy_decode._cache_size()
  tokens, lengths = decode.greedy_decode(model, params, inputs, max_len=8)
  decode.greedy_decode(model, params, inputs + 0, max_len=8)
  assert decode._greedy_decode._cache_size() == before + 1
  ref_tokens, ref_lengths = decode.greedy_decode_uncached(model, params, inputs, max_len=8)
  np.testing.assert_array_equal(tokens, ref_tokens)
  np.testing.assert_array_equal(lengths, ref_lengths)
  assert tokens.shape == (B, 8)


def test_greedy_decode_stops_at_eos_and_reports_lengths():
  """Force EOS at step 3 by biasing the output projection through the embedding row."""
  model = _model("t5")
  inputs, targets = _batch()
  params = _init(model, inputs, targets)
  tokens, lengths = decode.greedy_decode(model, params, inputs, max_len=6)
  np.testing.assert_array_equal(lengths, 6)  # untrained model here never says EOS...
  assert not np.any(np.asarray(tokens) == vocab.EOS_ID)
  big = params["embedding"]["embedding"].at[vocab.EOS_ID].multiply(50.0)  # ...now it always does
  params = {**params, "embedding": {"embedding": big}}
  tokens, lengths = decode.greedy_decode(model, params, inputs, max_len=6)
  np.testing.assert_array_equal(lengths, 0)
  np.testing.assert_array_equal(tokens[:, 0], vocab.EOS_ID)
  np.testing.assert_array_equal(tokens[:, 1:], vocab.PAD_ID)
