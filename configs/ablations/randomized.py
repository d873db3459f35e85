"""Every scheme with and without randomized positions; mirrors Ruoss et al. 2023, Table 1.

Ruoss et al. ("Randomized Positional Encodings Boost Length Generalization of
Transformers") compare each encoding with and without randomized positions.
With `randomized.enabled`, each training sequence of length L gets sorted
positions sampled from [0, MAX_RANDOM_POSITION) instead of 0..L-1, so every
position value up to the longest eval length (80) is seen in training;
evaluation uses 0..L-1. A learned table needs a row per position, so its
`max_len` is MAX_RANDOM_POSITION in both arms (one change between the arms).
Copy task, train lengths 1-20, eval to 80, 3 seeds per run.

  python train.py --config configs/ablations/randomized.py --workdir runs/randomized

Expected runtime: ~2 min per run on 2 CPU cores at the ablation size (2 runs per
registered scheme: 16 today). Arguments: those of configs/default.py.
"""

import os

import ml_collections

from relpos_jax import positions
from relpos_jax import sweep

_DEFAULT = sweep.load_module(os.path.join(os.path.dirname(__file__), "..", "default.py"))
MAX_RANDOM_POSITION = 256  # > the longest padded eval sequence (128), as the trainer requires


def get_config(arg=None) -> ml_collections.ConfigDict:
  """configs/default.py at the ablation size, 3 seeds, randomized range set (runs turn it on)."""
  config = _DEFAULT.get_config(f"num_seeds=3,ablation,{arg or ''}")
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
