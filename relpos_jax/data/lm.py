"""Byte-level language-model data: a corpus of real text cut into windows.

Task names (the `data.task` of a run):

* `lm:cpython` - the `*.py` files of the Python standard library of the running
  interpreter (`sysconfig.get_paths()["stdlib"]`), minus every file under a
  `test/`, `tests/`, `site-packages/`, `dist-packages/` or `__pycache__/`
  folder and the build-generated `_sysconfigdata*.py` (~800 files, ~12.6 MB on
  Python 3.11.7): real code present on every
  machine, like the GitHub subsets KERPLE and others evaluate on;
* `lm:tfds:<name>` - any TFDS text dataset prepared in a local data_dir (lm1b,
  pg19, wiki40b/en, ...), read with `tfds.data_source` (no download); the text
  feature and the three splits are config keys.

Vocabulary: the project's 4 specials, then the 256 bytes (byte b has id
`NUM_SPECIAL + b`). Documents are joined in a fixed order, each followed by
SEPARATOR_ID (the vocabulary's EOS: "end of document"), into one id array per
split. `lm:cpython` splits files by a hash of their path relative to the stdlib
root (`split_of`): ~90% train, ~5% validation, ~5% test, the same on every
machine with the same files and independent of file order or run seed.

The corpus manifest (`Corpus.manifest`: source, Python version, per split the
number of documents, bytes and the sha256 of its ids) is stored in a run's
config (`data.manifest`, filled by configs/lm.py) and checked on every rebuild:
evaluating a run on a different corpus (another Python, a changed TFDS build)
fails with a one-line error instead of scoring other text.

Training (`LMDataset.train_batch`): each row is a window of `train_length` (L)
consecutive ids from the training split, its start uniform over the split, a
pure function of (seed, step) (exact resume). Batches have the pipeline's form:
`inputs` one PAD slot [B, 1] (an empty prompt; the decoder-only model puts its
SEP = BOS before the targets) and `targets` the window [B, L], no EOS: every
slot is a byte to predict, at positions 0..L-1.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import os
import pathlib
import platform
import sysconfig
from typing import Any, Mapping, Sequence

import ml_collections
import numpy as np

from relpos_jax.data import finite
from relpos_jax.data import vocab as vocab_lib

PREFIX = "lm:"
CPYTHON = "cpython"
TFDS_PREFIX = "tfds:"
SEPARATOR_ID = vocab_lib.EOS_ID  # after every document
SPLITS = ("train", "validation", "test")
# Upper edges of the path-hash intervals of train and validation; the rest is test.
SPLIT_EDGES = (0.90, 0.95)
EXCLUDED_DIRS = frozenset({"test", "tests", "site-packages", "dist-packages", "__pycache__"})
# Written by the interpreter's build, not source: a dict of one machine's compiler flags
# and paths (37 KB on 3.11.7, the first file of the test split), which differs between
# builds and would dominate the test bytes with text that is not Python code.
EXCLUDED_FILE_PREFIXES = ("_sysconfigdata",)
# First words of this module's numpy seeds: tasks.py uses 0-1, pipeline.py 2-5.
_TRAIN_STREAM = 6
PASSKEY_STREAM = 7  # relpos_jax/data/passkey.py
OBJECTIVES = ("lm", "passkey")


# ----------------------------------------------------------------- vocabulary

def byte_vocab() -> vocab_lib.Vocab:
  """The specials, then one token per byte value, named `0x00` .. `0xff`."""
  return vocab_lib.Vocab([f"0x{b:02x}" for b in range(256)])


def encode_bytes(data: bytes) -> np.ndarray:
  """Bytes -> ids (`NUM_SPECIAL + b`), uint16 [len(data)]."""
  return np.frombuffer(data, np.uint8).astype(np.uint16) + vocab_lib.NUM_SPECIAL


def decode_ids(ids: Sequence[int] | np.ndarray) -> bytes:
  """Ids -> bytes; special ids (PAD, BOS, the separator, ...) are dropped."""
  ids = np.asarray(ids).reshape(-1).astype(np.int64)
  ids = ids[(ids >= vocab_lib.NUM_SPECIAL) & (ids < vocab_lib.NUM_SPECIAL + 256)]
  return (ids - vocab_lib.NUM_SPECIAL).astype(np.uint8).tobytes()


# --------------------------------------------------------------------- corpus

@dataclasses.dataclass(frozen=True)
class Corpus:
  """One corpus: the ids of each split (documents + separators) and its manifest."""
  name: str
  splits: Mapping[str, np.ndarray]  # split -> uint16 ids
  manifest: Mapping[str, Any]


def split_of(relative_path: str) -> str:
  """The split of a document, from the sha256 of its relative path (POSIX separators).

  u = the first 8 bytes of sha256(path) as an integer / 2**64, uniform in [0, 1):
  train if u < 0.90, validation if u < 0.95, else test.
  """
  digest = hashlib.sha256(relative_path.encode("utf-8")).digest()
  u = int.from_bytes(digest[:8], "big") / 2.0**64
  return SPLITS[int(np.searchsorted(SPLIT_EDGES, u, side="right"))]


def join_documents(documents: Sequence[bytes]) -> np.ndarray:
  """The documents' ids, each followed by SEPARATOR_ID; uint16 [sum(len) + len(documents)]."""
  parts = []
  for doc in documents:
    parts += [encode_bytes(doc), np.array([SEPARATOR_ID], np.uint16)]
  return np.concatenate(parts) if parts else np.zeros(0, np.uint16)


def split_digest(ids: np.ndarray) -> str:
  """sha256 (hex) of a split's ids as little-endian uint16."""
  return hashlib.sha256(np.asarray(ids).astype("<u2").tobytes()).hexdigest()


def make_manifest(source: str, documents: Mapping[str, Sequence[bytes]],
                  splits: Mapping[str, np.ndarray], **extra: Any) -> dict[str, Any]:
  """The manifest of a corpus: source, Python version, and per split documents, bytes, sha256."""
  return {"source": source, "python_version": platform.python_version(), **extra,
          "splits": {name: {"documents": len(documents[name]),
                            "bytes": int(sum(len(d) for d in documents[name])),
                            "sha256": split_digest(splits[name])} for name in SPLITS}}


def cpython_files(root: str | os.PathLike | None = None) -> list[tuple[str, pathlib.Path]]:
  """The stdlib's `*.py` files outside EXCLUDED_DIRS and EXCLUDED_FILE_PREFIXES.

  Args:
    root: the stdlib folder (default: the running interpreter's, from sysconfig).

  Returns:
    (POSIX relative path, path) pairs, sorted.
  """
  root = pathlib.Path(root or sysconfig.get_paths()["stdlib"])
  if not root.is_dir():
    raise FileNotFoundError(f"the Python standard library folder {root} does not exist")
  files = []
  for path in root.rglob("*.py"):
    rel = path.relative_to(root)
    if (not EXCLUDED_DIRS & set(rel.parts[:-1]) and not rel.name.startswith(EXCLUDED_FILE_PREFIXES)
        and path.is_file()):
      files.append((rel.as_posix(), path))
  return sorted(files)


@functools.lru_cache(maxsize=2)
def cpython_corpus(root: str | None = None) -> Corpus:
  """`lm:cpython`: the stdlib sources split by `split_of`, each split in sorted path order.

  Args:
    root: the stdlib folder (default: the running interpreter's).

  Returns:
    The corpus; its manifest also holds `root_files` (the number of files found).
  """
  documents: dict[str, list[bytes]] = {name: [] for name in SPLITS}
  for rel, path in cpython_files(root):
    documents[split_of(rel)].append(path.read_bytes())
  empty = [name for name in SPLITS if not documents[name]]
  if empty:
    raise ValueError(f"lm:cpython: no file of {root or 'the stdlib'} falls in split(s) {empty}")
  splits = {name: join_documents(docs) for name, docs in documents.items()}
  return Corpus(PREFIX + CPYTHON, splits, make_manifest(
      PREFIX + CPYTHON, documents, splits, split_rule="sha256(relative path): 90/5/5"))


def tfds_corpus(name: str, *, data_dir: str | None, text_key: str,
                splits: Sequence[str]) -> Corpus:
  """`lm:tfds:<name>`: a prepared TFDS text dataset, each split's documents in record order.

  Args:
    name: `name[/config][:version]` as `tfds.data_source` takes it.
    data_dir: the TFDS data_dir ("" or None: $TFDS_DATA_DIR, else ~/tensorflow_datasets).
    text_key: the feature holding each document's text (str or bytes).
    splits: the TFDS splits used as (train, validation, test).

  Returns:
    The corpus (text encoded as UTF-8 bytes).

  Raises:
    FileNotFoundError: the dataset is not prepared in data_dir.
    ValueError: a missing split or text feature.
  """
  if len(splits) != 3:
    raise ValueError(f"tfds_splits must name 3 splits (train, validation, test), got "
                     f"{list(splits)}")
  def check(example: Mapping[str, Any]) -> None:
    """ValueError naming tfds_text_key if the text feature is missing."""
    if text_key not in example:
      raise ValueError(f"TFDS dataset {name!r} examples have no key {text_key!r}; their keys "
                       f"are {sorted(example)}: set data.tfds_text_key to the right one")

  by_split = finite.read_tfds_splits(name, data_dir=data_dir, splits=tuple(splits),
                                       split_fields=("data.tfds_splits",) * 3, check=check)
  documents = {}
  for role, records in zip(SPLITS, by_split):
    documents[role] = [_text_bytes(r[text_key]) for r in records]
    if not documents[role]:
      raise ValueError(f"TFDS dataset {name!r}: split for {role} is empty")
  ids = {role: join_documents(docs) for role, docs in documents.items()}
  return Corpus(PREFIX + TFDS_PREFIX + name, ids, make_manifest(
      PREFIX + TFDS_PREFIX + name, documents, ids, tfds_splits=list(splits),
      text_key=text_key))


def _text_bytes(value: Any) -> bytes:
  """A text feature as UTF-8 bytes."""
  if isinstance(value, bytes):
    return value
  if isinstance(value, str):
    return value.encode("utf-8")
  return np.asarray(value).item() if np.asarray(value).dtype.kind in "SO" else bytes(value)


def load_corpus(task: str, *, tfds_data_dir: str | None = "", tfds_text_key: str = "text",
                tfds_splits: Sequence[str] = SPLITS) -> Corpus:
  """The corpus of an `lm:` task name (see the module docstring)."""
  source = task.removeprefix(PREFIX)
  if source == CPYTHON:
    return cpython_corpus()
  if source.startswith(TFDS_PREFIX) and len(source) > len(TFDS_PREFIX):
    return tfds_corpus(source.removeprefix(TFDS_PREFIX), data_dir=tfds_data_dir,
                       text_key=tfds_text_key, splits=tuple(tfds_splits))
  raise ValueError(f"unknown language-model corpus {task!r}; choose {PREFIX}{CPYTHON} or "
                   f"{PREFIX}{TFDS_PREFIX}<name>")


def check_manifest(expected: Mapping[str, Any] | None, actual: Mapping[str, Any]) -> None:
  """Raises ValueError (one line) if a run's recorded manifest differs from the corpus built now.

  Args:
    expected: the manifest in the run's config (empty or None: nothing to check).
    actual: the manifest of the corpus built now.
  """
  if not expected:
    return
  expected = plain_json(expected)
  actual = plain_json(actual)
  if expected != actual:
    diff = sorted(k for k in set(expected) | set(actual) if expected.get(k) != actual.get(k))
    raise ValueError(
        f"the corpus {actual.get('source')} built here differs from the one this run was "
        f"trained on (manifest keys {diff} differ, e.g. python_version "
        f"{expected.get('python_version')} then, {actual.get('python_version')} now); "
        "evaluate it where the training corpus is available")


def plain_json(value: Any) -> Any:
  """Nested mappings and sequences as plain dicts and lists (a ConfigDict, tuples from JSON)."""
  if isinstance(value, Mapping) or hasattr(value, "to_dict"):
    value = value.to_dict() if hasattr(value, "to_dict") else value
    return {str(k): plain_json(v) for k, v in value.items()}
  if isinstance(value, (list, tuple)):
    return [plain_json(v) for v in value]
  return value


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
    vocab: `byte_vocab()`.
    corpus: the corpus.
    train_length: L.
    eval_contexts: the eval contexts C (multiples of L), ascending.
    eval_bytes, valid_bytes: how many leading ids of the test / validation split
      eval scores (see `eval_span`).
    sliding_stride: 0, or S: sliding-window eval scoring the last S ids of each window.
    num_train_examples: None (windows are drawn afresh).
  """

  num_train_examples = None

  def __init__(self, corpus: Corpus, *, seed: int, train_length: int,
               eval_multiples: Sequence[int], eval_bytes: int, valid_bytes: int,
               sliding_stride: int):
    self.vocab = byte_vocab()
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
      "task": PREFIX + CPYTHON,
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
      "tfds_splits": SPLITS,
  })


def make_dataset(*, task: str, seed: int, train_length: int = 128,
                 eval_multiples: Sequence[int] = (1, 2, 4, 8, 16), eval_bytes: int = 65_536,
                 valid_bytes: int = 16_384, sliding_stride: int = 0, objective: str = "lm",
                 passkey_examples: int = 32, manifest: Mapping[str, Any] | None = None, tfds_data_dir: str | None = "",
                 tfds_text_key: str = "text",
                 tfds_splits: Sequence[str] = SPLITS) -> Any:
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
  corpus = load_corpus(task, tfds_data_dir=tfds_data_dir, tfds_text_key=tfds_text_key,
                       tfds_splits=tfds_splits)
  check_manifest(manifest, corpus.manifest)
  if objective == "passkey":
    from relpos_jax.data import passkey  # pylint: disable=g-import-not-at-top (it imports lm)
    return passkey.PasskeyDataset(corpus, seed=seed, train_length=train_length,
                                  eval_multiples=multiples, eval_examples=passkey_examples)
  dataset = LMDataset(corpus, seed=seed, train_length=train_length, eval_multiples=multiples,
                      eval_bytes=eval_bytes, valid_bytes=valid_bytes,
                      sliding_stride=sliding_stride)
  eval_span(len(dataset.split("test")), eval_bytes, longest)  # raises early if too short
  return dataset
