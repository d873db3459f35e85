"""Evaluates trained runs at every eval length and writes the tables and figures.

  python eval.py --workdir runs/demo                                # one run
  python eval.py --workdir runs/a --workdir runs/b --out runs/ab    # chosen runs
  python eval.py --sweep_dir runs/schemes                           # every run of a sweep
  python eval.py --sweep_dir runs/schemes --lengths 10,20,40,80 --num_examples 64 \
      --oracle_length
  python eval.py --workdir runs/rope --override model.position.scaling.type=yarn \
      --override model.position.scaling.factor=4.0           # eval-time RoPE scaling
  python eval.py --sweep_dir runs/shaw_terms --results_dir results/shaw_terms

Each run's report goes to `<workdir>/eval/`: extrapolation.jsonl (one record per
replica × length), extrapolation.md (tables), extrapolation.csv,
accuracy_vs_length.png, and the scheme's own figures (t5_bias.png,
shaw_key_norms.png, sinusoid.png). The comparison of all runs goes to --out
(default `<sweep_dir>/eval`; one --workdir: its own eval folder). The tables
are also printed. Runs without a checkpoint are skipped.

Protocol (relpos_jax/evaluate.py): each replica is evaluated at its checkpoint
with the best held-out validation exact match (--checkpoint last: the last);
records carry that score, the step, and whether the replica converged.
--dump_predictions writes predictions.jsonl beside the report. --results_dir
stores each run's records under results/<table>/ (what RESULTS.md is rendered
from).

A byte-level language-model run (data.task lm:..., configs/lm.py) is evaluated by
relpos_jax/lm_eval.py instead: bits per byte at each eval context on the same test
bytes (--num_examples: how many bytes), loss by position, lm_context.{jsonl,md,csv},
bpb_vs_context.png and loss_vs_position.png in `<workdir>/eval/` (--override: an
eval variant, e.g. RoPE scaling, in its subfolder); a passkey run: passkey.{jsonl,md,
csv} and passkey_heatmap.png. --lengths, --batch_size and --eval_seed do not apply
(ignored with a warning), --oracle_length, --random_positions and --dump_predictions
are refused. With --results_dir they are stored as seq2seq runs are (with --sweep_dir,
every eval-time variant of the sweep too), and the table's report is lm_report's.

eval.py only reads a workdir's checkpoints (read-only, without the trainer's
lock: it can run while the run still trains); an unreadable checkpoint is
skipped with a warning naming it. It
runs as one process. A mistake in the flags or a run that cannot be evaluated is
reported as one line (exit 1).
"""

import os

from absl import app
from absl import flags
from absl import logging

from relpos_jax import errors
from relpos_jax import lm_eval
from relpos_jax import log_setup
from relpos_jax import workdir as workdir_lib
from relpos_jax.experiments import lm_report
from relpos_jax.experiments import lm_runner
from relpos_jax.experiments import report
from relpos_jax.experiments import results
from relpos_jax.experiments import runner
from relpos_jax.experiments import store
from relpos_jax.experiments import sweep
from relpos_jax.experiments import sweep_spec

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
    "each eval set with this many; SCAN/TFDS take a seeded random sample (--eval_seed) of this "
    "many of each length (default: the whole test split).")
_ORACLE_LENGTH = flags.DEFINE_bool(
    "oracle_length", False, "Also decode with the true target length imposed (EOS forbidden "
    "before it, forced at it) and report oracle_exact_match / oracle_token_accuracy.")
_EVAL_SEED = flags.DEFINE_integer("eval_seed", 0, "Seed of the random sample when an eval set "
                                  "is cut to --num_examples (recorded in every record).")
_CHECKPOINT = flags.DEFINE_enum("checkpoint", None, list(runner.CHECKPOINT_RULES),
                                "Which checkpoint of each replica: best (held-out validation "
                                "exact match) or last (default: the config's eval_checkpoint, "
                                "else best).")
_DUMP = flags.DEFINE_bool("dump_predictions", False, "Also write predictions.jsonl: every "
                          "example's run, seed, length, input, target, output, exact and "
                          "first wrong position.")
_OVERRIDE = flags.DEFINE_multi_string(
    "override", [], "key=value: change each run's config at evaluation only (e.g. "
    "model.position.scaling.type=yarn on a RoPE run); the run is named <run>@<overrides>.")
_RANDOM_POSITIONS = flags.DEFINE_bool(
    "random_positions", False, "Decode at one random sorted sample of positions per batch from "
    "[0, randomized.max_random_position) instead of 0..L-1 (Ruoss et al. 2023's evaluation); "
    "the run is named <run>@random_positions.")
_ALLOW_DIRTY = sweep_spec.define_allow_dirty_flag()
_RESULTS_DIR = flags.DEFINE_string("results_dir", None, "Also store each run's records in this "
                                   "table folder (results/<table>) and write its report.")
_BATCH_SIZE = flags.DEFINE_integer("batch_size", None,
                                   "Decoding batch size (default: each run's eval_batch_size).")


def _parse_lengths(values: list[str] | None) -> list[int] | None:
  """`--lengths 10,20` as positive integers (None: each run's config)."""
  if not values:
    return None
  bad = [v for v in values if not v.strip().isdigit() or int(v) < 1]
  if bad:
    raise errors.UserError(f"--lengths: {', '.join(map(repr, bad))} not a positive integer; "
                           "give a comma list such as --lengths 10,20,40")
  return [int(v) for v in values]


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f"unexpected arguments: {argv[1:]}")
  if bool(_WORKDIR.value) == bool(_SWEEP_DIR.value):
    raise app.UsageError("pass --workdir (repeatable) or --sweep_dir, not both")
  if _WORKDIR.value and len(_WORKDIR.value) > 1 and not (_OUT.value or _RESULTS_DIR.value):
    raise app.UsageError("several --workdir: pass --out for the comparison report (each run's "
                         "own report goes to <workdir>/eval)")
  log_setup.setup()
  with errors.user_errors(FileNotFoundError):
    workdirs = _WORKDIR.value or sweep.run_dirs(_SWEEP_DIR.value)
  out = _OUT.value or _RESULTS_DIR.value or os.path.join(_SWEEP_DIR.value or workdirs[0], "eval")
  lengths = _parse_lengths(_LENGTHS.value)
  options = dict(lengths=lengths, batch_size=_BATCH_SIZE.value, num_examples=_NUM_EXAMPLES.value,
                 oracle_length=_ORACLE_LENGTH.value, eval_seed=_EVAL_SEED.value,
                 checkpoint=_CHECKPOINT.value, dump_predictions=_DUMP.value,
                 overrides=_OVERRIDE.value, random_positions=_RANDOM_POSITIONS.value)
  with errors.user_errors(ValueError, FileNotFoundError):
    is_lm = lm_eval.is_lm_run(workdirs[0])  # byte-level LMs: bits per byte by context
    if is_lm and not _RESULTS_DIR.value:
      print(lm_report.any_markdown(lm_runner.evaluate_runs(workdirs, out, **options)))
      return
    if _RESULTS_DIR.value:
      names = workdir_lib.run_names(workdirs)
      variants = {}
      if _SWEEP_DIR.value:  # the table lists the sweep's runs in order, trained or not
        meta = workdir_lib.read_json(os.path.join(_SWEEP_DIR.value, sweep.SWEEP_FILE))
        if os.path.exists(sweep_spec.split_config_spec(meta["config"])[0]):
          variants = sweep.eval_variants(meta["config"],
                                         sweep_spec.expand(*sweep_spec.load_sweep(meta["config"])))
        else:
          logging.warning("%s is gone: its runs' eval-time variants are not evaluated",
                          meta["config"])
        store.write_table_meta(_RESULTS_DIR.value, meta["config"],
                                 [r["name"] for r in meta["runs"]], variants)
      # LM runs too: runner.evaluate_runs hands them to lm_runner, and the table's
      # report is lm_report's when its records are LM records.
      records = sweep.evaluate_into_results(workdirs, names, _RESULTS_DIR.value,
                                            variants=variants, allow_dirty=_ALLOW_DIRTY.value,
                                            **options)
      results.write_table_report(_RESULTS_DIR.value)
      if is_lm:
        print(lm_report.any_markdown(records))
        return
    else:
      records = runner.evaluate_runs(workdirs, out, **options)
  print(report.markdown(records))
  logging.info("wrote %s", ", ".join(os.path.join(out, f) for f in report.REPORT_FILES.values()))


if __name__ == "__main__":
  errors.run(main)
