"""T5's bucketing: num_buckets × max_distance on the copy task.

The table: where do more buckets stop helping extrapolation? Train lengths 1-20,
eval to 160 (8x). max_distance 16 puts every training distance beyond 16 into
one shared bucket; 32 and 128 give long distances their own (log-spaced)
buckets, which training up to 20 never fills.

The grid is {8, 16, 32, 64} × {16, 32, 128}, keeping only the pairs T5's formula
accepts: the causal decoder's exact range is num_buckets / 2, and max_distance
must exceed it. That drops (32, 16), (64, 16) and (64, 32): 9 runs.

  python train.py --config configs/ablations/t5_buckets.py --workdir runs/t5_buckets \
      --results_dir results/t5_buckets

Expected runtime: ~20 min per 3-seed run at the ablation size (2,500 steps of 64),
measured on 2 CPU cores shared with other jobs; less alone (9 runs).
Arguments: those of configs/default.py.
"""

import itertools

import ml_collections

from configs import default as _DEFAULT

from relpos_jax import config_args

NUM_BUCKETS = (8, 16, 32, 64)
MAX_DISTANCE = (16, 32, 128)


def get_config(arg=None) -> ml_collections.ConfigDict:
  """configs/default.py with the T5 scheme and 3 seeds (the user's `arg` wins)."""
  config = _DEFAULT.get_config(f"scheme=t5,num_seeds=3,ablation,{arg or ''}")
  if not config_args.parse(arg, _DEFAULT.ARGS)["smoke"]:
    config.data.eval_lengths = (5, 10, 15, 20, 30, 40, 60, 80, 120, 160)  # up to 8x
  return config


def get_sweep() -> list[dict]:
  """The valid (num_buckets, max_distance) pairs (max_distance > num_buckets / 2)."""
  return [{"model.position.num_buckets": n, "model.position.max_distance": d}
          for n, d in itertools.product(NUM_BUCKETS, MAX_DISTANCE) if d > n // 2]
