"""Trains a model: `python train.py --config configs/default.py --workdir runs/demo`.

Overrides: `--config configs/default.py:scheme=shaw,task=reverse` (the config's
arguments) and `--config.model.num_heads=4` (any key). A workdir with checkpoints
of the same run is resumed.
"""

from absl import app
from absl import flags
from absl import logging
from ml_collections import config_flags

from relpos_jax import train_lib

_CONFIG = config_flags.DEFINE_config_file("config", None, "Experiment config file.",
                                          lock_config=True)
_WORKDIR = flags.DEFINE_string("workdir", None, "Where checkpoints and metrics go.")
flags.mark_flags_as_required(["config", "workdir"])


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f"unexpected arguments: {argv[1:]}")
  logging.set_verbosity(logging.INFO)
  # Orbax logs every checkpoint write at INFO; keep its warnings, drop the chatter.
  logging.get_absl_logger().addFilter(
      lambda r: r.levelno >= logging.WARNING or "/orbax/" not in r.pathname)
  train_lib.train_and_evaluate(_CONFIG.value, _WORKDIR.value)


if __name__ == "__main__":
  app.run(main)
