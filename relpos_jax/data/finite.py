"""Finite sources (SCAN, local TFDS datasets): reading, tokenizing, encoding, the held-out split.

`pipeline.make_dataset` turns an `Encoded` source into a `Dataset`.
"""

from __future__ import annotations

import dataclasses
import functools
import os
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from relpos_jax.data import batching
from relpos_jax.data import scan
from relpos_jax.data import vocab as vocab_lib

Example = batching.Example
_DEFAULT_TFDS_DATA_DIR = "~/tensorflow_datasets"  # TFDS's own default
_HOLDOUT_STREAM = 5  # which training inputs are held out (pipeline.py's streams use 2..4)
HOLDOUT_SEED = 20_230_101  # fixed, so every run of a table trains on the same examples


@dataclasses.dataclass(frozen=True)
class Encoded:
  """A finite source, encoded: vocabulary, training / validation ids, test ids by length."""
  vocab: vocab_lib.Vocab
  train: tuple[Example, ...]
  validation: tuple[Example, ...]  # grouped by target length, shorter first
  test_by_length: dict[int, tuple[Example, ...]]
  validation_info: dict[str, Any]


def hold_out(inputs: Sequence[str], fraction: float) -> set[str]:
  """The distinct inputs held out of a finite training split as its validation set.

  A fixed share of the distinct inputs, chosen by the fixed HOLDOUT_SEED: it
  depends on neither the run seed nor the order of the split (the distinct
  inputs are sorted before the seeded permutation picks from them), so every
  run, from the grammar or from a TFDS build, holds out the same ones. Every
  example whose input is held out goes to validation, so no validation input is
  ever trained on, even where the split repeats an input.

  Args:
    inputs: each training example's input, as text.
    fraction: the share to hold out, in (0, 1).

  Returns:
    round(fraction * number of distinct inputs) of them, at least 1, at most
    all but 1.

  Raises:
    ValueError: fewer than 2 distinct inputs.
  """
  distinct = sorted(set(inputs))
  if len(distinct) < 2:
    raise ValueError(f"cannot hold out validation inputs from a training split with "
                     f"{len(distinct)} distinct input(s)")
  count = min(max(1, round(fraction * len(distinct))), len(distinct) - 1)
  order = np.random.default_rng([_HOLDOUT_STREAM, HOLDOUT_SEED]).permutation(len(distinct))
  return {distinct[i] for i in order[:count]}


def encode_pairs(train: Sequence[tuple[Any, Any]], test: Sequence[tuple[Any, Any]],
                  validation_fraction: float) -> Encoded:
  """Tokenizes and encodes a finite source, holding out `validation_fraction` of its inputs."""
  train, test = [_tokenize(p) for p in train], [_tokenize(p) for p in test]
  if not train or not test:
    raise ValueError(f"empty data: {len(train)} training and {len(test)} eval examples; "
                     "check tfds_train_split and tfds_eval_split")
  vocab = vocab_lib.Vocab.from_sequences(seq for pair in train for seq in pair)
  held = hold_out([" ".join(x) for x, _ in train], validation_fraction)
  is_held = [" ".join(x) in held for x, _ in train]
  validation = sorted((_encode(vocab, p) for p, h in zip(train, is_held) if h),
                      key=lambda e: len(e[1]))
  by_length: dict[int, list[Example]] = {}
  for p in test:
    by_length.setdefault(len(p[1]), []).append(_encode(vocab, p))
  info = {"num_examples": len(validation), "lengths": sorted({len(y) for _, y in validation}),
          "length_unit": "target tokens", "source": "held_out_split",
          "rule": (f"{len(held)} of the training split's {len(set(' '.join(x) for x, _ in train))} "
                   f"distinct inputs ({validation_fraction:g}), chosen by the fixed holdout "
                   "seed and never trained on"),
          "fraction": validation_fraction, "holdout_seed": HOLDOUT_SEED}
  return Encoded(vocab=vocab,
                  train=tuple(_encode(vocab, p) for p, h in zip(train, is_held) if not h),
                  validation=tuple(validation),
                  test_by_length={n: tuple(group) for n, group in sorted(by_length.items())},
                  validation_info=info)


@functools.lru_cache(maxsize=4)
def encoded_scan(split: str, validation_fraction: float) -> Encoded:
  """A SCAN split, encoded once per process."""
  pairs = scan.load_split(split)
  return encode_pairs(pairs["train"], pairs["test"], validation_fraction)


def _tokenize(pair: tuple[Any, Any]) -> tuple[list[str], list[str]]:
  """(input, target) as token lists: text is split on whitespace, integers become strings."""
  def tokens(value: Any) -> list[str]:
    """One feature's tokens."""
    if isinstance(value, bytes):
      value = value.decode("utf-8")
    if isinstance(value, str):
      return value.split()
    return [str(int(t)) for t in np.asarray(value).reshape(-1)]
  return tokens(pair[0]), tokens(pair[1])


def _encode(vocab: vocab_lib.Vocab, pair: tuple[list[str], list[str]]) -> Example:
  """Token lists -> id tuples (no EOS); tuples are immutable and cheaper than small arrays."""
  return tuple(vocab.encode(pair[0])), tuple(vocab.encode(pair[1]))


def read_tfds(name: str, *, data_dir: str | None, input_key: str, target_key: str,
               splits: tuple[str, str]) -> tuple[list[tuple[Any, Any]], list[tuple[Any, Any]]]:
  """(train pairs, eval pairs) of a prepared TFDS dataset, read with `tfds.data_source`."""
  out = read_tfds_splits(name, data_dir=data_dir, splits=splits,
                         split_fields=("tfds_train_split", "tfds_eval_split"),
                         check=lambda ex: _check_keys(ex, name, input_key, target_key))
  return ([(ex[input_key], ex[target_key]) for ex in out[0]],
          [(ex[input_key], ex[target_key]) for ex in out[1]])


def read_tfds_splits(name: str, *, data_dir: str | None, splits: Sequence[str],
                     split_fields: Sequence[str],
                     check: Callable[[Mapping[str, Any]], None] | None = None
                     ) -> list[list[Mapping[str, Any]]]:
  """Every record of some splits of a prepared TFDS dataset, read with `tfds.data_source`.

  Args:
    name: `name[/config][:version]`.
    data_dir: the TFDS data_dir ("" or None: $TFDS_DATA_DIR, else ~/tensorflow_datasets).
    splits: the split names.
    split_fields: the config key naming each split (for error messages).
    check: called on each split's first record before reading the rest (raise on bad keys).

  Returns:
    One list of records per split.

  Raises:
    FileNotFoundError: the dataset is not prepared in data_dir.
    ValueError: a split the dataset lacks.
  """
  # Imported here: tfds is only needed for "tfds:" tasks, and costs ~0.3 s to import.
  import tensorflow_datasets as tfds  # pylint: disable=g-import-not-at-top

  data_dir = os.path.expanduser(
      data_dir or os.environ.get("TFDS_DATA_DIR") or _DEFAULT_TFDS_DATA_DIR)
  dataset_dir = os.path.join(data_dir, *name.split(":")[0].split("/"))  # name[/config]
  how_to_build = (
      f"Build it there first: `tfds build {name.split(':')[0]} --data_dir={data_dir} "
      f"--file_format=array_record` (building most catalog datasets needs TensorFlow, "
      f"e.g. in another environment; for the SCAN splits: `python -m "
      f"relpos_jax.data.scan_tfds --data_dir={data_dir}`), or set tfds_data_dir to the "
      "directory that holds it.")
  if not os.path.isdir(dataset_dir):
    raise FileNotFoundError(f"TFDS dataset {name!r} not found: {dataset_dir} does not exist. "
                            + how_to_build)
  try:
    sources = tfds.data_source(name, data_dir=data_dir, download=False)
  except Exception as e:  # tfds raises several types for "not prepared here"
    reason = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
    raise FileNotFoundError(f"TFDS dataset {name!r} could not be read from {data_dir} "
                            f"({reason}). " + how_to_build) from e
  out = []
  for split, field in zip(splits, split_fields):
    if split not in sources:
      raise ValueError(f"TFDS dataset {name!r} has no split {split!r}; its splits are "
                       f"{sorted(sources)}: set {field} to one of them")
    if len(sources[split]) and check is not None:
      check(sources[split][0])  # before reading it all
    out.append(_read_all(sources[split]))
  return out


def _read_all(source: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
  """Every record of a tfds data source, read in chunks."""
  if not hasattr(source, "__getitems__"):
    return [source[i] for i in range(len(source))]
  chunk = 4096
  return [ex for start in range(0, len(source), chunk)
          for ex in source.__getitems__(list(range(start, min(start + chunk, len(source)))))]


def _check_keys(example: Mapping[str, Any], name: str, input_key: str, target_key: str) -> None:
  """ValueError naming the config fields if an example lacks the input or target key."""
  for key, field in ((input_key, "tfds_input_key"), (target_key, "tfds_target_key")):
    if key not in example:
      raise ValueError(f"TFDS dataset {name!r} examples have no key {key!r}; their keys are "
                       f"{sorted(example)}: set {field} to the right one")
