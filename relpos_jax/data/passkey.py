"""Passkey retrieval (Mohtashami & Jaggi 2023, "Landmark Attention"), on a byte-level corpus.

An example of context C bytes: filler text (a random window of the corpus's
training split) with a key sentence holding a random 5-digit key inserted at
depth d (0: before all the filler, 1: after all of it), then a question; the
model must generate the key:

    prompt  = filler[:k] + KEY_SENTENCE(key) + filler[k:] + QUESTION,  k = round(d * F)
    answer  = the key's 5 digits (then EOS)

with F = C - 5 - len(KEY_SENTENCE) - len(QUESTION) filler bytes, so prompt and
answer fill exactly C bytes. As a seq2seq example for the decoder-only model the
prompt is the input and the digits the target (`prompt SEP digits EOS`: the model
reads the C + 1 tokens before EOS, at positions 0..C, and predicts the digits and
EOS). Training draws d uniform in [0, 1] at C = L, a pure
function of (seed, step); eval sets at each (C, d) are seeded by (C, d) only.
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from relpos_jax.data import corpus as corpus_lib
from relpos_jax.data import vocab as vocab_lib

KEY_DIGITS = 5
KEY_SENTENCE = b"\n# the pass key is %s. remember it.\n"
QUESTION = b"\n# what is the pass key? the pass key is "
DEPTHS = (0.0, 0.25, 0.5, 0.75, 1.0)
EVAL_SEED = 20_230_501  # eval sets' own seed, never a training seed
# First word of this module's numpy seeds (lm.py lists the other modules'); eval sets add
# _EVAL_STREAM as the second word.
_STREAM = 7
_EVAL_STREAM = 1


def overhead() -> int:
  """Bytes of an example that are not filler: key sentence, question, answer."""
  return len(KEY_SENTENCE % (b"0" * KEY_DIGITS)) + len(QUESTION) + KEY_DIGITS


def make_example(filler_ids: np.ndarray, rng: np.random.Generator, context: int,
                 depth: float) -> tuple[np.ndarray, np.ndarray, int]:
  """One passkey example of `context` bytes with the key sentence at `depth`.

  Args:
    filler_ids: ids of the text to draw the filler from (a split).
    rng: draws the filler's start and the key.
    context: C, prompt + answer bytes.
    depth: in [0, 1]: the share of the filler before the key sentence.

  Returns:
    (prompt ids int32 [C - 5], answer ids int32 [5], offset of the key sentence in the prompt).

  Raises:
    ValueError: C too short for the sentence, question and answer; depth outside [0, 1].
  """
  num_filler = context - overhead()
  if num_filler < 0:
    raise ValueError(f"a passkey example needs at least {overhead()} bytes; context {context} "
                     "is shorter")
  if not 0.0 <= depth <= 1.0:
    raise ValueError(f"depth must be in [0, 1], got {depth}")
  start = int(rng.integers(0, len(filler_ids) - num_filler + 1))
  filler = np.asarray(filler_ids[start:start + num_filler], np.int32)
  key = b"%05d" % int(rng.integers(0, 10**KEY_DIGITS))
  at = int(round(depth * num_filler))
  sentence = corpus_lib.encode_bytes(KEY_SENTENCE % key).astype(np.int32)
  prompt = np.concatenate([filler[:at], sentence, filler[at:],
                           corpus_lib.encode_bytes(QUESTION).astype(np.int32)])
  return prompt, corpus_lib.encode_bytes(key).astype(np.int32), at


def batch_of(examples: Sequence[tuple[np.ndarray, np.ndarray, int]]) -> dict[str, np.ndarray]:
  """{"inputs": prompts int32 [B, C - 5], "targets": digits then EOS int32 [B, 6]}."""
  inputs = np.stack([p for p, _, _ in examples])
  answers = np.stack([a for _, a, _ in examples])
  eos = np.full((len(examples), 1), vocab_lib.EOS_ID, np.int32)
  return {"inputs": inputs, "targets": np.concatenate([answers, eos], axis=1)}


class PasskeyDataset:
  """Passkey examples over an LM corpus, with the training interface of `pipeline.Dataset`.

  Attributes:
    vocab: `corpus.byte_vocab()`.
    train_length: L (training examples are L bytes).
    eval_contexts: C values of the eval sets.
    depths: the eval depths.
    eval_examples: examples per (C, depth).
  """

  num_train_examples = None

  def __init__(self, corpus: corpus_lib.Corpus, *, seed: int, train_length: int,
               eval_multiples: Sequence[int], eval_examples: int,
               depths: Sequence[float] = DEPTHS):
    self.vocab = corpus_lib.byte_vocab()
    self.corpus = corpus
    self.seed = int(seed)
    self.train_length = int(train_length)
    self.eval_contexts = sorted({int(m) * self.train_length for m in eval_multiples})
    self.eval_lengths = list(self.eval_contexts)
    self.depths = tuple(float(d) for d in depths)
    self.eval_examples = int(eval_examples)
    if self.train_length < overhead() + 1:
      raise ValueError(f"data.train_length={train_length}: a passkey example needs more than "
                       f"{overhead()} bytes")

  @property
  def manifest(self) -> Any:
    """The corpus manifest."""
    return self.corpus.manifest

  def split(self, name: str) -> np.ndarray:
    """A split's ids."""
    return self.corpus.splits[name]

  def train_batch(self, step: int, batch_size: int) -> dict[str, np.ndarray]:
    """Training examples at C = L, depth uniform in [0, 1]: pure in (seed, step, batch_size)."""
    if step < 0 or batch_size < 1:
      raise ValueError(f"need step >= 0 and batch_size >= 1, got step={step}, "
                       f"batch_size={batch_size}")
    rng = np.random.default_rng([_STREAM, self.seed, int(step)])
    return batch_of([make_example(self.split("train"), rng, self.train_length, rng.random())
                     for _ in range(batch_size)])

  def train_rows(self, step: int, batch_size: int, rows: slice) -> dict[str, np.ndarray]:
    """Rows `rows` of `train_batch(step, batch_size)`."""
    return {k: v[rows] for k, v in self.train_batch(step, batch_size).items()}

  def max_padded_lengths(self) -> tuple[int, int]:
    """(L - 5, 6): the training prompt and the digits with EOS."""
    return self.train_length - KEY_DIGITS, KEY_DIGITS + 1

  def eval_batch(self, context: int, depth: float, num_examples: int | None = None,
                 seed: int = EVAL_SEED) -> dict[str, np.ndarray]:
    """The fixed eval set at (context, depth), filler from the training split as in the issue.

    Seeded by (seed, context, depth) only: the same for every training seed.
    """
    rng = np.random.default_rng([_STREAM, _EVAL_STREAM, seed, int(context),
                                 int(round(depth * 1000))])
    return batch_of([make_example(self.split("train"), rng, context, depth)
                     for _ in range(num_examples or self.eval_examples)])

  def validation_info(self) -> dict[str, Any]:
    """What the periodic validation scores."""
    return {"source": "passkey at the training context", "depths": list(self.depths),
            "num_examples": self.eval_examples * len(self.depths)}
