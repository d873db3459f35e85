"""This project against HuggingFace transformers' T5 in PyTorch, at the same shape, same run.

Optional: needs `torch` and `transformers` (benchmarks/requirements-peers.txt).
Without them `measure` returns a record that says why the peers were skipped,
and nothing else in the project imports either.

The peer is `T5ForConditionalGeneration` built from a `T5Config` at our shape
(random init, no download): relative attention with our T5 scheme's buckets and
distance, a non-gated MLP with the tanh GELU (flax's `nn.gelu`), tied embeddings,
dropout 0, float32, eager mode, `torch.set_num_threads` = the cores XLA uses.
Its train step is forward + backward + global-norm clipping + `torch.optim.AdamW`
with `optim.make_optimizer`'s hyperparameters; its decoding is `generate` with the
cache, greedy, exactly L new tokens. Ours are `schemes.compile_train_step` and
`schemes.compile_cached_decode` with the `t5` scheme on the same tokens, in each
compute dtype asked for (float32 and bfloat16 under `make bench`). Each round
times ours in every dtype, then theirs, and each side reports its median:
load from other processes falls on both alike.
"""

from __future__ import annotations

import dataclasses
import os
import time
from typing import Any, Callable

import numpy as np

from benchmarks import schemes
from relpos_jax import optim
from relpos_jax import positions
from relpos_jax.data import vocab

try:
  import torch
  import transformers
  IMPORT_ERROR: str | None = None
except ImportError as e:  # the optional extra is not installed
  torch = transformers = None
  IMPORT_ERROR = f"{type(e).__name__}: {e}"

INSTALL = "pip install -r benchmarks/requirements-peers.txt"
OURS_SCHEME = "t5"  # the scheme HF T5 implements


def versions() -> dict[str, str]:
  """The peer's library versions and torch's thread counts."""
  return {"torch": torch.__version__, "transformers": transformers.__version__,
          "torch_threads": str(torch.get_num_threads()),
          "torch_interop_threads": str(torch.get_num_interop_threads())}


def t5_config(shape: schemes.Shape) -> "transformers.T5Config":
  """HF's T5 at our shape and with our T5 scheme's defaults and special ids."""
  position = positions.default_config(OURS_SCHEME)
  return transformers.T5Config(
      vocab_size=shape.vocab_size, d_model=shape.d_model, d_kv=shape.head_dim,
      d_ff=shape.d_ff, num_layers=shape.num_encoder_layers,
      num_decoder_layers=shape.num_decoder_layers, num_heads=shape.num_heads,
      relative_attention_num_buckets=position.num_buckets,
      relative_attention_max_distance=position.max_distance, dropout_rate=0.0,
      feed_forward_proj="gelu_new", tie_word_embeddings=True,
      pad_token_id=vocab.PAD_ID, eos_token_id=vocab.EOS_ID,
      decoder_start_token_id=vocab.BOS_ID)


def make_model(shape: schemes.Shape, seed: int = 0):
  """A randomly initialised `T5ForConditionalGeneration` (float32)."""
  torch.manual_seed(seed)
  return transformers.T5ForConditionalGeneration(t5_config(shape))


def hf_train_step(shape: schemes.Shape, inputs: np.ndarray,
                  targets: np.ndarray) -> Callable[[], float]:
  """One train step of the peer as a callable: forward, backward, clipping, AdamW.

  `labels=targets` makes the decoder input `[BOS, targets[:-1]]`, as ours.
  """
  model = make_model(shape).train()
  hp = optim.optimizer_config()
  opt = torch.optim.AdamW(model.parameters(), lr=hp.learning_rate, betas=(hp.b1, hp.b2),
                          eps=hp.eps, weight_decay=hp.weight_decay)
  x, y = torch.from_numpy(inputs.astype(np.int64)), torch.from_numpy(targets.astype(np.int64))

  def step() -> float:
    loss = model(input_ids=x, labels=y).loss
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), hp.grad_clip_norm)
    opt.step()
    opt.zero_grad(set_to_none=True)
    return loss.item()

  return step


def hf_decode(shape: schemes.Shape, inputs: np.ndarray) -> Callable[[], Any]:
  """The peer's cached greedy decoding of exactly L new tokens per row, as a callable."""
  model = make_model(shape).eval()
  x = torch.from_numpy(inputs.astype(np.int64))
  mask = torch.ones_like(x)
  L = inputs.shape[1]

  def run():
    return model.generate(input_ids=x, attention_mask=mask, use_cache=True, min_new_tokens=L,
                          max_new_tokens=L, do_sample=False, num_beams=1)

  return run


def interleave(*fns: Callable[[], Any], runs: int, warmup: int = 1) -> tuple[list[float], ...]:
  """Seconds of `runs` rounds of the `fns` in turn (a, b, ..., a, b, ...) after `warmup` rounds.

  Returns:
    One list of `runs` timings per function, in the order given.
  """
  for _ in range(warmup):
    for fn in fns:
      fn()
  seconds = tuple([] for _ in fns)
  for _ in range(max(runs, 1)):
    for fn, times in zip(fns, seconds):
      start = time.perf_counter()
      fn()
      times.append(time.perf_counter() - start)
  return seconds


def measure(shape: schemes.Shape, B: int, L: int, *, runs: int, decode_runs: int,
            threads: int | None = None, dtypes: tuple[str, ...] | None = None,
            log: Callable[[str], None] = print) -> dict[str, Any]:
  """Train step and cached decoding, ours (in each of `dtypes`) and the peer's, interleaved.

  Args:
    shape: both models' shape.
    B: batch.
    L: source = target length, and the new tokens decoded.
    runs: timed rounds of the train steps (each: ours in every dtype, then the peer's).
    decode_runs: timed rounds of decoding.
    threads: torch's intra-op threads (default: the cores XLA uses).
    dtypes: our compute dtypes (default: `shape.dtype`); the peer is float32.
    log: progress lines.

  Returns:
    A record: versions, settings, and the seconds of every timed run,
    `ours_train_s` / `ours_decode_s` as `{dtype: [s, ...]}`, `theirs_train_s` /
    `theirs_decode_s` as lists. Without torch or transformers: `{"skipped": why}`,
    nothing compiled.
  """
  if IMPORT_ERROR:
    return {"skipped": IMPORT_ERROR}
  dtypes = tuple(dtypes or (shape.dtype,))
  threads = threads or len(os.sched_getaffinity(0))
  torch.set_num_threads(threads)
  rng = np.random.default_rng(0)
  tokens = {"inputs": schemes.random_tokens(rng, shape, B, L),
            "targets": schemes.random_tokens(rng, shape, B, L)}
  record = {"scheme": OURS_SCHEME, "ours_dtypes": list(dtypes), "L": L, "batch": B,
            "new_tokens": L, **versions(), "train_runs": runs, "decode_runs": decode_runs}
  at = {d: dataclasses.replace(shape, dtype=d) for d in dtypes}

  ours = [schemes.compile_train_step(at[d], OURS_SCHEME, B, L, tokens) for d in dtypes]
  theirs = hf_train_step(shape, tokens["inputs"], tokens["targets"])
  *mine, record["theirs_train_s"] = interleave(*(o.run for o in ours), theirs, runs=runs,
                                               warmup=2)
  record["ours_train_s"] = dict(zip(dtypes, mine))
  log("peers  train  " + "  ".join(f"ours ({d}) {1e3 * np.median(s):.1f} ms"
                                   for d, s in zip(dtypes, mine))
      + f"  HF T5 {1e3 * np.median(record['theirs_train_s']):.1f} ms")
  del ours

  ours = [schemes.compile_cached_decode(at[d], OURS_SCHEME, B, L, inputs=tokens["inputs"],
                                        full_length=True) for d in dtypes]
  theirs = hf_decode(shape, tokens["inputs"])
  generated = theirs().shape[1] - 1  # generate returns the decoder start token too
  if generated != L:
    raise RuntimeError(f"HF generate returned {generated} new tokens, not {L}")
  *mine, record["theirs_decode_s"] = interleave(*(o.run for o in ours), theirs,
                                                runs=decode_runs)
  record["ours_decode_s"] = dict(zip(dtypes, mine))
  log("peers  decode " + "  ".join(f"ours ({d}) {B * L / np.median(s):.0f} tok/s"
                                   for d, s in zip(dtypes, mine))
      + f"  HF T5 {B * L / np.median(record['theirs_decode_s']):.0f} tok/s")
  return record
