"""bfloat16 against float32, same programs, same run: the `precision` part of `make bench`.

Issue #52's question is whether a bfloat16 model trains faster than the float32 one
on this machine (XLA:CPU's native bf16 dots need AMX to pay). Three programs, each
compiled once per dtype and timed alternately (`peers.interleave`: a float32 run, a
bfloat16 run, ...), so load from other processes falls on both alike:

* `default`: the encoder-decoder train step at the benchmark's Shape (T5 scheme,
  L = the first `--lengths`), un-vmapped, as `benchmarks/schemes.py` times it;
* `seeds`: `jit(vmap(train_step))` of a config's N seeds as `train_and_evaluate` runs
  it (default: configs/ablations/kazemnejad.py's decoder-only model, 3 seeds, its
  step-0 batch), the program the ablation tables spend their time in;
* `decode`: cached greedy decoding of L tokens at the Shape (EOS forbidden before the
  end, so both dtypes decode every step).

Each program also records how many of its compiled dots run in bf16 and how many
bf16 dots XLA converted to f32 (`benchmarks.dots.count_dots`), the figure that says
whether a slow bf16 step is XLA's doing. `model.dtype = "auto"`'s choice on this
machine (`relpos_jax.precision`) goes into the record.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable

import numpy as np

from benchmarks import dots as dots_bench
from benchmarks import peers
from benchmarks import schemes
from relpos_jax import precision

DTYPES = ("float32", "bfloat16")  # reference first: ratios are bfloat16 / float32
SCHEME = "t5"  # the scheme of the default-shape programs (HF T5's, as in `peers`)
SEEDS_CONFIG = "configs/ablations/kazemnejad.py:scheme=t5"


def _dot_counts(compiled) -> dict[str, int]:
  """`count_dots` of a compiled program (empty where its HLO text is unavailable)."""
  try:
    return dots_bench.count_dots(compiled.as_text())
  except Exception:  # pylint: disable=broad-except  (a backend without HLO text)
    return {}


def _timed(name: str, programs: dict[str, Any], run: Callable[[Any], Any], runs: int,
           warmup: int, log: Callable[[str], None], unit: Callable[[float], str]) -> dict:
  """`programs` (one per dtype) timed alternately; their seconds and dot counts."""
  fns = [lambda p=programs[d]: run(p) for d in DTYPES]
  seconds = peers.interleave(*fns, runs=runs, warmup=warmup)
  row = {"program": name, "runs": runs,
         "seconds": {d: s for d, s in zip(DTYPES, seconds)},
         "dots": {d: _dot_counts(programs[d].compiled) for d in DTYPES},
         "compile_s": {d: programs[d].compile_s for d in DTYPES}}
  med = {d: float(np.median(row["seconds"][d])) for d in DTYPES}
  log(f"bf16   {name:8s} " + "  ".join(f"{d} {unit(med[d])}" for d in DTYPES)
      + f"  bf16/f32 {med['bfloat16'] / med['float32']:.2f}x")
  return row


def measure(shape: schemes.Shape, B: int, L: int, *, runs: int, decode_runs: int,
            seeds_config: str = SEEDS_CONFIG, num_seeds: int = 3,
            log: Callable[[str], None] = print) -> dict[str, Any]:
  """Every program of the module doc in float32 and bfloat16, timed alternately; a record.

  Args:
    shape: the encoder-decoder's shape (its `dtype` is ignored: both are timed).
    B: batch of the default-shape train step and decoding.
    L: source = target length of both.
    runs: timed rounds of each train step (each round: one float32 run, one bfloat16).
    decode_runs: timed rounds of decoding.
    seeds_config: the config of the vmapped program (`schemes.config_spec`).
    num_seeds: its seeds.
    log: progress lines.

  Returns:
    `{"auto": ..., "scheme", "L", "batch", "seeds_config", "num_seeds", "programs": [row]}`,
    each row `{"program", "seconds": {dtype: [s, ...]}, "dots": {dtype: counts}, ...}`
    (`tokens` too for decoding: tokens generated per run).
  """
  rng = np.random.default_rng(0)
  tokens = {"inputs": schemes.random_tokens(rng, shape, B, L),
            "targets": schemes.random_tokens(rng, shape, B, L)}
  at = {d: dataclasses.replace(shape, dtype=d) for d in DTYPES}
  record: dict[str, Any] = {"auto": precision.record(), "scheme": SCHEME, "L": L, "batch": B,
                            "seeds_config": seeds_config, "num_seeds": num_seeds,
                            "programs": []}
  ms = lambda s: f"{1e3 * s:.1f} ms"

  steps = {d: schemes.compile_train_step(at[d], SCHEME, B, L, tokens) for d in DTYPES}
  record["programs"].append(_timed("default", steps, lambda p: p.run(), runs, 2, log, ms))
  del steps

  steps = {d: schemes.compile_seeds_steps(seeds_config, num_seeds, dtype=d)[num_seeds]
           for d in DTYPES}
  row = _timed("seeds", steps, lambda p: p.run(), runs, 2, log, ms)
  # inputs + target width, as the default program's "64x64+64" (a language model's inputs
  # are one token wide: its window is the targets)
  batch = steps[DTYPES[0]].batch
  row["batch"] = ("x".join(str(n) for n in batch["inputs"].shape)
                  + f"+{batch['targets'].shape[-1]}")
  record["programs"].append(row)
  del steps

  decoders = {d: schemes.compile_cached_decode(at[d], SCHEME, B, L, inputs=tokens["inputs"],
                                               full_length=True) for d in DTYPES}
  row = _timed("decode", decoders, lambda p: p.run(), decode_runs, 1, log,
               lambda s: f"{B * L / s:.0f} tok/s")
  row["tokens"] = B * L
  record["programs"].append(row)
  return record


def figures(record: dict) -> dict[str, dict[str, float]]:
  """Per program: the median seconds of each dtype and `ratio` = bfloat16 / float32."""
  out = {}
  for row in record["programs"]:
    med = {d: float(np.median(row["seconds"][d])) for d in DTYPES}
    out[row["program"]] = {**med, "ratio": med["bfloat16"] / med["float32"]}
  return out
