"""Word-level vocabulary: ids 0-3 are PAD, BOS, EOS, UNK; the data's tokens follow.

One vocabulary is shared by inputs and targets. It is built from training data,
saved as JSON beside the checkpoints (`vocab.save(workdir / "vocab.json")`) and
loaded back with `Vocab.load(path)` to decode predictions later.
"""

from __future__ import annotations

import collections
import json
from typing import Iterable, Sequence

from etils import epath
import numpy as np

PAD_ID = 0
BOS_ID = 1
EOS_ID = 2
UNK_ID = 3
SPECIAL_TOKENS = ("<pad>", "<bos>", "<eos>", "<unk>")  # in id order
NUM_SPECIAL = len(SPECIAL_TOKENS)


class Vocab:
  """A fixed token <-> id map: `SPECIAL_TOKENS` first, then `tokens` in the given order."""

  def __init__(self, tokens: Sequence[str]):
    """Args: tokens: the data's tokens (no specials), each once; token i gets id NUM_SPECIAL + i."""
    tokens = list(tokens)
    clash = sorted(set(tokens) & set(SPECIAL_TOKENS))
    if clash:
      raise ValueError(f"tokens {clash} are reserved special tokens; rename them in the data")
    if len(set(tokens)) != len(tokens):
      dupes = sorted(t for t, n in collections.Counter(tokens).items() if n > 1)
      raise ValueError(f"duplicate vocabulary tokens {dupes[:10]}; pass each token once")
    self._tokens = list(SPECIAL_TOKENS) + tokens
    self._ids = {t: i for i, t in enumerate(self._tokens)}

  @classmethod
  def from_sequences(cls, sequences: Iterable[Sequence[str]]) -> Vocab:
    """Builds a vocabulary from training data.

    Args:
      sequences: token sequences (inputs and targets alike).

    Returns:
      A `Vocab` of every distinct token, sorted, so it does not depend on data order.
    """
    return cls(sorted({t for seq in sequences for t in seq}))

  @property
  def size(self) -> int:
    """The number of ids, specials included (the embedding table's rows)."""
    return len(self._tokens)

  def __len__(self) -> int:
    return self.size

  @property
  def tokens(self) -> list[str]:
    """All tokens in id order, specials included."""
    return list(self._tokens)

  def __eq__(self, other: object) -> bool:
    return isinstance(other, Vocab) and self._tokens == other._tokens

  def __repr__(self) -> str:
    return f"Vocab(size={self.size}, tokens={self._tokens[NUM_SPECIAL:NUM_SPECIAL + 8]}...)"

  def encode(self, tokens: Sequence[str], append_eos: bool = False) -> list[int]:
    """Maps tokens to ids.

    Args:
      tokens: a token sequence; tokens not in the vocabulary become UNK_ID.
      append_eos: whether to end the ids with EOS_ID.

    Returns:
      The ids, one per token (plus EOS_ID if asked).
    """
    ids = [self._ids.get(t, UNK_ID) for t in tokens]
    return ids + [EOS_ID] if append_eos else ids

  def decode(self, ids: Iterable[int] | np.ndarray) -> list[str]:
    """Maps ids back to tokens, stopping at the first EOS and dropping PAD.

    Args:
      ids: a 1-D sequence of ids (e.g. one row of predictions).

    Returns:
      The tokens before the first EOS_ID, PAD_IDs removed. An id outside the
      vocabulary (e.g. from a model whose output layer is padded) decodes as "<unk>".
    """
    out = []
    for i in np.asarray(ids).reshape(-1).tolist():
      if i == EOS_ID:
        break
      if i != PAD_ID:
        out.append(self._tokens[i] if 0 <= i < self.size else SPECIAL_TOKENS[UNK_ID])
    return out

  def save(self, path: str | epath.PathLike) -> None:
    """Writes `{"tokens": [...]}` (all tokens in id order) as JSON to `path` (local or gs://)."""
    epath.Path(path).write_text(json.dumps({"tokens": self._tokens}, indent=1))

  @classmethod
  def load(cls, path: str | epath.PathLike) -> Vocab:
    """Reads a vocabulary written by `save`.

    Args:
      path: the JSON file.

    Returns:
      The same `Vocab` (same ids).
    """
    path = epath.Path(path)
    if not path.exists():
      raise FileNotFoundError(f"no vocabulary at {path}; it is written by `Vocab.save` "
                              "(the trainer saves it beside the checkpoints)")
    try:
      tokens = json.loads(path.read_text())["tokens"]
    except (ValueError, KeyError, TypeError) as e:  # name the file: there are many vocab.json
      raise ValueError(f"{path} is not a vocabulary file ({type(e).__name__}: {e})") from e
    if tuple(tokens[:NUM_SPECIAL]) != SPECIAL_TOKENS:
      raise ValueError(f"{path} does not start with the special tokens {SPECIAL_TOKENS}; "
                       "it was not written by relpos_jax.data.vocab.Vocab.save")
    return cls(tokens[NUM_SPECIAL:])
