"""Speed and memory of every positional scheme: train step, decoding, compilation.

  make bench                                         # -> benchmarks/RESULTS.md (~15 min, 2 cores)
  python -m benchmarks.schemes --schemes=none,t5 --lengths=64
  python -m benchmarks.schemes --quick --out=/tmp/results.md   # tiny shapes, seconds

For every scheme in `positions.SCHEMES` (plus `shaw_naive`, Shaw's L x L x Kd
gather form, defined here as the memory reference) and every length L, in one
process, each measurement after a warm-up and reported as the median of
`--runs` timed runs:

* train step (forward, backward, AdamW update of `train_lib.make_train_step`),
  its ratio to `none`, its achieved FLOP/s as a fraction of a float32 matmul
  measured in the same process, the peak temporary memory of the compiled step
  (XLA's `memory_analysis().temp_size_in_bytes`) and its ratio to `none`, and
  its compile time;
* greedy decoding of L tokens from a length-L source with the cache
  (`decode.greedy_decode`) and, up to `--uncached_max_length`, without it
  (`decode.greedy_decode_uncached`, which reruns the whole teacher-forced
  forward pass, encoder included, each step), their ratio, and the cached rate as a fraction of its
  matmul-bound rate;
* the vmapped multi-seed train step of configs/default.py, 1 seed against
  `--num_seeds` seeds.

FLOPs are counted analytically (`train_flops`, `decode_flops`) and XLA's own
count (`compiled.cost_analysis()["flops"]`) is printed beside them. Every timed
run is followed by one `--matmul_size`² float32 matmul: a row's "% of matmul"
divides by the median matmul rate of the runs interleaved with its own, so a
neighbour's load on a shared machine slows both alike.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import datetime
import functools
import importlib.util
import json
import math
import os
import platform
import sys
import time
from typing import Any, Callable, Sequence

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
DEFAULT_OUT = os.path.join(REPO, "benchmarks", "RESULTS.md")
NAIVE_SHAW = "shaw_naive"

TRAIN_COLUMNS = ("L", "batch", "scheme", "step ms", "× none", "model GFLOP", "XLA GFLOP",
                 "GFLOP/s", "% of matmul", "temp MiB", "mem × none", "compile s")
DECODE_COLUMNS = ("L", "batch", "new tokens", "scheme", "cached tok/s", "uncached tok/s",
                  "cached ÷ uncached", "matmul-bound tok/s", "% of bound", "compile s")
SEEDS_COLUMNS = ("seeds", "step ms", "× 1 seed", "ms per seed-step")


# ------------------------------------------------------------------- settings

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


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
  """The command line; `--quick` shrinks everything for a test."""
  p = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                              formatter_class=argparse.ArgumentDefaultsHelpFormatter)
  ints = lambda s: [int(x) for x in s.split(",") if x]
  names = lambda s: [x for x in s.split(",") if x]
  p.add_argument("--schemes", type=names, default=list(positions.SCHEMES),
                 help="comma list of registered schemes (default: all)")
  p.add_argument("--naive_shaw", type=int, default=1,
                 help="1: also benchmark Shaw's naive L x L x Kd gather form (`shaw_naive`)")
  p.add_argument("--decode_schemes", type=names, default=None,
                 help="schemes whose decoding is measured (default: every benchmarked one)")
  p.add_argument("--lengths", type=ints, default=[64, 256, 1024],
                 help="source = target length L of the train step and of decoding")
  p.add_argument("--batch", type=int, default=64, help="batch size at the first length")
  p.add_argument("--tokens_per_batch", type=int, default=4096,
                 help="longer lengths use batch = min(batch, tokens_per_batch // L)")
  for field in dataclasses.fields(Shape):
    p.add_argument(f"--{field.name}", type=int, default=field.default)
  p.add_argument("--runs", type=int, default=5, help="timed runs per train step (median)")
  p.add_argument("--decode_runs", type=int, default=3, help="timed runs per decoding (median)")
  p.add_argument("--uncached_max_length", type=int, default=64,
                 help="decode without the cache only up to this L (it costs L decoder passes)")
  p.add_argument("--naive_time_max_length", type=int, default=256,
                 help="time shaw_naive up to this L; beyond it only its memory is compiled")
  p.add_argument("--seeds_config", default="",
                 help="argument of configs/default.py for the multi-seed benchmark")
  p.add_argument("--num_seeds", type=int, default=4, help="seeds of the vmapped step (vs 1)")
  p.add_argument("--seeds_runs", type=int, default=20)
  p.add_argument("--matmul_size", type=int, default=2048)
  p.add_argument("--out", default=DEFAULT_OUT, help="the markdown file written")
  p.add_argument("--json", default=None, help="also save the raw results to this JSON file")
  p.add_argument("--render_from", default=None,
                 help="re-render the report from a --json file instead of measuring")
  p.add_argument("--quick", action="store_true",
                 help="tiny shapes, two schemes, one timed run: a smoke test in seconds")
  args = p.parse_args(argv)
  if args.quick:
    given = set(a.split("=")[0].lstrip("-") for a in (argv or []) if a.startswith("--"))
    quick = dict(schemes=["none", "shaw"], decode_schemes=["none"], lengths=[8], batch=4,
                 tokens_per_batch=32,
                 d_model=16, num_heads=2, head_dim=8, d_ff=32, num_encoder_layers=1,
                 num_decoder_layers=1, vocab_size=16, runs=1, decode_runs=1,
                 uncached_max_length=8, naive_time_max_length=0, seeds_config="smoke",
                 num_seeds=2, seeds_runs=2, matmul_size=256)
    for key, value in quick.items():
      if key not in given:
        setattr(args, key, value)
  if args.decode_schemes is None:
    args.decode_schemes = list(args.schemes)
  unknown = [s for s in args.schemes + args.decode_schemes if s not in positions.SCHEMES]
  if unknown:
    p.error(f"unknown scheme(s) {unknown}; choose from: {', '.join(positions.SCHEMES)}")
  return args


def batch_at(args, length: int) -> int:
  """The batch at `length`: `--batch`, cut to keep about `--tokens_per_batch` tokens."""
  return max(1, min(args.batch, args.tokens_per_batch // length))


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

def bench_train(clock: Clock, shape: Shape, scheme: str, B: int, L: int, runs: int,
                timed: bool = True) -> dict[str, Any]:
  """Compile time, temporary memory, XLA FLOPs and median time of one train step."""
  model = make_model(shape, scheme, L)
  rng = np.random.default_rng(0)
  batch = {"inputs": random_tokens(rng, shape, B, L), "targets": random_tokens(rng, shape, B, L)}
  tx, schedule = optim.make_optimizer(num_steps=1000)
  state = jax.jit(functools.partial(train_lib.init_state, model, tx, 0))(batch)
  step = train_lib.make_train_step(model, tx, schedule, label_smoothing=0.0,
                                   randomized=randomized_lib.RandomizedPositions())
  batch = jax.tree_util.tree_map(jnp.asarray, batch)
  seed = jnp.array(0, jnp.int32)
  start = time.perf_counter()
  compiled = jax.jit(step).lower(state, batch, seed).compile()
  compile_s = time.perf_counter() - start
  row = {"scheme": scheme, "L": L, "batch": B, "compile_s": compile_s,
         "temp_bytes": _temp_bytes(compiled), "xla_flops": _xla_flops(compiled),
         "model_flops": train_flops(shape, B, L, L), "seconds": None, "matmul_rate": None}
  if timed:
    holder = [state]

    def run():
      holder[0], metrics = compiled(holder[0], batch, seed)
      return metrics

    row["seconds"], row["matmul_rate"] = clock.time(run, runs)
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

def bench_decode(clock: Clock, shape: Shape, scheme: str, B: int, L: int, runs: int,
                 uncached: bool) -> dict[str, Any]:
  """Greedy decoding of L tokens from a length-L source, with the cache and without."""
  model = make_model(shape, scheme, L)
  rng = np.random.default_rng(1)
  inputs = jnp.asarray(random_tokens(rng, shape, B, L))
  params = jax.jit(model.init)(jax.random.PRNGKey(0), inputs[:1], inputs[:1])["params"]
  model.check_lengths(L, L)
  start = time.perf_counter()
  cached = decode._greedy_decode.lower(  # pylint: disable=protected-access
      model, params, inputs, max_len=L, inputs_pos_BxS=None, oracle_lengths_B=None).compile()
  row = {"scheme": scheme, "L": L, "batch": B, "compile_s": time.perf_counter() - start}
  _, lengths = cached(params, inputs, inputs_pos_BxS=None, oracle_lengths_B=None)
  lengths = np.asarray(lengths)
  steps = L if (lengths >= L).any() else int(lengths.max()) + 1  # the loop stops at all-EOS
  row["steps"] = steps
  seconds, matmul_rate = clock.time(
      lambda: cached(params, inputs, inputs_pos_BxS=None, oracle_lengths_B=None), runs)
  row["cached_tok_s"] = B * steps / seconds
  row["matmul_rate"] = matmul_rate
  row["bound_tok_s"] = B * steps / (decode_flops(shape, B, L, steps) / matmul_rate)
  row["uncached_tok_s"] = row["uncached_compile_s"] = None
  if uncached:
    start = time.perf_counter()
    slow = decode._greedy_decode_uncached.lower(  # pylint: disable=protected-access
        model, params, inputs, max_len=L).compile()
    row["uncached_compile_s"] = time.perf_counter() - start
    seconds, row["uncached_matmul_rate"] = clock.time(lambda: slow(params, inputs),
                                                      max(1, min(runs, 2)))
    row["uncached_tok_s"] = B * steps / seconds
  return row


# ---------------------------------------------------------------------- seeds

def load_default_config(arg: str):
  """configs/default.py's `get_config(arg)` (config files are not package modules)."""
  path = os.path.join(REPO, "configs", "default.py")
  spec = importlib.util.spec_from_file_location("_bench_default_config", path)
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module.get_config(arg or None)


def bench_seeds(clock: Clock, config_arg: str, num_seeds: int, runs: int) -> list[dict]:
  """Step time of `jit(vmap(train_step))` (as `train_and_evaluate` runs it), 1 vs N seeds.

  Both use the step-0 batches of the N-seed run (replica 0's for one seed), so
  every replica has the same shapes.
  """
  config = load_default_config(config_arg)
  seeds = [config.seed + i for i in range(num_seeds)]
  datasets = [pipeline.make_dataset(seed=s, **config.data) for s in seeds]
  model = architectures.make_model(config.model, vocab_size=datasets[0].vocab.size)
  tx, schedule = optim.make_optimizer(num_steps=config.num_steps, **config.optimizer)
  step = train_lib.make_train_step(
      model, tx, schedule, label_smoothing=config.label_smoothing,
      randomized=randomized_lib.RandomizedPositions(**config.randomized))
  batch_N = train_lib.stacked_batch(datasets, 0, config.batch_size)
  states = train_lib.init_replicas(model, tx, seeds)
  rows = []
  for n in sorted({1, num_seeds}):
    state = jax.tree_util.tree_map(lambda x, n=n: x[:n], states)
    batch = {k: jnp.asarray(v[:n]) for k, v in batch_N.items()}
    seeds_n = jnp.asarray(seeds[:n], jnp.int32)
    step_fn = jax.jit(jax.vmap(step), donate_argnums=0)
    holder = [state]

    def run(step_fn=step_fn, holder=holder, batch=batch, seeds_n=seeds_n):
      holder[0], metrics = step_fn(holder[0], batch, seeds_n)
      return metrics

    seconds, matmul_rate = clock.time(run, runs, warmup=2)
    rows.append({"seeds": n, "seconds": seconds, "matmul_rate": matmul_rate,
                 "shape": "x".join(str(d) for d in batch["inputs"].shape)})
  return rows


# --------------------------------------------------------------------- report

def machine() -> dict[str, str]:
  """What ran the benchmark."""
  cpu = platform.processor() or platform.machine()
  try:
    with open("/proc/cpuinfo") as f:
      names = [l.split(":", 1)[1].strip() for l in f if l.startswith("model name")]
    cpu = names[0] if names else cpu
  except OSError:
    pass
  cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
  device = jax.devices()[0]
  return {"cpu": cpu, "cores": str(cores), "platform": f"{platform.system()} {platform.release()}",
          "python": platform.python_version(), "jax": jax.__version__,
          "jaxlib": jax.lib.__version__ if hasattr(jax.lib, "__version__") else "?",
          "backend": f"{jax.default_backend()} ({device.device_kind}, {jax.device_count()} device(s))",
          "load": "%.2f %.2f %.2f" % os.getloadavg()}


def _fmt(x, spec=".1f", none="—"):
  """A number, or a dash for None."""
  return none if x is None else format(x, spec)


def markdown_table(columns: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
  """A GitHub markdown table."""
  lines = ["| " + " | ".join(columns) + " |", "|" + "|".join("---" for _ in columns) + "|"]
  lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
  return "\n".join(lines) + "\n"


def relative_time(row: dict, base: dict | None) -> float | None:
  """`row`'s time over `base`'s, each in units of its interleaved reference matmul.

  Both are measured against matmuls run between their own timed runs, so a
  neighbour's load that slows one row more than another cancels to first order.
  """
  if not base or not row["seconds"] or not base["seconds"]:
    return None
  if not row.get("matmul_rate") or not base.get("matmul_rate"):
    return row["seconds"] / base["seconds"]
  return (row["seconds"] * row["matmul_rate"]) / (base["seconds"] * base["matmul_rate"])


def train_table(rows: list[dict]) -> str:
  """The train-step table; ratios against `none` at the same length."""
  none = {r["L"]: r for r in rows if r["scheme"] == "none"}
  out = []
  for r in rows:
    base = none.get(r["L"])
    ratio = relative_time(r, base)
    mem_ratio = (r["temp_bytes"] / base["temp_bytes"]
                 if base and base["temp_bytes"] and r["temp_bytes"] is not None else None)
    rate = r["model_flops"] / r["seconds"] if r["seconds"] else None
    frac = 100 * rate / r["matmul_rate"] if rate else None
    out.append([r["L"], r["batch"], r["scheme"], _fmt(r["seconds"] and 1e3 * r["seconds"]),
                _fmt(ratio, ".2f"), _fmt(r["model_flops"] / 1e9), _fmt(
                    r["xla_flops"] and r["xla_flops"] / 1e9), _fmt(rate and rate / 1e9, ".0f"),
                _fmt(frac, ".0f"), _fmt(r["temp_bytes"] and r["temp_bytes"] / 2 ** 20),
                _fmt(mem_ratio, ".2f"), _fmt(r["compile_s"])])
  return markdown_table(TRAIN_COLUMNS, out)


def decode_table(rows: list[dict]) -> str:
  """The decoding table."""
  out = []
  for r in rows:
    ratio = cached_speedup(r)
    compile_s = _fmt(r["compile_s"]) + (f" / {r['uncached_compile_s']:.1f}"
                                        if r["uncached_compile_s"] else "")
    out.append([r["L"], r["batch"], r["steps"], r["scheme"], _fmt(r["cached_tok_s"], ".0f"),
                _fmt(r["uncached_tok_s"], ".0f"), _fmt(ratio, ".1f"),
                _fmt(r["bound_tok_s"], ".0f"), _fmt(100 * r["cached_tok_s"] / r["bound_tok_s"],
                                                    ".0f"), compile_s])
  return markdown_table(DECODE_COLUMNS, out)


def cached_speedup(row: dict) -> float | None:
  """Cached over uncached tokens/s, each in units of its interleaved reference matmul."""
  if not row["uncached_tok_s"]:
    return None
  ratio = row["cached_tok_s"] / row["uncached_tok_s"]
  if row.get("uncached_matmul_rate") and row.get("matmul_rate"):
    ratio *= row["uncached_matmul_rate"] / row["matmul_rate"]
  return ratio


def seeds_table(rows: list[dict]) -> str:
  """The multi-seed table."""
  return markdown_table(SEEDS_COLUMNS, [
      [r["seeds"], _fmt(1e3 * r["seconds"], ".2f"), _fmt(relative_time(r, rows[0]), ".2f"),
       _fmt(1e3 * r["seconds"] / r["seeds"], ".2f")] for r in rows])


# Why a target can miss on this machine (shown beside a missed target).
BOUNDS = {
    "train": "bounded by XLA:CPU code generation, not by the model code: see Notes",
    "decode": "memory- and single-core-bound steps, see Notes",
    "seeds": "one replica already keeps both cores busy, see Notes",
}


def targets(results: dict) -> list[tuple[str, str, bool, str]]:
  """(target, measured, holds, why it can miss) for each of the issue's targets covered."""
  train, dec, seeds = results["train"], results["decode"], results["seeds"]
  lengths, num_seeds = results["args"]["lengths"], results["args"]["num_seeds"]
  first, longest = lengths[0], lengths[-1]
  get = lambda rows, scheme, L: next((r for r in rows if r["scheme"] == scheme and r["L"] == L),
                                     None)
  out = []
  t5 = get(train, "t5", first)
  if t5 and t5["seconds"]:
    frac = t5["model_flops"] / t5["seconds"] / t5["matmul_rate"]
    out.append((f"train step, t5, L={first}: ≥ 70% of the matmul FLOP/s", f"{100 * frac:.0f}%",
                frac >= 0.70, BOUNDS["train"]))
  none = get(train, "none", first)
  for scheme, limit in (("t5", 1.15), ("alibi", 1.15), ("rope", 1.15), ("shaw", 1.5),
                        ("xl", 1.5)):
    r = get(train, scheme, first)
    ratio = relative_time(r, none) if r else None
    if ratio is not None:
      out.append((f"train step, {scheme}, L={first}: ≤ {limit}× none", f"{ratio:.2f}×",
                  ratio <= limit, ""))
  sh, nv, no = get(train, "shaw", longest), get(train, NAIVE_SHAW, longest), get(
      train, "none", longest)
  if sh and no and sh["temp_bytes"] and no["temp_bytes"]:
    ratio = sh["temp_bytes"] / no["temp_bytes"]
    naive = (f"; the naive gather form: {nv['temp_bytes'] / no['temp_bytes']:.2f}×"
             if nv and nv["temp_bytes"] else "")
    out.append((f"Shaw peak temporary memory, L={longest}: ≤ 2× none",
                f"{ratio:.2f}×{naive}", ratio <= 2.0, ""))
  for r in dec:
    if r["L"] == first:
      frac = r["cached_tok_s"] / r["bound_tok_s"]
      out.append((f"cached decoding, {r['scheme']}, L={first}: ≥ 40% of matmul-bound",
                  f"{100 * frac:.0f}%", frac >= 0.40, BOUNDS["decode"]))
      if r["uncached_tok_s"]:
        ratio = cached_speedup(r)
        out.append((f"cached decoding, {r['scheme']}, {r['steps']} new tokens: ≥ 5× "
                    "recomputation", f"{ratio:.1f}×", ratio >= 5.0, ""))
  if len(seeds) > 1:
    ratio = relative_time(seeds[-1], seeds[0])
    out.append((f"{num_seeds} seeds in one vmapped step: ≤ 2× one seed", f"{ratio:.2f}×",
                ratio <= 2.0, BOUNDS["seeds"]))
  return out


NOTES = """\
## Notes: what bounds each figure

* **Train step (the 70% target).** XLA's profiler at DEFAULT, with wall time attributed
  to ops: the MLP matmuls run at about the reference matmul rate, the
  `[4096, 256] × [256, 256]` projections at about 70% of it, and attention's matmuls
  (B·H = 256 separate 64 × 64 × 64 products per call; XLA:CPU reaches ~85 GFLOP/s on
  those at best) far below it. Matmuls take about two thirds of the step. The rest is
  memory-bound work XLA:CPU does not fold into them: the GELU and its gradient (with a
  `[d_ff, tokens]` transpose for the weight gradient), eleven RMSNorms and their
  gradients, softmax, attention layout transposes, residual adds and the AdamW update;
  XLA:CPU's YNNPACK fusions even materialize the GELU's scalar constants as full
  `[B, L, d_ff]` arrays. These are limits of XLA:CPU's code generation, not of the
  model code: reformulations with the same math (custom-VJP GELU and RMSNorm,
  optimization barriers, GELU as `x·sigmoid(·)`, one fused QKV matmul) were measured
  and moved the step by ≤ 2% (the fused QKV matmul was slower), so none was kept.
  `jax.default_matmul_precision` changes nothing on XLA:CPU (float32 matmuls stay
  float32: same speed, same bits). XLA flags (e.g. the YNNPACK fusion type) were not
  used, as every user would have to set them too.
* **Schemes.** T5 and ALiBi add one `[B, H, L, L]` bias to the logits, RoPE rotates q
  and k, Shaw gathers `q·aᴷᵀ` (`[B, L, 2k+1, H]`) by relative index and scatter-adds
  the weights into `2k+1` buckets, Transformer-XL adds `(q+v)·W_R` and one
  `[B, H, L, L]` matmul against the keys' sinusoids. Their cost is the traffic of
  those `[B, H, L, L]` tensors (and XL's sinusoids), so their ratios to `none` grow
  with L.
* **Shaw's memory** stays O(L·k) beyond attention's own `[B, H, L, L]` weights;
  `shaw_naive` materializes an `[B, L, L, Kd]` tensor per term and its gradient.
* **Decoding (the 40% target).** A cached step at DEFAULT reads every layer's
  self-attention cache and the encoder keys/values (32 MiB) at the memory bandwidth
  (~23 GB/s from one core) for 0.24 GFLOP of 64-row matmuls, which XLA:CPU runs on
  one core; the encoder (the prefill, about a third of the time) runs at the train
  step's forward efficiency. So the loop is bound by memory traffic and by one core,
  not by matmul throughput, and at longer L with small batches (4 rows at L = 1024)
  by per-step overhead. Transformer-XL is slower still: every step recomputes the
  sinusoid of every cached key position in every layer (B·L·rel_dim sines and
  cosines, ~3 ns each on XLA:CPU); caching them would need a scheme hook in the decode
  cache. Recomputing the prefix instead of caching costs a whole decoder pass per token.
* **Seeds.** The demo model (d_model 64) is small, but its one-seed step is not
  dispatch-bound: XLA runs its ~1,700 small kernels on both cores and their time
  grows with the data, so four replicas in one program cost about three times one;
  `vmap` saves the Python and dispatch overhead of separate programs, which is small
  here. (On an accelerator, where one small model leaves the device mostly idle, the
  same vmapped step is what makes extra seeds nearly free.)
* **Machine.** A shared VM: the load averages above say how busy its cores were. A
  row's percentages divide by matmuls interleaved with its own runs, so a neighbour's
  load moves them less than the absolute times. A matmul run right after a step is
  slower than in a quiet loop (the median above vs. its maximum); against the
  maximum, every "% of matmul" and "% of bound" would be lower by that ratio.

"""


def report(results: dict) -> str:
  """The whole RESULTS.md, from `run`'s results."""
  args, info, shape = results["args"], results["info"], Shape(**results["shape"])
  train, dec, seeds, rates = (results["train"], results["decode"], results["seeds"],
                              results["matmul_rates"])
  lengths = args["lengths"]
  batches = ", ".join(f"L={L}: {batch_at(argparse.Namespace(**args), L)}" for L in lengths)
  command = " ".join(["python -m benchmarks.schemes"] + results["argv"])
  rate = float(np.median(rates))
  lines = [
      "# Benchmark: positional schemes" + (" (--quick smoke run)" if args["quick"] else ""),
      "",
      f"Written by `{command}`" + (" (`make bench`)" if not results["argv"] else "")
      + f" on {results['date']}, "
      f"{results['seconds'] / 60:.1f} min.",
      "",
      "## Machine",
      "",
      f"* CPU: {info['cpu']}, {info['cores']} cores available to the process; "
      f"{info['platform']}, Python {info['python']}",
      f"* JAX {info['jax']}, jaxlib {info['jaxlib']}; backend {info['backend']}; float32, "
      "default matmul precision, no XLA flags",
      f"* Load average (1, 5, 15 min) at start: {info['load_start']}; at end: {info['load_end']}",
      f"* Reference matmul: `{args['matmul_size']}×{args['matmul_size']} @ "
      f"{args['matmul_size']}×{args['matmul_size']}` float32, jitted, measured "
      f"{len(rates)} times in this process: median {rate / 1e9:.0f} GFLOP/s "
      f"(min {min(rates) / 1e9:.0f}, max {max(rates) / 1e9:.0f}).",
      "",
      "## Setup",
      "",
      f"* Model: encoder-decoder, d_model {shape.d_model}, {shape.num_heads} heads of "
      f"{shape.head_dim}, {shape.num_encoder_layers} encoder + {shape.num_decoder_layers} "
      f"decoder layers, d_ff {shape.d_ff}, vocab {shape.vocab_size}, RMSNorm, tied "
      "embeddings; each scheme with its default config (a `learned` table grown to L "
      "rows). AdamW (`optim.make_optimizer`: warmup + cosine, global-norm clipping).",
      f"* Lengths L (source = target): {', '.join(map(str, lengths))}. Batch: {batches} "
      f"(`--batch {args['batch']}`, cut to about `--tokens_per_batch "
      f"{args['tokens_per_batch']}` tokens at longer lengths, so every step processes the "
      "same number of tokens; attention's share grows with L).",
      f"* Train step: `jit(train_lib.make_train_step(...))`, {args['runs']} timed runs after "
      "a warm-up, median. **model GFLOP** counts matmuls analytically, 2·m·n·k each: the "
      "q, k, v and output projections, the MLP, the output logits, and attention scores "
      "and values (4·B·H·Q·K·Kd per attention), times 3 for forward + backward "
      "(`benchmarks.schemes.train_flops`; norms, softmax, embeddings and a scheme's own "
      "terms are not counted, so extra work shows as a lower rate). **XLA GFLOP** is "
      "`compiled.cost_analysis()['flops']` (every op, elementwise included). **GFLOP/s** "
      "= model GFLOP / step time; **% of matmul** divides it by the median rate of the "
      "reference matmuls run between that row's timed steps. **× none** compares step "
      "times in those units too (step time × its matmul rate, over `none`'s), so load "
      "from other processes that varies between rows cancels. **temp MiB**: "
      "`compiled.memory_analysis().temp_size_in_bytes`, the peak temporary buffer of the "
      "compiled step (parameters, optimizer state and batch excluded). **compile s**: "
      "`lower()` + `compile()`.",
      f"* `{NAIVE_SHAW}`: Shaw's naive gather form (an `[B, L, L, Kd]` tensor of table rows "
      "per term, as `_naive_shaw` in tests/positions_test.py), defined in the benchmark as "
      f"the memory reference for `shaw`; timed only up to L = "
      f"{args['naive_time_max_length']} (beyond, compiled for its memory only).",
      f"* Decoding: greedy, L new tokens from a length-L source (cache sized L), median of "
      f"{args['decode_runs']} runs. **cached**: `decode.greedy_decode` (one `while_loop`, "
      "KV cache); **uncached**: `decode.greedy_decode_uncached`, which reruns the decoder "
      "over the whole target every step (measured up to L = "
      f"{args['uncached_max_length']}: it costs L decoder passes). **matmul-bound tok/s**: "
      "generated tokens ÷ (the cached run's matmul FLOPs ÷ the reference matmul rate), "
      "FLOPs from `decode_flops`: the encoder and cross-attention keys/values once, then "
      "per step the decoder's projections, MLP, logits and attention over the filled cache "
      "and the source. **cached ÷ uncached** compares the two rates in units of their "
      "interleaved reference matmuls, like **× none**. **compile s**: cached / uncached.",
      "",
      "## Targets",
      "",
  ]
  for name, value, ok, why in targets(results):
    lines.append(f"* {'✅ holds' if ok else '❌ missed'}: {name}: **{value}**"
                 + (f" ({why})" if why and not ok else ""))
  lines += ["", "## Train step", "", train_table(train), "## Greedy decoding", "",
            decode_table(dec)]
  if seeds:
    config = "configs/default.py" + (f":{args['seeds_config']}" if args["seeds_config"] else "")
    lines += [f"## Several seeds in one program ({args['num_seeds']} vs 1)", "",
              f"{config} (its model, and its step-0 batch: {seeds[0]['shape']} per replica), "
              "`jit(vmap(train_step), donate_argnums=0)` as `train_and_evaluate` runs it; "
              f"median of {args['seeds_runs']} steps; **× 1 seed** in units of the "
              "interleaved reference matmuls, like **× none**.", "", seeds_table(seeds)]
  lines += [NOTES]
  return "\n".join(lines)


def run(args) -> dict:
  """Runs every benchmark; returns the raw results (JSON-serialisable)."""
  start = time.perf_counter()
  info = machine()
  info["load_start"] = info.pop("load")
  shape = Shape(**{f.name: getattr(args, f.name) for f in dataclasses.fields(Shape)})
  clock = Clock(args.matmul_size)
  log = lambda msg: print(msg, file=sys.stderr, flush=True)
  train, dec = [], []
  schemes = list(args.schemes)
  with naive_shaw_registered():
    if args.naive_shaw and "shaw" in schemes:
      schemes.insert(schemes.index("shaw") + 1, NAIVE_SHAW)
    for L in args.lengths:
      B = batch_at(args, L)
      for scheme in schemes:
        naive = scheme == NAIVE_SHAW
        timed = not naive or L <= args.naive_time_max_length
        row = bench_train(clock, shape, scheme, B, L, args.runs, timed=timed)
        train.append(row)
        log(f"train  L={L:5d} B={B:3d} {scheme:12s} "
            f"{_fmt(row['seconds'] and row['seconds'] * 1e3)} ms  "
            f"temp {_fmt(row['temp_bytes'] and row['temp_bytes'] / 2 ** 20)} MiB  "
            f"compile {row['compile_s']:.1f}s")
        if naive or scheme not in args.decode_schemes:
          continue
        row = bench_decode(clock, shape, scheme, B, L, args.decode_runs,
                           uncached=L <= args.uncached_max_length)
        dec.append(row)
        log(f"decode L={L:5d} B={B:3d} {scheme:12s} cached {row['cached_tok_s']:.0f} tok/s "
            f"uncached {_fmt(row['uncached_tok_s'], '.0f')} tok/s")
  seeds = bench_seeds(clock, args.seeds_config, args.num_seeds, args.seeds_runs)
  log("seeds  " + ", ".join(f"{r['seeds']}: {r['seconds'] * 1e3:.2f} ms" for r in seeds))
  info["load_end"] = "%.2f %.2f %.2f" % os.getloadavg()
  return {"argv": list(results_argv(args)), "args": {k: v for k, v in vars(args).items()},
          "date": f"{datetime.datetime.now():%Y-%m-%d %H:%M}", "info": info,
          "shape": dataclasses.asdict(shape), "train": train, "decode": dec, "seeds": seeds,
          "matmul_rates": clock.all_rates, "seconds": time.perf_counter() - start}


def results_argv(args) -> list[str]:
  """The command-line flags that produced a run (where it was written left out)."""
  out, skip = [], False
  for a in args.argv or []:
    if skip:
      skip = False
    elif a.startswith(("--out", "--json", "--render_from")):
      skip = "=" not in a
    else:
      out.append(a)
  return out


def main(argv: Sequence[str] | None = None) -> str:
  """Runs the benchmarks (or re-renders `--render_from`), prints and writes the report."""
  argv = list(sys.argv[1:] if argv is None else argv)
  args = parse_args(argv)
  args.argv = argv
  if args.render_from:
    with open(args.render_from) as f:
      results = json.load(f)
  else:
    results = run(args)
  if args.json:
    with open(args.json, "w") as f:
      json.dump({k: v for k, v in results.items()}, f, indent=1, default=str)
  text = report(results)
  print(text)
  os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
  with open(args.out, "w") as f:
    f.write(text)
  return text


if __name__ == "__main__":
  main()
