"""Randomized positions (Ruoss et al. 2023, "Randomized Positional Encodings Boost
Length Generalization of Transformers", ACL, §3).

A switch that applies to every scheme, because schemes are functions of explicit
positions: during training a sequence of n real tokens gets the positions

    sort(sample_without_replacement([0, max_random_position), n))

instead of 0..n-1, so the model sees position values (and gaps) of every size up
to `max_random_position` while training only on short sequences.

The sample's size is the row's number of *real* tokens, never the padded width:
a 5-token row padded to 20 slots gets a uniform 5-subset (its largest position
is about 5/6 of the range), not the 5 smallest of 20 draws (about 5/21). Slots
after the real ones repeat the last real position: in range, and no query that
counts attends to them (PAD keys are masked; the fed EOS after a target is
seen only by queries whose loss is masked). With max_random_position = 10, a row of
3 real tokens in 5 slots and one of 5:

    lengths_B = [3, 5]   ->   [[1, 4, 8, 8, 8],
                               [0, 2, 3, 6, 9]]

`input_target_positions` draws a batch's input and target positions:

* encoder-decoder: two independent samples, the inputs' (size: non-PAD inputs)
  and the decoder slots' (size: non-PAD targets = tokens + EOS, which is exactly
  the decoder's real inputs BOS, t_0, ..., t_{m-1});
* decoder-only (one running sequence `input SEP target`): ONE sorted sample of
  size (real inputs + SEP + target tokens) per row, its first n_in values on
  the input's real slots and the rest on SEP and the target slots, so the gap
  of input PAD slots between them changes nothing (as `run_on_positions`).
  With max_random_position = 10, inputs [x, y, PAD] and targets [a, EOS, PAD]
  (decoder input [SEP, a, EOS]: SEP and a are the real target slots; the EOS
  slot is seen only by queries whose loss is masked), n = 2 + 2:

      joint sample [0, 3, 5, 6, 6, 6]  ->  inputs_pos [0, 3, 3], targets_pos [5, 6, 6]
                    x  y  SEP a

Evaluation uses 0..L-1 by default. Evaluated at random positions (the
`@random_positions` rows), each example's positions are drawn exactly as in
training: `RandomizedPositions.sample` of the eval batch, i.e. for its real
input length and its reference target length (tokens + EOS), per example, with
a key that folds in the replica's seed, the eval length and the batch. Positions
carry no token information, so sizing the target sample by the reference length
reveals nothing about the answer: it only makes the positions of the tokens the
model has to produce follow the training distribution (a sample sized by the
padded decode width would give the real tokens the smallest of T draws, and a
spacing that depends on the padding). An overlong output's extra slots repeat
the last position; it is wrong at its EOS slot anyway. Each example is scored
over `eval_draws` independent samples and its scores averaged
(docs/evaluation.md). A learned table must have `max_random_position` rows
(checked by the trainer).

A randomized run's in-distribution validation (checkpoint choice) decodes at
random positions, because that is what it trained on: 0..L-1 is one particular,
vanishingly rare, sample of its training distribution (a sinusoidal model can
reach 0.94 exact match at random positions and 0.00 at 0..L-1). Each row of a
table is marked converged or not by validation at the positions that row is
decoded at (experiments/runner.py): a randomized run's 0..L-1 row by validation at 0..L-1.
`validation_positions` says which positions a run is validated at, and a sweep
that stores results evaluates such a run both ways, the random-position records
named `<run>` + `EVAL_SUFFIX`.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Mapping

import jax
import jax.numpy as jnp
import ml_collections

from relpos_jax.data import vocab

Array = jax.Array
EVAL_SUFFIX = "@random_positions"  # the name of a run's records decoded at random positions


def sample_positions(rng: Array, lengths_B: Array, width: int, *, max_random_position: int,
                     per_example: bool = True) -> Array:
  """Sorted random positions without replacement, one sample the size of each row's length.

  Row b's first `lengths_B[b]` entries are a uniform random subset of
  [0, max_random_position) of that size, sorted; its later entries repeat the
  last of them (0 for an empty row). A row's sample does not depend on `width`
  (with the same rng, widening the batch leaves every row's real positions as
  they were).

  Args:
    rng: PRNG key.
    lengths_B: int [B], real tokens per row, each in [0, min(width, max_random_position)].
    width: L, the padded width (static).
    max_random_position: positions are drawn from [0, max_random_position) (static).
    per_example: a fresh sample per row (True), or one draw shared by the batch
      (rows of equal length then get equal positions; every row is still a
      uniform sample of its own size).

  Returns:
    int32 `[B, L]`: strictly increasing over each row's first lengths_B[b]
    entries, constant after them, values in [0, max_random_position).

  Raises:
    ValueError: a (concrete) length above max_random_position or width.
  """
  lengths_B = jnp.asarray(lengths_B, jnp.int32)
  if not isinstance(lengths_B, jax.core.Tracer) and lengths_B.size:
    longest = int(jnp.max(lengths_B))
    if longest > max_random_position:
      raise ValueError(f"cannot draw {longest} distinct positions from "
                       f"[0, {max_random_position}); raise config key "
                       "randomized.max_random_position.")
    if longest > width:
      raise ValueError(f"a row of {longest} tokens does not fit width {width}")
  k = min(width, max_random_position)

  def one_row(key: Array, n: Array) -> Array:
    # The top-k of uniform noise, in noise order, is a uniformly random ordered
    # k-subset; its first n elements a uniform n-subset, whatever k is.
    noise = jax.random.uniform(key, (max_random_position,))
    _, idx_K = jax.lax.top_k(noise, k)
    chosen_K = jnp.sort(jnp.where(jnp.arange(k) < n, idx_K, max_random_position))
    chosen_L = jnp.pad(chosen_K, (0, width - k), constant_values=max_random_position)
    last = jnp.where(n > 0, chosen_L[jnp.maximum(n - 1, 0)], 0)
    return jnp.where(jnp.arange(width) < n, chosen_L, last).astype(jnp.int32)

  B = lengths_B.shape[0]
  keys = jax.random.split(rng, B) if per_example else jnp.broadcast_to(rng, (B,) + rng.shape)
  return jax.vmap(one_row)(keys, lengths_B)


def input_target_positions(rng: Array, input_lengths_B: Array, input_width: int,
                           target_lengths_B: Array, target_width: int, *,
                           max_random_position: int, joint: bool,
                           per_example: bool = True) -> tuple[Array, Array]:
  """Random positions for a batch's input slots and target (decoder-input) slots.

  Args:
    rng: PRNG key.
    input_lengths_B: int [B], real (non-PAD) input tokens per row.
    input_width: S.
    target_lengths_B: int [B], real target slots per row: the decoder input's
      non-PAD tokens, i.e. BOS / SEP plus the fed target tokens (in training the
      targets' non-PAD count, tokens + EOS).
    target_width: T.
    max_random_position: positions are drawn from [0, max_random_position).
    joint: one running sequence (decoder-only, `model.joint_positions`): one
      sample of size inputs + targets per row, split between them; else two
      independent samples (encoder-decoder: encoder and decoder each count
      positions on their own).
    per_example: a fresh sample per row, or one draw shared by the batch.

  Returns:
    `(inputs_pos_BxS, targets_pos_BxT)`, int32. Joint: row b's input slots
    j < n_in hold the sample's first n_in values (later input slots repeat the
    last of them) and target slot k holds value n_in + k.
  """
  input_lengths_B = jnp.asarray(input_lengths_B, jnp.int32)
  target_lengths_B = jnp.asarray(target_lengths_B, jnp.int32)
  draw = lambda key, lengths_B, width: sample_positions(
      key, lengths_B, width, max_random_position=max_random_position, per_example=per_example)
  if not joint:
    in_rng, tgt_rng = jax.random.split(rng)
    return (draw(in_rng, input_lengths_B, input_width),
            draw(tgt_rng, target_lengths_B, target_width))
  S, T = input_width, target_width
  pos_BxN = draw(rng, input_lengths_B + target_lengths_B, S + T)
  n_in_Bx1 = input_lengths_B[:, None]
  in_idx_BxS = jnp.minimum(jnp.arange(S)[None], jnp.maximum(n_in_Bx1 - 1, 0))
  inputs_pos_BxS = jnp.take_along_axis(pos_BxN, in_idx_BxS, axis=1)
  targets_pos_BxT = jnp.take_along_axis(pos_BxN, n_in_Bx1 + jnp.arange(T)[None], axis=1)
  return inputs_pos_BxS, targets_pos_BxT


@dataclasses.dataclass(frozen=True)
class RandomizedPositions:
  """The `randomized` config: whether and how positions are randomized; the one sampler.

  Training and evaluation at random positions both call `sample`, so an eval
  example's positions have exactly the distribution its training examples had.

  Attributes:
    enabled: randomize training positions (and validate at random positions;
      evaluation uses 0..L-1 unless asked).
    max_random_position: positions are drawn from [0, max_random_position).
    per_example: a fresh sample per example (True) or one draw per batch.
    eval_draws: evaluated at random positions, each example is decoded at this
      many independent samples and its scores averaged (the records'
      `position_draws`).
  """

  enabled: bool = False
  max_random_position: int = 2048
  per_example: bool = True
  eval_draws: int = 8

  def __post_init__(self):
    if self.max_random_position < 1:
      raise ValueError(f"randomized.max_random_position must be >= 1, got "
                       f"{self.max_random_position}")
    if self.eval_draws < 1:
      raise ValueError(f"randomized.eval_draws must be >= 1, got {self.eval_draws}")

  def sample(self, rng: Array, inputs_BxS: Array, targets_BxT: Array, *,
             joint: bool) -> tuple[Array, Array]:
    """`(inputs_pos_BxS, targets_pos_BxT)` for a batch, sized by its real tokens.

    The sample sizes are each row's non-PAD inputs and non-PAD targets (tokens +
    EOS, which is exactly the decoder's real inputs BOS / SEP, t_0, ...), never
    the padded widths; see `input_target_positions`. The same call serves a
    training batch and an eval batch (whose targets are the references).

    Args:
      rng: PRNG key.
      inputs_BxS: source tokens, PAD-padded.
      targets_BxT: target tokens (then EOS, then PAD).
      joint: one running sequence (decoder-only, `model.joint_positions`).

    Returns:
      `(inputs_pos_BxS, targets_pos_BxT)`, int32; target slot k is where the
      decoder-input token k (BOS / SEP at k = 0) sits.
    """
    return input_target_positions(
        rng, jnp.sum(inputs_BxS != vocab.PAD_ID, axis=1), inputs_BxS.shape[1],
        jnp.sum(targets_BxT != vocab.PAD_ID, axis=1), targets_BxT.shape[1],
        max_random_position=self.max_random_position, joint=joint,
        per_example=self.per_example)


def eval_key(eval_seed: int, seed: int, length: int) -> Array:
  """The key of one eval set's random positions: folds in the replica's seed and the length.

  Batch i, draw k then use `fold_in(fold_in(key, i), k)`; different seeds draw
  different positions, so the spread over seeds includes the draws' variance.
  """
  key = jax.random.fold_in(jax.random.PRNGKey(eval_seed), seed)
  return jax.random.fold_in(key, length)


def default_config() -> ml_collections.ConfigDict:
  """The `randomized` config: `RandomizedPositions`' fields with their defaults."""
  return ml_collections.ConfigDict(
      {f.name: f.default for f in dataclasses.fields(RandomizedPositions)})


def from_config(randomized: Mapping[str, Any] | None) -> RandomizedPositions:
  """The sampler of a run's `randomized` config section (a ConfigDict or its JSON data).

  Missing keys take their defaults (configs of runs trained before a key existed).
  """
  return RandomizedPositions(**dict(randomized or {}))


def validation_sampler(randomized: Mapping[str, Any] | None) -> RandomizedPositions | None:
  """Where a run is validated (checkpoint choice): its sampler if it trained randomized, else None.

  Args:
    randomized: the run's `randomized` config section (None or missing keys: the
      defaults).

  Returns:
    None (validate at 0..L-1) or the sampler to validate at random positions with.
  """
  config = from_config(randomized)
  return config if config.enabled else None
