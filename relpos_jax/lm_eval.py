"""Language-model evaluation: loss per byte against the eval context, and where it breaks.

For a byte-level LM run (data task `lm:...`, relpos_jax/data/corpus.py) trained on
windows of L bytes, each eval context C in `data.eval_multiples` x L is scored on
the same leading span of N ids of the test split (`lm.eval_span`: N a multiple of
the longest C, so every C tiles exactly the same ids):

* **non-overlapping windows** (the default): the span cut into N / C windows of C
  ids, every id scored from the window's start (position 0 is predicted from
  SEP = BOS alone). Mean loss per id (nats) -> bits per byte = loss / ln 2 and
  per-byte perplexity = exp(loss). The document separators are scored like bytes
  (about one id in 15,000 of lm:cpython).
* **sliding windows** (`data.sliding_stride` S > 0; Press et al. 2022, "Train
  Short, Test Long", §B): windows of C ending at C, C + S, ..., N; the first scores
  all its C ids, every later one only its last S, so each id is scored once with
  at least C - S ids of context.
* **loss by position**: the mean loss at each position 0..C-1 of the
  non-overlapping windows, so a figure shows where a scheme breaks.
* **bits per byte by block**: the span cut into blocks of the longest C (the same
  bytes at every C, in every run), each block's bits per byte, so an interval and a
  paired comparison account for the finite test text as well as the seeds
  (`experiments/stats.py`; blocks are the eval "examples").

A scheme that cannot encode C positions (learned absolute positions beyond their
table) gets an "n/a" record (NaN metrics, the reason in `error`), never a clamped
gather. Eval-time variants (RoPE's PI / dynamic NTK / YaRN scaling,
length-scaled attention) are `key=value` overrides of the run's config, as in
`config_args.apply_overrides`; the run is then named `<run>@<variant>` (the
runner: `relpos_jax.experiments.lm_runner`).

Memory: one forward pass holds at most `rows_per_pass` windows, chosen so that
one layer's attention logits (rows x H x (C+1) x (C+1) float32) stay within
`attention_budget_mib`; the layers run one after another, so no more than one
such tensor per layer is live. benchmarks/lm_eval_memory.py measures the peak.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import os
import time
from typing import Any, Callable, Sequence

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import optax

from relpos_jax import evaluate
from relpos_jax import workdir as workdir_lib
from relpos_jax.data import corpus as corpus_lib
from relpos_jax.data import lm
from relpos_jax.data import passkey as passkey_lib
from relpos_jax.data import vocab as vocab_lib

Record = dict[str, Any]
LossFn = Callable[[np.ndarray], np.ndarray]  # windows int32 [B, C] -> loss per id [B, C]
DEFAULT_ATTENTION_BUDGET_MIB = 256
MAX_IDS_PER_PASS = 32_768  # also bounds the other activations (rows x C x d_ff) of one pass


def is_lm_config(config: ml_collections.ConfigDict | dict) -> bool:
  """Whether a run config is a byte-level language model (`data.task` starts with `lm:`)."""
  return str(config["data"]["task"]).startswith(corpus_lib.PREFIX)


def is_lm_run(workdir: str) -> bool:
  """Whether `workdir` holds a language-model run (reads its config.json; False without one)."""
  if not os.path.exists(workdir_lib.config_path(workdir)):
    return False
  return is_lm_config(workdir_lib.load_config(workdir))


# ------------------------------------------------------------------- windows

def nonoverlapping_windows(ids: np.ndarray, context: int, span: int) -> np.ndarray:
  """The first `span` ids cut into windows of `context`: int32 [span / C, C].

  Raises:
    ValueError: `span` not a positive multiple of `context`, or longer than `ids`.
  """
  if span < context or span % context or span > len(ids):
    raise ValueError(f"a span of {span} ids cannot be tiled by windows of {context} "
                     f"(split of {len(ids)} ids)")
  return np.asarray(ids[:span], np.int32).reshape(span // context, context)


def sliding_windows(ids: np.ndarray, context: int, stride: int,
                    span: int) -> tuple[np.ndarray, np.ndarray]:
  """Windows of `context` ending at C, C + S, ..., span, and the first position each scores.

  Returns:
    (windows int32 [W, C], first_scored int32 [W]: 0 for the first window, C - S after),
    so the scored ids are exactly ids[0:span], each once.
  """
  if not 0 < stride <= context or (span - context) % stride or span > len(ids):
    raise ValueError(f"sliding windows of {context} with stride {stride} do not tile a span "
                     f"of {span} ids")
  ends = np.arange(context, span + 1, stride)
  windows = np.stack([np.asarray(ids[e - context:e], np.int32) for e in ends])
  first = np.full(len(ends), context - stride, np.int32)
  first[0] = 0
  return windows, first


def bits_per_byte(loss_nats: float) -> float:
  """Mean loss per byte in nats -> bits per byte: loss / ln 2."""
  return float(loss_nats) / math.log(2.0)


# --------------------------------------------------------------- the model

def _window_inputs(windows_BxC: jax.Array) -> jax.Array:
  """The empty prompt: one PAD slot per row (the model puts SEP = BOS before the window)."""
  return jnp.full((windows_BxC.shape[0], 1), vocab_lib.PAD_ID, jnp.int32)


@functools.partial(jax.jit, static_argnames="model")
def _token_losses(model, params, windows_BxC: jax.Array) -> jax.Array:
  """-log p(id_t | SEP, id_<t) for every id of every window, float32 [B, C]."""
  logits_BxCxV = model.apply({"params": params}, _window_inputs(windows_BxC), windows_BxC)
  return optax.softmax_cross_entropy_with_integer_labels(
      logits_BxCxV.astype(jnp.float32), windows_BxC)


def token_loss_fn(model, params) -> LossFn:
  """The per-id loss of a model: windows int32 [B, C] -> float32 numpy [B, C]."""
  return lambda windows_BxC: np.asarray(_token_losses(model, params, jnp.asarray(windows_BxC)))


def rows_per_pass(model, context: int, budget_mib: float = DEFAULT_ATTENTION_BUDGET_MIB) -> int:
  """Windows per forward pass: one layer's rows x H x (C+1)^2 float32 logits within the budget.

  Also at most MAX_IDS_PER_PASS ids in all (the feed-forward activations).

  Returns:
    At least 1 (a single window larger than the budget still runs, alone).
  """
  per_row = model.num_heads * (context + 1) ** 2 * 4
  return max(1, min(int(budget_mib * 2**20 // per_row), MAX_IDS_PER_PASS // context))


def check_context(model, context: int) -> str | None:
  """None if the model can encode a window of `context` ids, else why not (the scheme's message)."""
  try:
    model.check_lengths(1, context)  # the PAD prompt slot, then the window
  except ValueError as e:
    return str(e)
  return None


# ----------------------------------------------------------------- scoring

@dataclasses.dataclass
class WindowScores:
  """Sums over scored ids: total loss and count, per position within the window, and the
  loss of every id of the span (each scored once)."""
  loss_sum: float
  count: int
  position_loss_sum_C: np.ndarray
  position_count_C: np.ndarray
  id_loss_N: np.ndarray


def score_windows(loss_fn: LossFn, windows_WxC: np.ndarray, first_scored_W: np.ndarray,
                  rows: int, starts_W: np.ndarray | None = None) -> WindowScores:
  """Scores windows `rows` at a time (the last chunk padded with copies, weight 0).

  Args:
    loss_fn: windows [B, C] -> loss per id [B, C].
    windows_WxC: the windows.
    first_scored_W: position from which each window's ids count.
    rows: windows per call of `loss_fn` (a fixed shape: one compilation per C).
    starts_W: where each window starts in the span (default: back to back, W x C ids).

  Returns:
    The sums (`WindowScores`); `id_loss_N` NaN at ids no window scores.
  """
  W, C = windows_WxC.shape
  starts_W = np.arange(W) * C if starts_W is None else np.asarray(starts_W)
  loss_sum, count = 0.0, 0
  pos_sum_C, pos_count_C = np.zeros(C, np.float64), np.zeros(C, np.int64)
  id_loss_N = np.full(int(starts_W.max()) + C, np.nan)
  for start in range(0, W, rows):
    chunk = windows_WxC[start:start + rows]
    real = len(chunk)
    chunk = np.concatenate([chunk, np.repeat(chunk[-1:], rows - real, 0)]) if real < rows else chunk
    loss_BxC = np.asarray(loss_fn(chunk), np.float64)[:real]
    scored_BxC = np.arange(C)[None, :] >= first_scored_W[start:start + real, None]
    loss_sum += float((loss_BxC * scored_BxC).sum())
    count += int(scored_BxC.sum())
    pos_sum_C += (loss_BxC * scored_BxC).sum(0)
    pos_count_C += scored_BxC.sum(0)
    ids_BxC = starts_W[start:start + real, None] + np.arange(C)[None, :]
    id_loss_N[ids_BxC[scored_BxC]] = loss_BxC[scored_BxC]
  return WindowScores(loss_sum, count, pos_sum_C, pos_count_C, id_loss_N)


def context_record(loss_fn: LossFn, ids: np.ndarray, context: int, span: int, *,
                   rows: int, stride: int = 0, block: int | None = None) -> Record:
  """Loss, bits per byte and perplexity of one eval context over ids[0:span].

  Args:
    loss_fn: windows [B, C] -> loss per id [B, C].
    ids: the split's ids.
    context: C.
    span: N, the shared span (a multiple of C).
    rows: windows per call.
    stride: 0: non-overlapping windows; S > 0: sliding windows scoring their last S.
    block: the eval unit of the interval (default: the whole span): the span's
      consecutive blocks of this many ids, the same bytes at every context when it
      is the longest context (`evaluate_contexts`); divides `span`.

  Returns:
    {"context", "mode", "stride", "eval_bytes", "num_windows", "loss" (nats per
    byte), "bits_per_byte", "perplexity", "position_loss" (list of C means, or
    None for sliding windows), "block_bytes", "block_bits_per_byte" (bits per byte
    of each block: their mean is "bits_per_byte")}.

  Raises:
    ValueError: `block` does not divide `span`.
  """
  block = span if block is None else int(block)
  if block <= 0 or span % block:
    raise ValueError(f"blocks of {block} ids do not tile a span of {span}")
  if stride:
    windows, first = sliding_windows(ids, context, stride, span)
    starts = np.arange(len(windows)) * stride
  else:
    windows = nonoverlapping_windows(ids, context, span)
    first = np.zeros(len(windows), np.int32)
    starts = np.arange(len(windows)) * context
  scores = score_windows(loss_fn, windows, first, min(rows, len(windows)), starts)
  if scores.count != span or np.isnan(scores.id_loss_N).any():
    raise AssertionError(f"scored {scores.count} ids of a span of {span}")
  loss = scores.loss_sum / scores.count
  position = None if stride else (scores.position_loss_sum_C / scores.position_count_C).tolist()
  block_bits = scores.id_loss_N.reshape(span // block, block).mean(axis=1) / math.log(2.0)
  return {"context": int(context), "mode": "sliding" if stride else "nonoverlapping",
          "stride": int(stride), "eval_bytes": int(span), "num_windows": int(len(windows)),
          "loss": float(loss), "bits_per_byte": bits_per_byte(loss),
          "perplexity": float(math.exp(loss)), "position_loss": position,
          "block_bytes": block, "block_bits_per_byte": block_bits.tolist()}


def not_representable(context: int, span: int, reason: str, *, stride: int = 0) -> Record:
  """The record of a context the scheme cannot encode: NaN metrics, `error` the reason."""
  nan = float("nan")
  return {"context": int(context), "mode": "sliding" if stride else "nonoverlapping",
          "stride": int(stride), "eval_bytes": int(span), "num_windows": 0, "loss": nan,
          "bits_per_byte": nan, "perplexity": nan, "position_loss": None,
          "block_bytes": None, "block_bits_per_byte": None, "error": reason}


def evaluate_contexts(model, params, dataset: lm.LMDataset, *, split: str = "test",
                      contexts: Sequence[int] | None = None, num_bytes: int | None = None,
                      budget_mib: float = DEFAULT_ATTENTION_BUDGET_MIB,
                      loss_fn: LossFn | None = None) -> list[Record]:
  """Every eval context's records on the same span of `split` (non-overlapping, then sliding).

  Args:
    model: the model (decoder-only).
    params: one replica's parameters.
    dataset: the LM data.
    split: "test" (or "validation").
    contexts: the contexts (default: `dataset.eval_contexts`).
    num_bytes: N before rounding (default: the dataset's eval_bytes).
    budget_mib: the attention budget of one forward pass (`rows_per_pass`).
    loss_fn: the per-id loss (default: the model's; tests pass a stub).

  Returns:
    One record per context (and one more per context with sliding windows when
    `dataset.sliding_stride`), each with `error` None or the reason it is n/a.
  """
  contexts = sorted(contexts or dataset.eval_contexts)
  ids = dataset.split(split)
  span = lm.eval_span(len(ids), num_bytes or dataset.eval_bytes, contexts[-1])
  loss_fn = loss_fn or token_loss_fn(model, params)
  records = []
  for stride in [0] + ([dataset.sliding_stride] if dataset.sliding_stride else []):
    for context in contexts:
      reason = check_context(model, context)
      if reason is not None:
        records.append(not_representable(context, span, reason, stride=stride))
        continue
      if stride and stride > context:
        continue
      record = context_record(loss_fn, ids, context, span,
                              rows=rows_per_pass(model, context, budget_mib), stride=stride,
                              block=contexts[-1])
      records.append({**record, "error": None})
  return records


def validation_loss(model, params, dataset: lm.LMDataset,
                    budget_mib: float = DEFAULT_ATTENTION_BUDGET_MIB) -> float:
  """Mean loss per byte (nats) on the validation span at the training context L."""
  L = dataset.train_length
  ids = dataset.split("validation")
  span = lm.eval_span(len(ids), dataset.valid_bytes, L)
  record = context_record(token_loss_fn(model, params), ids, L, span,
                          rows=rows_per_pass(model, L, budget_mib))
  return record["loss"]


def validation_scalars(model, params, dataset) -> dict[str, float]:
  """The periodic eval of a training run: validation loss and bits per byte at context L.

  A passkey run reports its accuracy at L (`passkey_validation_accuracy`).
  """
  if isinstance(dataset, passkey_lib.PasskeyDataset):
    return {"valid_passkey_accuracy": passkey_validation_accuracy(model, params, dataset)}
  loss = validation_loss(model, params, dataset)
  return {"valid_loss": loss, "valid_bits_per_byte": bits_per_byte(loss)}


# ---------------------------------------------------------------- passkey

def passkey_correct(model, params, batch: dict[str, np.ndarray], rows: int) -> np.ndarray:
  """Greedy-decodes each prompt's 5 digits, `rows` prompts at a time; bool [B]: all 5 right."""
  out = []
  for start in range(0, len(batch["inputs"]), rows):
    chunk = {k: v[start:start + rows] for k, v in batch.items()}
    tokens_BxT, _ = evaluate.decode_batch(model, params, chunk)
    digits = passkey_lib.KEY_DIGITS
    out.append((tokens_BxT[:, :digits] == chunk["targets"][:, :digits]).all(axis=1))
  return np.concatenate(out)


def passkey_context_reason(model, context: int) -> str | None:
  """None if the model can encode a passkey example of `context` bytes, else why not."""
  try:
    model.check_lengths(context - passkey_lib.KEY_DIGITS, passkey_lib.KEY_DIGITS + 1)
  except ValueError as e:
    return str(e)
  return None


def evaluate_passkey(model, params, dataset: passkey_lib.PasskeyDataset, *,
                     budget_mib: float = DEFAULT_ATTENTION_BUDGET_MIB,
                     seed: int = passkey_lib.EVAL_SEED) -> list[Record]:
  """Passkey accuracy at every (eval context, depth).

  Returns:
    One record per (context, depth): {"context", "depth", "accuracy" (share of
    examples whose 5 generated digits are the key; NaN if n/a), "num_examples", "error"}.
  """
  records = []
  for context in dataset.eval_contexts:
    reason = passkey_context_reason(model, context)
    for depth in dataset.depths:
      if reason is not None:
        records.append({"context": context, "depth": depth, "accuracy": float("nan"),
                        "num_examples": 0, "error": reason})
        continue
      batch = dataset.eval_batch(context, depth, seed=seed)
      correct = passkey_correct(model, params, batch, rows_per_pass(model, context + 2,
                                                                    budget_mib))
      records.append({"context": context, "depth": depth, "accuracy": float(correct.mean()),
                      "num_examples": int(len(correct)), "error": None})
  return records


def passkey_validation_accuracy(model, params, dataset: passkey_lib.PasskeyDataset) -> float:
  """Mean passkey accuracy at context L over the depths, on examples the eval sets do not use."""
  correct = [passkey_correct(model, params,
                             dataset.eval_batch(dataset.train_length, depth,
                                                seed=passkey_lib.EVAL_SEED + 1),
                             rows_per_pass(model, dataset.train_length + 2)).mean()
             for depth in dataset.depths]
  return float(np.mean(correct))
