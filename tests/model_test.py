"""Both architectures and cached decoding, parameterised over every registered scheme.

Architectures: the encoder-decoder, the decoder-only causal LM and the
decoder-only prefix-LM (`ARCHS`). The tiny models, batches, decoding protocol and
quick-loop subset are in model_harness.py.
"""

import json
import os
import pathlib

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from model_harness import (ARCHS, B, BOTH, LEARNED_MAX_LEN, RELATIVE, S, SCHEMES, T, batch,
                            cached_logits, default_positions, init, quick_cases,
                            quick_params, tiny_model)
from relpos_jax import decode
from relpos_jax import decoder_only
from relpos_jax import positions
from relpos_jax.data import vocab
from relpos_jax.positions import randomized

SNAPSHOTS = pathlib.Path(__file__).parent / "snapshots"


@pytest.mark.parametrize("name, arch", quick_cases(SCHEMES, ARCHS))
def test_cached_decoding_matches_full_forward(name, arch):
  model = tiny_model(name, arch)
  inputs, targets = batch()
  params = init(model, inputs, targets)
  full = model.apply({"params": params}, inputs, targets)
  np.testing.assert_allclose(cached_logits(model, params, inputs, targets), full, atol=1e-5)


@pytest.mark.parametrize("arch", BOTH)
@pytest.mark.parametrize("name", quick_params([n for n in SCHEMES if n != "learned"]))
def test_cached_decoding_matches_beyond_a_learned_table(name, arch):
  """Lengths past LEARNED_MAX_LEN, with randomized-style sparse positions too."""
  model = tiny_model(name, arch)
  inputs, targets = batch(1, s=4, t=3 * LEARNED_MAX_LEN)
  params = init(model, inputs, targets)
  tpos = jnp.broadcast_to(jnp.arange(targets.shape[1]) * 3 + 5, targets.shape)
  full = model.apply({"params": params}, inputs, targets, None, tpos)
  np.testing.assert_allclose(cached_logits(model, params, inputs, targets, None, tpos), full,
                             atol=1e-5)


def _embedding_jacobian(model, params, inputs, targets, part, output):
  """|d output / d token embedding| summed to `[slots out, slots in]`, batch row 0.

  `part` picks the perturbed embeddings ("inputs" or "targets": the decoder
  input / the sequence's target part); `output` is "logits" (`__call__`'s) or
  "hidden" (the decoder-only stack's outputs at the input slots).
  """
  S, T = inputs.shape[1], targets.shape[1]
  is_dec_only = isinstance(model, decoder_only.DecoderOnly)
  n_in = S if part == "inputs" else T

  def out_of(delta_BxNxD):
    captured = {}

    def intercept(next_fun, args, kwargs, context):
      out = next_fun(*args, **kwargs)
      if context.module.name == "embedding" and context.method_name == "__call__":
        if is_dec_only:
          lo = 0 if part == "inputs" else S
          out = out.at[:, lo:lo + n_in].add(delta_BxNxD)
        elif args[0].shape == (inputs if part == "inputs" else targets).shape:
          out = out + delta_BxNxD
      if context.module.name == "decoder" and context.method_name == "__call__":
        captured["hidden"] = out
      return out

    with nn.intercept_methods(intercept):
      logits = model.apply({"params": params}, inputs, targets)
    return logits.sum(-1) if output == "logits" else captured["hidden"][:, :S].sum(-1)

  delta = jnp.zeros((B, n_in, 16))
  jac = jax.jacrev(out_of)(delta)  # [B, out, B, in, D]
  return np.abs(np.asarray(jac))[0, :, 0].sum(-1)


@pytest.mark.parametrize("name, arch", quick_cases(SCHEMES, ARCHS))
def test_decoder_is_causal(name, arch):
  """d logits[t] / d (decoder input embedding at s) = 0 for every s > t."""
  model = tiny_model(name, arch)
  inputs, targets = batch(2)
  params = init(model, inputs, targets)
  jac_TxT = _embedding_jacobian(model, params, inputs, targets, "targets", "logits")
  assert np.all(np.triu(jac_TxT, k=1) == 0.0), jac_TxT
  assert np.all(np.diag(jac_TxT) > 0)


@pytest.mark.parametrize("arch", ["decoder_only", "prefix_lm"])
@pytest.mark.parametrize("name", quick_params(SCHEMES))
def test_prefix_lm_sees_the_whole_input_and_causal_lm_does_not(name, arch):
  """Input slot i's output depends on input j > i iff prefix-LM; never on the target."""
  model = tiny_model(name, arch)
  inputs, targets = batch(2)
  params = init(model, inputs, targets)
  jac_SxS = _embedding_jacobian(model, params, inputs, targets, "inputs", "hidden")
  future = np.triu(jac_SxS, k=1)
  if arch == "prefix_lm":
    assert np.all(future[np.triu_indices(S, k=1)] > 0), jac_SxS
  else:
    assert np.all(future == 0.0), jac_SxS
  jac_SxT = _embedding_jacobian(model, params, inputs, targets, "targets", "hidden")
  assert np.all(jac_SxT == 0.0)


@pytest.mark.parametrize("name, arch", quick_cases(SCHEMES, ARCHS))
def test_padding_does_not_change_real_positions(name, arch):
  model = tiny_model(name, arch)
  inputs, targets = batch(3)
  params = init(model, inputs, targets)
  base_logits = model.apply({"params": params}, inputs, targets)
  padded_inputs = jnp.pad(inputs, ((0, 0), (0, 3)))
  padded_targets = jnp.pad(targets, ((0, 0), (0, 1)))
  logits = model.apply({"params": params}, padded_inputs, padded_targets)
  np.testing.assert_allclose(logits[:, :T], base_logits, atol=1e-5)


@pytest.mark.parametrize("name, arch", quick_cases(RELATIVE, ARCHS))
def test_relative_models_are_translation_invariant(name, arch):
  model = tiny_model(name, arch)
  inputs, targets = batch(4)
  params = init(model, inputs, targets)
  ipos, tpos = default_positions(model, inputs, targets)
  a = model.apply({"params": params}, inputs, targets, ipos, tpos)
  b = model.apply({"params": params}, inputs, targets, ipos + 37, tpos + 37)
  np.testing.assert_allclose(a, b, atol=1e-5)


@pytest.mark.parametrize("arch", BOTH)
@pytest.mark.parametrize("name", [n for n in SCHEMES if not positions.SCHEMES[n].is_relative
                                  and positions.SCHEMES[n].implements("embed")])
def test_absolute_models_see_the_shift(name, arch):
  model = tiny_model(name, arch)
  inputs, targets = batch(4)
  params = init(model, inputs, targets)
  ipos, tpos = default_positions(model, inputs, targets)
  a = model.apply({"params": params}, inputs, targets, ipos, tpos)
  b = model.apply({"params": params}, inputs, targets, ipos + 1, tpos + 1)
  assert not np.allclose(a, b, atol=1e-4)


def test_decoder_only_positions_run_on_from_the_last_real_input():
  inputs, targets = batch()
  ipos, tpos = decoder_only.run_on_positions(inputs, targets.shape[1])
  np.testing.assert_array_equal(ipos[0], np.arange(S))
  np.testing.assert_array_equal(tpos[0], S + np.arange(T))
  np.testing.assert_array_equal(tpos[1], S - 2 + np.arange(T))  # row 1 ends in 2 PADs


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


@pytest.mark.parametrize("arch", ["encoder_decoder", "decoder_only"])
@pytest.mark.parametrize("name", quick_params(SCHEMES))
def test_parameter_shape_snapshot(name, arch):
  """Set UPDATE_SNAPSHOTS=1 to rewrite tests/snapshots/params_*.json after a deliberate change.

  The prefix-LM has the decoder-only model's parameters (only the mask differs).
  """
  model = tiny_model(name, arch)
  inputs, targets = batch()
  shapes = _shapes(jax.eval_shape(lambda: init(model, inputs, targets)))
  prefix = "" if arch == "encoder_decoder" else f"{arch}_"
  path = SNAPSHOTS / f"params_{prefix}{name}.json"
  if os.environ.get("UPDATE_SNAPSHOTS"):
    SNAPSHOTS.mkdir(exist_ok=True)
    path.write_text(json.dumps(shapes, indent=1, sort_keys=True) + "\n")
  assert path.exists(), f"no snapshot {path}; run with UPDATE_SNAPSHOTS=1 once"
  assert shapes == json.loads(path.read_text())


def test_t5_has_one_table_per_stack_and_shaw_one_pair_per_layer():
  inputs, targets = batch()
  t5 = _shapes(jax.eval_shape(lambda: init(tiny_model("t5"), inputs, targets)))
  assert {k: v for k, v in t5.items() if "rel_bias" in k} == {
      "encoder/position/rel_bias": [32, 2], "decoder/position/rel_bias": [32, 2]}
  t5_per_layer = _shapes(jax.eval_shape(
      lambda: init(tiny_model("t5", share_across_layers=False), inputs, targets)))
  assert sorted(k for k in t5_per_layer if "rel_bias" in k) == [
      f"{s}/position_{i}/rel_bias" for s in ("decoder", "encoder") for i in (0, 1)]
  shaw = _shapes(jax.eval_shape(
      lambda: init(tiny_model("shaw", max_relative_position=3), inputs, targets)))
  tables = {k: v for k, v in shaw.items() if "table" in k}
  assert len(tables) == 2 * 2 * 2  # (key, value) x layers x stacks
  assert all(v == [7, 8] for v in tables.values())
  for arch in ("decoder_only", "prefix_lm"):
    t5 = _shapes(jax.eval_shape(lambda a=arch: init(tiny_model("t5", a), inputs, targets)))
    assert {k: v for k, v in t5.items() if "rel_bias" in k} == {
        "decoder/position/rel_bias": [32, 2]}
    assert not any("cross_attention" in k for k in t5)


@pytest.mark.parametrize("arch", ["decoder_only", "prefix_lm"])
def test_t5_buckets_are_unidirectional_when_causal_and_bidirectional_for_prefix_lm(arch):
  """The causal LM's T5 bias puts every future key in the distance-0 bucket; the prefix-LM's
  gives future keys their own buckets (inside the prefix they are visible)."""
  model = tiny_model("t5", arch)
  inputs, targets = batch()
  params = init(model, inputs, targets)
  biases = []

  def capture(next_fun, args, kwargs, context):
    out = next_fun(*args, **kwargs)
    if context.method_name == "logit_bias":
      biases.append(out)
    return out

  with nn.intercept_methods(capture):
    model.apply({"params": params}, inputs, targets)
  bias_HxNxN = np.asarray(biases[0])[0]
  future_equals_present = np.allclose(bias_HxNxN[:, 0, 1:S], bias_HxNxN[:, 0, :1])
  assert future_equals_present == (arch == "decoder_only")


@pytest.mark.parametrize("arch", BOTH)
def test_learned_model_refuses_to_decode_past_its_table(arch):
  """Decoder-only positions run on from the input: its table holds S + LEARNED_MAX_LEN rows."""
  model = tiny_model("learned", arch)
  inputs, targets = batch()
  longest = LEARNED_MAX_LEN
  params = init(model, inputs, targets[:, :longest])
  decode.greedy_decode(model, params, inputs, max_len=longest)
  with pytest.raises(ValueError, match=r"model\.position\.max_len"):
    decode.greedy_decode(model, params, inputs, max_len=longest + 1)
  with pytest.raises(ValueError, match=r"model\.position\.max_len"):
    model.apply({"params": params}, inputs, jnp.ones((B, longest + 1), jnp.int32))


@pytest.mark.parametrize("arch", BOTH)
@pytest.mark.parametrize("name", quick_params(["t5", "shaw", "sinusoidal", "rope"]))
def test_greedy_decode_equals_uncached_and_compiles_once(name, arch):
  model = tiny_model(name, arch)
  inputs, targets = batch(5)
  params = init(model, inputs, targets)
  before = decode._greedy_decode._cache_size()
  tokens, lengths = decode.greedy_decode(model, params, inputs, max_len=8)
  decode.greedy_decode(model, params, inputs + 0, max_len=8)
  assert decode._greedy_decode._cache_size() == before + 1
  ref_tokens, ref_lengths = decode.greedy_decode_uncached(model, params, inputs, max_len=8)
  np.testing.assert_array_equal(tokens, ref_tokens)
  np.testing.assert_array_equal(lengths, ref_lengths)
  assert tokens.shape == (B, 8)


@pytest.mark.parametrize("arch", BOTH)
@pytest.mark.parametrize("name", quick_params(["t5", "sinusoidal"]))
def test_greedy_decode_at_random_positions_equals_the_forward_at_them(name, arch):
  """Positions drawn per example as in training: cached = uncached = teacher-forced."""
  model = tiny_model(name, arch)
  inputs, targets = batch(6, t=8)
  params = init(model, inputs, targets)
  sampler = randomized.RandomizedPositions(enabled=True, max_random_position=64)
  ipos, tpos = sampler.sample(jax.random.PRNGKey(4), inputs, targets,
                              joint=model.joint_positions)
  tokens, lengths = decode.greedy_decode(model, params, inputs, max_len=8, inputs_pos_BxS=ipos,
                                         targets_pos_BxT=tpos)
  ref_tokens, ref_lengths = decode.greedy_decode_uncached(model, params, inputs, max_len=8,
                                                          inputs_pos_BxS=ipos,
                                                          targets_pos_BxT=tpos)
  np.testing.assert_array_equal(tokens, ref_tokens)
  np.testing.assert_array_equal(lengths, ref_lengths)
  full = model.apply({"params": params}, inputs, targets, ipos, tpos)
  np.testing.assert_allclose(cached_logits(model, params, inputs, targets, ipos, tpos), full,
                             atol=1e-5)
  default = model.apply({"params": params}, inputs, targets)
  assert not np.allclose(full, default, atol=1e-5)  # the positions were used
  with pytest.raises(ValueError, match="targets_pos_BxT has shape"):
    decode.greedy_decode(model, params, inputs, max_len=7, inputs_pos_BxS=ipos,
                         targets_pos_BxT=tpos)
  with pytest.raises(ValueError, match="both"):
    decode.greedy_decode_uncached(model, params, inputs, max_len=8, targets_pos_BxT=tpos)


@pytest.mark.parametrize("arch", BOTH)
def test_greedy_decode_stops_at_eos_and_reports_lengths(arch):
  """Force EOS at step 3 by biasing the output projection through the embedding row."""
  model = tiny_model("t5", arch)
  inputs, targets = batch()
  params = init(model, inputs, targets)
  tokens, lengths = decode.greedy_decode(model, params, inputs, max_len=6)
  for row in np.asarray(tokens):  # untrained: EOS anywhere or nowhere; lengths must agree
    eos = np.flatnonzero(row == vocab.EOS_ID)
    n = eos[0] if eos.size else 6
    np.testing.assert_array_equal(row[n + 1:], vocab.PAD_ID)
  np.testing.assert_array_equal(
      lengths, [np.flatnonzero(r == vocab.EOS_ID)[0] if (r == vocab.EOS_ID).any() else 6
                for r in np.asarray(tokens)])
  big = params["embedding"]["embedding"].at[vocab.EOS_ID].multiply(50.0)  # ...now it always does
  params = {**params, "embedding": {"embedding": big}}
  tokens, lengths = decode.greedy_decode(model, params, inputs, max_len=6)
  np.testing.assert_array_equal(lengths, 0)
  np.testing.assert_array_equal(tokens[:, 0], vocab.EOS_ID)
  np.testing.assert_array_equal(tokens[:, 1:], vocab.PAD_ID)


@pytest.mark.parametrize("arch", BOTH)
def test_oracle_length_decoding_emits_exactly_the_given_lengths(arch):
  model = tiny_model("t5", arch)
  inputs, targets = batch()
  params = init(model, inputs, targets)
  big = params["embedding"]["embedding"].at[vocab.EOS_ID].multiply(50.0)  # always wants EOS
  params = {**params, "embedding": {"embedding": big}}
  oracle = jnp.array([3, 5], jnp.int32)
  tokens, lengths = decode.greedy_decode(model, params, inputs, max_len=7, oracle_lengths_B=oracle)
  np.testing.assert_array_equal(lengths, oracle)
  for row, n in enumerate([3, 5]):
    assert not np.any(np.asarray(tokens[row, :n]) == vocab.EOS_ID)
    assert tokens[row, n] == vocab.EOS_ID
