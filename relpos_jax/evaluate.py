"""Evaluating one checkpoint on one eval set: decoding, scoring, the teacher-forced loss.

The library half of evaluation (the trainer's periodic eval uses it; so does the
experiment runner, `relpos_jax.experiments.runner`, which chooses checkpoints,
evaluates whole workdirs and writes reports):

- `decode_batch` / `evaluate_batch`: cached greedy decoding of one batch, scored
  by `scoring.py` (exact match, token accuracy, failure anatomy), and the
  teacher-forced loss; with `oracle_length` a second decoding with the true
  length imposed.
- `evaluate_length`: one eval length's fixed set (a set cut to `num_examples` is
  a seeded uniform sample of it, never a prefix in generation order), at
  positions 0..L-1 or drawn by the run's `RandomizedPositions` sampler as in
  training (`RandomEval`).
- `validation_record`: the held-out in-distribution validation set.

Each returns a flat dict of `scoring`'s keys plus its length and set size.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any

import jax
import numpy as np

from relpos_jax import decode
from relpos_jax import losses
from relpos_jax import model as model_lib
from relpos_jax import scoring
from relpos_jax.data import pipeline
from relpos_jax.data import vocab
from relpos_jax.positions import randomized as randomized_lib

Record = dict[str, Any]  # one flat record; experiments/records.EvalRecord types the runner's


class UnrepresentableLength(ValueError):
  """The run's positional scheme cannot encode the sequences of an eval length."""


# ------------------------------------------------------------- one batch

Positions = tuple  # (inputs_pos_BxS, targets_pos_BxT) of one batch; None: 0..L-1


def decode_batch(model, params, batch: dict[str, np.ndarray], *, oracle_length: bool = False,
                 positions: Positions | None = None) -> tuple[np.ndarray, np.ndarray]:
  """Greedy-decodes a batch up to its padded target length.

  Args:
    model: the model (any `architectures.ARCHS` class).
    params: one replica's parameters.
    batch: `inputs`, `targets`.
    oracle_length: impose each example's true target length (EOS forbidden
      before it, forced at it: `decode.greedy_decode(oracle_lengths_B=...)`).
    positions: `(inputs_pos_BxS, targets_pos_BxT)` to decode at (None: 0..L-1);
      random ones from `RandomizedPositions.sample`.

  Returns:
    `(tokens_BxT, lengths_B)` as numpy arrays.

  Raises:
    ValueError: the scheme cannot encode these lengths (raised by `decode`).
  """
  oracle_B = scoring.target_lengths(batch["targets"]) if oracle_length else None
  inputs_pos, targets_pos = positions or (None, None)
  tokens_BxT, lengths_B = decode.greedy_decode(model, params, batch["inputs"],
                                               max_len=batch["targets"].shape[1],
                                               inputs_pos_BxS=inputs_pos,
                                               targets_pos_BxT=targets_pos,
                                               oracle_lengths_B=oracle_B)
  return np.asarray(tokens_BxT), np.asarray(lengths_B)


def decode_and_score(model, params, batch: dict[str, np.ndarray], *, oracle_length: bool = False,
                     positions: Positions | None = None) -> dict[str, np.ndarray]:
  """`scoring.score_batch` of `decode_batch`'s output (same arguments and errors)."""
  tokens_BxT, lengths_B = decode_batch(model, params, batch, oracle_length=oracle_length,
                                       positions=positions)
  return scoring.score_batch(tokens_BxT, lengths_B, batch["targets"])


@functools.partial(jax.jit, static_argnames="model")
def _teacher_forced_loss(model, params, inputs_BxS, targets_BxT, inputs_pos_BxS=None,
                         targets_pos_BxT=None):
  """Per example: the teacher-forced cross-entropy summed over its target tokens, their count."""
  logits_BxTxV = model.apply({"params": params}, inputs_BxS, targets_BxT, inputs_pos_BxS,
                             targets_pos_BxT)
  _, loss_BxT = losses.cross_entropy(logits_BxTxV, targets_BxT)
  return loss_BxT.sum(axis=1), (targets_BxT != vocab.PAD_ID).sum(axis=1)


def evaluate_batch(model, params, batch: dict[str, np.ndarray], *, oracle_length: bool = False,
                   positions: Positions | None = None
                   ) -> tuple[dict[str, np.ndarray], np.ndarray]:
  """Every per-example score of one batch: decoding, loss and (optionally) oracle decoding.

  Args:
    model: the model.
    params: one replica's parameters.
    batch: `inputs`, `targets`.
    oracle_length: also decode with the true lengths imposed.
    positions: `(inputs_pos_BxS, targets_pos_BxT)` to decode and score the loss
      at (None: 0..L-1).

  Returns:
    `(scores, tokens_BxT)`: `scoring.score_batch`'s dict plus `loss_sum`,
    `loss_tokens` and, with `oracle_length`, `oracle_exact` and
    `oracle_token_correct`; and the decoded tokens.

  Raises:
    UnrepresentableLength: `decode` refused the batch's lengths.
  """
  try:
    tokens_BxT, lengths_B = decode_batch(model, params, batch, positions=positions)
  except ValueError as e:  # decode checks the lengths before tracing
    raise UnrepresentableLength(str(e)) from e
  scores = scoring.score_batch(tokens_BxT, lengths_B, batch["targets"])
  loss_sum_B, loss_tokens_B = _teacher_forced_loss(model, params, batch["inputs"],
                                                   batch["targets"], *(positions or (None, None)))
  scores.update(loss_sum=np.asarray(loss_sum_B), loss_tokens=np.asarray(loss_tokens_B))
  if oracle_length:
    oracle = decode_and_score(model, params, batch, oracle_length=True, positions=positions)
    scores.update(oracle_exact=oracle["exact"], oracle_token_correct=oracle["token_correct"])
  return scores, tokens_BxT


def prediction_rows(data_vocab: vocab.Vocab, batch: dict[str, np.ndarray],
                    tokens_BxT: np.ndarray, scores: dict[str, np.ndarray]) -> list[Record]:
  """One readable row per real example of a batch (rows with weight 0 are left out).

  Args:
    data_vocab: the run's vocabulary.
    batch: `inputs`, `targets`, `weights`.
    tokens_BxT: the decoded tokens.
    scores: `scoring.score_batch`'s dict of the batch.

  Returns:
    `{"input", "target", "output"}` (space-separated tokens, EOS and PAD
    dropped), `"exact"` and `"first_wrong"` (0-based position of the first
    wrong token, the EOS slot included; None when exact).
  """
  rows = []
  for b in np.flatnonzero(batch["weights"] > 0):
    exact = bool(scores["exact"][b])
    rows.append({"input": " ".join(data_vocab.decode(batch["inputs"][b])),
                 "target": " ".join(data_vocab.decode(batch["targets"][b])),
                 "output": " ".join(data_vocab.decode(tokens_BxT[b])),
                 "exact": exact,
                 "first_wrong": None if exact else int(scores["first_error"][b])})
  return rows


# ------------------------------------------------------------ one eval set

@dataclasses.dataclass(frozen=True)
class RandomEval:
  """Evaluate at random positions: the run's sampler and the eval set's key.

  Attributes:
    sampler: the run's `randomized` config (`RandomizedPositions`): the same
      sampler training used, and how many draws each example is scored over.
    key: the eval set's key (`randomized_lib.eval_key`: seed and length folded in).
  """

  sampler: randomized_lib.RandomizedPositions
  key: jax.Array

  def positions(self, model, batch: dict[str, np.ndarray], batch_index: int,
                draw: int) -> Positions:
    """Draw `draw` of batch `batch_index`: sized by each example's real input and target."""
    key = jax.random.fold_in(jax.random.fold_in(self.key, batch_index), draw)
    return self.sampler.sample(key, batch["inputs"], batch["targets"],
                               joint=model.joint_positions)


def _score_batches(model, params, batches, *, oracle_length: bool = False,
                   data_vocab: vocab.Vocab | None = None,
                   predictions: list[Record] | None = None,
                   random: RandomEval | None = None) -> Record:
  """`scoring.summarize_scores` over batches (with `weights`); fills `predictions` if given.

  At random positions every example is decoded `random.sampler.eval_draws` times;
  the draws are summarized as that many observations of it (rates are then the
  mean over draws), and the record adds `exact_match_draws` (each draw's exact
  match over the set). Every record adds `position_draws` and `exact_counts`:
  per example (in the set's order), in how many draws it was exact.
  """
  draws = 1 if random is None else random.sampler.eval_draws
  if random is not None:  # the whole range, not just this draw: no silently partial set
    try:
      model_lib.check_positions(model, random.sampler.max_random_position)
    except ValueError as e:
      raise UnrepresentableLength(str(e)) from e
  parts, weights, exact_DxN = [], [], [[] for _ in range(draws)]
  for i, batch in enumerate(batches):
    for k in range(draws):
      positions = None if random is None else random.positions(model, batch, i, k)
      scores, tokens_BxT = evaluate_batch(model, params, batch, oracle_length=oracle_length,
                                          positions=positions)
      parts.append(scores)
      weights.append(batch["weights"])
      exact_DxN[k].append(scores["exact"][batch["weights"] > 0])
      if predictions is not None and k == 0:
        predictions += prediction_rows(data_vocab, batch, tokens_BxT, scores)
  scores = {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}
  record = scoring.summarize_scores(scores, np.concatenate(weights))
  exact_DxN = np.array([np.concatenate(d) for d in exact_DxN])
  record["num_examples"] = int(exact_DxN.shape[1])
  record["position_draws"] = draws
  record["exact_counts"] = exact_DxN.sum(axis=0).astype(int).tolist()
  if random is not None:
    record["exact_match_draws"] = [float(v) for v in exact_DxN.mean(axis=1)]
  return record


def evaluate_length(model, params, dataset: pipeline.Dataset, length: int, *,
                    batch_size: int, num_examples: int | None = None, eval_seed: int = 0,
                    oracle_length: bool = False, predictions: list[Record] | None = None,
                    random: randomized_lib.RandomizedPositions | None = None,
                    seed: int = 0) -> Record:
  """Evaluates the eval set at `length`: decoding, loss, failure anatomy.

  Args:
    model: the model (any `architectures.ARCHS` class).
    params: one replica's parameters.
    dataset: the data source.
    length: one of `dataset.eval_lengths`.
    batch_size: decoding batch size.
    num_examples: a seeded uniform sample of this many examples of the set
      (None, or at least the set's size: all of it).
    eval_seed: the sample's seed (and the random positions').
    oracle_length: add the oracle-length metrics.
    predictions: a list to append one `prediction_rows` row per example to
      (each with its `length`; at random positions, of the first draw).
    random: decode at random positions drawn by this sampler, as in training
      (per example, sized by its real input and target), each example over
      `random.eval_draws` draws, keyed by (eval_seed, seed, length); None: 0..L-1.
    seed: the replica's training seed (folded into the random positions' key).

  Returns:
    `{"length", **summarize_scores(...), "num_available", "eval_seed",
    "position_draws", "exact_counts"[, "exact_match_draws"]}`: `num_examples`
    scored out of the `num_available` of that length.

  Raises:
    UnrepresentableLength: the scheme cannot encode this length.
  """
  batches = dataset.eval_batches(length, batch_size, num_examples=num_examples,
                                 sample_seed=eval_seed)
  rows: list[Record] | None = [] if predictions is not None else None
  rand = None if random is None else RandomEval(
      random, randomized_lib.eval_key(eval_seed, seed, length))
  record = _score_batches(model, params, batches, oracle_length=oracle_length,
                          data_vocab=dataset.vocab, predictions=rows, random=rand)
  if predictions is not None:
    predictions += [{"length": int(length), **row} for row in rows]
  return {"length": int(length), **record, "num_available": int(dataset.eval_size(length)),
          "eval_seed": int(eval_seed)}


VALIDATION_LENGTH = 0  # the length folded into the validation set's position key


def validation_record(model, params, dataset: pipeline.Dataset, *, batch_size: int,
                      random: randomized_lib.RandomizedPositions | None = None,
                      seed: int = 0) -> Record:
  """Exact match and token accuracy on the held-out in-distribution validation set.

  Args:
    model: the model.
    params: one replica's parameters.
    dataset: the data source (`validation_batches` is disjoint from training).
    batch_size: decoding batch size.
    random: decode at random positions drawn by this sampler as in training
      (`evaluate_length`), for a run validated at random positions; None: 0..L-1.
    seed: the replica's training seed (the positions' key; every checkpoint of
      a replica is validated on the same draws).

  Returns:
    `summarize_scores`' record of the validation set.
  """
  rand = None if random is None else RandomEval(
      random, randomized_lib.eval_key(0, seed, VALIDATION_LENGTH))
  return _score_batches(model, params, dataset.validation_batches(batch_size), random=rand)


def format_seconds(seconds: float) -> str:
  """`h:mm:ss`."""
  seconds = int(max(seconds, 0))
  return f"{seconds // 3600}:{seconds % 3600 // 60:02d}:{seconds % 60:02d}"

