"""The model of the comparison with DeepMind's randomized_positional_encodings (issue #14).

The Kazemnejad size the issue names: decoder-only, 4 layers, d_model 64, 4 heads
of 16, d_ff 256, dropout 0.1, batch 32, the copy task on lengths 1-20, so a
full batch is 20 input slots + SEP + 20 target tokens = 41 tokens per row (the
input padded to 20, the target slots `SEP t_0..t_19` to 21). Batches are padded
to the longest row's length bucket, and 20 is a bucket (the longest training
input): a batch of 32 rows from 1-20 is narrower only if no row reaches 16
tokens (a chance of (15/20)^32 ≈ 1e-4), and the benchmark checks the width of
the step-0 batch it times (`benchmarks/peers_rpe.py`), so the lengths stay 1-20
as the ablations train. `randomized.max_random_position` is 2048, their
`noise_max_length`. Used only by the benchmark (`python -m benchmarks.run
--parts=rpe`), through `benchmarks.schemes.compile_seeds_steps`:

  benchmarks/rpe_size.py:scheme=xl,randomized    # vs their NOISY_RELATIVE
  benchmarks/rpe_size.py:scheme=sinusoidal       # vs their SIN_COS
  benchmarks/rpe_size.py:scheme=xl,smoke         # 1 layer, d_model 16: tests, --quick

Arguments: those of configs/default.py (`scheme`, `randomized`, `smoke`, ...) and
`dropout` (0.1, their example's `dropout_prob`; `dropout=0` is the ablation tables'
setting: `--rpe_size_arg=dropout=0` times both sides without it);
`smoke` shrinks the model to 1 layer, d_model 16 (2 heads of 8, d_ff 64: still
4 × d_model, their `widening_factor`), batch 4, lengths 1-6.
"""

import ml_collections

from configs import default as _DEFAULT

from relpos_jax import architectures
from relpos_jax import config_args

MAX_RANDOM_POSITION = 2048  # their example's noise_max_length
ARGS = {**_DEFAULT.ARGS, "dropout": 0.1}  # their example's dropout_prob


def get_config(arg=None) -> ml_collections.ConfigDict:
  """configs/default.py's `ablation` config with the decoder-only model of the module doc."""
  args = config_args.parse(arg, ARGS)
  default_arg = ",".join(a for a in (arg or "").split(",") if a.split("=")[0].strip() != "dropout")
  config = _DEFAULT.get_config(f"ablation,{default_arg}")
  model = architectures.default_config("decoder_only")
  model.position = config.model.position
  config.model = model
  config.randomized.max_random_position = MAX_RANDOM_POSITION
  config.data.min_train_length = 1
  if args["smoke"]:
    model.update(num_layers=1, d_model=16, num_heads=2, head_dim=8, d_ff=64,
                 dropout_rate=args["dropout"])
    config.batch_size = 4
    config.data.max_train_length = 6
    return config
  model.update(num_layers=4, d_model=64, num_heads=4, head_dim=16, d_ff=256,
               dropout_rate=args["dropout"])
  config.batch_size = 32
  config.data.max_train_length = 20
  return config
