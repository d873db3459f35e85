"""Sweeps: a config file's `get_sweep()` expanded into runs, trained, then evaluated.

An ablation config file defines `get_config(arg=None)` (the base config) and
`get_sweep()`, a list of override dicts with dotted keys:

    [{"model.position": positions.default_config("shaw")},   # a whole sub-config
     {"model.position.max_relative_position": 4}]            # one key

A dict value replaces the whole sub-config (a scheme switch must: each scheme
has its own keys); any other value sets one existing key (type-checked by
ml_collections). Each run trains into `<sweep_dir>/<run name>`; the run name is
made from its overrides (`shaw`, `max_relative_position=4`, `t5+randomized`,
`rope+scan_length`). Seeds are not separate runs: set `num_seeds` (replicas
trained together in one vmapped program), and the tables report mean ± std over
them.

One command per table (the two forms are the same):

  python train.py --config configs/ablations/schemes.py --workdir runs/schemes
  python -m relpos_jax.sweep --config configs/ablations/schemes.py --sweep_dir runs/schemes

trains every run (finished runs are skipped, interrupted ones resume), then
evaluates them all and writes `<sweep_dir>/eval/`: extrapolation.jsonl,
extrapolation.md, extrapolation.csv and accuracy_vs_length.png (`python eval.py --sweep_dir
runs/schemes` redoes only that part). `--runs a,b` restricts the sweep to some
runs. `--config.KEY=VALUE` (any key) overrides the base config and is applied
again to every run after the sweep's own settings, so it also reaches inside a
sub-config the sweep replaces whole (`--config.model.position.num_buckets=16`
with a sweep over schemes); a key the sweep itself sets per run, or that a
selected run's config lacks, is refused with a message naming it.

`--sweep_shard i/n` trains only runs i, i+n, i+2n, ... (0-based, in sweep
order), so n processes or a cluster job array share one sweep directory:

  for i in 0 1 2 3; do
    python train.py --config configs/ablations/schemes.py --workdir runs/schemes \
        --sweep_shard $i/4 &
  done

With `--results_dir results/<table>` each run is evaluated as soon as it is trained
and its records stored there (see `run_sweep`; `--config.num_seeds=N` above a stored
run's n trains and appends only its seeds n..N-1: added_seeds.py), with every
evaluation its table shows: a run trained at random positions also at random
positions, and any eval-time variants the config file declares with
`get_eval_variants(config)` -> `{label: {dotted key: value}}` (stored as `<run>@<label>`).

A shard evaluates the sweep only if every run is finished when its own runs are,
so the last shard to finish writes the tables (two finishing together may both
do it); the others name the runs still missing. `python eval.py --sweep_dir
runs/schemes` writes the tables at any time from the finished runs.
"""

from __future__ import annotations

import json
import os
import time
import types
from typing import Any, Mapping, Sequence

from absl import app
from absl import flags
from absl import logging
import ml_collections
from ml_collections import config_flags

from relpos_jax import config_args
from relpos_jax import distributed
from relpos_jax import errors
from relpos_jax import log_setup
from relpos_jax import provenance
from relpos_jax import run_identity
from relpos_jax import train_lib
from relpos_jax import workdir as workdir_lib
from relpos_jax.experiments import added_seeds
from relpos_jax.experiments import anatomy_table
from relpos_jax.experiments import results
from relpos_jax.experiments import runner
from relpos_jax.experiments import seed_parts
from relpos_jax.experiments import store
from relpos_jax.experiments import sweep_spec
from relpos_jax.experiments import tables
from relpos_jax.positions import randomized as randomized_lib

_MAPPINGS = (Mapping, ml_collections.ConfigDict)  # a ConfigDict is not a `Mapping`
SWEEP_FILE = "sweep.json"


# ------------------------------------------------------------- the sweep dir

def run_dirs(sweep_dir: str) -> list[str]:
  """The run workdirs of a sweep directory: every subfolder holding config.json.

  Ordered as the sweep lists them (`sweep.json`), then any others by name.

  Args:
    sweep_dir: the sweep directory.

  Returns:
    Workdir paths.
  """
  if not os.path.isdir(sweep_dir):
    raise FileNotFoundError(f"sweep directory {sweep_dir} does not exist")
  found = sorted(d for d in os.listdir(sweep_dir)
                 if os.path.isfile(os.path.join(sweep_dir, d, "config.json")))
  order = []
  sweep_file = os.path.join(sweep_dir, SWEEP_FILE)
  if os.path.exists(sweep_file):
    with open(sweep_file) as f:
      order = [r["name"] for r in json.load(f)["runs"]]
  ordered = [n for n in order if n in found] + [n for n in found if n not in order]
  return [os.path.join(sweep_dir, n) for n in ordered]


def _write_sweep_file(sweep_dir: str, source: str, names: Sequence[str],
                      overrides: Sequence[sweep_spec.Override]) -> None:
  """Records the sweep's source and every run's overrides in `sweep_dir/sweep.json`."""
  os.makedirs(sweep_dir, exist_ok=True)
  runs = [{"name": n, "overrides": {k: config_args.plain(v) if isinstance(v, _MAPPINGS) else v
                                     for k, v in o.items()}}
          for n, o in zip(names, overrides)]
  path = os.path.join(sweep_dir, SWEEP_FILE)
  partial = f"{path}.{os.getpid()}.tmp"  # shards write it concurrently: replace it whole
  with open(partial, "w") as f:
    json.dump({"config": source, "runs": runs}, f, indent=1)
  os.replace(partial, path)


def _trained_step(workdir: str, config: ml_collections.ConfigDict) -> int:
  """The step a workdir has reached (0 if new); ValueError if it holds another run."""
  if not workdir_lib.has_checkpoint(workdir):
    return 0
  changed = run_identity.identity_changes(workdir_lib.load_config(workdir).to_dict(), config)
  if changed:
    raise ValueError(f"{workdir} holds a run with a different config in {changed}: the sweep "
                     "changed since it was trained (or another command-line override). "
                     "Delete that workdir or use a new --sweep_dir.")
  return workdir_lib.checkpoint_steps(workdir)[-1]


# ------------------------------------------------------------------- running

def run_sweep(config: str | types.ModuleType, sweep_dir: str, *,
              base_config: ml_collections.ConfigDict | None = None, arg: str | None = None,
              only: Sequence[str] | None = None, shard: str | None = None,
              run_eval: bool = True, lengths: Sequence[int] | None = None,
              batch_size: int | None = None, out_dir: str | None = None,
              results_dir: str | None = None, reuse: bool = True,
              split_seeds: bool = False, seeds_per_part: int = 1,
              allow_dirty: bool = False,
              command_line: Mapping[str, Any] | None = None) -> list[dict]:
  """Trains the runs of a sweep into `sweep_dir/<run>`, then evaluates them.

  Finished runs (a checkpoint at `num_steps`) are skipped; interrupted ones
  resume from their last checkpoint. Without `results_dir` the evaluation waits
  for every run: if some are unfinished (other shards still training them), it
  is skipped. With `results_dir` (`results/<table>`, see results.py) each run is
  evaluated as soon as it is trained and its records are stored there; a run
  whose records are already stored is neither trained nor evaluated again, so a
  table can be completed a few runs at a time, unless it is asked with more seeds
  than it stores: then only the missing seeds are trained (one at a time, as seed
  parts) and appended to its records (`added_seeds`); with `reuse`, a run that another
  table in the same results folder stored with an identical config
  (`store.find_identical_run`) is copied from there instead of trained.

  Args:
    config: the sweep config file (`"path.py[:arg]"`) or its module.
    sweep_dir: the sweep directory.
    base_config: the base config to use instead of `get_config(arg)` (e.g. with
      command-line overrides applied).
    arg: `get_config`'s argument when `config` has no `:arg`.
    only: run names to restrict the sweep to.
    shard: `"i/n"`: train only runs i, i+n, i+2n, ... (of the sweep, or of
      `only`).
    run_eval: evaluate the runs and write the report afterwards.
    lengths: eval lengths (default: each run's config).
    batch_size: eval decoding batch size (default: each run's).
    out_dir: the report folder (default `sweep_dir/eval`).
    results_dir: store each run's records in this table folder as it finishes.
    reuse: copy identical runs from the other tables beside `results_dir` (only
      with the default `lengths` and `batch_size`, which the records were made with).
    split_seeds: train each run one seed at a time (`seed_parts.part_config`; needs
      `results_dir`): each seed's records are stored as soon as it is trained
      (`seed_parts.parts_dir`) and merged into the run's once all are, so a run
      longer than a working session can be completed over several.
    seeds_per_part: with `split_seeds`, and for seeds added to a stored run, the
      most consecutive seeds one part trains together (vmapped; default 1).
    command_line: `--config.KEY=VALUE` overrides, applied to every run after
      the sweep's own (see `apply_command_line`).
    allow_dirty: store records even from a working tree with uncommitted
      changes (refused by default: `provenance.check_clean_tree`).

  Returns:
    The eval records (empty when not evaluated, and on processes other than 0
    of a multi-process run).

  Raises:
    ValueError: a bad `shard`, an unknown run in `only`, a run directory that
      holds a run with another config, or `split_seeds` without `results_dir`.
  """
  with errors.user_errors():
    if results_dir and run_eval:
      provenance.check_clean_tree(allow_dirty)
    if split_seeds and not results_dir:
      raise ValueError("split_seeds stores each seed's records until the run's are complete: "
                       "give it a results_dir (results/<table>)")
    shard_spec = sweep_spec.parse_shard(shard)
    base, overrides = sweep_spec.load_sweep(config, arg)
    base = base_config if base_config is not None else base
    all_runs = sweep_spec.expand(base, overrides)
    variants = eval_variants(config, all_runs)
    runs = sweep_spec.apply_command_line(sweep_spec.select(all_runs, only), overrides, command_line)
    mine = sweep_spec.shard_runs(runs, shard_spec)
  source = config if isinstance(config, str) else getattr(config, "__file__", str(config))
  if distributed.is_writer():
    _write_sweep_file(sweep_dir, source, [n for n, _ in all_runs], overrides)
    if results_dir:
      store.write_table_meta(results_dir, source, [n for n, _ in all_runs],
                               {n: list(v) for n, v in variants.items()})
  if shard_spec:
    logging.info("shard %s: %d of the %d runs: %s", shard, len(mine), len(runs),
                 ", ".join(n for n, _ in mine) or "none")
  records: list[dict] = []
  reuse_root = (os.path.dirname(os.path.abspath(results_dir))
                if results_dir and reuse and lengths is None and batch_size is None else None)

  def stored(name: str, run_config: ml_collections.ConfigDict) -> bool | tuple[str, str]:
    """True if the table holds the run; (table, run) of an identical run to copy; else False."""
    if results_dir and store.has_records(results_dir, name, run_config,
                                           list(variants.get(name, {}))):
      return True
    # A run with eval-time variants is trained here: a copy would lack their records.
    found = reuse_root and not variants.get(name) and store.find_identical_run(
        reuse_root, workdir_lib.config_json(run_config), exclude=results_dir)
    return found or False

  trained_seconds: list[float] = []
  for i, (name, run_config) in enumerate(mine):
    label = f"run {i + 1}/{len(mine)} {name}"
    found = stored(name, run_config)
    if found is True:
      with errors.user_errors():  # a stored run that cannot take the asked seeds: one line
        missing = added_seeds.seeds_to_add(results_dir, name, workdir_lib.config_json(
            run_config), list(variants.get(name, {})))
      if missing:
        logging.info("%s: stored with %d seeds, adding seeds %s", label, missing[0],
                     [run_config.seed + k for k in missing])
        records += _train_parts(sweep_dir, name, run_config, label, results_dir,
                                variants.get(name, {}), run_eval=run_eval, lengths=lengths,
                                batch_size=batch_size, allow_dirty=allow_dirty,
                                first=missing[0], seeds_per_part=seeds_per_part)
      else:
        logging.info("%s: records stored in %s, skipping", label, results_dir)
      continue
    if found:
      if distributed.is_writer():
        records += store.copy_run(*found, results_dir, name)
      logging.info("%s: %s stored an identical run (%s), copied instead of trained", label,
                   *found)
      continue
    if split_seeds:
      records += _train_parts(sweep_dir, name, run_config, label, results_dir,
                              variants.get(name, {}), run_eval=run_eval, lengths=lengths,
                              batch_size=batch_size, allow_dirty=allow_dirty,
                              seeds_per_part=seeds_per_part)
      continue
    workdir = os.path.join(sweep_dir, name)
    start = time.perf_counter()
    steps = _train_run(workdir, run_config, label)
    # a resumed run trained only part of its steps: its pace counts as a whole run's
    run_seconds = (time.perf_counter() - start) * run_config.num_steps / max(steps, 1)
    start = time.perf_counter()
    if results_dir and run_eval and distributed.is_writer():
      records += evaluate_into_results([workdir], [name], results_dir, variants=variants,
                                       lengths=lengths, batch_size=batch_size,
                                       allow_dirty=allow_dirty)
    if steps:
      trained_seconds.append(run_seconds + time.perf_counter() - start)
      _log_sweep_eta(trained_seconds, sum(
          not stored(n, c) and _unfinished(os.path.join(sweep_dir, n), c) for n, c in mine[i + 1:]))
  if results_dir:
    if run_eval and distributed.is_writer():
      results.write_table_report(results_dir)
    return records
  if not run_eval or not distributed.is_writer():
    return []
  unfinished = [n for n, c in runs if _trained_step(os.path.join(sweep_dir, n), c) < c.num_steps]
  if unfinished:
    logging.warning("not evaluating yet: %d of %d runs are unfinished (%s). Once every shard "
                    "is done, `python eval.py --sweep_dir %s` writes the tables.",
                    len(unfinished), len(runs), ", ".join(unfinished), sweep_dir)
    return []
  workdirs = [os.path.join(sweep_dir, n) for n, _ in runs]
  return runner.evaluate_runs(workdirs, out_dir or os.path.join(sweep_dir, "eval"),
                                lengths=lengths, batch_size=batch_size,
                                names=[n for n, _ in runs])


def _train_parts(sweep_dir: str, name: str, config: ml_collections.ConfigDict, label: str,
                 results_dir: str, variants: Mapping[str, Sequence[str]], *, run_eval: bool,
                 first: int = 0, seeds_per_part: int = 1, **options) -> list[dict]:
  """Trains a run's missing seeds from replica `first` on, in parts of up to
  `seeds_per_part` consecutive seeds; stores the run once every seed is."""
  parts_dir = seed_parts.parts_dir(results_dir)
  config_data = workdir_lib.config_json(config)
  records: list[dict] = []
  seeds = [config.seed + k for k in range(first, config.num_seeds)]
  with errors.user_errors():  # a seed stored twice: one line, nothing trained
    groups = seed_parts.plan(results_dir, sweep_dir, name, config_data, list(variants), seeds,
                             seeds_per_part)
  for group in groups:
    k = group[0] - config.seed
    part_config = seed_parts.part_config(config, k, len(group))
    part = seed_parts.part_name(name, part_config.seed, part_config.num_seeds)
    workdir = os.path.join(sweep_dir, part)
    _train_run(workdir, part_config,
               f"{label} {seed_parts.describe(group, k, config.num_seeds)}")
    if run_eval and distributed.is_writer():
      records += evaluate_into_results(
          [workdir], [part], parts_dir, variants={part: variants},
          info=seed_parts.part_info(name, config_data, list(variants)), **options)
  if not distributed.is_writer():
    return []
  # From replica 0 the parts make the run; later ones are appended to its stored seeds.
  with errors.user_errors():  # a part of another config or protocol: one line, nothing stored
    merged = (added_seeds.append_parts(results_dir, name, config_data, list(variants), first)
              if first else seed_parts.merge_parts(results_dir, name, config_data, list(variants)))
  if merged is None:
    return records
  logging.info("%s: every seed stored: %s %s", label, "appended to" if first else "merged into",
               results_dir)
  return merged


def evaluate_into_results(workdirs: Sequence[str], names: Sequence[str], results_dir: str, *,
                          variants: Mapping[str, Mapping[str, Sequence[str]]] | None = None,
                          info: Mapping[str, Any] | None = None, allow_dirty: bool = False,
                          **options) -> list[dict]:
  """Evaluates runs (each into its own `<workdir>/eval`) and stores each one's records.

  Unless `options` ask for one particular evaluation (`random_positions` or
  `overrides`), each run gets every evaluation its table shows
  (`store.record_names`): at 0..L-1; for a run trained at random positions
  also at random positions, as Ruoss et al. evaluate it; and each of its
  eval-time variants (`eval_variants`), stored as `<run>@<label>`. A variant's
  `runs/<name>.json` says `variant_of` its run.

  Args:
    workdirs: trained workdirs.
    names: their run names.
    results_dir: the table folder (`results/<table>`).
    variants: run name -> {label: `key=value` eval overrides} (`eval_variants`).
    info: more fields for every `runs/<name>.json` it writes (`seed_parts.part_info`).
    allow_dirty: store records from a tree with uncommitted changes (refused by
      default, checked before each run: `provenance.check_clean_tree`).
    **options: `runner.evaluate_runs`' options (lengths, batch_size, EvalOptions fields).

  Returns:
    Every run's records.
  """
  records = []
  asked = bool(options.get("random_positions") or options.get("overrides"))
  for workdir, name in zip(workdirs, names):
    with errors.user_errors():
      provenance.check_clean_tree(allow_dirty)
    def write(record_name, workdir, run_records, seconds, run=name):
      store.write_run(results_dir, record_name, run_records, workdir=workdir,
                      eval_seconds=seconds,
                      info={**(info or {}), **({"variant_of": run} if record_name != run
                                               else {})})

    plan = [options]
    if not asked:
      config = workdir_lib.load_config(workdir)
      if randomized_lib.validation_sampler(config.get("randomized")) is not None:
        plan.append({**options, "random_positions": True})
      plan += [{**options, "overrides": list(overrides), "variant": label}
               for label, overrides in (variants or {}).get(name, {}).items()]
    for run_options in plan:
      records += runner.evaluate_runs([workdir], None, names=[name], on_run=write,
                                        **run_options)
  return records


def eval_variants(spec: str | types.ModuleType,
                  runs: Sequence[tuple[str, ml_collections.ConfigDict]]
                  ) -> dict[str, dict[str, list[str]]]:
  """The eval-time variants a sweep config declares for its runs.

  A sweep config file may define `get_eval_variants(config)` -> {label:
  {dotted key: value}}: evaluations of a trained run with its config changed
  at eval time only (e.g. RoPE scaling, `configs/ablations/extrapolation_methods.py`),
  shown as rows `<run>@<label>` of the same table.

  Args:
    spec: the sweep config file (`"path.py[:arg]"`) or its module.
    runs: (name, config) of the runs.

  Returns:
    run name -> {label: `key=value` overrides} (runs without variants left out).
  """
  module = sweep_spec.load_module(sweep_spec.split_config_spec(spec)[0]) if isinstance(spec, str) else spec
  declare = getattr(module, "get_eval_variants", None)
  out = {}
  for name, config in runs if declare else ():
    declared = declare(config)
    if declared:
      out[name] = {label: [f"{key}={value!r}" for key, value in overrides.items()]
                   for label, overrides in declared.items()}
  return out


def _unfinished(workdir: str, config: ml_collections.ConfigDict) -> bool:
  """Whether a run still needs training (a workdir of another config counts; refused later)."""
  try:
    return _trained_step(workdir, config) < config.num_steps
  except ValueError:
    return True


def _log_sweep_eta(seconds: Sequence[float], left: int) -> None:
  """Logs the sweep's pace (runs done here, their mean time as whole runs) and the time its
  `left` runs need."""
  mean = sum(seconds) / len(seconds)
  eta = time.strftime("%H:%M", time.localtime(time.time() + mean * left))
  logging.info("sweep: %d run(s) done in this process, %.0f min each on average; %d left to "
               "train here, about %.1f h (done about %s)", len(seconds), mean / 60, left,
               mean * left / 3600, eta)


def _train_run(workdir: str, config: ml_collections.ConfigDict, label: str) -> int:
  """Trains one run to `num_steps`, resumed if interrupted; returns the steps trained here
  (0: it was finished, skipped)."""
  step = _trained_step(workdir, config)
  if step >= config.num_steps:
    logging.info("%s: finished (step %d), skipping", label, step)
    return 0
  logging.info("%s: training%s", label, f" (resuming from step {step})" if step else "")
  start = time.perf_counter()
  train_lib.train_and_evaluate(config, workdir)
  logging.info("%s: trained in %.0fs", label, time.perf_counter() - start)
  return config.num_steps - step


def main(argv: Sequence[str]) -> None:
  """`python -m relpos_jax.sweep --config <file>[:arg] --sweep_dir <dir> [--sweep_shard i/n]`."""
  if len(argv) > 1:
    raise app.UsageError(f"unexpected arguments: {argv[1:]}")
  log_setup.setup()
  config_flag = flags.FLAGS["config"]
  with errors.user_errors():
    distributed.initialize(flags.FLAGS.multihost, sweep_shard=bool(flags.FLAGS.sweep_shard))
  records = run_sweep(config_flag.config_filename, flags.FLAGS.sweep_dir,
                      base_config=config_flag.value, only=flags.FLAGS.runs,
                      shard=flags.FLAGS.sweep_shard, run_eval=flags.FLAGS.eval,
                      lengths=[int(n) for n in flags.FLAGS.lengths or []] or None,
                      batch_size=flags.FLAGS.batch_size, out_dir=flags.FLAGS.out,
                      results_dir=flags.FLAGS.results_dir, reuse=flags.FLAGS.reuse,
                      split_seeds=flags.FLAGS.split_seeds,
                      seeds_per_part=flags.FLAGS.seeds_per_part,
                      command_line=config_flags.get_override_values(config_flag))
  if records:
    print(tables.exact_match_table(records))
    print(anatomy_table.error_table(records))


def _define_flags() -> None:
  """The flags of `main`; only a run as a program defines them (importers get none)."""
  config_flags.DEFINE_config_file("config", None, "Sweep config file (with get_sweep()), "
                                  "optionally `:arg`.", lock_config=False)
  flags.DEFINE_string("sweep_dir", None, "Where the runs go, one subfolder each.")
  flags.DEFINE_list("runs", None, "Only these runs of the sweep (default: all).")
  flags.DEFINE_bool("eval", True, "Evaluate the runs and write the tables afterwards.")
  flags.DEFINE_list("lengths", None, "Eval lengths (default: each run's config).")
  flags.DEFINE_integer("batch_size", None, "Eval decoding batch size (default: config's).")
  flags.DEFINE_string("out", None, "Report folder (default: <sweep_dir>/eval).")
  flags.DEFINE_string("results_dir", None, "Store each run's eval records in this table folder "
                      "(results/<table>) as soon as it is trained; skip runs stored there.")
  flags.DEFINE_bool("reuse", True, "With --results_dir: copy a run that another table beside it "
                    "stored with an identical config instead of training it again.")
  sweep_spec.define_split_seeds_flag()
  sweep_spec.define_seeds_per_part_flag()
  sweep_spec.define_shard_flag()
  distributed.define_flag()
  flags.mark_flags_as_required(["config", "sweep_dir"])


if __name__ == "__main__":
  _define_flags()
  errors.run(main)
