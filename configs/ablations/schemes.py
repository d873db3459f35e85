"""Every registered positional scheme on copy, reverse and SCAN's length split.

The main extrapolation table, after Kazemnejad et al. 2023 ("The Impact of
Positional Encoding on Length Generalization in Transformers"): on copy, trained
on lengths <= 20 and tested to 40. Their models are decoder-only (see
kazemnejad.py for that comparison and their published numbers); this table's is
configs/default.py's encoder-decoder (`model.arch`).

Runs: each scheme of `positions.SCHEMES` (a newly registered scheme appears
without editing this file) × {copy, reverse, SCAN length split}, named
`<scheme>+<task>` (`t5+copy`, `shaw+reverse`, `rope+scan_length`), 30 runs for the
10 schemes registered today. Each run trains 3 seeds together as replicas
(`num_seeds=3`) at configs/default.py's `ablation` size: 2,500 steps of batch 64,
the same model for every task. Copy and reverse train on lengths 1-20 and are
evaluated at 5-80 (up to 4x), 128 examples per length; SCAN trains on commands
with <= 22 actions (10% of them held out for validation) and is evaluated on the
whole test split (24-48 actions), its data section taken from configs/scan_length.py.

  python train.py --config configs/ablations/schemes.py --workdir runs/schemes \
      --results_dir results/schemes
  python train.py --config configs/ablations/schemes.py:smoke --workdir /tmp/schemes \
      --runs t5+copy,sinusoidal+copy      # seconds per run

Writes each run's records to results/schemes/ as it finishes (without --results_dir:
runs/schemes/eval/ at the end). Expected runtime: ~10-20 min per 3-seed run on 2 CPU
cores at the ablation size, ~8 h for the 30 runs; `--sweep_shard i/n` splits them
over n processes.

Arguments: those of configs/default.py (e.g. `num_seeds=1`, `steps=500`, `smoke`);
`scheme` and `task` are set per run.
"""

import ml_collections

from configs import default as _DEFAULT
from configs import scan_length as _SCAN_LENGTH

from relpos_jax import positions

SYNTHETIC_TASKS = ("copy", "reverse")


def get_config(arg=None) -> ml_collections.ConfigDict:
  """configs/default.py at the ablation size with 3 seeds (the user's `arg` comes last and wins)."""
  return _DEFAULT.get_config(f"num_seeds=3,ablation,{arg or ''}")


def get_sweep() -> list[dict]:
  """Task-major: every scheme on copy, then on reverse, then on SCAN's length split."""
  scan_data = _SCAN_LENGTH.get_config().data  # replaces the synthetic data section whole
  tasks = [{"data.task": task} for task in SYNTHETIC_TASKS] + [{"data": scan_data}]
  return [{"model.position": positions.default_config(name), **task}
          for task in tasks for name in positions.SCHEMES]
