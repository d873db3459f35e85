"""Test-session settings: XLA compiles without LLVM's expensive optimizations.

The tests' models are tiny, so compiling, not running, is most of their time;
XLA:CPU at backend optimization level 0 compiles about a third faster. Results
stay float32 and every parity test compares two computations of the same
session, so nothing a test checks depends on the level. Set before anything
imports jax; subprocesses that tests start inherit it through the environment.
"""

import os

FAST_COMPILE_FLAGS = ("--xla_backend_optimization_level=0 "
                      "--xla_llvm_disable_expensive_passes=true")

if "xla_backend_optimization_level" not in os.environ.get("XLA_FLAGS", ""):
  os.environ["XLA_FLAGS"] = f"{os.environ.get('XLA_FLAGS', '')} {FAST_COMPILE_FLAGS}".strip()
