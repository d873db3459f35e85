"""XLA:CPU compiler options against the default, timed interleaved in one process.

  PYTHONPATH=. .venv/bin/python benchmarks/records/xla_options/run.py \
      --out benchmarks/records/xla_options/README.md

Each program is compiled once per option set (`jax.stages.Lowered.compile(
compiler_options=...)`, so no XLA_FLAGS and no restart), then the variants run in
turn, `--rounds` times, and the median of each is reported beside the default's:
cached greedy decoding at `make bench`'s reference shape (t5, L = 64, batch 64) and
the 3-seed vmapped train step at configs/default.py's `ablation` size. Decoded tokens
are checked equal to the default's.
"""

import sys
import time

from absl import app
from absl import flags
import jax
import numpy as np

from benchmarks import schemes
from relpos_jax import decode

_YNN = "xla_cpu_experimental_ynn_fusion_type"
OPTIONS = {
    "default": {},
    "YNNPACK fusions off": {_YNN: ""},
    "YNNPACK fusions: dot only": {_YNN: "LIBRARY_FUSION_TYPE_DOT"},
    "YNNPACK fusions: elementwise only": {_YNN: "LIBRARY_FUSION_TYPE_ELTWISE"},
    "fusion emitters off": {"xla_cpu_use_fusion_emitters": False},
    "concurrency-optimized scheduler": {"xla_cpu_enable_concurrency_optimized_scheduler": True},
    "512-bit vectors": {"xla_cpu_prefer_vector_width": 512},
}
_OUT = flags.DEFINE_string("out", None, "Also write the markdown here.")
_ROUNDS = flags.DEFINE_integer("rounds", 9, "Timed runs of each variant (interleaved).")


def _time(calls: dict, rounds: int) -> dict[str, float]:
  """Median seconds of each call, the calls interleaved round by round (after a warm-up)."""
  times = {name: [] for name in calls}
  for name, call in calls.items():
    call()
  for _ in range(rounds):
    for name, call in calls.items():
      start = time.perf_counter()
      call()
      times[name].append(time.perf_counter() - start)
  return {name: float(np.median(t)) for name, t in times.items()}


def main(argv):
  del argv
  dec = schemes.compile_cached_decode(schemes.Shape(), "t5", 64, 64, full_length=True)
  lowered = decode._greedy_decode.lower(  # pylint: disable=protected-access
      dec.model, dec.params, dec.inputs, max_len=64, inputs_pos_BxS=None,
      oracle_lengths_B=dec.oracle_lengths)
  decoders = {name: lowered.compile(compiler_options=o) for name, o in OPTIONS.items()}

  def decode_call(compiled):
    return lambda: jax.block_until_ready(compiled(
        dec.params, dec.inputs, inputs_pos_BxS=None, oracle_lengths_B=dec.oracle_lengths))

  reference = np.asarray(decode_call(decoders["default"])()[0])
  same = {n: bool((np.asarray(decode_call(c)()[0]) == reference).all())
          for n, c in decoders.items()}
  decode_s = _time({n: decode_call(c) for n, c in decoders.items()}, _ROUNDS.value)

  step = schemes.compile_seeds_steps("ablation", 3)[3]
  lowered = jax.jit(jax.vmap(step.train_step)).lower(step.state, step.batch, step.seed)
  steps = {name: lowered.compile(compiler_options=o) for name, o in OPTIONS.items()}
  train_s = _time({n: (lambda c=c: jax.block_until_ready(c(step.state, step.batch, step.seed)))
                   for n, c in steps.items()}, _ROUNDS.value)

  lines = ["# XLA:CPU compiler options against the default", "",
           f"`benchmarks/records/xla_options/run.py`: jax {jax.__version__}, "
           f"{time.strftime('%Y-%m-%d %H:%M')}; median of {_ROUNDS.value} interleaved runs "
           "each. Decoding: t5, L = 64, batch 64, 64 new tokens, DEFAULT shape. Train step: "
           "configs/default.py `ablation`, 3 seeds vmapped.", "",
           "| options | decoding ms | × default | same tokens | 3-seed train step ms | × default |",
           "|---|---|---|---|---|---|"]
  for name, options in OPTIONS.items():
    lines.append(f"| {name} `{options}` | {1e3 * decode_s[name]:.1f} | "
                 f"{decode_s[name] / decode_s['default']:.2f} | {same[name]} | "
                 f"{1e3 * train_s[name]:.1f} | {train_s[name] / train_s['default']:.2f} |")
  text = "\n".join(lines) + "\n"
  print(text)
  if _OUT.value:
    with open(_OUT.value, "w") as f:
      f.write(text)


if __name__ == "__main__":
  app.run(main)
