"""Decoder-only models × 5 schemes × {copy, reverse, SCAN cutoff 25}: Kazemnejad et al. 2023.

Mirrors the main comparison of Kazemnejad et al. 2023 ("The Impact of Positional
Encoding on Length Generalization in Transformers", NeurIPS, Fig. 1 and the
per-task plots): decoder-only Transformers with NoPE, T5's relative bias, ALiBi,
RoPE and sinusoidal absolute positions, trained on short instances and tested on
longer ones; exact match on the lengths beyond training, mean of 3 seeds. Their
numbers (T5-base-sized models; read off their figures):

    task            NoPE   T5 bias  ALiBi  RoPE  sinusoidal
    copy            .99    .77      .29    .00   .00
    reverse         .23    .24      .17    .08   .02
    SCAN cutoff 25  .80    .80      .44    .28   .06

Here: `model.arch = decoder_only` over `input SEP target EOS` (loss on the target,
positions running on from the input), 4 layers, d_model 64, 4 heads, at
configs/default.py's `ablation` size (1,000 steps of batch 32, 3 seeds trained
together). Copy and reverse train on lengths 1-20 and are evaluated at 5-40 (64
examples per length); SCAN uses the length_cutoff_25 split (train <= 25 actions,
test 26-48) and is evaluated on its test split.

  python train.py --config configs/ablations/kazemnejad.py --workdir runs/kazemnejad
  python train.py --config configs/ablations/kazemnejad.py:smoke --workdir /tmp/kaz \
      --runs none+copy                       # seconds

15 runs. Expected runtime: ~3 min per run on 2 CPU cores (the 4-layer model over
input and target is about twice the encoder-decoder's step), ~45 min in all
(`--sweep_shard i/n` splits them over n processes). Arguments: those of
configs/default.py (`num_seeds`, `steps`, `smoke`, ...); scheme and task are set
per run.
"""

import os

import ml_collections

from relpos_jax import architectures
from relpos_jax import config_args
from relpos_jax import positions
from relpos_jax import sweep

_DEFAULT = sweep.load_module(os.path.join(os.path.dirname(__file__), "..", "default.py"))
SCHEMES = ("none", "t5", "alibi", "rope", "sinusoidal")
SYNTHETIC_TASKS = ("copy", "reverse")
SCAN_SPLIT = "length_cutoff_25"


def get_config(arg=None) -> ml_collections.ConfigDict:
  """configs/default.py at the ablation size with a 4-layer decoder-only model, 3 seeds."""
  smoke = config_args.parse(arg, _DEFAULT.ARGS)["smoke"]
  config = _DEFAULT.get_config(f"num_seeds=3,ablation,{arg or ''}")
  model = architectures.default_config("decoder_only")
  model.update(d_model=config.model.d_model, num_heads=config.model.num_heads,
               head_dim=config.model.head_dim, d_ff=config.model.d_ff,
               dropout_rate=config.model.dropout_rate, num_layers=1 if smoke else 4)
  model.position = config.model.position
  config.model = model
  if not smoke:
    config.data.eval_lengths = (5, 10, 15, 20, 25, 30, 35, 40)
  return config


def get_sweep() -> list[dict]:
  """Task-major: the five schemes on copy, then reverse, then SCAN's cutoff-25 split."""
  scan_data = get_config().data  # replaces the synthetic data section whole
  scan_data.update(task="scan", scan_split=SCAN_SPLIT)
  tasks = [{"data.task": task} for task in SYNTHETIC_TASKS] + [{"data": scan_data}]
  return [{"model.position": positions.default_config(name), **task}
          for task in tasks for name in SCHEMES]
