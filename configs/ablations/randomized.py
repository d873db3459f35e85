"""Every scheme with and without randomized positions; mirrors Ruoss et al. 2023, Table 1.

Ruoss et al. ("Randomized Positional Encodings Boost Length Generalization of
Transformers") compare each encoding with and without randomized positions.
With `randomized.enabled`, each training sequence of length L gets sorted
positions sampled from [0, MAX_RANDOM_POSITION) instead of 0..L-1, so every
position value up to the longest eval length (80) is seen in training;
validation and evaluation: see "Budget" below. A learned table needs a row per
position, so its `max_len` is MAX_RANDOM_POSITION in both arms (one change between
the arms).
Each example draws a sorted uniform sample of exactly its own length (input and
target separately; `positions.randomized.sample_positions`), as Ruoss et al. do.
Evaluated at random positions, each example's positions are drawn by the same
sampler as in training, for its own real input and target lengths, with a key that
folds in the seed, over `randomized.eval_draws` = 8 draws (docs/evaluation.md).
Copy and reverse, train lengths 1-20, eval to 80, 3 seeds per run; runs are named
`<scheme>+<task>` and `<scheme>+randomized+<task>`.

Budget: both arms train the same 5,000 steps of 64 (twice the ablation size's
2,500: at 2,500 steps the absolute schemes had not converged at random positions,
results/randomized/superseded/notes.md), so "randomization helps / costs" compares
equal budgets. Every run's convergence mark is decided by validation at the
positions its row is decoded at: a run that trained at random positions is
validated at random positions (checkpoint choice and its `@random_positions` row)
and at 0..L-1 for its 0..L-1 row.

  python train.py --config configs/ablations/randomized.py --workdir runs/randomized \
      --results_dir results/randomized

No run is copied from another table (none trains 5,000 steps with these settings).
Expected runtime on 2 CPU cores: ~20 min per 5,000-step 3-seed run, plus ~1 min per
evaluation at 0..L-1 and ~8 min at random positions (8 draws): 40 runs (10 schemes ×
2 tasks × 2 arms), ~17 h. Arguments: those of configs/default.py (`steps` sets the
budget of both arms; default RANDOMIZED_STEPS).
"""

import ml_collections

from configs import default as _DEFAULT

from relpos_jax import config_args
from relpos_jax import positions

MAX_RANDOM_POSITION = 256  # > the longest padded eval sequence (128), as the trainer requires
RANDOMIZED_STEPS = 5000  # both arms: 2x the ablation size, where sinusoidal/learned converge


def get_config(arg=None) -> ml_collections.ConfigDict:
  """configs/default.py at the ablation size, 3 seeds, 5,000 steps, randomized range set."""
  args = config_args.parse(arg, _DEFAULT.ARGS)
  steps = "" if args["steps"] or args["smoke"] else f"steps={RANDOMIZED_STEPS},"
  config = _DEFAULT.get_config(f"num_seeds=3,ablation,{steps}{arg or ''}")
  config.randomized.enabled = False
  config.randomized.max_random_position = MAX_RANDOM_POSITION
  return config


TASKS = ("copy", "reverse")


def get_sweep(arg=None) -> list[dict]:
  """Task-major: each registered scheme, randomized off then on, at one budget."""
  runs = []
  for task in TASKS:
    for name in positions.SCHEMES:
      position = positions.default_config(name)
      if "max_len" in position:  # a learned table: a row for every sampled position
        position.max_len = MAX_RANDOM_POSITION
      runs += [{"model.position": position, "data.task": task},  # trains on 0..L-1
               {"model.position": position, "randomized.enabled": True, "data.task": task}]
  return runs
