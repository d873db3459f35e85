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
Copy and reverse, train lengths 1-20, eval to 80, 3 seeds per run; runs are named
`<scheme>+<task>` and `<scheme>+randomized+<task>+num_steps=5000`.

Budget: the arm without randomization trains the ablation size's 2,500 steps of 64
(the schemes table's runs); the randomized arm trains twice as long
(RANDOMIZED_STEPS_FACTOR), because at 2,500 steps the absolute schemes had not
converged at random positions (sinusoidal 0.94, learned 0.75 held-out validation
exact match, still rising; results/randomized/notes.md). A run that trained at
random positions is validated at random positions, and evaluated both at 0..L-1 and
at random positions (`<run>@random_positions`).

  python train.py --config configs/ablations/randomized.py --workdir runs/randomized \
      --results_dir results/randomized

The runs without randomization are configured exactly as schemes.py's copy and
reverse runs (the range setting acts only when randomization is on), so a sweep with
`--results_dir` copies their records from results/schemes/ instead of training them
again; `learned`'s longer table makes its two runs differ, so they are trained.
Expected runtime on 2 CPU cores: ~10 min per 2,500-step 3-seed run and ~20 min per
5,000-step one, plus ~1 min per evaluation: 4 runs per registered scheme, of which 22
are trained (2 per scheme with randomization, plus learned's 2 without) while the
schemes table holds the other 18: ~7 h. Arguments: those of configs/default.py
(`steps` sets the base budget; the randomized arm trains twice that).
"""

import ml_collections

from configs import default as _DEFAULT

from relpos_jax import positions

MAX_RANDOM_POSITION = 256  # > the longest padded eval sequence (128), as the trainer requires
RANDOMIZED_STEPS_FACTOR = 2  # the randomized arm trains this many times the base budget


def get_config(arg=None) -> ml_collections.ConfigDict:
  """configs/default.py at the ablation size, 3 seeds, randomized range set (runs turn it on)."""
  config = _DEFAULT.get_config(f"num_seeds=3,ablation,{arg or ''}")
  config.randomized.enabled = False
  config.randomized.max_random_position = MAX_RANDOM_POSITION
  return config


TASKS = ("copy", "reverse")


def get_sweep(arg=None) -> list[dict]:
  """Task-major: each registered scheme, randomized off then on (with the longer budget)."""
  steps = RANDOMIZED_STEPS_FACTOR * get_config(arg).num_steps
  runs = []
  for task in TASKS:
    for name in positions.SCHEMES:
      position = positions.default_config(name)
      if "max_len" in position:  # a learned table: a row for every sampled position
        position.max_len = MAX_RANDOM_POSITION
      runs += [{"model.position": position, "data.task": task},  # trains on 0..L-1
               {"model.position": position, "randomized.enabled": True, "data.task": task,
                "num_steps": steps}]
  return runs
