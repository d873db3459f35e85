"""Batched greedy decoding with the key/value cache, in one `lax.while_loop`.

Both architectures implement the same three-method protocol, so one loop serves
both (the config's `model.arch` picks the model, nothing here branches on it):

* `cache_sizing(inputs, max_len)`: creates the self-attention cache (inside `init`);
* `prime(inputs, inputs_pos)`: everything before the first target token, in one
  pass: the encoder-decoder encodes the source, projects each layer's
  cross-attention keys/values once and feeds BOS; the decoder-only model runs
  the prompt `inputs SEP` through the stack, filling the cache. Returns the first
  target token's logits, a context for `step` and the start position;
* `step(token, pos, context, inputs)`: feeds the last token, appends its keys and
  values to the cache, returns the next logits.

The loop stops when every row has produced EOS or after `max_len` tokens. One
compiled program per (batch, source length, max_len) shape. An oracle-length
mode forces the true output length (`oracle_lengths_B`). Positions are 0..L-1
(decoder-only: running on from the input), or given explicitly for the source
and for every decoder-input slot (random positions: `positions.randomized`).

`greedy_decode_uncached` recomputes the whole teacher-forced forward pass each
step (no cache): the reference the cache is checked and benchmarked against.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp

from relpos_jax import model as model_lib
from relpos_jax.data import vocab

Array = jax.Array


def init_cache(model, inputs_BxS: Array, max_len: int):
  """A zero cache for decoding `max_len` tokens (shapes from a traced `init`)."""

  def sizing_init():
    return model.init(jax.random.PRNGKey(0), inputs_BxS, max_len,
                      method=model.cache_sizing)["cache"]

  shapes = jax.eval_shape(sizing_init)
  return jax.tree_util.tree_map(lambda s: jnp.zeros(s.shape, s.dtype), shapes)


def _finish(tokens_BxT: Array) -> tuple[Array, Array]:
  """Pads everything after the first EOS; returns tokens and lengths (EOS excluded)."""
  T = tokens_BxT.shape[1]
  is_eos_BxT = tokens_BxT == vocab.EOS_ID
  first_eos_B = jnp.where(is_eos_BxT.any(axis=1), jnp.argmax(is_eos_BxT, axis=1), T)
  keep_BxT = jnp.arange(T)[None, :] <= first_eos_B[:, None]
  return jnp.where(keep_BxT, tokens_BxT, vocab.PAD_ID), first_eos_B.astype(jnp.int32)


@functools.partial(jax.jit, static_argnames=("model", "max_len"))
def _greedy_decode(model, params, inputs_BxS, *, max_len, inputs_pos_BxS, targets_pos_BxT,
                   oracle_lengths_B):
  """The compiled body of `greedy_decode`."""
  B = inputs_BxS.shape[0]
  cache = init_cache(model, inputs_BxS, max_len)
  start_pos_B = None if targets_pos_BxT is None else targets_pos_BxT[:, 0]
  (logits_BxV, context, start_pos_B), new_vars = model.apply(
      {"params": params, "cache": cache}, inputs_BxS, inputs_pos_BxS, start_pos_B,
      mutable=["cache"], method=model.prime)
  if targets_pos_BxT is None:
    targets_pos_BxT = start_pos_B[:, None] + jnp.arange(max_len, dtype=jnp.int32)[None]
  first_B = _argmax_token(logits_BxV, 0, oracle_lengths_B)

  def step(state):
    t, cache, tokens_BxT, last_B, done_B = state
    pos_B = jax.lax.dynamic_index_in_dim(targets_pos_BxT, t, axis=1, keepdims=False)
    logits_BxV, new_vars = model.apply(
        {"params": params, "cache": cache}, last_B, pos_B, context, inputs_BxS,
        mutable=["cache"], method=model.step)
    next_B = jnp.where(done_B, vocab.PAD_ID, _argmax_token(logits_BxV, t, oracle_lengths_B))
    tokens_BxT = jax.lax.dynamic_update_slice(tokens_BxT, next_B[:, None], (0, t))
    return t + 1, new_vars["cache"], tokens_BxT, next_B, done_B | (next_B == vocab.EOS_ID)

  def keep_going(state):
    t, _, _, _, done_B = state
    return (t < max_len) & ~done_B.all()

  tokens_BxT = jnp.zeros((B, max_len), jnp.int32).at[:, 0].set(first_B)
  state = (jnp.array(1, jnp.int32), new_vars["cache"], tokens_BxT, first_B,
           first_B == vocab.EOS_ID)
  _, _, tokens_BxT, _, _ = jax.lax.while_loop(keep_going, step, state)
  return _finish(tokens_BxT)


@functools.partial(jax.jit, static_argnames=("model", "max_len"))
def _greedy_decode_uncached(model, params, inputs_BxS, *, max_len, inputs_pos_BxS,
                            targets_pos_BxT):
  """The compiled body of `greedy_decode_uncached`."""
  B = inputs_BxS.shape[0]
  variables = {"params": params}

  def step(state):
    t, tokens_BxT, done_B = state
    # Teacher-forced logits of the tokens so far; later slots (PAD) are masked.
    logits_BxTxV = model.apply(variables, inputs_BxS, tokens_BxT, inputs_pos_BxS,
                               targets_pos_BxT)
    logits_BxV = jax.lax.dynamic_index_in_dim(logits_BxTxV, t, axis=1, keepdims=False)
    next_B = jnp.where(done_B, vocab.PAD_ID, _argmax_token(logits_BxV, t, None))
    tokens_BxT = jax.lax.dynamic_update_slice(tokens_BxT, next_B[:, None], (0, t))
    return t + 1, tokens_BxT, done_B | (next_B == vocab.EOS_ID)

  def keep_going(state):
    t, _, done_B = state
    return (t < max_len) & ~done_B.all()

  state = (jnp.array(0, jnp.int32), jnp.zeros((B, max_len), jnp.int32), jnp.zeros((B,), bool))
  _, tokens_BxT, _ = jax.lax.while_loop(keep_going, step, state)
  return _finish(tokens_BxT)


def greedy_decode(model, params, inputs_BxS: Array, *, max_len: int,
                  inputs_pos_BxS: Array | None = None, targets_pos_BxT: Array | None = None,
                  oracle_lengths_B: Array | None = None) -> tuple[Array, Array]:
  """Greedy decoding with the cache.

  Args:
    model: the (unbound) model, either architecture; static.
    params: its parameters.
    inputs_BxS: source tokens, PAD-padded.
    max_len: most tokens generated per row (EOS included); static.
    inputs_pos_BxS: source positions (default 0..S-1).
    targets_pos_BxT: the position of every decoder-input slot, T = max_len (slot
      t holds the token fed at step t: BOS / SEP at t = 0); default: running on
      from the input (decoder-only) or 0..T-1. Random positions for an eval
      batch: `positions.randomized.RandomizedPositions.sample`.
    oracle_lengths_B: the true target lengths (tokens before EOS), for the
      oracle-length mode: EOS is forbidden before step `oracle_lengths_B[b]` and
      forced at it, so the output has the right length and only its content can
      be wrong (Newman et al. 2020, "The EOS Decision and Length Extrapolation").

  Returns:
    `(tokens_BxT, lengths_B)`: T = max_len; tokens end with EOS (when produced)
    then PAD; lengths count the tokens before EOS (max_len if none).

  Raises:
    ValueError: the scheme cannot encode these positions (e.g. a learned table
      too short), checked before tracing since traced positions cannot raise;
      or `targets_pos_BxT` of the wrong width.
  """
  if oracle_lengths_B is not None:
    oracle_lengths_B = jnp.asarray(oracle_lengths_B, jnp.int32)
  _check_positions(model, inputs_BxS, max_len, inputs_pos_BxS, targets_pos_BxT)
  return _greedy_decode(model, params, inputs_BxS, max_len=max_len, inputs_pos_BxS=inputs_pos_BxS,
                        targets_pos_BxT=targets_pos_BxT, oracle_lengths_B=oracle_lengths_B)


def greedy_decode_uncached(model, params, inputs_BxS: Array, *, max_len: int,
                           inputs_pos_BxS: Array | None = None,
                           targets_pos_BxT: Array | None = None) -> tuple[Array, Array]:
  """Greedy decoding that reruns the decoder over the whole prefix every step.

  Same outputs as `greedy_decode` (the parity and benchmark reference): each step
  reruns the whole teacher-forced forward pass (encoder included), so quadratic
  work per sequence instead of linear. Positions: as for `greedy_decode`, both
  given or neither.
  """
  if (inputs_pos_BxS is None) != (targets_pos_BxT is None):
    raise ValueError("greedy_decode_uncached: give both inputs_pos_BxS and targets_pos_BxT "
                     "or neither")
  _check_positions(model, inputs_BxS, max_len, inputs_pos_BxS, targets_pos_BxT)
  return _greedy_decode_uncached(model, params, inputs_BxS, max_len=max_len,
                                 inputs_pos_BxS=inputs_pos_BxS, targets_pos_BxT=targets_pos_BxT)


def _check_positions(model, inputs_BxS: Array, max_len: int, inputs_pos_BxS: Array | None,
                     targets_pos_BxT: Array | None) -> None:
  """ValueError if the scheme cannot encode the positions decoding will use (concrete only)."""
  if targets_pos_BxT is not None and targets_pos_BxT.shape != (inputs_BxS.shape[0], max_len):
    raise ValueError(f"targets_pos_BxT has shape {targets_pos_BxT.shape}; decoding "
                     f"{max_len} tokens of {inputs_BxS.shape[0]} rows needs "
                     f"{(inputs_BxS.shape[0], max_len)}")
  explicit = [p for p in (inputs_pos_BxS, targets_pos_BxT) if p is not None]
  if targets_pos_BxT is not None:
    if not any(isinstance(p, jax.core.Tracer) for p in explicit):
      model_lib.check_positions(model, max(int(jnp.max(p)) for p in explicit) + 1)
    return
  max_input_position = inputs_BxS.shape[1]
  if inputs_pos_BxS is not None and not isinstance(inputs_pos_BxS, jax.core.Tracer):
    max_input_position = int(jnp.max(inputs_pos_BxS)) + 1
  model.check_lengths(max_input_position, max_len)


def _argmax_token(logits_BxV: Array, t: Array, oracle_lengths_B: Array | None) -> Array:
  """The greedy choice at step t; PAD and BOS are never generated; EOS exactly at an oracle length."""
  never_V = jnp.zeros(logits_BxV.shape[-1], bool).at[jnp.array([vocab.PAD_ID, vocab.BOS_ID])].set(True)
  if oracle_lengths_B is None:
    return jnp.argmax(jnp.where(never_V, -jnp.inf, logits_BxV), axis=-1).astype(jnp.int32)
  never_BxV = never_V[None] | ((jnp.arange(logits_BxV.shape[-1]) == vocab.EOS_ID)[None]
                               & (t < oracle_lengths_B)[:, None])
  token_B = jnp.argmax(jnp.where(never_BxV, -jnp.inf, logits_BxV), axis=-1).astype(jnp.int32)
  return jnp.where(t == oracle_lengths_B, vocab.EOS_ID, token_B)

