"""Byte-level language-model data: windows of a text corpus (`corpus.py`) to predict.

The corpora (`lm:cpython`, `lm:tfds:<name>`), their byte vocabulary, splits and
manifest are `corpus.py`'s; `make_dataset` builds the dataset of a run's objective
from one: this module's `LMDataset` (next-byte prediction) or `passkey.PasskeyDataset`.

Training (`LMDataset.train_batch`): each row is a window of `train_length` (L)
consecutive ids from the training split, its start uniform over the split, a
pure function of (seed, step) (exact resume). Batches have the pipeline's form:
`inputs` one PAD slot [B, 1] (an empty prompt; the decoder-only model puts its
SEP = BOS before the targets) and `targets` the window [B, L], no EOS: every
slot is a byte to predict, at positions 0..L-1.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

import ml_collections
import numpy as np

from relpos_jax.data import corpus as corpus_lib
from relpos_jax.data import passkey
from relpos_jax.data import vocab as vocab_lib

# First words of this module's numpy seeds: tasks.py uses 0-1, pipeline.py 2-5, passkey.py 7.
_TRAIN_STREAM = 6
OBJECTIVES = ("lm", "passkey")


# -------------------------------------------------------------------- windows

def random_windows(ids: np.ndarray, length: int, starts_rng: np.random.Generator,
                   count: int) -> np.ndarray:
  """`count` windows of `length` consecutive ids, starts uniform over [0, len - length].

  Returns:
    int32 [count, length].
  """
  if len(ids) < length:
    raise ValueError(f"a split of {len(ids)} ids is shorter than one window of {length}")
  starts = starts_rng.integers(0, len(ids) - length + 1, size=count)
  return np.stack([ids[s:s + length] for s in starts]).astype(np.int32)


def eval_span(num_ids: int, num_bytes: int, longest_context: int) -> int:
  """How many leading ids of a split every eval context scores: the same span for every C.

  min(num_bytes, num_ids) rounded down to a multiple of the longest context, so
  that every context C (each dividing it) tiles exactly the same ids.

  Raises:
    ValueError: the split is shorter than one window of the longest context.
  """
  span = min(num_bytes, num_ids) // longest_context * longest_context
  if span < longest_context:
    raise ValueError(f"the eval split holds {num_ids} ids and {num_bytes} were asked for: "
                     f"fewer than one window of the longest context {longest_context}; "
                     "raise data.eval_bytes or shorten data.eval_multiples")
  return span


# -------------------------------------------------------------------- dataset

class LMDataset:
  """A byte-level LM source with the training interface of `pipeline.Dataset`.

  Attributes:
    vocab: `corpus.byte_vocab()`.
    corpus: the corpus.
    train_length: L.
    eval_contexts: the eval contexts C (multiples of L), ascending.
    eval_bytes, valid_bytes: how many leading ids of the test / validation split
      eval scores (see `eval_span`).
    sliding_stride: 0, or S: sliding-window eval scoring the last S ids of each window.
    num_train_examples: None (windows are drawn afresh).
  """

  num_train_examples = None

  def __init__(self, corpus: corpus_lib.Corpus, *, seed: int, train_length: int,
               eval_multiples: Sequence[int], eval_bytes: int, valid_bytes: int,
               sliding_stride: int):
    self.vocab = corpus_lib.byte_vocab()
    self.corpus = corpus
    self.seed = int(seed)
    self.train_length = int(train_length)
    self.eval_contexts = sorted({int(m) * self.train_length for m in eval_multiples})
    self.eval_lengths = list(self.eval_contexts)
    self.eval_bytes, self.valid_bytes = int(eval_bytes), int(valid_bytes)
    self.sliding_stride = int(sliding_stride)

  @property
  def manifest(self) -> Mapping[str, Any]:
    """The corpus manifest."""
    return self.corpus.manifest

  def split(self, name: str) -> np.ndarray:
    """A split's ids (uint16)."""
    if name not in self.corpus.splits:
      raise ValueError(f"no split {name!r}; splits are {list(self.corpus.splits)}")
    return self.corpus.splits[name]

  def train_batch(self, step: int, batch_size: int) -> dict[str, np.ndarray]:
    """The windows of one step: a pure function of (seed, step, batch_size).

    Returns:
      {"inputs": PAD int32 [B, 1], "targets": int32 [B, L]}.
    """
    if step < 0 or batch_size < 1:
      raise ValueError(f"need step >= 0 and batch_size >= 1, got step={step}, "
                       f"batch_size={batch_size}")
    rng = np.random.default_rng([_TRAIN_STREAM, self.seed, int(step)])
    targets_BxL = random_windows(self.split("train"), self.train_length, rng, batch_size)
    return {"inputs": np.full((batch_size, 1), vocab_lib.PAD_ID, np.int32),
            "targets": targets_BxL}

  def train_rows(self, step: int, batch_size: int, rows: slice) -> dict[str, np.ndarray]:
    """Rows `rows` of `train_batch(step, batch_size)`."""
    batch = self.train_batch(step, batch_size)
    return {k: v[rows] for k, v in batch.items()}

  def max_padded_lengths(self) -> tuple[int, int]:
    """(1, L): the empty prompt slot and the training window."""
    return 1, self.train_length

  def validation_info(self) -> dict[str, Any]:
    """What the periodic validation scores."""
    return {"num_bytes": eval_span(len(self.split("validation")), self.valid_bytes,
                                   self.train_length),
            "source": "validation split", "rule": "documents whose path hash falls in "
            "the validation interval (never trained on)", "length_unit": "bytes"}


def default_config() -> ml_collections.ConfigDict:
  """The `data` config of a language-model run (the keys `make_dataset` accepts)."""
  return ml_collections.ConfigDict({
      "task": corpus_lib.PREFIX + corpus_lib.CPYTHON,
      "train_length": 128,  # L, bytes per training window
      "eval_multiples": (1, 2, 4, 8, 16),  # eval contexts C = m * L
      "eval_bytes": 65_536,  # N: leading test ids scored at every C
      "valid_bytes": 16_384,  # leading validation ids scored periodically and to pick checkpoints
      "sliding_stride": 0,  # S > 0: also score sliding windows (each scores its last S)
      "objective": "lm",  # "lm": next-byte prediction; "passkey": retrieval (data/passkey.py)
      "passkey_examples": 32,  # passkey eval examples per (context, depth)
      "manifest": {},  # the corpus manifest the run was trained on (configs/lm.py fills it)
      "tfds_data_dir": "",
      "tfds_text_key": "text",
      "tfds_splits": corpus_lib.SPLITS,
  })


def make_dataset(*, task: str, seed: int, train_length: int = 128,
                 eval_multiples: Sequence[int] = (1, 2, 4, 8, 16), eval_bytes: int = 65_536,
                 valid_bytes: int = 16_384, sliding_stride: int = 0, objective: str = "lm",
                 passkey_examples: int = 32, manifest: Mapping[str, Any] | None = None,
                 tfds_data_dir: str | None = "", tfds_text_key: str = "text",
                 tfds_splits: Sequence[str] = corpus_lib.SPLITS
                 ) -> LMDataset | passkey.PasskeyDataset:
  """The `LMDataset` of an `lm:` task (a `passkey.PasskeyDataset` with objective "passkey").

  Config errors are raised before the corpus is read.

  Args: the `default_config()` keys, and the run seed.

  Raises:
    ValueError: bad lengths or stride, or a corpus whose manifest differs from `manifest`.
  """
  if not isinstance(seed, (int, np.integer)) or seed < 0:
    raise ValueError(f"seed must be a non-negative int, got {seed!r}")
  if train_length < 1:
    raise ValueError(f"data.train_length must be >= 1, got {train_length}")
  if objective not in OBJECTIVES:
    raise ValueError(f"data.objective={objective!r}; choose one of {OBJECTIVES}")
  multiples = [int(m) for m in eval_multiples]
  if not multiples or min(multiples) < 1:
    raise ValueError(f"data.eval_multiples must be positive integers, got {list(eval_multiples)}")
  longest = max(multiples) * train_length
  if sliding_stride < 0 or (sliding_stride and train_length % sliding_stride):
    raise ValueError(f"data.sliding_stride={sliding_stride}: use 0 (off) or a divisor of "
                     f"train_length={train_length}, so every window ends on the shared span")
  corpus = corpus_lib.load_corpus(task, tfds_data_dir=tfds_data_dir,
                                  tfds_text_key=tfds_text_key, tfds_splits=tfds_splits)
  corpus_lib.check_manifest(manifest, corpus.manifest)
  if objective == "passkey":
    return passkey.PasskeyDataset(corpus, seed=seed, train_length=train_length,
                                  eval_multiples=multiples, eval_examples=passkey_examples)
  dataset = LMDataset(corpus, seed=seed, train_length=train_length, eval_multiples=multiples,
                      eval_bytes=eval_bytes, valid_bytes=valid_bytes,
                      sliding_stride=sliding_stride)
  eval_span(len(dataset.split("test")), eval_bytes, longest)  # raises early if too short
  return dataset
