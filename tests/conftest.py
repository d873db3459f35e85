"""Test-session settings: cheaper XLA compiles, and compiled programs shared across tests.

The tests' models are tiny, so compiling, not running, is most of their time:

* XLA:CPU at backend optimization level 0 compiles about a third faster, and
  without its new fusion emitters (`--xla_cpu_use_fusion_emitters=false`: the
  older elemental emitters) the suite compiles about a quarter faster again
  (measured on a quiet VM, `pytest -m "not slow" -n 2`: 276 s -> 209 s with an
  empty compile cache, 152 s -> 141 s with a warm one).
* JAX's persistent compilation cache (a directory of serialized executables keyed
  by the program, the compile options and the jax version) lets a test reuse a
  program that another test, another xdist worker or a `train.py` subprocess
  already compiled: every test builds its step functions anew, so the in-memory
  jit cache alone never hits across tests. The directory is
  `.pytest_cache/xla` (kept between local runs; a clean clone starts empty);
  `RELPOS_TEST_XLA_CACHE=` (empty) turns it off.

Results stay float32 and every parity test compares two computations of the same
session, so nothing a test checks depends on these settings. They are set before
anything imports jax, as environment variables, so the subprocesses that tests
start inherit them.
"""

import os
import pathlib

import pytest

FAST_COMPILE_FLAGS = ("--xla_backend_optimization_level=0 "
                      "--xla_llvm_disable_expensive_passes=true "
                      "--xla_cpu_use_fusion_emitters=false")
CACHE_DIR = pathlib.Path(__file__).resolve().parent.parent / ".pytest_cache" / "xla"

if "xla_backend_optimization_level" not in os.environ.get("XLA_FLAGS", ""):
  os.environ["XLA_FLAGS"] = f"{os.environ.get('XLA_FLAGS', '')} {FAST_COMPILE_FLAGS}".strip()

_cache = os.environ.get("RELPOS_TEST_XLA_CACHE", str(CACHE_DIR))
if _cache:
  os.environ.setdefault("JAX_COMPILATION_CACHE_DIR", _cache)
  # Tiny programs compile in well under JAX's default 1 s threshold; cache them all.
  # (Caching only those over 0.5 s, to skip writing the thousands of single primitives
  # that eager code compiles, was no faster cold and a third slower warm: quick loop,
  # quiet VM, 207 s / 192 s against 209 s / 141 s.)
  os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0")
  os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES", "0")

from relpos_jax import provenance  # noqa: E402 (after the XLA settings above)

# Files whose tests run longest (subprocesses, training), in that order. xdist's workers
# take tests in collection order, round-robin at first, then as each finishes; starting
# these first spreads them over the workers and leaves the many short tests to fill
# in, instead of one worker running a minute-long test alone at the end.
LONGEST_FIRST = ("multihost_test.py", "train_main_test.py", "benchmarks_test.py",
                 "eval_main_test.py", "sweep_test.py", "train_lib_test.py", "evaluate_test.py")


def pytest_collection_modifyitems(items):
  """Runs the files of LONGEST_FIRST first (stable: the order inside a file is kept)."""
  rank = {name: i for i, name in enumerate(LONGEST_FIRST)}
  items.sort(key=lambda item: rank.get(item.path.name, len(rank)))


@pytest.fixture(autouse=True)
def _a_clean_tree(monkeypatch):
  """Storing records refuses a checkout with uncommitted changes; the tests store records
  from whatever checkout runs them, so they see it as clean (provenance_test checks the
  refusal on a repository of its own)."""
  monkeypatch.setattr(provenance, "is_dirty", lambda repo=None: False)
