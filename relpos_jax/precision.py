"""`model.dtype = "auto"`: bfloat16 where the backend runs bf16 matmuls fast, else float32.

bf16 pays only where the hardware multiplies bf16 natively: TPUs, GPUs, and CPUs
with AMX (Intel Sapphire Rapids and later: `amx_bf16` and `amx_tile` in
/proc/cpuinfo), where XLA:CPU's YNNPACK dots reach several times the float32 rate
(docs/performance.md). Elsewhere (a CPU without AMX, even one with AVX-512 BF16)
`auto` keeps float32, the precision every stored table was trained in. The choice
and its reason are logged once and written into each run's provenance
(`provenance.provenance()["precision"]`).
"""

from __future__ import annotations

import functools

from absl import logging
import jax

AMX_FLAGS = ("amx_bf16", "amx_tile")
CPUINFO = "/proc/cpuinfo"


def cpu_flags(path: str = CPUINFO) -> frozenset[str]:
  """The CPU feature flags listed in `path` (empty where it cannot be read, e.g. not Linux)."""
  try:
    with open(path) as f:
      for line in f:
        if line.startswith("flags"):
          return frozenset(line.split(":", 1)[1].split())
  except OSError:
    pass
  return frozenset()


def bf16_dots_fast(backend: str | None = None, flags: frozenset[str] | None = None
                   ) -> tuple[bool, str]:
  """Whether `backend` runs bf16 matmuls faster than float32, and why.

  Args:
    backend: a JAX backend name (default: `jax.default_backend()`).
    flags: CPU feature flags (default: `cpu_flags()`), read only for "cpu".

  Returns:
    `(fast, reason)`, the reason one line for the log and the run record.
  """
  backend = jax.default_backend() if backend is None else backend
  if backend in ("gpu", "cuda", "rocm", "tpu"):
    return True, f"backend {backend} has bf16 matmul units"
  if backend != "cpu":
    return False, f"backend {backend}: bf16 matmul speed unknown"
  flags = cpu_flags() if flags is None else flags
  missing = [f for f in AMX_FLAGS if f not in flags]
  if missing:
    return False, (f"CPU without AMX (no {', '.join(missing)} in {CPUINFO}): XLA:CPU's bf16 "
                   "dots are not faster than float32 there")
  return True, f"CPU with AMX ({', '.join(AMX_FLAGS)}): native bf16 dots"


@functools.lru_cache(maxsize=None)
def _auto() -> tuple[str, str]:
  """The dtype `auto` stands for on this process's backend, and why."""
  fast, reason = bf16_dots_fast()
  return ("bfloat16" if fast else "float32"), reason


@functools.lru_cache(maxsize=None)
def _log_auto() -> str:
  """Logs once, where a config resolves `auto`, what it means here; the dtype."""
  # Not logged by `record()`: every run record reads it, and a bf16 run's log saying
  # "auto means float32" reads as if the run were float32.
  name, reason = _auto()
  logging.info("model.dtype 'auto' means %s on this machine: %s", name, reason)
  return name


@functools.lru_cache(maxsize=None)
def _warn_named_bf16() -> str | None:
  """Warns once when a config names bfloat16 where bf16 dots are not fast; the warning."""
  fast, reason = bf16_dots_fast()
  if fast:
    return None
  # A table names its dtype (it must not mix precisions across machines), so a bf16
  # table trained here is right but slow: say so before hours of training, not after.
  message = ("model.dtype is 'bfloat16' but this machine has no fast bf16 matmuls (%s): "
             "the run computes in bf16 as configured, more slowly than float32 would (about "
             "1.2x on AMD EPYC Zen 3: benchmarks/records/zen_bf16)" % reason)
  logging.warning(message)
  return message


def resolve(name: str) -> str:
  """`name` with "auto" replaced by the dtype it stands for here (others unchanged).

  A named "bfloat16" is kept, with a one-time warning where bf16 dots are slow.
  """
  if name == "bfloat16":
    _warn_named_bf16()
  return _log_auto() if name == "auto" else name


def record() -> dict[str, str]:
  """`{"auto": dtype, "reason": ...}`: what `model.dtype = "auto"` means on this machine."""
  name, reason = _auto()
  return {"auto": name, "reason": reason}
