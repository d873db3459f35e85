"""Where a compiled program's time goes: XLA's profiler, per op kind, model part and thread.

  python -m benchmarks.profile                          # train step, t5, the reference shape
  python -m benchmarks.profile --program=decode         # cached greedy decoding
  python -m benchmarks.profile --program=train --scheme=shaw --length=256 --out=/tmp/p.md
  python -m benchmarks.profile --program=seeds --seeds_config=ablation --num_seeds=3
  python -m benchmarks.profile --program=seeds --seeds_config=configs/ablations/kazemnejad.py

Compiles one program of benchmarks/schemes.py at `make bench`'s shape (the same
flags; `seeds`: the vmapped train step of `--seeds_config`, an argument of
configs/default.py or a config file `path.py[:arg]`, one seed and `--num_seeds`,
as the ablation tables train), runs it `--runs` times under `jax.profiler`, and attributes every
executed XLA op (a thunk: a dot, a fusion, a copy, ...) to

* its **kind**: `dot` (a plain matmul), `ynn fusion` (XLA:CPU's YNNPACK fusions:
  a matmul or elementwise work with what XLA fused into it), `loop fusion`
  (elementwise work XLA:CPU generated code for), `copy/transpose`, `other`;
* its **model part**, from the op's source location in the HLO metadata:
  the module path with layer numbers folded (`decoder/layer_*/mlp`), and whether
  it is a forward or a backward (`transpose(jvp(...))`) op; the loss and the
  optimizer's update run outside any module;
* the **thread** that ran it, so a program that keeps one core busy while the
  other idles shows as one busy thread.

Times nest (a `while` loop's op contains its body's ops), so the tables count
leaf ops only; "busy" is the summed leaf time of a thread over the wall time.
Run it on a quiet machine: other processes stretch every op alike but make the
wall time and the threads' busy fractions meaningless. docs/performance.md
cites its output.
"""

from __future__ import annotations

import collections
import dataclasses
import glob
import re
import tempfile
import time
from typing import Any, Callable, Sequence

from absl import app
from absl import flags
import jax
from jax import profiler

from benchmarks import schemes as bench

PROGRAMS = ("train", "decode", "seeds")
_DEFINITION = re.compile(r"^\s*(?:ROOT )?%([\w.\-]+) = (.*)$")
_OP_NAME = re.compile(r"metadata=\{[^}]*op_name=\"([^\"]*)\"")
_OPERAND = re.compile(r"%([\w.\-]+)")
_LAYER = re.compile(r"layer_\d+")
OUTSIDE_MODULES = "(outside modules: loss, optimizer, glue)"
_CONTAINERS = ("while", "conditional", "call")  # their time is their body's ops'


@dataclasses.dataclass(frozen=True)
class OpTime:
  """One op's summed time over the profiled runs."""

  name: str          # the HLO instruction (`dot.316`, `ynn_fusion.3`)
  thread: str        # the runtime thread that ran it
  seconds: float
  calls: int


def op_sources(hlo_text: str) -> dict[str, str]:
  """HLO instruction name -> its `op_name` metadata (the JAX source path), from `as_text()`.

  An instruction XLA created without metadata (a layout dot, a copy) takes the
  source of its first operand that has one.
  """
  sources, operands = {}, {}
  for line in hlo_text.splitlines():
    match = _DEFINITION.match(line)
    if not match:
      continue
    name, rest = match.groups()
    source = _OP_NAME.search(rest)
    if source:
      sources[name] = source.group(1)
    else:
      operands[name] = _OPERAND.findall(rest.split("metadata=")[0])
  for _ in range(8):  # chains of metadata-less ops are short
    for name, names in operands.items():
      if name not in sources:
        inherited = next((sources[o] for o in names if o in sources), None)
        if inherited:
          sources[name] = inherited
  return sources


def op_kind(name: str) -> str:
  """The kind of an executed op from its HLO instruction name."""
  base = name.split(".")[0]
  if base == "dot" or base.startswith("dot_"):
    return "dot"
  if base.startswith("ynn_fusion"):
    return "ynn fusion"
  if "copy" in base or "transpose" in base:
    return "copy/transpose"
  if "fusion" in base or base.startswith("wrapped_"):
    return "loop fusion"
  return "other"


def model_part(source: str) -> str:
  """A model part from an op's source path: `backward decoder/layer_*/mlp`, `optimizer`, ...

  The Flax module path (a method call `decoder.cross_kv` counts as its module
  `decoder`; the top model's class and loop plumbing are left out), layer numbers
  folded, at most three deep; `backward` when the op is part of a gradient
  (`transpose(...)` in its path), `loop:` when it runs in a `while` loop (a
  decoding step, against the prefill outside it). Ops traced outside any module
  (the loss, the optax update, the tied-embedding logits) are `OUTSIDE_MODULES`.
  """
  if not source:
    return "(no source)"
  phase = "backward " if "transpose(" in source else ""
  phase += "loop: " if "/while/" in source else ""
  parts = [p for p in source.split("/")
           if p and not p.startswith(("jit(", "jvp(", "transpose(", "vmap(", "checkpoint"))]
  modules: list[str] = []
  for part in parts[:-1]:  # the last element is the primitive
    module = part.split(".")[0]
    if (not module or module[:1].isupper() or module in ("while", "body", "cond", "branch")
        or "(" in module or "->" in part):  # an einsum's spec is a primitive's, not a module's
      continue
    module = _LAYER.sub("layer_*", module)
    if not modules or modules[-1] != module:
      modules.append(module)
  return phase + ("/".join(modules[:3]) or OUTSIDE_MODULES)


def collect(xplane_path: str) -> tuple[list[OpTime], float]:
  """Leaf ops and the traced wall time (seconds) from a profiler's `.xplane.pb`."""
  data = profiler.ProfileData.from_file(xplane_path)
  totals: dict[tuple[str, str], list[float]] = collections.defaultdict(lambda: [0.0, 0])
  start, end = float("inf"), 0.0
  for plane in data.planes:
    for line in plane.lines:
      if "XLAEigen" not in line.name and "PjRt" not in line.name:
        continue  # ops run on the runtime's threads; python and profiler lines are not ops
      for event in line.events:
        name = event.name
        if (name.startswith(("ThunkExecutor", "SlinkyThreadPool"))
            or name.split(".")[0] in _CONTAINERS):
          continue
        total = totals[(name, line.name)]
        total[0] += event.duration_ns * 1e-9
        total[1] += 1
        start = min(start, event.start_ns)
        end = max(end, event.start_ns + event.duration_ns)
  ops = [OpTime(name, thread, seconds, int(calls))
         for (name, thread), (seconds, calls) in totals.items()]
  return ops, max(end - start, 0.0) * 1e-9


def profile(run: Callable[[], Any], runs: int) -> tuple[list[OpTime], float, float, float]:
  """Times `runs` calls of `run` (after one warm-up), then profiles as many.

  Returns:
    (leaf ops, traced span in seconds, wall seconds of the profiled calls, wall
    seconds of the same number of calls without the profiler).
  """
  run()
  start = time.perf_counter()
  for _ in range(runs):
    run()
  plain = time.perf_counter() - start
  with tempfile.TemporaryDirectory() as directory:
    profiler.start_trace(directory)
    start = time.perf_counter()
    for _ in range(runs):
      run()
    wall = time.perf_counter() - start
    profiler.stop_trace()
    paths = sorted(glob.glob(f"{directory}/**/*.xplane.pb", recursive=True))
    if not paths:
      raise RuntimeError(f"jax.profiler wrote no .xplane.pb under {directory}")
    ops, span = collect(paths[-1])
  return ops, span, wall, plain


def _table(title: str, rows: dict[str, float], total: float, runs: int, top: int) -> list[str]:
  """A markdown table of the largest `rows` (seconds summed over `runs`) with their shares."""
  lines = [f"### {title}", "", "| | ms per run | share |", "|---|---|---|"]
  ranked = sorted(rows.items(), key=lambda kv: -kv[1])
  for key, seconds in ranked[:top]:
    lines.append(f"| {key} | {1e3 * seconds / runs:.1f} | {100 * seconds / total:.0f}% |")
  rest = sum(s for _, s in ranked[top:])
  if rest:
    lines.append(f"| ({len(ranked) - top} more) | {1e3 * rest / runs:.1f} | "
                 f"{100 * rest / total:.0f}% |")
  return lines + [""]


def report(ops: Sequence[OpTime], sources: dict[str, str], wall: float, runs: int, *,
           title: str, plain: float | None = None, top: int = 12) -> str:
  """The markdown report: time per op kind, per model part, per thread, and the top ops.

  Args:
    ops: leaf ops from `collect`.
    sources: `op_sources` of the compiled program.
    wall: wall seconds of the `runs` profiled calls.
    runs: how many calls were profiled.
    title: the report's heading.
    plain: wall seconds of `runs` calls without the profiler (None: not measured).
    top: rows per table.

  Returns:
    The markdown text.
  """
  total = sum(op.seconds for op in ops) or 1e-12
  kinds, parts, threads, names = (collections.Counter() for _ in range(4))
  for op in ops:
    kinds[op_kind(op.name)] += op.seconds
    parts[model_part(sources.get(op.name, ""))] += op.seconds
    threads[op.thread] += op.seconds
    names[f"`{op.name}` ({model_part(sources.get(op.name, ''))})"] += op.seconds
  untraced = (f"; {1e3 * plain / runs:.1f} ms each without the profiler, which stretches "
              f"the run {wall / plain:.2f}×" if plain else "")
  lines = [f"## {title}", "",
           f"{runs} runs, {1e3 * wall / runs:.1f} ms each (wall){untraced}. Leaf ops sum to "
           f"{1e3 * total / runs:.1f} ms per run over {len(threads)} runtime thread(s)."]
  lines += [""] + _table("By op kind", kinds, total, runs, top)
  lines += _table("By model part", parts, total, runs, top)
  lines += ["### By thread", "", "| thread | ms per run | busy |", "|---|---|---|"]
  for i, (_, seconds) in enumerate(threads.most_common()):
    lines.append(f"| {i} | {1e3 * seconds / runs:.1f} | {100 * seconds / wall:.0f}% |")
  lines += [""] + _table("Largest ops", names, total, runs, top)
  return "\n".join(lines)


def profile_program(program: str, shape: bench.Shape, scheme: str, batch: int, length: int,
                    runs: int, *, seeds_config: str = "ablation", num_seeds: int = 3) -> str:
  """Compiles `program` (one of `PROGRAMS`), profiles it and returns the report."""
  where = f"jax {jax.__version__}, {jax.device_count()} {jax.default_backend()} device(s)"
  if program == "seeds":
    reports = []
    for n, step in bench.compile_seeds_steps(seeds_config, num_seeds,
                                             dtype=shape.dtype).items():
      ops, _, wall, plain = profile(step.run, runs)
      path, arg = bench.config_spec(seeds_config)
      title = (f"seeds: {n} of {num_seeds}, {path}{':' + arg if arg else ''}, batch "
               f"{'x'.join(map(str, step.batch['inputs'].shape))}, {shape.dtype}; {where}")
      reports.append(report(ops, op_sources(step.compiled.as_text()), wall, runs, title=title,
                            plain=plain))
    return "\n\n".join(reports)
  if program == "train":
    target = bench.compile_train_step(shape, scheme, batch, length)
  elif program == "decode":
    target = bench.compile_cached_decode(shape, scheme, batch, length, full_length=True)
  else:
    raise ValueError(f"unknown program {program!r}: one of {', '.join(PROGRAMS)}")
  ops, _, wall, plain = profile(target.run, runs)
  title = (f"{program}: {scheme}, L = {length}, batch {batch}, d_model {shape.d_model}, "
           f"{shape.num_heads} heads of {shape.head_dim}, {shape.num_encoder_layers} + "
           f"{shape.num_decoder_layers} layers, d_ff {shape.d_ff}, {shape.dtype}; {where}")
  return report(ops, op_sources(target.compiled.as_text()), wall, runs, title=title,
                plain=plain)


def main(argv: Sequence[str]) -> None:
  """`python -m benchmarks.profile [--program train|decode] [--scheme t5] [--out FILE]`."""
  if len(argv) > 1:
    raise app.UsageError(f"unexpected arguments: {argv[1:]}")
  f = flags.FLAGS
  shape = bench.Shape(d_model=f.d_model, num_heads=f.num_heads, head_dim=f.head_dim,
                      d_ff=f.d_ff, num_encoder_layers=f.num_layers,
                      num_decoder_layers=f.num_layers, vocab_size=f.vocab_size, dtype=f.dtype)
  text = profile_program(f.program, shape, f.scheme, f.batch, f.length, f.runs,
                         seeds_config=f.seeds_config, num_seeds=f.num_seeds)
  if f.out:
    with open(f.out, "w") as out:
      out.write(text + "\n")
  print(text)


def _define_flags() -> None:
  """The flags of `main`; only a run as a program defines them (importers get none)."""
  default = bench.Shape()
  flags.DEFINE_enum("program", "train", PROGRAMS, "What to profile.")
  flags.DEFINE_string("scheme", "t5", "A registered positional scheme.")
  flags.DEFINE_integer("length", 64, "Source and target length L.")
  flags.DEFINE_integer("batch", 64, "Batch size.")
  flags.DEFINE_integer("runs", 5, "Profiled runs (after one warm-up).")
  flags.DEFINE_integer("d_model", default.d_model, "Model width.")
  flags.DEFINE_integer("num_heads", default.num_heads, "Attention heads.")
  flags.DEFINE_integer("head_dim", default.head_dim, "Width of each head.")
  flags.DEFINE_integer("num_layers", default.num_encoder_layers,
                       "Encoder and decoder layers (each).")
  flags.DEFINE_integer("d_ff", default.d_ff, "MLP width.")
  flags.DEFINE_integer("vocab_size", default.vocab_size, "Vocabulary size.")
  flags.DEFINE_enum("dtype", default.dtype, ("float32", "bfloat16"),
                    "Compute dtype (`seeds`: replaces the config's model.dtype).")
  flags.DEFINE_string("seeds_config", "ablation", "`seeds`: an argument of configs/default.py, "
                      "or a config file `path.py[:arg]`.")
  flags.DEFINE_integer("num_seeds", 3, "`seeds`: replicas of the vmapped step (against 1).")
  flags.DEFINE_string("out", None, "Also write the report to this markdown file.")


if __name__ == "__main__":
  _define_flags()
  app.run(main)
