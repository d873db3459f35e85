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
start inherit them. JAX_PLATFORMS=cpu (unless set) says what the settings assume, in
the tests' processes and in every process they start (cli_harness.py's server, whose
children must see the platform it imported jax with).

Trained runs that tests only read, or copy before changing, are trained once per
session (`smoke_run`, `learned_smoke_run`): by whichever pytest-xdist worker asks
first, the others waiting on a file lock in the session's shared temporary folder.
"""

import fcntl
import os
import pathlib
import shutil

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
os.environ.setdefault("JAX_PLATFORMS", "cpu")
# tensorboardX sets this (to "auto", unless set) when it first writes an event file; set
# here, the test process's environment stays what cli_harness's server imported with, so
# the server is not started a second time after the first in-process training run.
os.environ.setdefault("CRC32C_SW_MODE", "auto")

from configs import default  # noqa: E402 (after the XLA settings above)
from relpos_jax import provenance  # noqa: E402
from relpos_jax import train_lib  # noqa: E402

import cli_harness  # noqa: E402 (pytest puts tests/ on the path)

# Files whose tests run longest (subprocesses, training), in that order. xdist's workers
# take tests in collection order, round-robin at first, then as each finishes; starting
# these first spreads them over the workers and leaves the many short tests to fill
# in, instead of one worker running a minute-long test alone at the end.
LONGEST_FIRST = ("multihost_test.py", "preemption_test.py", "lm_table_test.py",
                 "train_main_test.py", "added_seeds_test.py", "benchmarks_test.py",
                 "eval_main_test.py", "errors_test.py", "sweep_test.py", "train_lib_test.py",
                 "evaluate_test.py")


def pytest_collection_modifyitems(items):
  """Runs the files of LONGEST_FIRST first (stable: the order inside a file is kept)."""
  rank = {name: i for i, name in enumerate(LONGEST_FIRST)}
  items.sort(key=lambda item: rank.get(item.path.name, len(rank)))


def pytest_sessionfinish(session):
  """Stops this worker's cli_harness server, if a test started one."""
  del session
  cli_harness.close()


def _train_once(tmp_path_factory, name, config):
  """Trains `config` into `<session temp>/shared_runs/<name>` unless a worker already has.

  Returns the workdir. pytest-xdist's workers each have a temp folder of their own inside
  the session's; the run and its lock live in the session's, so all workers share one.
  """
  base = tmp_path_factory.getbasetemp()
  root = (base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base) / "shared_runs"
  root.mkdir(exist_ok=True)
  workdir, done = root / name, root / f"{name}.done"
  with open(root / f"{name}.lock", "w") as lock:
    fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes, or its process dies
    if not done.exists():
      shutil.rmtree(workdir, ignore_errors=True)  # what a worker that died here left
      train_lib.train_and_evaluate(config, str(workdir))
      done.touch()
  return str(workdir)


@pytest.fixture(scope="session")
def smoke_run(tmp_path_factory):
  """A finished `configs/default.py:smoke` run (T5 bias, 6 steps, checkpoints at 3 and 6,
  keeping both), trained once per session. Read it; copy it before changing it."""
  return _train_once(tmp_path_factory, "smoke", default.get_config("smoke"))


@pytest.fixture(scope="session")
def learned_smoke_run(tmp_path_factory):
  """A 2-replica smoke run of learned positions (3 steps) whose table has 16 rows: the smoke
  eval lengths 4 and 8 fit, 16 is not representable. Read it; copy it before changing it
  (an evaluation writes its report into the workdir)."""
  config = default.get_config("smoke,scheme=learned,num_seeds=2,steps=3")
  config.model.position.max_len = 16
  return _train_once(tmp_path_factory, "learned16", config)


@pytest.fixture(autouse=True)
def _a_clean_tree(monkeypatch):
  """Storing records refuses a checkout with uncommitted changes; the tests store records
  from whatever checkout runs them, so they see it as clean (provenance_test checks the
  refusal on a repository of its own)."""
  monkeypatch.setattr(provenance, "is_dirty", lambda repo=None: False)
