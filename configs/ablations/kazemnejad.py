"""Decoder-only models × 5 schemes × {copy, reverse, SCAN cutoff 25}: Kazemnejad et al. 2023.

Mirrors the main comparison of Kazemnejad et al. 2023 ("The Impact of Positional
Encoding on Length Generalization in Transformers", NeurIPS): decoder-only
Transformers with NoPE, T5's relative bias, ALiBi, RoPE and sinusoidal absolute
positions, trained on short instances and tested on longer ones. Their metric,
reproduced here: exact match pooled over every test example of every length
21-40 (the main table's `pooled (L, 2L]` column), 3 seeds. Their setup, matched where it
matters for the comparison: T5 bias with 32 buckets / max_distance 128, causal,
one table computed in layer 0 and shared by all layers (our default); RoPE
rotating 25% of each head (`fraction = 0.25`); SCAN's length_cutoff_25 split with
10% of the training commands held out for validation.

Their own numbers (McGill-NLP/length-generalization, results/len_gen_experiments.csv;
exact match pooled over lengths 21-40, 3 seeds; the copy variant with random
tokens, "cmc", is ours): t5-base size (T5-base configuration as a decoder only, about
107M parameters per an outside reading of the paper; ~110M by our count from their
config: 12 layers, d_model 768, d_ff 3072, tied 32,128-token embedding, no
cross-attention; about 135x this config's 0.79M): NoPE .63 (2 seeds),
T5 .93 (1 seed), sinusoidal .05, all 1.0 in distribution; their "xsmall" size
(3 layers, d_model 64, 2 heads, 65k steps): NoPE .016, T5 .073, sinusoidal .014,
in distribution .63 / .91 / .77 (not converged). RESULTS.md puts these beside ours.

Size here (DESIGN.md, "Calibration"): 4 layers, d_model 128, 4 heads × 32, d_ff 512,
batch 64, AdamW lr 1e-3 (500 warmup steps, cosine), 6,000 steps: NoPE and T5 reach
1.00 in distribution on copy at this size, which the d_model-64 ablation size does
not. Copy and reverse train on lengths 1-20 and are evaluated at every length 21-40
(128 examples each) plus 5, 10, 15, 20; SCAN on its whole test split (26-48 actions).

  python train.py --config configs/ablations/kazemnejad.py --workdir runs/kazemnejad \
      --results_dir results/kazemnejad
  python train.py --config configs/ablations/kazemnejad.py:smoke --workdir /tmp/kaz \
      --runs none+copy                       # seconds

15 runs (NoPE, T5 and ALiBi on copy and reverse are also extrapolation_methods.py's,
which copies their records from here). Expected runtime on 2 CPU cores: the 3-seed step
took 0.74 s at the longest training batch on a quiet VM (2026-12-02,
benchmarks/records/profiles/seeds_kazemnejad_bench.md),
so up to ~75 min per 3-seed run and ~18 h for the 15; `--sweep_shard i/n` splits them
over n processes, and `--results_dir` lets the table be completed a few runs at a time
(the sweep logs its pace and ETA after each run). Arguments: those of configs/default.py
(`num_seeds`, `steps`, `smoke`, ...); scheme and task are set per run.
"""

import ml_collections

from configs import default as _DEFAULT

from relpos_jax import architectures
from relpos_jax import config_args
from relpos_jax import positions

SCHEMES = ("none", "t5", "alibi", "rope", "sinusoidal")
SYNTHETIC_TASKS = ("copy", "reverse")
SCAN_SPLIT = "length_cutoff_25"


def get_config(arg=None) -> ml_collections.ConfigDict:
  """A 4-layer decoder-only model at the calibrated size (module doc), 3 seeds."""
  smoke = config_args.parse(arg, _DEFAULT.ARGS)["smoke"]
  config = _DEFAULT.get_config(f"num_seeds=3,ablation,{arg or ''}")
  model = architectures.default_config("decoder_only")
  model.position = config.model.position
  config.model = model
  if smoke:
    model.update(d_model=16, num_heads=2, head_dim=8, d_ff=32, num_layers=1, dropout_rate=0.0)
    return config
  model.update(d_model=128, num_heads=4, head_dim=32, d_ff=512, num_layers=4,
               dropout_rate=0.0)  # DESIGN.md's calibration: copy converges at this size
  config.num_steps = config_args.parse(arg, _DEFAULT.ARGS)["steps"] or 6000
  config.batch_size = 64
  config.optimizer.update(learning_rate=1e-3, warmup_steps=500)  # 1e-2 is unstable at d 128
  config.checkpoint_every = 1000
  config.keep_checkpoints = config.num_steps // config.checkpoint_every + 1  # all: pick by valid
  config.eval_every = config.num_steps
  config.data.eval_lengths = (5, 10, 15, 20) + tuple(range(21, 41))  # theirs: every 21-40
  config.data.eval_examples_per_length = 128
  return config


def get_sweep() -> list[dict]:
  """Task-major: the five schemes on copy, then reverse, then SCAN's cutoff-25 split."""
  scan_data = get_config().data  # replaces the synthetic data section whole
  scan_data.update(task="scan", scan_split=SCAN_SPLIT)
  tasks = [{"data.task": task} for task in SYNTHETIC_TASKS] + [{"data": scan_data}]
  return [{"model.position": position_config(name), **task} for task in tasks for name in SCHEMES]


def position_config(name: str) -> ml_collections.ConfigDict:
  """The scheme's config, set as Kazemnejad et al. set it."""
  position = positions.default_config(name)
  if name == "rope":
    position.fraction = 0.25  # their RoPE rotates a quarter of each head
  return position
