"""Every scheme with and without randomized positions (Ruoss et al. 2023).

With `randomized.enabled`, each training sequence of length L gets sorted
positions sampled from [0, MAX_RANDOM_POSITION) instead of 0..L-1, so every
position value up to the longest eval length (80) is seen in training;
evaluation uses 0..L-1. A learned table needs a row per position, so its
`max_len` is MAX_RANDOM_POSITION in both arms (one change between the arms).

  python -m relpos_jax.sweep --config configs/ablations/randomized.py \
      --sweep_dir runs/randomized

Expected runtime on 2 CPU cores: ~8 min per run (2000 steps × 3 replicas, plus
eval), ~2 h 15 min for 8 schemes × 2. Arguments: those of configs/default.py.
"""

import os

import ml_collections

from relpos_jax import positions
from relpos_jax import sweep

_DEFAULT = sweep.load_module(os.path.join(os.path.dirname(__file__), "..", "default.py"))
MAX_RANDOM_POSITION = 256  # > the longest padded eval sequence (128), as the trainer requires


def get_config(arg=None) -> ml_collections.ConfigDict:
  """configs/default.py with 3 seeds and the randomized range set (off: runs switch it on)."""
  config = _DEFAULT.get_config(f"num_seeds=3,{arg or ''}")
  config.randomized.enabled = False
  config.randomized.max_random_position = MAX_RANDOM_POSITION
  return config


def get_sweep() -> list[dict]:
  """Each registered scheme, randomized off (run `<scheme>`) then on (`<scheme>+randomized`)."""
  runs = []
  for name in positions.SCHEMES:
    position = positions.default_config(name)
    if "max_len" in position:  # a learned table: a row for every sampled position
      position.max_len = MAX_RANDOM_POSITION
    runs += [{"model.position": position},  # the base config trains on 0..L-1
             {"model.position": position, "randomized.enabled": True}]
  return runs
