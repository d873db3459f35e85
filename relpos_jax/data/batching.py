"""Padding examples into batches: length buckets, EOS, and fixed-size eval batches."""

from __future__ import annotations

from typing import Iterator, Sequence

import numpy as np

from relpos_jax.data import vocab as vocab_lib

Example = tuple[Sequence[int], Sequence[int]]  # (input ids, target ids without EOS)
Batch = dict[str, np.ndarray]


def padded_batches(examples: Sequence[Example], batch_size: int,
                    buckets: Sequence[int]) -> Iterator[Batch]:
  """Batches of exactly `batch_size` rows with `weights`; the last is padded with copies."""
  for start in range(0, len(examples), batch_size):
    chunk = list(examples[start:start + batch_size])
    weights_B = np.zeros(batch_size, np.float32)
    weights_B[:len(chunk)] = 1.0
    chunk = [chunk[i % len(chunk)] for i in range(batch_size)]
    yield {**make_batch(chunk, buckets), "weights": weights_B}


def bucket_length(n: int, buckets: Sequence[int]) -> int:
  """The smallest bucket >= n.

  Args:
    n: a sequence length.
    buckets: sorted bucket lengths.

  Returns:
    The padded length.

  Raises:
    ValueError: if n exceeds the largest bucket.
  """
  for b in buckets:
    if b >= n:
      return b
  raise ValueError(f"a sequence of {n} tokens is longer than the largest length bucket "
                   f"{buckets[-1]}; add a bucket >= {n} to length_buckets")


def make_batch(examples: Sequence[Example], buckets: Sequence[int]) -> Batch:
  """Pads examples into one batch.

  Args:
    examples: (input ids, target ids) pairs, targets without EOS.
    buckets: sorted bucket lengths.

  Returns:
    {"inputs": int32 [B, S], "targets": int32 [B, T]}: right-padded with PAD_ID,
    each target followed by EOS_ID; S, T the buckets of the longest input and
    target (+1 for EOS).
  """
  seq_len = bucket_length(max(len(x) for x, _ in examples), buckets)
  tgt_len = bucket_length(max(len(y) for _, y in examples) + 1, buckets)
  inputs_BxS = np.full((len(examples), seq_len), vocab_lib.PAD_ID, np.int32)
  targets_BxT = np.full((len(examples), tgt_len), vocab_lib.PAD_ID, np.int32)
  for i, (x, y) in enumerate(examples):
    inputs_BxS[i, :len(x)] = x
    targets_BxT[i, :len(y)] = y
    targets_BxT[i, len(y)] = vocab_lib.EOS_ID
  return {"inputs": inputs_BxS, "targets": targets_BxT}
