"""The experiment runner: evaluates trained runs under the eval protocol of docs/evaluation.md.

For each run and replica:

1. **Checkpoint.** Every kept checkpoint is scored on the held-out validation
   set (`Dataset.validation_batches`: disjoint from training); the evaluated
   one is the best by validation exact match (`eval_checkpoint = "best"`, the
   default; ties go to the later step) or the last (`"last"`). The record says
   which step, its validation score, the best score and its step, and whether
   the replica converged (best validation exact match ≥ `converged_at`).
2. **Sets.** Each eval length has a fixed set; a set cut to `num_examples` is a
   seeded uniform sample of it (`eval_seed`, recorded), never a prefix in
   generation order. Records say how many examples they scored
   (`num_examples`) of how many (`num_available`).
3. **Scores.** `relpos_jax.evaluate` (the library: one checkpoint on one eval
   set). With `dump_predictions` every example's input, target and output go
   to predictions.jsonl.

One record per (run, replica, length) (`records.EvalRecord`'s fields) that
`tables.py` and `plots.py` consume. A length the scheme cannot encode (a learned
position table too short) is recorded as not representable (NaN metrics, the
reason in `error`) instead of stopping the evaluation. `overrides` change a
trained run's config at evaluation only (e.g. `model.position.scaling.type=yarn`
on a RoPE run): the run is then named `<run>@<overrides>`.
"""

from __future__ import annotations

import dataclasses
import os
import time
from typing import Iterable, Sequence

from absl import logging
import ml_collections

from relpos_jax import architectures
from relpos_jax import config_args
from relpos_jax import evaluate
from relpos_jax import lm_eval
from relpos_jax import provenance
from relpos_jax import scoring
from relpos_jax import workdir as workdir_lib
from relpos_jax.data import pipeline
from relpos_jax.data import vocab
from relpos_jax.experiments import checkpoints
from relpos_jax.experiments import lm_runner
from relpos_jax.experiments import records as records_lib
from relpos_jax.experiments import report
from relpos_jax.positions import randomized as randomized_lib

Record = evaluate.Record
CHECKPOINT_RULES = checkpoints.CHECKPOINT_RULES
DEFAULT_CONVERGED_AT = 0.95


# ------------------------------------------------------------- not representable

def not_representable(length: int, reason: str, *, oracle_length: bool = False) -> Record:
  """The record of a length the scheme cannot encode.

  Args:
    length: the eval length.
    reason: why (decode's message).
    oracle_length: include the oracle metrics.

  Returns:
    `{"length", "num_examples": 0, every metric: NaN, "error": reason}`.
  """
  keys = records_lib.metric_keys(oracle_length=oracle_length)
  return {"length": int(length), "num_examples": 0, **{k: float("nan") for k in keys},
          "error": reason}



# ------------------------------------------------------------------ progress

class Progress:
  """Logs `done/total`, elapsed time and an ETA as evaluation items finish."""

  def __init__(self, total: int):
    """Starts the clock.

    Args:
      total: the number of items (run × replica × length) to come.
    """
    self.total, self.done, self._start = total, 0, time.perf_counter()

  def step(self, message: str) -> None:
    """Counts one finished item and logs it with the ETA of the rest.

    Args:
      message: what finished and its headline numbers.
    """
    self.done += 1
    elapsed = time.perf_counter() - self._start
    eta = elapsed / self.done * max(self.total - self.done, 0)
    logging.info("eval %d/%d | %s | elapsed %s | ETA %s", self.done, self.total, message,
                 evaluate.format_seconds(elapsed), evaluate.format_seconds(eta))


# ------------------------------------------------------- whole workdirs and runs

def train_length_range(config: ml_collections.ConfigDict,
                       dataset: pipeline.Dataset) -> tuple[int, int]:
  """(shortest, longest) training length, in the unit of the dataset's eval lengths.

  Synthetic tasks draw training lengths from the config's range; a finite
  dataset (SCAN, TFDS) is measured: one epoch is every training example once.
  """
  if dataset.num_train_examples is None:
    return int(config.data.min_train_length), int(config.data.max_train_length)
  epoch = dataset.train_batch(0, dataset.num_train_examples)
  lengths_N = scoring.target_lengths(epoch["targets"])
  return int(lengths_N.min()), int(lengths_N.max())


@dataclasses.dataclass
class EvalOptions:
  """What every run of one evaluation shares.

  Attributes:
    lengths: eval lengths (None: each run's config). Synthetic tasks accept any
      length (its eval set is rebuilt, fixed by the length); SCAN/TFDS only
      lengths present in the eval split (others are skipped with a warning).
    num_examples: examples per length (None: the config's). Synthetic tasks
      rebuild each eval set with this many (`data.eval_examples_per_length`);
      SCAN/TFDS take a seeded uniform sample of this many of each length.
    batch_size: decoding batch size (None: each run's `eval_batch_size`).
    oracle_length: add the oracle-length metrics (decodes everything twice).
    eval_seed: the seed of every sample of an eval set.
    checkpoint: "best" (by validation exact match) or "last"; None: each run's
      `eval_checkpoint` (default "best").
    dump_predictions: also write every example's input, target and output.
    overrides: `key=value` changes of each run's config at evaluation only.
    random_positions: decode at random positions drawn as in training (the run's
      `randomized` sampler, per example, `randomized.eval_draws` draws each)
      instead of 0..L-1.
    variant: the label of the `overrides` in run names (`<run>@<variant>`;
      default: the overrides themselves).
  """

  lengths: Sequence[int] | None = None
  num_examples: int | None = None
  batch_size: int | None = None
  oracle_length: bool = False
  eval_seed: int = 0
  checkpoint: str | None = None
  dump_predictions: bool = False
  overrides: Sequence[str] = ()
  random_positions: bool = False
  variant: str | None = None

  def __post_init__(self):
    if self.num_examples is not None and self.num_examples < 1:
      raise ValueError(f"num_examples must be >= 1, got {self.num_examples}")
    if self.batch_size is not None and self.batch_size < 1:
      raise ValueError(f"batch_size must be >= 1, got {self.batch_size}")
    if self.lengths is not None:
      self.lengths = sorted({int(n) for n in self.lengths})
      if not self.lengths or self.lengths[0] < 1:
        raise ValueError(f"eval lengths must be positive, got {self.lengths}")
    if self.checkpoint is not None and self.checkpoint not in CHECKPOINT_RULES:
      raise ValueError(f"checkpoint must be one of {CHECKPOINT_RULES}, got {self.checkpoint!r}")
    self.overrides = tuple(self.overrides)
    config_args.parse_overrides(self.overrides)  # raises early on a malformed one
    if self.variant is not None and not self.overrides:
      raise ValueError(f"variant {self.variant!r} names overrides, but none are given")


@dataclasses.dataclass
class _Run:
  """One run to evaluate: where it is, what it is called, its config and eval data."""

  workdir: str
  name: str
  config: ml_collections.ConfigDict
  dataset: pipeline.Dataset
  variant: str = ""  # how the evaluation differs from the run's default (see _prepare_run)
  predictions: list[Record] = dataclasses.field(default_factory=list)

  @property
  def eval_dir(self) -> str:
    """Where this evaluation's own report goes: `workdir_lib.eval_dir` of the variant."""
    return workdir_lib.eval_dir(self.workdir, self.variant)

  @property
  def num_items(self) -> int:
    """Replicas × lengths: the evaluation items of this run."""
    return self.config.num_seeds * len(self.dataset.eval_lengths)


def evaluate_workdir(workdir: str, lengths: Iterable[int] | None = None,
                     batch_size: int | None = None, *, run: str | None = None,
                     step: int | None = None, **options) -> list[Record]:
  """Evaluates every replica of a trained run at every eval length.

  Writes the run's report (`report.REPORT_FILES`, and predictions.jsonl with
  `dump_predictions`) to `workdir/eval/` (an eval variant's to a subfolder:
  `workdir_lib.eval_dir`), with the scheme's own figures beside it (first
  replica).

  Args:
    workdir: a training workdir (config.json, vocab.json, checkpoints/).
    lengths: eval lengths (see `EvalOptions`).
    batch_size: decoding batch size (default: config.eval_batch_size).
    run: the run's name in tables (default: the workdir's basename).
    step: evaluate this checkpoint step (default: chosen by `checkpoint`).
    **options: `EvalOptions`' other fields (`num_examples`, `oracle_length`,
      `eval_seed`, `checkpoint`, `dump_predictions`, `overrides`).

  Returns:
    One record per (replica, length): `evaluate_length`'s keys plus `run`,
    `scheme`, `task`, `seed`, `replica`, `workdir`, `min_train_length`,
    `max_train_length`, the checkpoint and validation fields (`step`,
    `checkpoint_rule`, `final_step`, `valid_exact_match`,
    `valid_token_accuracy`, `valid_num_examples`, `valid_source`,
    `best_valid_exact_match`, `best_valid_step`, `converged_at`,
    `converged`), `overrides`, `eval_positions`, `valid_positions`, `provenance` (the evaluating
    process's package versions, backend and git commit) and `error` (None, or
    why the length is not representable).

  Raises:
    FileNotFoundError: no config.json or no checkpoint.
    ValueError: the data no longer match the saved vocabulary; bad options.
  """
  opts = EvalOptions(lengths=None if lengths is None else list(lengths), batch_size=batch_size,
                     **options)
  target = _prepare_run(workdir, run or os.path.basename(os.path.normpath(workdir)), opts)
  return _evaluate_run(target, opts, Progress(target.num_items), step=step)


def _prepare_run(workdir: str, name: str, options: EvalOptions) -> _Run:
  """Loads a run's config (with the eval overrides) and builds its eval data."""
  config = workdir_lib.load_config(workdir)
  variant = ""
  if options.overrides:
    config = config_args.apply_overrides(config, options.overrides, what="eval override")
    variant = f"@{options.variant or ','.join(options.overrides)}"
  if options.random_positions:
    variant += randomized_lib.EVAL_SUFFIX
  dataset = _eval_dataset(config, options)
  _check_vocab(workdir, dataset)
  return _Run(workdir, name + variant, config, dataset, variant=variant)


def _evaluate_run(target: _Run, options: EvalOptions, progress: Progress, *,
                  step: int | None = None) -> list[Record]:
  """Evaluates one prepared run and writes its report and figures to `<workdir>/eval`."""
  config, dataset = target.config, target.dataset
  model = architectures.make_model(config.model, vocab_size=dataset.vocab.size)
  batch_size = options.batch_size or config.eval_batch_size
  rule = options.checkpoint or config.get("eval_checkpoint", "best")
  converged_at = float(config.get("converged_at", DEFAULT_CONVERGED_AT))
  chosen = checkpoints.choose_checkpoints(target.workdir, config, model, dataset, rule=rule,
                              batch_size=batch_size, steps=None if step is None else [step])
  min_train, max_train = train_length_range(config, dataset)
  valid_source = _describe_validation(dataset)
  valid_sampler = randomized_lib.validation_sampler(config.get("randomized"))
  row_sampler = None
  if options.random_positions:
    row_sampler = randomized_lib.from_config(config.get("randomized"))
  base = {"run": target.name, "scheme": config.model.position.name, "task": config.data.task,
          "workdir": provenance.portable_path(target.workdir), "min_train_length": min_train,
          "max_train_length": max_train, "checkpoint_rule": rule if step is None else "step",
          "converged_at": converged_at, "valid_source": valid_source,
          "overrides": list(options.overrides),
          "eval_positions": _positions_name(row_sampler),
          "valid_positions": _positions_name(row_sampler),
          "checkpoint_valid_positions": _positions_name(valid_sampler),
          "provenance": provenance.provenance()}
  records, predictions = [], []
  for replica, pick in enumerate(chosen):
    seed = config.seed + replica
    logging.info("run %s seed %d: checkpoint %d (%s; validation exact match %.3f, best %.3f "
                 "at step %d)", target.name, seed, pick.step, base["checkpoint_rule"],
                 pick.valid["exact_match"], pick.best_exact_match, pick.best_step)
    # A row is converged by validation at the positions it is decoded at: a run
    # validated at random positions but scored at 0..L-1 is validated again there.
    row_valid = pick.valid
    if (row_sampler is None) != (valid_sampler is None):
      try:
        row_valid = evaluate.validation_record(model, pick.params, dataset, batch_size=batch_size,
                                      random=row_sampler, seed=seed)
      except evaluate.UnrepresentableLength as e:  # its lengths are n/a too
        logging.warning("run %s: no validation at this row's positions: %s", target.name, e)
        row_valid = {"exact_match": float("nan"), "token_accuracy": float("nan"),
                     "num_examples": 0}
      logging.info("run %s seed %d: validation exact match at this row's positions (%s): %.3f",
                   target.name, seed, base["eval_positions"], row_valid["exact_match"])
    replica_base = {**base, "seed": seed, "replica": replica, "step": pick.step,
                    "final_step": pick.final_step,
                    "valid_exact_match": row_valid["exact_match"],
                    "valid_token_accuracy": row_valid["token_accuracy"],
                    "valid_num_examples": row_valid["num_examples"],
                    "checkpoint_valid_exact_match": pick.valid["exact_match"],
                    "best_valid_exact_match": pick.best_exact_match,
                    "best_valid_step": pick.best_step,
                    "converged": bool(row_valid["exact_match"] >= converged_at
                                      if row_valid is not pick.valid
                                      else pick.best_exact_match >= converged_at)}
    rows = [] if options.dump_predictions else None
    for length in dataset.eval_lengths:
      record = _evaluate_or_na(model, pick.params, dataset, length, batch_size, options,
                               f"run {target.name} seed {seed} length {length}", progress, rows,
                               row_sampler, seed)
      records.append(records_lib.EvalRecord.from_dict({**replica_base, **record}).to_dict())
    if rows is not None:
      predictions += [{"run": target.name, "seed": seed, **row} for row in rows]
  out_dir = target.eval_dir
  report.write_report(records, out_dir)
  if options.dump_predictions:
    records_lib.write_jsonl(predictions, os.path.join(out_dir, report.PREDICTIONS_FILE))
  distance = report.train_distance(model, dataset)
  randomized = config.get("randomized", {})
  if randomized.get("enabled", False):  # positions were drawn from [0, max_random_position)
    distance = max(distance, int(randomized["max_random_position"]) - 1)
  report.scheme_figures(model, chosen[0].params, config, out_dir, distance)
  target.predictions = predictions
  return records


def _positions_name(sampler: randomized_lib.RandomizedPositions | None) -> str:
  """How records name where a row is decoded or validated: "0..L-1" or "random"."""
  return "0..L-1" if sampler is None else "random"


def _describe_validation(dataset: pipeline.Dataset) -> str:
  """One line saying what the validation set is (from `Dataset.validation_info`)."""
  info = dataset.validation_info()
  lengths = info.get("lengths") or []
  span = f"{min(lengths)}–{max(lengths)}" if lengths else "?"
  where = ("a held-out stream of its own" if info.get("source") == "held_out_stream"
           else f"{info.get('fraction', 0):.0%} of the training inputs held out")
  return (f"{info.get('num_examples')} examples at lengths {span} "
          f"({info.get('length_unit', 'tokens')}), {where}")


def _eval_dataset(config: ml_collections.ConfigDict, options: EvalOptions) -> pipeline.Dataset:
  """The run's dataset, with the requested eval lengths and set sizes where the source allows."""
  dataset = pipeline.make_dataset(seed=config.seed, **config.data)
  if dataset.num_train_examples is None:  # synthetic: any length has a fixed eval set
    overrides = {}
    if options.lengths is not None:
      overrides["eval_lengths"] = options.lengths
    if options.num_examples is not None and (
        options.num_examples > config.data.eval_examples_per_length):
      overrides["eval_examples_per_length"] = options.num_examples  # a smaller N is sampled
    if overrides:
      dataset = pipeline.make_dataset(seed=config.seed, **{**config.data, **overrides})
    return dataset
  if options.lengths is not None:
    missing = [n for n in options.lengths if n not in dataset.eval_lengths]
    if missing:
      logging.warning("task %s has no eval examples at lengths %s (it has %s); skipping them",
                      config.data.task, missing, dataset.eval_lengths)
    dataset.eval_lengths = [n for n in options.lengths if n in dataset.eval_lengths]
  return dataset


def _check_vocab(workdir: str, dataset: pipeline.Dataset) -> None:
  """Raises ValueError if the rebuilt vocabulary differs from the run's vocab.json."""
  path = workdir_lib.vocab_path(workdir)
  if os.path.exists(path) and vocab.Vocab.load(path) != dataset.vocab:
    raise ValueError(f"the data of {workdir} now build a different vocabulary than the "
                     f"saved {path}; its checkpoints cannot be evaluated on them.")


def _evaluate_or_na(model, params, dataset, length, batch_size, options: EvalOptions,
                    label: str, progress: Progress, predictions: list[Record] | None,
                    random: randomized_lib.RandomizedPositions | None, seed: int) -> Record:
  """`evaluate_length`, logged with progress; `not_representable` if the scheme cannot encode it."""
  try:
    record = evaluate.evaluate_length(model, params, dataset, length, batch_size=batch_size,
                             num_examples=options.num_examples, eval_seed=options.eval_seed,
                             oracle_length=options.oracle_length, predictions=predictions,
                             random=random, seed=seed)
  except evaluate.UnrepresentableLength as e:
    logging.warning("%s: not representable (%s)", label, e)
    progress.step(f"{label}: n/a")
    return {**not_representable(length, str(e), oracle_length=options.oracle_length),
            "num_available": int(dataset.eval_size(length)), "eval_seed": options.eval_seed}
  oracle = (f" | oracle exact {record['oracle_exact_match']:.3f}"
            if options.oracle_length else "")
  progress.step(f"{label}: exact {record['exact_match']:.3f} | token acc "
                f"{record['token_accuracy']:.3f} | loss {record['loss']:.3f} | stop errors "
                f"{record['stop_errors']:.3f}{oracle}")
  return {**record, "error": None}


def evaluate_runs(workdirs: Sequence[str], out_dir: str | None, *,
                  lengths: Iterable[int] | None = None, batch_size: int | None = None,
                  names: Sequence[str] | None = None, on_run=None, **options) -> list[Record]:
  """Evaluates several runs and writes their comparison to `out_dir`.

  Each run's own report and figures also go to its `<workdir>/eval/` (for an
  eval variant, `--override` or random positions, a subfolder of it named after
  the variant: `workdir_lib.eval_dir`). Runs
  without a checkpoint are skipped with a warning. Progress (done/total over
  run × replica × length, with an ETA) is logged.

  Args:
    workdirs: training workdirs.
    out_dir: where the comparison's `report.REPORT_FILES` go (None: only each
      run's own report).
    lengths: eval lengths (see `EvalOptions`).
    batch_size: decoding batch size (default: each run's eval_batch_size).
    names: run names for the tables (default: workdir basenames, or the paths
      where basenames collide).
    on_run: called as `on_run(name, workdir, records, seconds)` after each run
      (e.g. to store its records under results/).
    **options: `EvalOptions`' other fields.

  Returns:
    Every run's records.

  Raises:
    ValueError: no workdir holds a checkpoint; bad options.
  """
  if workdirs and all(lm_eval.is_lm_run(w) for w in workdirs):  # byte-level LMs: own protocol
    return lm_runner.evaluate_runs(workdirs, out_dir, names=names, on_run=on_run,
                                   lengths=lengths, batch_size=batch_size, **options)
  opts = EvalOptions(lengths=None if lengths is None else list(lengths), batch_size=batch_size,
                     **options)
  names = list(names) if names is not None else workdir_lib.run_names(workdirs)
  targets = []
  for workdir, name in zip(workdirs, names):
    if not workdir_lib.has_checkpoint(workdir):
      logging.warning("skipping %s: no checkpoint in %s/checkpoints (not trained yet?)",
                      name, workdir)
      continue
    targets.append(_prepare_run(workdir, name, opts))
  if not targets:
    raise ValueError(f"nothing to evaluate: none of {list(workdirs)} holds a checkpoint")
  progress = Progress(sum(t.num_items for t in targets))
  logging.info("evaluating %d runs, %d items (run × replica × length)", len(targets),
               progress.total)
  records: list[Record] = []
  predictions: list[Record] = []
  for target in targets:
    start = time.perf_counter()
    run_records = _evaluate_run(target, opts, progress)
    records += run_records
    predictions += target.predictions
    if on_run is not None:
      on_run(target.name, target.workdir, run_records, time.perf_counter() - start)
  own_dirs = {os.path.abspath(t.eval_dir) for t in targets}
  if out_dir is not None and own_dirs != {os.path.abspath(out_dir)}:  # else: own report
    report.write_report(records, out_dir)
    if opts.dump_predictions:
      records_lib.write_jsonl(predictions, os.path.join(out_dir, report.PREDICTIONS_FILE))
  return records
