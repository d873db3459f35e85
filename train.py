"""Trains a model, or every run of an ablation sweep.

  python train.py --config configs/default.py --workdir runs/demo
  python train.py --config configs/default.py:scheme=shaw,task=reverse --workdir runs/x \
      --config.model.num_heads=4
  python train.py --config configs/ablations/schemes.py --sweep_dir runs/schemes

`--config FILE:ARGS` passes ARGS to the file's get_config; `--config.KEY=VALUE`
overrides any key. A workdir with checkpoints of the same run is resumed. With
`--sweep_dir`, every run of the config's get_sweep() is trained into its own
subfolder (finished runs skipped), then all are evaluated and tabulated, like
`python -m relpos_jax.sweep`.
"""

from absl import app
from absl import flags
from ml_collections import config_flags

from relpos_jax import log_setup
from relpos_jax import sweep
from relpos_jax import tables
from relpos_jax import train_lib

_CONFIG = config_flags.DEFINE_config_file("config", None, "Experiment config file.",
                                          lock_config=True)
_WORKDIR = flags.DEFINE_string("workdir", None, "Where checkpoints and metrics go.")
_SWEEP_DIR = flags.DEFINE_string("sweep_dir", None,
                                 "Train every run of the config's get_sweep() in here instead.")
flags.mark_flags_as_required(["config"])
flags.register_validator("workdir", lambda w: bool(w) != bool(flags.FLAGS.sweep_dir),
                         "pass exactly one of --workdir and --sweep_dir")


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f"unexpected arguments: {argv[1:]}")
  log_setup.setup()
  if _SWEEP_DIR.value:
    records = sweep.run_sweep(flags.FLAGS["config"].config_filename, _SWEEP_DIR.value,
                              base_config=_CONFIG.value)
    print(tables.exact_match_table(records))
    print(tables.error_table(records))
  else:
    train_lib.train_and_evaluate(_CONFIG.value, _WORKDIR.value)


if __name__ == "__main__":
  app.run(main)
