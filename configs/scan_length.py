"""SCAN's length split (Lake & Baroni 2018): train on commands whose action
sequences have <= 22 actions, test on those with >= 24 (up to 48).

SCAN is generated from its grammar (no download). Eval lengths are the target
(action) lengths of the test split, so every column of the table lies beyond
the training range. The model is deeper than the copy demo's (3 + 3 layers,
d_model 64, dropout 0.1) and trains longer (6000 steps of 64, ~23 epochs of the
~17k training commands).

  python train.py --config configs/scan_length.py --workdir runs/scan_t5
  python train.py --config configs/scan_length.py:scheme=shaw,num_seeds=3 --workdir runs/scan_shaw
  python eval.py --workdir runs/scan_t5 --workdir runs/scan_shaw --out runs/scan_eval
  python train.py --config configs/scan_length.py:smoke --workdir /tmp/scan_smoke   # seconds

Expected runtime on 2 CPU cores: ~20 min per seed for the 6000 steps (~5 steps/s),
plus about a minute for the eval over the ~4k test commands.

Arguments: those of configs/default.py (scheme, seed, num_seeds, steps,
randomized, smoke); `task` is scan.
"""

import ml_collections

from configs import default as _DEFAULT

from relpos_jax import config_args



def get_config(arg=None) -> ml_collections.ConfigDict:
  """The SCAN length-split config; `smoke` keeps default.py's tiny model and few steps."""
  args = config_args.parse(arg, _DEFAULT.ARGS)
  config = _DEFAULT.get_config(arg)
  config.data.task = "scan"
  config.data.scan_split = "length"
  if args["smoke"]:
    return config
  config.model.update(d_model=64, num_heads=4, head_dim=16, num_encoder_layers=3,
                      num_decoder_layers=3, d_ff=256, dropout_rate=0.1)
  config.optimizer.update(learning_rate=1e-3, warmup_steps=500)
  config.num_steps = args["steps"] or 6000
  config.eval_every = 2000
  config.checkpoint_every = 1000
  return config
