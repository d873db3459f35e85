"""Trains a model, or every run of an ablation sweep.

  python train.py --config configs/default.py --workdir runs/demo
  python train.py --config configs/default.py:scheme=shaw,task=reverse --workdir runs/x \
      --config.model.num_heads=4
  python train.py --config configs/ablations/schemes.py --workdir runs/schemes
  python train.py --config configs/ablations/schemes.py --workdir runs/schemes --sweep_shard 0/4

`--config FILE:ARGS` passes ARGS to the file's get_config; `--config.KEY=VALUE`
overrides any key. A workdir with checkpoints of the same run is resumed.

If the config file defines get_sweep() (configs/ablations/), the workdir is the
sweep directory: every run is trained into `<workdir>/<run name>/` (finished
runs skipped, interrupted ones resumed), then all are evaluated and tabulated
into `<workdir>/eval/`, as `python -m relpos_jax.sweep` does. `--runs a,b` trains
only those runs; `--sweep_shard i/n` only runs i, i+n, i+2n, ... (see
relpos_jax/sweep.py); command-line overrides apply to every run after the sweep's
own settings. `--results_dir results/<table>` evaluates each run as soon as it is
trained and stores its records there (see relpos_jax/results.py); runs already
stored are skipped, so a table can be completed a few runs at a time, and a run
that another table beside it stored with an identical config is copied from there
instead of trained again (`--noreuse` trains it). `--split_seeds` (with
--results_dir) trains each run one seed at a time and stores each seed's records
as it finishes, for runs longer than a working session (relpos_jax/sweep.py);
`--seeds_per_part 2` trains two consecutive seeds together in each part instead.
`--config.num_seeds=N` (with --results_dir) gives a run stored with fewer seeds
its missing ones, trained one at a time and appended (docs/evaluation.md, "More
seeds for a stored run").

Multi-process runs (README, "Multi-host"): `--multihost=auto` (default) joins one
when JAX_COORDINATOR_ADDRESS, JAX_NUM_PROCESSES and JAX_PROCESS_ID are set or in
a SLURM job step of several tasks (not with --sweep_shard: shards are
independent); `on` requires one, `off` never joins.

A mistake in the config, flags or workdir is reported as one line (exit 1);
RELPOS_TRACEBACK=1 adds the traceback. A run holds its workdir's lock: a second
train.py on it is refused (exit 1). SIGTERM or SIGINT (Ctrl-C) finish the step
in flight, save a checkpoint at it and exit 75, also in the middle of a sweep;
a second signal exits at once. A failed write (full disk) exits 74. See
docs/training.md, "Preemption, locks, exit codes".
"""

from absl import app
from absl import flags
from ml_collections import config_flags

from relpos_jax import distributed
from relpos_jax import errors
from relpos_jax import log_setup
from relpos_jax import preemption
from relpos_jax import train_lib
from relpos_jax.experiments import anatomy_table
from relpos_jax.experiments import lm_report
from relpos_jax.experiments import sweep
from relpos_jax.experiments import sweep_spec
from relpos_jax.experiments import tables

_CONFIG = config_flags.DEFINE_config_file("config", None, "Experiment or sweep config file.",
                                          lock_config=True)
_WORKDIR = flags.DEFINE_string("workdir", None, "Where checkpoints and metrics go (for a sweep "
                               "config: the sweep directory, one subfolder per run).")
_RUNS = flags.DEFINE_list("runs", None, "Sweep configs only: train only these runs.")
_RESULTS_DIR = flags.DEFINE_string(
    "results_dir", None, "Sweep configs only: evaluate each run as soon as it is trained and "
    "store its records in this table folder (results/<table>); runs stored there are skipped.")
_REUSE = flags.DEFINE_bool(
    "reuse", True, "With --results_dir: copy a run that another table beside it (results/*) "
    "stored with an identical config instead of training it again.")
_SPLIT_SEEDS = sweep_spec.define_split_seeds_flag()
_SEEDS_PER_PART = sweep_spec.define_seeds_per_part_flag()
_ALLOW_DIRTY = sweep_spec.define_allow_dirty_flag()
_SHARD = sweep_spec.define_shard_flag()
_MULTIHOST = distributed.define_flag()
flags.mark_flags_as_required(["config", "workdir"])


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f"unexpected arguments: {argv[1:]}")
  log_setup.setup()
  config_file = flags.FLAGS["config"].config_filename
  with errors.user_errors():
    distributed.initialize(_MULTIHOST.value, sweep_shard=bool(_SHARD.value))
  with errors.user_errors(FileNotFoundError):
    is_sweep = sweep_spec.is_sweep_config(config_file)
  with preemption.handling_signals():  # a signal between a sweep's runs stops it too
    _train(config_file, is_sweep)


def _train(config_file: str, is_sweep: bool) -> None:
  """Trains the run, or the sweep's runs."""
  if is_sweep:
    overrides = config_flags.get_override_values(flags.FLAGS["config"])
    records = sweep.run_sweep(config_file, _WORKDIR.value, base_config=_CONFIG.value,
                              only=_RUNS.value, shard=_SHARD.value, command_line=overrides,
                              results_dir=_RESULTS_DIR.value, reuse=_REUSE.value,
                              split_seeds=_SPLIT_SEEDS.value,
                              seeds_per_part=_SEEDS_PER_PART.value,
                              allow_dirty=_ALLOW_DIRTY.value)
    if records and lm_report.is_lm_records(records):
      print(lm_report.any_markdown(records))
    elif records:
      print(tables.exact_match_table(records))
      print(anatomy_table.error_table(records))
    return
  if _RUNS.value or _SHARD.value or _RESULTS_DIR.value or _SPLIT_SEEDS.value:
    raise app.UsageError(f"--runs, --sweep_shard, --results_dir and --split_seeds need a sweep "
                         f"config; {config_file} "
                         "defines no get_sweep() (see configs/ablations/)")
  train_lib.train_and_evaluate(_CONFIG.value, _WORKDIR.value)


if __name__ == "__main__":
  errors.run(main)
