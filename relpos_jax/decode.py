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
(decoder-only: running on from the input), or with `position_rng` one sorted
random sample per batch from [0, max_random_position) (Ruoss et al. 2023's
evaluation of randomized positions; `positions.randomized`).

`greedy_decode_uncached` recomputes the whole teacher-forced forward pass each
step (no cache): the reference the cache is checked and benchmarked against.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp

from relpos_jax import model as model_lib
from relpos_jax.data import vocab
from relpos_jax.positions import randomized

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


def random_decode_positions(model, inputs_BxS: Array, max_len: int, position_rng: Array, *,
                            max_random_position: int) -> tuple[Array, Array]:
  """One random position sample per batch for decoding `max_len` tokens.

  Every row shares one draw (`per_example=False`): its real input tokens and
  the `max_len` decoder-input slots (BOS / SEP, then the fed-back tokens) get a
  sorted sample from [0, max_random_position); jointly for a model with
  `joint_positions` (decoder-only), else one sample each for encoder and decoder.

  Args:
    model: either architecture.
    inputs_BxS: source tokens, PAD-padded.
    max_len: decoded tokens (the target slots drawn for).
    position_rng: PRNG key.
    max_random_position: positions are drawn from [0, max_random_position).

  Returns:
    `(inputs_pos_BxS, targets_pos_BxT)`, T = max_len; target slot t is where
    the token fed at step t (BOS / SEP at t = 0) sits.
  """
  B, S = inputs_BxS.shape
  return randomized.input_target_positions(
      position_rng, jnp.sum(inputs_BxS != vocab.PAD_ID, axis=1), S,
      jnp.full((B,), max_len, jnp.int32), max_len, max_random_position=max_random_position,
      joint=model.joint_positions, per_example=False)


@functools.partial(jax.jit, static_argnames=("model", "max_len", "max_random_position"))
def _greedy_decode(model, params, inputs_BxS, *, max_len, inputs_pos_BxS, oracle_lengths_B,
                   position_rng=None, max_random_position=None):
  """The compiled body of `greedy_decode`."""
  B = inputs_BxS.shape[0]
  cache = init_cache(model, inputs_BxS, max_len)
  start_pos_B = None
  if position_rng is not None:
    inputs_pos_BxS, targets_pos_BxT = random_decode_positions(
        model, inputs_BxS, max_len, position_rng, max_random_position=max_random_position)
    start_pos_B = targets_pos_BxT[:, 0]
  (logits_BxV, context, start_pos_B), new_vars = model.apply(
      {"params": params, "cache": cache}, inputs_BxS, inputs_pos_BxS, start_pos_B,
      mutable=["cache"], method=model.prime)
  if position_rng is None:
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


@functools.partial(jax.jit, static_argnames=("model", "max_len", "max_random_position"))
def _greedy_decode_uncached(model, params, inputs_BxS, *, max_len, position_rng=None,
                            max_random_position=None):
  """The compiled body of `greedy_decode_uncached`."""
  B = inputs_BxS.shape[0]
  variables = {"params": params}
  inputs_pos_BxS = targets_pos_BxT = None
  if position_rng is not None:
    inputs_pos_BxS, targets_pos_BxT = random_decode_positions(
        model, inputs_BxS, max_len, position_rng, max_random_position=max_random_position)

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
                  inputs_pos_BxS: Array | None = None,
                  oracle_lengths_B: Array | None = None, position_rng: Array | None = None,
                  max_random_position: int | None = None) -> tuple[Array, Array]:
  """Greedy decoding with the cache.

  Args:
    model: the (unbound) model, either architecture; static.
    params: its parameters.
    inputs_BxS: source tokens, PAD-padded.
    max_len: most tokens generated per row (EOS included); static.
    inputs_pos_BxS: source positions (default 0..S-1).
    oracle_lengths_B: the true target lengths (tokens before EOS), for the
      oracle-length mode: EOS is forbidden before step `oracle_lengths_B[b]` and
      forced at it, so the output has the right length and only its content can
      be wrong (Newman et al. 2020, "The EOS Decision and Length Extrapolation").
    position_rng: a PRNG key: decode at random positions instead, one sorted
      sample per batch shared by every row (`random_decode_positions`), used for
      the prompt and every generated step. Needs `max_random_position`; not
      with `inputs_pos_BxS`. The target sample covers `max_len` slots, so
      max_len = the true target length + 1 draws exactly as training did.
    max_random_position: positions are drawn from [0, max_random_position) (static;
      the run's `randomized.max_random_position`).

  Returns:
    `(tokens_BxT, lengths_B)`: T = max_len; tokens end with EOS (when produced)
    then PAD; lengths count the tokens before EOS (max_len if none).

  Raises:
    ValueError: the scheme cannot encode these lengths (e.g. a learned table too
      short), checked before tracing since traced positions cannot raise; or a
      bad combination of the position arguments.
  """
  if oracle_lengths_B is not None:
    oracle_lengths_B = jnp.asarray(oracle_lengths_B, jnp.int32)
  if _check_random_positions(model, inputs_BxS, max_len, position_rng, max_random_position,
                             inputs_pos_BxS):
    return _greedy_decode(model, params, inputs_BxS, max_len=max_len, inputs_pos_BxS=None,
                          oracle_lengths_B=oracle_lengths_B, position_rng=position_rng,
                          max_random_position=max_random_position)
  max_input_position = inputs_BxS.shape[1]
  if inputs_pos_BxS is not None and not isinstance(inputs_pos_BxS, jax.core.Tracer):
    max_input_position = int(jnp.max(inputs_pos_BxS)) + 1
  model.check_lengths(max_input_position, max_len)
  return _greedy_decode(model, params, inputs_BxS, max_len=max_len, inputs_pos_BxS=inputs_pos_BxS,
                        oracle_lengths_B=oracle_lengths_B)


def greedy_decode_uncached(model, params, inputs_BxS: Array, *, max_len: int,
                           position_rng: Array | None = None,
                           max_random_position: int | None = None) -> tuple[Array, Array]:
  """Greedy decoding that reruns the decoder over the whole prefix every step.

  Same outputs as `greedy_decode` (the parity and benchmark reference): each step
  reruns the whole teacher-forced forward pass (encoder included), so quadratic
  work per sequence instead of linear. `position_rng`, `max_random_position`: as
  for `greedy_decode` (the same key draws the same positions).
  """
  if not _check_random_positions(model, inputs_BxS, max_len, position_rng,
                                 max_random_position, None):
    model.check_lengths(inputs_BxS.shape[1], max_len)
  return _greedy_decode_uncached(model, params, inputs_BxS, max_len=max_len,
                                 position_rng=position_rng,
                                 max_random_position=max_random_position)


def _check_random_positions(model, inputs_BxS: Array, max_len: int, position_rng: Array | None,
                            max_random_position: int | None,
                            inputs_pos_BxS: Array | None) -> bool:
  """Whether to decode at random positions; ValueError for a bad combination or range."""
  if position_rng is None:
    if max_random_position is not None:
      raise ValueError("max_random_position is set but position_rng is not; pass both "
                       "to decode at random positions")
    return False
  if max_random_position is None:
    raise ValueError("position_rng needs max_random_position (config key "
                     "randomized.max_random_position)")
  if inputs_pos_BxS is not None:
    raise ValueError("pass either inputs_pos_BxS or position_rng, not both")
  S = inputs_BxS.shape[1]
  needed = S + max_len if model.joint_positions else max(S, max_len)
  if needed > max_random_position:
    raise ValueError(f"cannot draw {needed} distinct positions for {S} input and {max_len} "
                     f"target slots from [0, {max_random_position}); raise "
                     "randomized.max_random_position")
  model_lib.check_positions(model, max_random_position)
  return True


def _argmax_token(logits_BxV: Array, t: Array, oracle_lengths_B: Array | None) -> Array:
  """The greedy choice at step t; PAD and BOS are never generated; EOS exactly at an oracle length."""
  never_V = jnp.zeros(logits_BxV.shape[-1], bool).at[jnp.array([vocab.PAD_ID, vocab.BOS_ID])].set(True)
  if oracle_lengths_B is None:
    return jnp.argmax(jnp.where(never_V, -jnp.inf, logits_BxV), axis=-1).astype(jnp.int32)
  never_BxV = never_V[None] | ((jnp.arange(logits_BxV.shape[-1]) == vocab.EOS_ID)[None]
                               & (t < oracle_lengths_B)[:, None])
  token_B = jnp.argmax(jnp.where(never_BxV, -jnp.inf, logits_BxV), axis=-1).astype(jnp.int32)
  return jnp.where(t == oracle_lengths_B, vocab.EOS_ID, token_B)

