"""Which dots of a compiled program run in bf16, and how fast each dot form is on this machine.

    .venv/bin/python -m benchmarks.dots                  # both parts, ~1 min on 2 cores
    .venv/bin/python -m benchmarks.dots --parts=hlo      # only the HLO counts

`count_dots` reads a compiled program's HLO text: every `dot` (inside fusions too)
by its operand dtypes, and how many of the f32 ones have an operand that is a
`convert` from bf16 (a dot the program meant in bf16 that XLA:CPU converted to f32).
`time_forms` times each dot form of `relpos_jax.dots`' module docstring alone,
jitted, bf16 x bf16 -> f32 against f32 x f32.
"""

from __future__ import annotations

import collections
import itertools
import re
import time

from absl import app
from absl import flags
import jax
import jax.numpy as jnp
import numpy as np


def _define_flags() -> None:
  """The command line (defined only when run as a program: importers get no flags)."""
  flags.DEFINE_list("parts", ["hlo", "forms"], "hlo (converted dots), forms (timings)")
  flags.DEFINE_integer("size", 1024, "m = k = n of the timed dots")
  flags.DEFINE_integer("runs", 7, "timed runs per form (median)")
  flags.DEFINE_list("schemes", ["t5"], "schemes whose train step's dots are counted")

_INSTR = re.compile(r"^\s*(?:ROOT\s+)?%([\w.\-]+) = (\w+)\[[^\]]*\](?:\{[^}]*\})? (\w[\w\-]*)\((.*)$")


def _parse(hlo_text: str):
  """`{computation: {instr: (dtype, op, args, called computation)}}` and fusion callers."""
  comps: dict[str, dict[str, tuple]] = {}
  callers: dict[str, tuple[str, list[str]]] = {}  # called computation -> (caller, operands)
  comp = None
  for line in hlo_text.splitlines():
    if not line.startswith(" ") and line.rstrip().endswith("{"):
      comp = line.split()[1] if line.startswith("ENTRY") else line.split()[0]
      comp = comp.lstrip("%")
      comps[comp] = {}
      continue
    m = _INSTR.match(line)
    if m and comp is not None:
      name, dtype, op, rest = m.groups()
      args = re.findall(r"%([\w.\-]+)", rest.split(")")[0])
      called = re.search(r"calls=%([\w.\-]+)", rest)
      param = re.match(r"(\d+)\)", rest) if op == "parameter" else None
      comps[comp][name] = (dtype, op, args, called and called.group(1),
                           param and int(param.group(1)))
      if called:
        callers[called.group(1)] = (comp, args)
  return comps, callers


def _from_bf16(comps, callers, comp, name, depth=0) -> bool:
  """Whether value `name` of `comp` is a convert of a bf16 value (through copies, fusions)."""
  if depth > 16 or name not in comps.get(comp, {}):
    return False
  dtype, op, args, called, param = comps[comp][name]
  if op == "convert":
    return bool(args) and _dtype(comps, callers, comp, args[0]) == "bf16"
  if op in ("bitcast", "copy", "transpose", "reshape"):
    return any(_from_bf16(comps, callers, comp, a, depth + 1) for a in args)
  if op == "fusion" and called:
    root = list(comps[called])[-1]  # HLO text lists a computation's ROOT last
    return _from_bf16(comps, callers, called, root, depth + 1)
  if op == "parameter" and comp in callers:
    caller, operands = callers[comp]
    return param < len(operands) and _from_bf16(comps, callers, caller, operands[param], depth + 1)
  return False


def _dtype(comps, callers, comp, name) -> str:
  """The dtype of value `name` in `comp`."""
  return comps.get(comp, {}).get(name, ("?",))[0]


def count_dots(hlo_text: str) -> dict[str, int]:
  """Dots of compiled HLO text by operand dtypes, and the f32 dots fed by a convert from bf16.

  Args:
    hlo_text: `compiled.as_text()`.

  Returns:
    `{"bf16 x bf16": n, "f32 x f32": n, ..., "converted": n}`; `converted` counts f32
    dots with an operand that is a `convert` of a bf16 value (followed through
    bitcasts, copies, transposes, fusion roots and fusion parameters): dots the
    program asked for in bf16 that XLA:CPU runs in f32.
  """
  comps, callers = _parse(hlo_text)
  counts: collections.Counter = collections.Counter()
  for comp, instrs in comps.items():
    for dtype, op, args, _, _ in instrs.values():
      if op != "dot":
        continue
      types = [_dtype(comps, callers, comp, a) for a in args[:2]]
      counts[" x ".join(types)] += 1
      if types == ["f32", "f32"] and any(_from_bf16(comps, callers, comp, a) for a in args[:2]):
        counts["converted"] += 1
  return dict(counts)


def train_step_hlo(arch: str = "encoder_decoder", scheme: str = "t5", dtype: str = "bfloat16",
                   vmapped: bool = True, d_model: int = 32) -> str:
  """Compiled HLO of `train_lib`'s step for a small model (vmapped over one seed or not)."""
  from relpos_jax import architectures, optim, positions, train_lib  # pylint: disable=g-import-not-at-top
  from relpos_jax.positions import randomized  # pylint: disable=g-import-not-at-top
  config = architectures.default_config(arch)
  config.update(d_model=d_model, num_heads=2, head_dim=d_model // 2, d_ff=2 * d_model,
                dtype=dtype)
  config.position = positions.default_config(scheme)
  model = architectures.make_model(config, vocab_size=13)
  tx, schedule = optim.make_optimizer(num_steps=10)
  rng = np.random.default_rng(0)
  batch = {"inputs": jnp.asarray(rng.integers(3, 13, (4, 7)), jnp.int32),
           "targets": jnp.asarray(rng.integers(3, 13, (4, 5)), jnp.int32)}
  step = train_lib.make_train_step(model, tx, schedule, label_smoothing=0.0,
                                   randomized=randomized.RandomizedPositions())
  state = jax.eval_shape(lambda: train_lib.init_state(model, tx, 0, batch))
  if vmapped:
    add = lambda x: jax.ShapeDtypeStruct((1,) + x.shape, x.dtype)
    return jax.jit(jax.vmap(step)).lower(
        jax.tree_util.tree_map(add, state), jax.tree_util.tree_map(add, batch),
        jax.ShapeDtypeStruct((1,), jnp.int32)).compile().as_text()
  return jax.jit(step).lower(state, batch, jnp.int32(0)).compile().as_text()


# (name, lhs shape, rhs shape, dimension numbers); n = m = k = size, batched forms B·H = 64.
def _forms(s):
  b = 64
  return [("mk,kn", (s, s), (s, s), (((1,), (0,)), ((), ()))),
          ("mk,nk", (s, s), (s, s), (((1,), (1,)), ((), ()))),
          ("km,kn (weight gradient)", (s, s), (s, s), (((0,), (0,)), ((), ()))),
          ("bqe,bke->bqk (attention, E=64)", (b, s // 4, 64), (b, s // 4, 64),
           (((2,), (2,)), ((0,), (0,)))),
          ("bqk,bke->bqe (attention, E=64)", (b, s // 4, s // 4), (b, s // 4, 64),
           (((2,), (1,)), ((0,), (0,))))]


def time_forms(size: int, runs: int) -> list[dict]:
  """Median time and GFLOP/s of each dot form, bf16 x bf16 -> f32 and f32 x f32 -> f32."""
  rng = np.random.default_rng(0)
  rows = []
  for name, ls, rs, dn in _forms(size):
    flops = 2 * np.prod(ls) * rs[-1 if dn[0][1] == (len(rs) - 2,) else -2]
    for dtype in (jnp.float32, jnp.bfloat16):
      lhs = jnp.asarray(rng.normal(size=ls), dtype)
      rhs = jnp.asarray(rng.normal(size=rs), dtype)
      f = jax.jit(lambda a, b, dn=dn: jax.lax.dot_general(a, b, dn,
                                                          preferred_element_type=jnp.float32))
      hlo = f.lower(lhs, rhs).compile().as_text()
      f(lhs, rhs).block_until_ready()
      times = []
      for _ in range(runs):
        t = time.perf_counter()
        f(lhs, rhs).block_until_ready()
        times.append(time.perf_counter() - t)
      t = float(np.median(times))
      rows.append({"form": name, "dtype": jnp.dtype(dtype).name, "ms": 1e3 * t,
                   "gflops": flops / t / 1e9, "dots": count_dots(hlo)})
  return rows


def main(argv):
  del argv
  fv = flags.FLAGS
  if "hlo" in fv.parts:
    print("| program | dots by operand dtype | converted from bf16 |\n|---|---|---|")
    for arch, scheme, vmapped in itertools.product(("encoder_decoder", "decoder_only"),
                                                 fv.schemes, (False, True)):
      counts = count_dots(train_step_hlo(arch, scheme, vmapped=vmapped))
      converted = counts.pop("converted", 0)
      print(f"| {arch} {scheme} bf16 train step{' (vmapped)' if vmapped else ''} | "
            f"{', '.join(f'{k}: {v}' for k, v in sorted(counts.items()))} | {converted} |")
  if "forms" in fv.parts:
    print(f"\n| form ({fv.size}) | dtype | ms | GFLOP/s | dots |\n|---|---|---|---|---|")
    for r in time_forms(fv.size, fv.runs):
      print(f"| {r['form']} | {r['dtype']} | {r['ms']:.2f} | {r['gflops']:.0f} | {r['dots']} |")


if __name__ == "__main__":
  _define_flags()
  app.run(main)
