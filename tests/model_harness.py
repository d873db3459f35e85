"""The tiny models, batches and decoding protocol shared by the model suite (model_test.py)
and the tests of options that run through the whole model (attention length scaling, RoPE
scaling, mixed precision), and which of their cases the quick loop runs.

Legend: V vocabulary, B batch, S input length, T target length.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from relpos_jax import architectures
from relpos_jax import decode
from relpos_jax import decoder_only
from relpos_jax import model as model_lib
from relpos_jax import positions
from relpos_jax.data import vocab

# The quick loop (`pytest -m "not slow"`) runs the per-scheme tests for one scheme of each
# kind (a learned absolute table, a logit bias, a rotation, Shaw's key and value terms),
# on the prefix-LM for T5 only (`quick_cases`); `make test` runs every registered scheme on
# every architecture.
QUICK_SCHEMES = ("learned", "t5", "rope", "shaw")


def quick_params(names):
  """`names` as test parameters, those outside QUICK_SCHEMES marked slow."""
  return [n if n in QUICK_SCHEMES else pytest.param(n, marks=pytest.mark.slow) for n in names]


def quick_cases(names, archs):
  """`(name, arch)` parameters; the quick loop runs QUICK_SCHEMES on the two architectures,
  and on the prefix-LM (the decoder-only model with another mask) T5 only, whose buckets
  the prefix changes."""
  quick = lambda n, a: n in QUICK_SCHEMES and (a != "prefix_lm" or n == "t5")
  return [(n, a) if quick(n, a) else pytest.param(n, a, marks=pytest.mark.slow)
          for n in names for a in archs]


def quick_first(values):
  """`values` as test parameters, all but the first marked slow (variants of one option)."""
  return [values[0]] + [pytest.param(v, marks=pytest.mark.slow) for v in values[1:]]


SCHEMES = sorted(positions.SCHEMES)
RELATIVE = [n for n in SCHEMES if positions.SCHEMES[n].is_relative]
V, B, S, T = 13, 2, 6, 9
LEARNED_MAX_LEN = 10


ARCHS = ["encoder_decoder", "decoder_only", "prefix_lm"]
# The two architectures; prefix-LM (the decoder-only model with another mask) runs the
# tests where the mask matters: cached = full forward, causality, padding, translation
# invariance, prefix visibility and T5's buckets.
BOTH = ["encoder_decoder", "decoder_only"]


def tiny_model(name, arch="encoder_decoder", **overrides):
  """A 2-layer, d_model 16 model of scheme `name` (`overrides`: its position config keys)."""
  position = positions.default_config(name)
  if name == "learned":  # decoder-only targets start after the S input positions
    position.max_len = LEARNED_MAX_LEN + (0 if arch == "encoder_decoder" else S)
  position.update(overrides)
  config = architectures.default_config("encoder_decoder" if arch == "encoder_decoder"
                                        else "decoder_only")
  config.update(d_model=16, num_heads=2, head_dim=8, d_ff=32)
  config.position = position  # replaced whole: `update` would merge it into T5's keys
  if arch == "encoder_decoder":
    config.update(num_encoder_layers=2, num_decoder_layers=2)
  else:
    config.update(num_layers=2, prefix_lm=arch == "prefix_lm")
  return architectures.make_model(config, vocab_size=V)


def default_positions(model, inputs, targets):
  """The positions the model uses by default (decoder-only: running on into the target)."""
  if isinstance(model, decoder_only.DecoderOnly):
    return decoder_only.run_on_positions(inputs, targets.shape[1])
  return model_lib.default_positions(inputs), model_lib.default_positions(targets)


def batch(seed=0, s=S, t=T):
  """`(inputs [B, s], targets [B, t])` int32; input row 1 ends in two PADs, targets in EOS."""
  rng = np.random.default_rng(seed)
  inputs = rng.integers(4, V, (B, s))
  inputs[1, s - 2:] = vocab.PAD_ID  # a shorter row
  targets = rng.integers(4, V, (B, t))
  targets[:, -1] = vocab.EOS_ID
  return jnp.asarray(inputs, jnp.int32), jnp.asarray(targets, jnp.int32)


def init(model, inputs, targets):
  """The model's parameters (PRNGKey(0)).

  Eager on purpose: XLA:CPU compiles a jitted init for longer than the eager init runs
  (plots_test: 70 s -> 34 s, one core, cold compile cache).
  """
  return model.init(jax.random.PRNGKey(0), inputs, targets)["params"]


def cached_logits(model, params, inputs, targets, inputs_pos=None, targets_pos=None):
  """Teacher-forced logits computed through the decoding protocol: `prime`, then cached steps."""
  T = targets.shape[1]
  cache = decode.init_cache(model, inputs, T)
  start = None if targets_pos is None else targets_pos[:, 0]
  (logits, context, start), new_vars = model.apply(
      {"params": params, "cache": cache}, inputs, inputs_pos, start, mutable=["cache"],
      method=model.prime)
  cache, out = new_vars["cache"], [logits]

  @jax.jit
  def step(cache, token_B, pos_B):
    return model.apply({"params": params, "cache": cache}, token_B, pos_B, context, inputs,
                       mutable=["cache"], method=model.step)

  for t in range(1, T):
    pos = start + t if targets_pos is None else targets_pos[:, t]
    logits, new_vars = step(cache, targets[:, t - 1], pos)
    cache = new_vars["cache"]
    out.append(logits)
  return jnp.stack(out, axis=1)
