"""Evaluates trained runs at every eval length and writes the comparison tables.

  python eval.py --sweep_dir runs/schemes                  # every run of a sweep
  python eval.py --workdirs runs/a,runs/b --out runs/ab    # chosen runs
  python eval.py --sweep_dir runs/schemes --lengths 10,20,40,100

Writes records.jsonl, exact_match.md, errors.md, results.csv and
accuracy_vs_length.png to --out (default `<sweep_dir>/eval`, or `<first
workdir>/eval`) and prints the tables. Runs without a checkpoint are skipped.
"""

import os

from absl import app
from absl import flags
from absl import logging

from relpos_jax import evaluate
from relpos_jax import log_setup
from relpos_jax import sweep
from relpos_jax import tables

_WORKDIRS = flags.DEFINE_list("workdirs", None, "Training workdirs to evaluate.")
_SWEEP_DIR = flags.DEFINE_string("sweep_dir", None,
                                 "A sweep directory: every subfolder with config.json is a run.")
_OUT = flags.DEFINE_string("out", None, "Report folder (default: <sweep_dir>/eval or "
                           "<first workdir>/eval).")
_LENGTHS = flags.DEFINE_list("lengths", None, "Eval lengths (default: each run's config).")
_BATCH_SIZE = flags.DEFINE_integer("batch_size", None,
                                   "Decoding batch size (default: each run's eval_batch_size).")


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f"unexpected arguments: {argv[1:]}")
  if bool(_WORKDIRS.value) == bool(_SWEEP_DIR.value):
    raise app.UsageError("pass exactly one of --workdirs and --sweep_dir")
  log_setup.setup()
  workdirs = _WORKDIRS.value or sweep.run_dirs(_SWEEP_DIR.value)
  out = _OUT.value or os.path.join(_SWEEP_DIR.value or workdirs[0], "eval")
  lengths = [int(n) for n in _LENGTHS.value] if _LENGTHS.value else None
  records = evaluate.evaluate_runs(workdirs, out, lengths=lengths, batch_size=_BATCH_SIZE.value)
  print(tables.exact_match_table(records))
  print(tables.error_table(records))
  logging.info("wrote %s", ", ".join(os.path.join(out, f) for f in evaluate.REPORT_FILES.values()))


if __name__ == "__main__":
  app.run(main)
