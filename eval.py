"""Evaluates trained runs at every eval length and writes the tables and figures.

  python eval.py --workdir runs/demo                                # one run
  python eval.py --workdir runs/a --workdir runs/b --out runs/ab    # chosen runs
  python eval.py --sweep_dir runs/schemes                           # every run of a sweep
  python eval.py --sweep_dir runs/schemes --lengths 10,20,40,80 --num_examples 64 \
      --oracle_length

Each run's report goes to `<workdir>/eval/`: extrapolation.jsonl (one record per
replica × length), extrapolation.md (tables), extrapolation.csv,
accuracy_vs_length.png, and the scheme's own figures (t5_bias.png,
shaw_key_norms.png, sinusoid.png). The comparison of all runs goes to --out
(default `<sweep_dir>/eval`; one --workdir: its own eval folder). The tables
are also printed. Runs without a checkpoint are skipped.

eval.py only reads a workdir's checkpoints (read-only: it can run while the run
still trains) and evaluates the newest readable one (an unreadable newer one is
named in a warning). It runs as one process. A mistake in the flags or a run
that cannot be evaluated is reported as one line (exit 1).
"""

import os

from absl import app
from absl import flags
from absl import logging

from relpos_jax import errors
from relpos_jax import evaluate
from relpos_jax import log_setup
from relpos_jax import sweep
from relpos_jax import tables

_WORKDIR = flags.DEFINE_multi_string("workdir", None, "A training workdir to evaluate "
                                     "(repeat the flag for several runs).")
_SWEEP_DIR = flags.DEFINE_string("sweep_dir", None,
                                 "A sweep directory: every subfolder with config.json is a run.")
_OUT = flags.DEFINE_string("out", None, "Folder of the comparison report (default: "
                           "<sweep_dir>/eval, or the single workdir's eval folder; required "
                           "with several --workdir).")
_LENGTHS = flags.DEFINE_list("lengths", None, "Eval lengths (default: each run's config).")
_NUM_EXAMPLES = flags.DEFINE_integer(
    "num_examples", None, "Examples per length (default: the config's). Synthetic tasks rebuild "
    "each eval set with this many; SCAN/TFDS take the first this many of each length.")
_ORACLE_LENGTH = flags.DEFINE_bool(
    "oracle_length", False, "Also decode with the true target length imposed (EOS forbidden "
    "before it, forced at it) and report oracle_exact_match / oracle_token_accuracy.")
_BATCH_SIZE = flags.DEFINE_integer("batch_size", None,
                                   "Decoding batch size (default: each run's eval_batch_size).")


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f"unexpected arguments: {argv[1:]}")
  if bool(_WORKDIR.value) == bool(_SWEEP_DIR.value):
    raise app.UsageError("pass --workdir (repeatable) or --sweep_dir, not both")
  if _WORKDIR.value and len(_WORKDIR.value) > 1 and not _OUT.value:
    raise app.UsageError("several --workdir: pass --out for the comparison report (each run's "
                         "own report goes to <workdir>/eval)")
  log_setup.setup()
  with errors.user_errors(FileNotFoundError):
    workdirs = _WORKDIR.value or sweep.run_dirs(_SWEEP_DIR.value)
  out = _OUT.value or os.path.join(_SWEEP_DIR.value or workdirs[0], "eval")
  lengths = [int(n) for n in _LENGTHS.value] if _LENGTHS.value else None
  with errors.user_errors(ValueError, FileNotFoundError):
    records = evaluate.evaluate_runs(workdirs, out, lengths=lengths,
                                     batch_size=_BATCH_SIZE.value,
                                     num_examples=_NUM_EXAMPLES.value,
                                     oracle_length=_ORACLE_LENGTH.value)
  print(tables.report(records))
  logging.info("wrote %s", ", ".join(os.path.join(out, f) for f in evaluate.REPORT_FILES.values()))


if __name__ == "__main__":
  errors.run(main)
