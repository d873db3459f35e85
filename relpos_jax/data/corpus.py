"""Byte-level text corpora for the language-model tasks: byte vocabulary, splits, manifest.

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

Built on it: `lm.py` (windows for next-byte prediction) and `passkey.py` (passkey
retrieval), both over a `Corpus`.
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
