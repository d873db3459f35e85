"""Every registered positional scheme on the copy task: the main extrapolation table.

The base is configs/default.py (copy, train lengths 1-20, eval lengths 5-80),
with 3 seeds per scheme trained together as replicas (`num_seeds`). The sweep is
`positions.SCHEMES`, so a newly registered scheme appears without editing this file.

  python -m relpos_jax.sweep --config configs/ablations/schemes.py --sweep_dir runs/schemes
  python -m relpos_jax.sweep --config configs/ablations/schemes.py:smoke \
      --sweep_dir /tmp/schemes --runs t5,sinusoidal      # seconds per run

Writes runs/schemes/eval/{exact_match.md, errors.md, results.csv, accuracy_vs_length.png}.
Expected runtime on 2 CPU cores: ~8 min per scheme (2000 steps × 3 replicas, plus
eval), about 1 h for the 8 schemes registered today.

Arguments: those of configs/default.py (e.g. `task=reverse`, `num_seeds=1`,
`steps=500`, `smoke`); `scheme` is set per run.
"""

import os

import ml_collections

from relpos_jax import positions
from relpos_jax import sweep

_DEFAULT = sweep.load_module(os.path.join(os.path.dirname(__file__), "..", "default.py"))


def get_config(arg=None) -> ml_collections.ConfigDict:
  """configs/default.py's config with 3 seeds (the user's `arg` comes last and wins)."""
  return _DEFAULT.get_config(f"num_seeds=3,{arg or ''}")


def get_sweep() -> list[dict]:
  """One run per registered scheme, each with its default keys."""
  return [{"model.position": positions.default_config(name)} for name in positions.SCHEMES]
