"""The methods the field uses now to extrapolate: decoder-only, 6 schemes × {copy, reverse,
addition with index hints}, plus randomized positions and eval-time RoPE scaling.

Training-time methods (one run each, 3 seeds trained together):

- schemes: NoPE, RoPE, ALiBi, KERPLE-log (Chi et al. 2022), FIRE (Li et al. 2023) and
  T5's bias, each on copy, reverse and `add_index_hints` (Zhou et al. 2024: reversed
  digits with index hints; see relpos_jax/data/tasks.py);
- randomized positions (Ruoss et al. 2023) with FIRE and with RoPE on addition, the
  combination Zhou et al. found to extrapolate (FIRE + randomized + index hints).

Eval-time methods (no training: rows evaluated from the RoPE runs' checkpoints, whose
parameters are unchanged by scaling): position interpolation (Chen et al. 2023),
dynamic NTK and YaRN (Peng et al. 2023), scaled from the longest training sequence to
the longest eval sequence (factor 2; `rope_eval_overrides(task)` gives the keys). The
sweep's `get_eval_variants` declares them, so `--results_dir` evaluates and stores them
as rows `rope+copy@pi`, `rope+copy@dynamic_ntk`, `rope+copy@yarn` (and the same for
reverse and addition) as soon as the RoPE run is trained. By hand, e.g. for copy:

  python eval.py --workdir runs/extrapolation_methods/rope+copy \
      --override model.position.scaling.type=linear \
      --override model.position.scaling.factor=2.0
  python eval.py --workdir runs/extrapolation_methods/rope+copy \
      --override model.position.scaling.type=dynamic_ntk \
      --override model.position.scaling.factor=2.0 \
      --override model.position.scaling.original_max_position=41 \
      --override model.position.scaling.eval_length=81
  python eval.py --workdir runs/extrapolation_methods/rope+copy \
      --override model.position.scaling.type=yarn \
      --override model.position.scaling.factor=2.0 \
      --override model.position.scaling.original_max_position=41

and the same for rope+reverse (same numbers) and rope+add_index_hints
(original_max_position=82, eval_length=162). Lengths here count decoder positions:
a copy example of n tokens spans positions 0..2n (input, SEP, target), so training
(n <= 20) reaches 41 positions and the longest eval (n = 40) 81; addition trains on
inputs of up to 41 tokens (82 positions with the 40-token target and SEP) and is
evaluated up to 81 (162). dynamic_ntk uses the static eval_length (a length-dependent
base would rotate cached keys inconsistently; see positions/rope.py).

Setup: configs/ablations/kazemnejad.py's decoder-only model and budget (4 layers,
d_model 128, 4 heads × 32, 6,000 steps of batch 64 at lr 1e-3, every checkpoint kept
so eval picks each seed's best validation checkpoint). Copy and reverse train on
lengths 1-20 and are evaluated at every length 21-40 (and 5-20); addition trains on
inputs of 5-41 tokens (2-20 digits in the two operands together; odd lengths, 2 tokens
per digit plus "+") and is evaluated at 11-81 (up to 40 digits, 2x). Runs that do not
converge in distribution are marked † in the table.

  python train.py --config configs/ablations/extrapolation_methods.py --workdir runs/extrapolation_methods \
      --results_dir results/extrapolation_methods
  python train.py --config configs/ablations/extrapolation_methods.py:smoke \
      --workdir /tmp/extrapolation --runs fire+copy           # seconds

20 runs, 6 of them shared: NoPE, T5 and ALiBi on copy and reverse are configured
exactly as kazemnejad.py's, so with `--results_dir` a sweep copies their records from
results/kazemnejad/ when that table has stored them. Expected runtime on 2 CPU cores
(the stored runs' `train_seconds`): 44-122 min of training per 3-seed run for copy and
reverse, 113-188 min for addition (sequences of up to 83 tokens instead of 41), plus
validation and eval. An addition run is longer than a working session, so train those
with `--split_seeds` (each seed alone: 37-67 min of training per seed in the stored
runs, stored as it finishes and merged once all three are; see docs/evaluation.md;
`--seeds_per_part 2` trains two seeds together per part, where a session is long
enough for it):

  python train.py --config configs/ablations/extrapolation_methods.py --workdir runs/extrapolation_methods \
      --results_dir results/extrapolation_methods --split_seeds

`--sweep_shard i/n` splits the runs over n processes and `--results_dir` lets the
table be completed a few runs (or seeds) at a time.
Arguments: those of configs/default.py (`num_seeds`, `steps`, `smoke`, ...); scheme
and task are set per run.
"""

from typing import Any

import ml_collections

from configs.ablations import kazemnejad as _KAZEMNEJAD

from relpos_jax import positions

SCHEMES = ("none", "rope", "alibi", "kerple", "fire", "t5")
SYNTHETIC_TASKS = ("copy", "reverse")
ADDITION = "add_index_hints"
RANDOMIZED_SCHEMES = ("fire", "rope")  # with randomized positions, on addition
MAX_RANDOM_POSITION = 256  # >= the longest padded addition sequence (128 + 128 slots)
ROPE_SCALING_FACTOR = 2.0  # longest eval sequence / longest training sequence, every task


def get_config(arg=None) -> ml_collections.ConfigDict:
  """kazemnejad.py's decoder-only setup (3 seeds, its size); randomized range set, off."""
  config = _KAZEMNEJAD.get_config(arg)
  config.randomized.max_random_position = MAX_RANDOM_POSITION
  return config


def addition_data() -> ml_collections.ConfigDict:
  """The addition runs' data section: index hints, inputs of 5-41 tokens, eval up to 81."""
  data = get_config().data  # replaces the synthetic data section whole
  data.update(task=ADDITION, vocab_size=10, min_train_length=5, max_train_length=41,
              eval_lengths=(11, 21, 31, 41, 51, 61, 71, 81))
  return data


def rope_eval_overrides(task: str) -> dict[str, dict[str, Any]]:
  """The eval-time RoPE rows of `task`: label -> `model.position.scaling.*` overrides.

  Positions a sequence spans: input, SEP and target (copy/reverse: 2n + 1 for n
  tokens; addition: n input tokens + SEP + n - 1 target tokens = 2n).
  """
  data = addition_data() if task == ADDITION else get_config().data
  span = (lambda n: 2 * n) if task == ADDITION else (lambda n: 2 * n + 1)
  train, longest = span(data.max_train_length), span(max(data.eval_lengths))
  key = "model.position.scaling."
  return {
      "pi": {key + "type": "linear", key + "factor": ROPE_SCALING_FACTOR},
      "dynamic_ntk": {key + "type": "dynamic_ntk", key + "factor": ROPE_SCALING_FACTOR,
                           key + "original_max_position": train, key + "eval_length": longest},
      "yarn": {key + "type": "yarn", key + "factor": ROPE_SCALING_FACTOR,
                    key + "original_max_position": train},
  }


def get_eval_variants(config: ml_collections.ConfigDict) -> dict[str, dict[str, Any]]:
  """The eval-time rows of a run (`sweep.eval_variants`): RoPE scaling of the plain RoPE runs."""
  if config.model.position.name != "rope" or config.randomized.enabled:
    return {}
  return rope_eval_overrides(config.data.task)


def get_sweep() -> list[dict]:
  """Task-major: the six schemes on copy, reverse and addition; then FIRE and RoPE randomized."""
  tasks = [{"data.task": task} for task in SYNTHETIC_TASKS] + [{"data": addition_data()}]
  runs = [{"model.position": positions.default_config(name), **task}
          for task in tasks for name in SCHEMES]
  runs += [{"model.position": positions.default_config(name), "data": addition_data(),
            "randomized.enabled": True} for name in RANDOMIZED_SCHEMES]
  return runs
