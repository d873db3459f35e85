"""Measurements of every positional scheme: train step, decoding, several seeds.

Each `bench_*` function compiles and times one program and returns a record (a
JSON-serialisable dict); `benchmarks/run.py` runs them over schemes and lengths and
`benchmarks/report.py` renders the records. What is measured and why each figure
is what it is: docs/performance.md.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import importlib.util
import math
import os
import time
from typing import Any, Callable

import jax
import jax.numpy as jnp
import numpy as np

from relpos_jax import architectures
from relpos_jax import decode
from relpos_jax import model as model_lib
from relpos_jax import optim
from relpos_jax import positions
from relpos_jax import train_lib
from relpos_jax.data import pipeline
from relpos_jax.data import vocab
from relpos_jax.positions import randomized as randomized_lib
from relpos_jax.positions import shaw

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NAIVE_SHAW = "shaw_naive"


# ---------------------------------------------------------------------- shape

@dataclasses.dataclass(frozen=True)
class Shape:
  """The model and batch shape (DEFAULT: the issue's reference shape)."""

  d_model: int = 256
  num_heads: int = 4
  head_dim: int = 64
  d_ff: int = 1024
  num_encoder_layers: int = 2
  num_decoder_layers: int = 2
  vocab_size: int = 64
  dtype: str = "float32"  # the model's compute dtype (`model.dtype`); parameters stay float32


def batch_at(batch: int, tokens_per_batch: int, length: int) -> int:
  """The batch at `length`: `batch`, cut to keep about `tokens_per_batch` tokens."""
  return max(1, min(batch, tokens_per_batch // length))


# ----------------------------------------------------------------- FLOP counts

def forward_flops(s: Shape, B: int, S: int, T: int) -> float:
  """Matmul FLOPs (2·m·n·k each) of one teacher-forced forward pass.

  Projections (q, k, v, out), MLP (wi, wo), attention scores and values, output
  logits. Not counted: norms, softmax, embeddings' gather, a scheme's own terms.
  """
  d, hk, f, H, K = s.d_model, s.num_heads * s.head_dim, s.d_ff, s.num_heads, s.head_dim
  encoder = B * S * (8 * d * hk + 4 * d * f) + 4 * B * H * S * S * K
  decoder = (B * T * (12 * d * hk + 4 * d * f) + 4 * B * S * d * hk
             + 4 * B * H * T * T * K + 4 * B * H * T * S * K)
  logits = 2 * B * T * d * s.vocab_size
  return s.num_encoder_layers * encoder + s.num_decoder_layers * decoder + logits


def train_flops(s: Shape, B: int, S: int, T: int) -> float:
  """Forward + backward: 3 × the forward matmuls (each has two gradient matmuls)."""
  return 3 * forward_flops(s, B, S, T)


def decode_flops(s: Shape, B: int, S: int, steps: int) -> float:
  """Matmul FLOPs of cached greedy decoding: encoder + cross keys/values once, then per step.

  Step t (t + 1 filled cache slots) costs, per row and decoder layer, the
  self-attention projections, cross-attention query/output, the MLP and
  attention over t + 1 keys and S encoder keys; plus the logits.
  """
  d, hk, f, H, K = s.d_model, s.num_heads * s.head_dim, s.d_ff, s.num_heads, s.head_dim
  prefill = (s.num_encoder_layers * (B * S * (8 * d * hk + 4 * d * f) + 4 * B * H * S * S * K)
             + s.num_decoder_layers * 4 * B * S * d * hk)
  per_row = sum(s.num_decoder_layers * (12 * d * hk + 4 * d * f + 4 * H * K * (t + 1 + S))
                + 2 * d * s.vocab_size for t in range(steps))
  return prefill + B * per_row


# --------------------------------------------------------------------- timing

class Clock:
  """Times callables, each run followed by one reference float32 matmul."""

  def __init__(self, size: int):
    self.size = size
    self.a = jax.random.normal(jax.random.PRNGKey(0), (size, size), jnp.float32)
    self.b = jax.random.normal(jax.random.PRNGKey(1), (size, size), jnp.float32)
    self._mm = jax.jit(jnp.matmul)
    self.all_rates: list[float] = []
    for _ in range(3):
      self.matmul_rate()

  def matmul_rate(self) -> float:
    """FLOP/s of one `size`² matmul."""
    start = time.perf_counter()
    jax.block_until_ready(self._mm(self.a, self.b))
    rate = 2 * self.size ** 3 / (time.perf_counter() - start)
    self.all_rates.append(rate)
    return rate

  def time(self, fn: Callable[[], Any], runs: int, warmup: int = 1) -> tuple[float, float]:
    """(median seconds of `fn`, median FLOP/s of the matmuls interleaved with it)."""
    for _ in range(warmup):
      jax.block_until_ready(fn())
    seconds, rates = [], []
    for _ in range(max(runs, 1)):
      start = time.perf_counter()
      jax.block_until_ready(fn())
      seconds.append(time.perf_counter() - start)
      rates.append(self.matmul_rate())
    return float(np.median(seconds)), float(np.median(rates))


# ---------------------------------------------------------------- the schemes

class NaiveShaw(shaw.Shaw):
  """Shaw's eqs. (3)-(5) in the naive gather form (tests/positions_test.py `_naive_shaw`).

  Gathers a `[B, Q, K, Kd]` tensor of table rows for each term: O(L²·Kd) memory,
  the reference for `shaw`'s O(L·k) form.
  """

  def logit_bias(self, q_BxQxHxK, k_BxKxHxK, qpos_BxQ, kpos_BxK):
    del k_BxKxHxK
    if not self.use_keys:
      return None
    idx_BxQxK = shaw.relative_index(qpos_BxQ, kpos_BxK, self.max_relative_position)
    a_BxQxKxD = self.key_table.astype(q_BxQxHxK.dtype)[idx_BxQxK]
    return jnp.einsum("bqhd,bqsd->bhqs", q_BxQxHxK, a_BxQxKxD) / math.sqrt(q_BxQxHxK.shape[-1])

  def value_term(self, w_BxHxQxK, qpos_BxQ, kpos_BxK):
    if not self.use_values:
      return None
    idx_BxQxK = shaw.relative_index(qpos_BxQ, kpos_BxK, self.max_relative_position)
    a_BxQxKxD = self.value_table.astype(w_BxHxQxK.dtype)[idx_BxQxK]
    return jnp.einsum("bhqs,bqsd->bqhd", w_BxHxQxK, a_BxQxKxD)


@contextlib.contextmanager
def naive_shaw_registered():
  """Registers `shaw_naive` in `positions.SCHEMES` for the duration (this process only)."""
  positions.SCHEMES[NAIVE_SHAW] = NaiveShaw
  try:
    yield
  finally:
    positions.SCHEMES.pop(NAIVE_SHAW, None)


def make_model(shape: Shape, scheme: str, length: int) -> model_lib.EncoderDecoder:
  """The encoder-decoder at `shape` with `scheme`'s default config.

  A table of absolute positions (`max_len`) is grown to hold `length` positions.
  """
  position = positions.default_config(scheme)
  if "max_len" in position and position.max_len < length:
    position.max_len = length
  fields = dataclasses.asdict(shape)
  vocab_size = fields.pop("vocab_size")
  return model_lib.EncoderDecoder(vocab_size=vocab_size, position=position, **fields)


def random_tokens(rng: np.random.Generator, shape: Shape, B: int, L: int) -> np.ndarray:
  """Token ids drawn from the non-special ids, no padding."""
  return rng.integers(vocab.NUM_SPECIAL, shape.vocab_size, (B, L)).astype(np.int32)


# ------------------------------------------------------------------ train step

@dataclasses.dataclass
class TrainStep:
  """One compiled train step; `run()` takes a step (blocking) from its own state.

  `seed` is the step's seed argument: a scalar, or `[N]` for a vmapped N-seed step
  (`compile_seeds_steps`, which also keeps the one-replica `train_step` it vmapped).
  """

  compiled: Any
  compile_s: float
  state: Any
  batch: dict[str, jax.Array]
  seed: jax.Array
  train_step: Callable | None = None

  def run(self):
    self.state, metrics = self.compiled(self.state, self.batch, self.seed)
    return jax.block_until_ready(metrics)


def compile_train_step(shape: Shape, scheme: str, B: int, L: int,
                       tokens: dict[str, np.ndarray] | None = None) -> TrainStep:
  """`jit(train_lib.make_train_step(...))` of the encoder-decoder with `scheme`, compiled.

  AdamW as `optim.make_optimizer` makes it; `tokens` (`inputs`, `targets`, `[B, L]`)
  default to random ids.
  """
  model = make_model(shape, scheme, L)
  if tokens is None:
    rng = np.random.default_rng(0)
    tokens = {"inputs": random_tokens(rng, shape, B, L),
              "targets": random_tokens(rng, shape, B, L)}
  tx, schedule = optim.make_optimizer(num_steps=1000)
  state = jax.jit(functools.partial(train_lib.init_state, model, tx, 0))(tokens)
  step = train_lib.make_train_step(model, tx, schedule, label_smoothing=0.0,
                                   randomized=randomized_lib.RandomizedPositions())
  batch = jax.tree_util.tree_map(jnp.asarray, tokens)
  seed = jnp.array(0, jnp.int32)
  start = time.perf_counter()
  compiled = jax.jit(step).lower(state, batch, seed).compile()
  return TrainStep(compiled, time.perf_counter() - start, state, batch, seed)


def bench_train(clock: Clock, shape: Shape, scheme: str, B: int, L: int, runs: int,
                timed: bool = True) -> dict[str, Any]:
  """Compile time, temporary memory, XLA FLOPs and median time of one train step."""
  step = compile_train_step(shape, scheme, B, L)
  row = {"scheme": scheme, "L": L, "batch": B, "compile_s": step.compile_s,
         "temp_bytes": _temp_bytes(step.compiled), "xla_flops": _xla_flops(step.compiled),
         "model_flops": train_flops(shape, B, L, L), "seconds": None, "matmul_rate": None}
  if timed:
    row["seconds"], row["matmul_rate"] = clock.time(step.run, runs)
  return row


def _temp_bytes(compiled) -> float | None:
  """XLA's peak temporary allocation of a compiled program (None if unavailable)."""
  try:
    return float(compiled.memory_analysis().temp_size_in_bytes)
  except Exception:  # pylint: disable=broad-except  (backends without the analysis)
    return None


def _xla_flops(compiled) -> float | None:
  """XLA's FLOP count of a compiled program (None if unavailable)."""
  try:
    cost = compiled.cost_analysis()
  except Exception:  # pylint: disable=broad-except
    return None
  if isinstance(cost, (list, tuple)):
    cost = cost[0] if cost else None
  return float(cost["flops"]) if cost and "flops" in cost else None


# -------------------------------------------------------------------- decoding

@dataclasses.dataclass
class CachedDecoder:
  """Cached greedy decoding (`decode.greedy_decode`'s program) of a fixed batch, compiled.

  `run()` decodes the batch (blocking) and returns `(tokens, lengths)`. With
  `oracle_lengths` (`compile_cached_decode(full_length=True)`) EOS is forbidden
  before the last step, so every row gets all `max_len` tokens.
  """

  model: model_lib.EncoderDecoder
  params: Any
  inputs: jax.Array
  compiled: Any
  compile_s: float
  oracle_lengths: jax.Array | None

  def run(self):
    return jax.block_until_ready(self.compiled(self.params, self.inputs, inputs_pos_BxS=None,
                                               targets_pos_BxT=None,
                                               oracle_lengths_B=self.oracle_lengths))


def compile_cached_decode(shape: Shape, scheme: str, B: int, L: int, *,
                          inputs: np.ndarray | None = None,
                          full_length: bool = False) -> CachedDecoder:
  """Greedy decoding of L tokens from the length-L `inputs` (default: random ids)."""
  model = make_model(shape, scheme, L)
  if inputs is None:
    inputs = random_tokens(np.random.default_rng(1), shape, B, L)
  inputs = jnp.asarray(inputs)
  params = jax.jit(model.init)(jax.random.PRNGKey(0), inputs[:1], inputs[:1])["params"]
  model.check_lengths(L, L)
  oracle = jnp.full((B,), L, jnp.int32) if full_length else None
  start = time.perf_counter()
  compiled = decode._greedy_decode.lower(  # pylint: disable=protected-access
      model, params, inputs, max_len=L, inputs_pos_BxS=None, targets_pos_BxT=None,
      oracle_lengths_B=oracle).compile()
  return CachedDecoder(model, params, inputs, compiled, time.perf_counter() - start, oracle)


def bench_decode(clock: Clock, shape: Shape, scheme: str, B: int, L: int, runs: int,
                 uncached: bool) -> dict[str, Any]:
  """Greedy decoding of L tokens from a length-L source, with the cache and without."""
  dec = compile_cached_decode(shape, scheme, B, L)
  row = {"scheme": scheme, "L": L, "batch": B, "compile_s": dec.compile_s}
  lengths = np.asarray(dec.run()[1])
  steps = L if (lengths >= L).any() else int(lengths.max()) + 1  # the loop stops at all-EOS
  row["steps"] = steps
  seconds, matmul_rate = clock.time(dec.run, runs)
  row["cached_tok_s"] = B * steps / seconds
  row["matmul_rate"] = matmul_rate
  row["bound_tok_s"] = B * steps / (decode_flops(shape, B, L, steps) / matmul_rate)
  row["uncached_tok_s"] = row["uncached_compile_s"] = None
  if uncached:
    start = time.perf_counter()
    slow = decode._greedy_decode_uncached.lower(  # pylint: disable=protected-access
        dec.model, dec.params, dec.inputs, max_len=L, inputs_pos_BxS=None,
        targets_pos_BxT=None).compile()
    row["uncached_compile_s"] = time.perf_counter() - start
    seconds, row["uncached_matmul_rate"] = clock.time(lambda: slow(dec.params, dec.inputs, inputs_pos_BxS=None,
                                                                   targets_pos_BxT=None),
                                                      max(1, min(runs, 2)))
    row["uncached_tok_s"] = B * steps / seconds
  return row


# ---------------------------------------------------------------------- seeds

def config_spec(spec: str) -> tuple[str, str]:
  """(config file, its argument) of a seeds spec: `path.py[:arg]`, or an argument of default.py."""
  path, _, arg = spec.partition(":") if spec.split(":")[0].endswith(".py") else ("", "", spec)
  return path or os.path.join("configs", "default.py"), arg


def load_config(spec: str):
  """The `get_config(arg)` of a config file (`config_spec`; files are not package modules)."""
  path, arg = config_spec(spec)
  module_spec = importlib.util.spec_from_file_location(
      "_bench_config", path if os.path.isabs(path) else os.path.join(REPO, path))
  module = importlib.util.module_from_spec(module_spec)
  module_spec.loader.exec_module(module)
  return module.get_config(arg or None)


def compile_seeds_steps(spec: str, num_seeds: int,
                        dtype: str | None = None) -> dict[int, TrainStep]:
  """The vmapped train step of a config (`config_spec`), for 1 and N seeds.

  As `train_and_evaluate` runs it (donated state). Both use the step-0 batches of
  the N-seed run (replica 0's for one seed), so every replica has the same shapes.
  `dtype`, where given, replaces the config's `model.dtype`.

  Returns:
    {1: one seed's step, num_seeds: the N-seed step} (one entry when N = 1).
  """
  config = load_config(spec)
  if dtype is not None:
    config.model.dtype = dtype
  seeds = [config.seed + i for i in range(num_seeds)]
  datasets = [pipeline.make_dataset(seed=s, **config.data) for s in seeds]
  model = architectures.make_model(config.model, vocab_size=datasets[0].vocab.size)
  tx, schedule = optim.make_optimizer(num_steps=config.num_steps, **config.optimizer)
  step = train_lib.make_train_step(
      model, tx, schedule, label_smoothing=config.label_smoothing,
      randomized=randomized_lib.RandomizedPositions(**config.randomized))
  batch_N = train_lib.stacked_batch(datasets, 0, config.batch_size)
  states = train_lib.init_replicas(model, tx, seeds)
  steps = {}
  for n in sorted({1, num_seeds}):
    state = jax.tree_util.tree_map(lambda x, n=n: x[:n], states)
    batch = {k: jnp.asarray(v[:n]) for k, v in batch_N.items()}
    seeds_n = jnp.asarray(seeds[:n], jnp.int32)
    start = time.perf_counter()
    compiled = jax.jit(jax.vmap(step), donate_argnums=0).lower(state, batch, seeds_n).compile()
    steps[n] = TrainStep(compiled, time.perf_counter() - start, state, batch, seeds_n, step)
  return steps


def bench_seeds(clock: Clock, config_arg: str, num_seeds: int, runs: int) -> list[dict]:
  """Step time of `jit(vmap(train_step))` (as `train_and_evaluate` runs it), 1 vs N seeds."""
  rows = []
  for n, step in compile_seeds_steps(config_arg, num_seeds).items():
    seconds, matmul_rate = clock.time(step.run, runs, warmup=2)
    rows.append({"seeds": n, "seconds": seconds, "matmul_rate": matmul_rate,
                 "shape": "x".join(str(d) for d in step.batch["inputs"].shape)})
  return rows
