"""The LM experiment runner: checkpoint choice, whole LM runs, their reports and results/.

The library half (`relpos_jax.lm_eval`) scores one checkpoint at one eval
context; this module chooses each replica's checkpoint (lowest validation loss,
or 1 - passkey accuracy), evaluates every context of a run, and writes
`lm_report`'s files. `runner.evaluate_runs` hands LM runs to `evaluate_runs`
here, so a sweep or eval.py stores them under results/ as it does seq2seq runs
(`sweep.evaluate_into_results`; `results.write_table_report` renders the table).
"""

from __future__ import annotations

import dataclasses
import os
import time
from typing import Any, Sequence

from absl import logging
import jax
import ml_collections

from relpos_jax import architectures
from relpos_jax import config_args
from relpos_jax import evaluate
from relpos_jax import lm_eval
from relpos_jax import provenance
from relpos_jax import workdir as workdir_lib
from relpos_jax.data import corpus as corpus_lib
from relpos_jax.data import lm
from relpos_jax.data import passkey as passkey_lib
from relpos_jax.data import pipeline
from relpos_jax.data import vocab as vocab_lib
from relpos_jax.experiments import lm_report
from relpos_jax.experiments import report

Record = lm_eval.Record
CHECKPOINT_RULES = ("best", "last")


# --------------------------------------------------------------- whole runs

@dataclasses.dataclass
class LMEvalOptions:
  """What every run of one LM evaluation shares.

  Attributes:
    checkpoint: "best" (lowest validation loss at L) or "last"; None: "best".
    num_bytes: N (default: each run's data.eval_bytes).
    sliding_stride: S (None: each run's data.sliding_stride; 0: off).
    overrides: `key=value` config changes at evaluation only (an eval variant).
    variant: the label of the overrides in run names (default: the overrides).
    budget_mib: attention budget per forward pass.
  """
  checkpoint: str | None = None
  num_bytes: int | None = None
  sliding_stride: int | None = None
  overrides: Sequence[str] = ()
  variant: str | None = None
  budget_mib: float = lm_eval.DEFAULT_ATTENTION_BUDGET_MIB

  def __post_init__(self):
    if self.checkpoint is not None and self.checkpoint not in CHECKPOINT_RULES:
      raise ValueError(f"checkpoint must be one of {CHECKPOINT_RULES}, got {self.checkpoint!r}")
    if self.num_bytes is not None and self.num_bytes < 1:
      raise ValueError(f"num_bytes must be >= 1, got {self.num_bytes}")
    self.overrides = tuple(self.overrides)
    config_args.parse_overrides(self.overrides)


def _validation_score(model, params, dataset, budget_mib: float) -> float:
  """Lower is better: the validation loss (LM), or 1 - the validation passkey accuracy."""
  if isinstance(dataset, passkey_lib.PasskeyDataset):
    return 1.0 - lm_eval.passkey_validation_accuracy(model, params, dataset)
  return lm_eval.validation_loss(model, params, dataset, budget_mib)


def choose_checkpoint(workdir: str, config: ml_collections.ConfigDict, model,
                      dataset: lm.LMDataset, rule: str,
                      budget_mib: float) -> list[tuple[int, Any, float, int]]:
  """Per replica: (step, params, validation score there, best step by it) (`_validation_score`).

  Raises:
    FileNotFoundError: no checkpoint.
  """
  steps = workdir_lib.checkpoint_steps(workdir)
  if not steps:
    raise FileNotFoundError(f"no checkpoint in {workdir_lib.checkpoint_dir(workdir)}; "
                            "train first")
  if rule == "last":
    steps = steps[-1:]
  scored: list[list[tuple[int, Any, float]]] = [[] for _ in range(config.num_seeds)]
  for step in steps:
    try:
      _, params_N = workdir_lib.load_params(workdir, config, model, step=step)
    except workdir_lib.UnreadableCheckpoints as e:
      logging.warning("skipping an unreadable checkpoint: %s", e)
      continue
    for replica in range(config.num_seeds):
      params = jax.tree_util.tree_map(lambda x, i=replica: x[i], params_N)
      scored[replica].append((step, params, _validation_score(model, params, dataset,
                                                              budget_mib)))
  if not scored[0]:
    raise workdir_lib.UnreadableCheckpoints(f"no checkpoint of {workdir} can be read")
  out = []
  for replica_scores in scored:
    best = min(replica_scores, key=lambda s: (s[2], -s[0]))
    pick = best if rule == "best" else replica_scores[-1]
    out.append((pick[0], pick[1], pick[2], best[0]))
  return out


def evaluate_workdir(workdir: str, out_dir: str | None = None, *, run: str | None = None,
                     **options: Any) -> list[Record]:
  """Evaluates every replica of an LM run at every eval context; writes its report.

  The report (`lm_report.REPORT_FILES`: records, markdown and CSV tables, bits per
  byte against context, loss by position; passkey: `lm_report.PASSKEY_FILES`), and the
  figures the run's scheme offers of its first seed (`report.scheme_figures`: e.g. T5's
  learned bias, `t5_bias.png`), go to `out_dir` (default: the run's `workdir/eval/`, or
  its variant's subfolder).

  Args:
    workdir: a training workdir of an `lm:` run.
    out_dir: where the report goes.
    run: the run's name (default: the workdir's basename).
    **options: `LMEvalOptions` fields.

  Returns:
    One record per (replica, context[, sliding]): `lm_eval.evaluate_contexts`' keys plus
    run, scheme, task, seed, replica, step, checkpoint_rule, valid_loss,
    valid_bits_per_byte, best_valid_step, train_length, multiple, manifest,
    overrides, provenance.

  Raises:
    FileNotFoundError: no config.json or no checkpoint.
    ValueError: not an LM run; the corpus differs from the run's manifest; bad options.
  """
  opts = LMEvalOptions(**options)
  config = workdir_lib.load_config(workdir)
  if not lm_eval.is_lm_config(config):
    raise ValueError(f"{workdir} is not a language-model run (data.task "
                     f"{config.data.task!r}); evaluate it with runner.evaluate_workdir")
  name = run or os.path.basename(os.path.normpath(workdir))
  variant = ""
  if opts.overrides:
    config = config_args.apply_overrides(config, opts.overrides, what="eval override")
    variant = f"@{opts.variant or ','.join(opts.overrides)}"
  data = dict(config.data)
  if opts.sliding_stride is not None:
    data["sliding_stride"] = opts.sliding_stride
  dataset = pipeline.make_dataset(seed=config.seed, **data)  # checks the manifest
  saved = workdir_lib.vocab_path(workdir)
  if os.path.exists(saved) and vocab_lib.Vocab.load(saved) != dataset.vocab:
    raise ValueError(f"{saved} is not the byte vocabulary this code builds")
  model = architectures.make_model(config.model, vocab_size=dataset.vocab.size)
  rule = opts.checkpoint or "best"
  start = time.perf_counter()
  chosen = choose_checkpoint(workdir, config, model, dataset, rule, opts.budget_mib)
  base = {"run": name + variant, "scheme": config.model.position.name,
          "task": config.data.task, "train_length": dataset.train_length,
          "checkpoint_rule": rule, "overrides": list(opts.overrides),
          "manifest": corpus_lib.plain_json(dataset.manifest),
          "provenance": provenance.provenance()}
  records = []
  is_passkey = isinstance(dataset, passkey_lib.PasskeyDataset)
  for replica, (step, params, valid, best_step) in enumerate(chosen):
    seed = config.seed + replica
    replica_base = {**base, "seed": seed, "replica": replica, "step": step,
                    "best_valid_step": best_step}
    if is_passkey:
      replica_base["valid_passkey_accuracy"] = 1.0 - valid
      results = lm_eval.evaluate_passkey(model, params, dataset, budget_mib=opts.budget_mib)
    else:
      replica_base.update(valid_loss=valid, valid_bits_per_byte=lm_eval.bits_per_byte(valid))
      results = lm_eval.evaluate_contexts(model, params, dataset, num_bytes=opts.num_bytes,
                                  budget_mib=opts.budget_mib)
    for record in results:
      records.append({**replica_base, "multiple": record["context"] / dataset.train_length,
                      **record})
      value = (f"accuracy {record['accuracy']:.3f} at depth {record['depth']}" if is_passkey
               else f"{record['bits_per_byte']:.4f} bits/byte")
      logging.info("run %s seed %d context %d: %s", name + variant, seed, record["context"],
                   "n/a" if record["error"] else value)
  logging.info("evaluated %s in %s", name + variant,
               evaluate.format_seconds(time.perf_counter() - start))
  out = out_dir or workdir_lib.eval_dir(workdir, variant)
  if is_passkey:
    lm_report.write_passkey_report(records, out)
  else:
    lm_report.write_report(records, out)
  report.scheme_figures(model, chosen[0][1], config, out,
                        report.train_distance(model, dataset))
  return records


def evaluate_runs(workdirs: Sequence[str], out_dir: str | None, *,
                  names: Sequence[str] | None = None, on_run=None,
                  **options: Any) -> list[Record]:
  """`evaluate_workdir` of each run (own report in its eval folder), then their comparison.

  Args:
    workdirs: training workdirs of LM runs.
    out_dir: where the comparison report goes (None, or one run's own eval folder:
      only each run's own report).
    names: run names (default: `workdir_lib.run_names`).
    on_run: called as `on_run(name, workdir, records, seconds)` after each run.
    **options: `LMEvalOptions` fields; also the options `runner.evaluate_runs`
      takes, mapped where they mean something here (`num_examples`: num_bytes) and
      refused where they do not (oracle_length, random_positions, dump_predictions).

  Returns:
    Every run's records.
  """
  options = _lm_options(options)
  names = list(names) if names is not None else workdir_lib.run_names(workdirs)
  records = []
  own = set()
  for workdir, name in zip(workdirs, names):
    start = time.perf_counter()
    run_records = evaluate_workdir(workdir, run=name, **options)
    records += run_records
    own.add(os.path.abspath(workdir_lib.eval_dir(workdir)))
    if on_run is not None:
      on_run(run_records[0]["run"] if run_records else name, workdir, run_records,
             time.perf_counter() - start)
  if out_dir is not None and {os.path.abspath(out_dir)} != own:
    lm_report.write_reports(records, out_dir)
  return records


def _lm_options(options: dict[str, Any]) -> dict[str, Any]:
  """`runner.EvalOptions`-style keywords -> `LMEvalOptions` fields (ValueError if meaningless)."""
  options = dict(options)
  for key in ("oracle_length", "random_positions", "dump_predictions"):
    if options.pop(key, False):
      raise ValueError(f"{key} does not apply to a language-model run")
  num_examples = options.pop("num_examples", None)
  if num_examples is not None:
    options["num_bytes"] = num_examples
  for key in ("lengths", "batch_size", "eval_seed"):  # contexts and batches come from the run
    if options.pop(key, None) not in (None, 0):
      logging.warning("%s is ignored for language-model runs", key)
  return options
