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
and its records stored there (see `run_sweep`), with every evaluation its table
shows: a run trained at random positions also at random positions, and any
eval-time variants the config file declares with `get_eval_variants(config)` ->
`{label: {dotted key: value}}` (stored as `<run>@<label>`).

A shard evaluates the sweep only if every run is finished when its own runs are,
so the last shard to finish writes the tables (two finishing together may both
do it); the others name the runs still missing. `python eval.py --sweep_dir
runs/schemes` writes the tables at any time from the finished runs.
"""

from __future__ import annotations

import copy
import importlib.util
import inspect
import json
import os
import re
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
from relpos_jax import evaluate
from relpos_jax import log_setup
from relpos_jax import provenance
from relpos_jax import results
from relpos_jax import tables
from relpos_jax import train_lib
from relpos_jax import workdir as workdir_lib
from relpos_jax.positions import randomized as randomized_lib

Override = Mapping[str, Any]
_MAPPINGS = (Mapping, ml_collections.ConfigDict)  # a ConfigDict is not a `Mapping`
SWEEP_FILE = "sweep.json"
_UNSAFE = re.compile(r"[^A-Za-z0-9._=+\-]")


# ---------------------------------------------------------------- config files

def split_config_spec(spec: str) -> tuple[str, str | None]:
  """`"configs/x.py:arg"` -> `("configs/x.py", "arg")`; no `:arg` gives None."""
  path, sep, arg = spec.rpartition(":")
  if sep and path.endswith(".py"):
    return path, arg
  return spec, None


def load_module(path: str) -> types.ModuleType:
  """Executes a config file and returns it as a module (not added to `sys.modules`).

  Config files load their base config this way (`configs/default.py` is not a
  package module), e.g. `sweep.load_module(os.path.join(os.path.dirname(__file__),
  "..", "default.py"))`.

  Args:
    path: a .py file.

  Returns:
    The executed module.
  """
  path = os.path.abspath(path)
  if not os.path.isfile(path):
    raise FileNotFoundError(f"config file {path} not found")
  name = "relpos_config_" + re.sub(r"\W", "_", os.path.splitext(os.path.basename(path))[0])
  spec = importlib.util.spec_from_file_location(name, path)
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module


def load_sweep(spec: str | types.ModuleType,
               arg: str | None = None) -> tuple[ml_collections.ConfigDict, list[dict]]:
  """The base config and the override list of a sweep config file.

  Args:
    spec: `"path.py"` or `"path.py:arg"`, or the loaded module.
    arg: the `get_config` argument when `spec` is a module (or has no `:arg`).

  Returns:
    `(get_config(arg), get_sweep())`; a `get_sweep` that takes an argument is
    given `arg` too (for overrides that depend on the base config, e.g. a
    multiple of its `num_steps`).

  Raises:
    ValueError: the file defines no `get_sweep`.
  """
  module = spec
  if isinstance(spec, str):
    path, spec_arg = split_config_spec(spec)
    module, arg = load_module(path), spec_arg if spec_arg is not None else arg
  if not hasattr(module, "get_sweep"):
    raise ValueError(f"{getattr(module, '__file__', module)} defines no get_sweep(); a sweep "
                     "config needs one (see configs/ablations/).")
  takes_arg = bool(inspect.signature(module.get_sweep).parameters)
  sweep_list = module.get_sweep(arg) if takes_arg else module.get_sweep()
  return module.get_config(arg), [dict(o) for o in sweep_list]


def is_sweep_config(spec: str) -> bool:
  """Whether the config file of `spec` (`"path.py[:arg]"`) defines `get_sweep()`."""
  return hasattr(load_module(split_config_spec(spec)[0]), "get_sweep")


# ------------------------------------------------------------------ expansion

def apply_overrides(config: ml_collections.ConfigDict,
                    overrides: Override) -> ml_collections.ConfigDict:
  """A copy of `config` with dotted-key overrides applied.

  Args:
    config: the base config (not modified).
    overrides: `{"a.b.c": value}`; a mapping value replaces the sub-config at
      that key whole, any other value sets an existing key.

  Returns:
    The new config.

  Raises:
    ValueError: a key the config does not have.
    TypeError: a value of the wrong type for its key.
  """
  config = copy.deepcopy(config)
  config.unlock()
  for key, value in overrides.items():
    node, leaf = config_args.parent_of(config, key, "sweep override")
    if isinstance(value, _MAPPINGS):
      node[leaf] = ml_collections.ConfigDict(_plain(value))
    else:
      node[leaf] = copy.deepcopy(value)
  return config


def run_name(overrides: Override, *, long: bool = False) -> str:
  """A short, path-safe name for a run made from its overrides.

  A scheme config gives its name (`shaw`), a data config or a `task` key its
  task (`reverse`; SCAN with its split: `scan_length`), a bool its key or
  `no_<key>` (`randomized.enabled` counts as `randomized`), anything else
  `key=value`; parts are joined by `+`; no overrides give `base`. `long=True`
  uses full dotted keys and spells out every key of a sub-config
  (`shaw-max_relative_position=4-use_keys=True-...`).

  Args:
    overrides: one entry of `get_sweep()`.
    long: the unambiguous form (used where short names collide).

  Returns:
    The name (letters, digits and `._=+-` only).
  """
  parts = [_name_part(key, value, long) for key, value in overrides.items()]
  return _UNSAFE.sub("_", "+".join(parts)) or "base"


def _name_part(key: str, value: Any, long: bool) -> str:
  """One override's part of a run name."""
  keys = key.split(".")
  leaf = key if long else (keys[-2] if keys[-1] == "enabled" and len(keys) > 1 else keys[-1])
  if isinstance(value, _MAPPINGS):
    items = _plain(value)
    if "name" in items and not long:
      return str(items["name"])
    if "task" in items and not long:
      return _task_name(items["task"], items.get("scan_split"))
    inner = [f"{k}={_value_text(v)}" for k, v in sorted(items.items()) if k != "name"]
    return "-".join([str(items.get("name", leaf))] + inner)
  if keys[-1] == "task" and not long:
    return _task_name(value)
  if isinstance(value, bool):
    return leaf if value else f"no_{leaf}"
  return f"{leaf}={_value_text(value)}"


def _task_name(task: str, scan_split: str | None = None) -> str:
  """A task as it appears in a run name: `copy`, `scan_length`, `tfds:x` (made safe later)."""
  return f"{task}_{scan_split}" if task == "scan" and scan_split else str(task)


def _plain(value: Mapping[str, Any] | ml_collections.ConfigDict) -> dict[str, Any]:
  """A deep, plain-dict copy of a mapping or ConfigDict."""
  if isinstance(value, ml_collections.ConfigDict):
    return value.to_dict()
  return {k: _plain(v) if isinstance(v, _MAPPINGS) else copy.deepcopy(v)
          for k, v in value.items()}


def _value_text(value: Any) -> str:
  """A value as it appears in a run name."""
  if isinstance(value, (list, tuple)):
    return "-".join(_value_text(v) for v in value)
  return f"{value:g}" if isinstance(value, float) else str(value)


def expand(config: ml_collections.ConfigDict,
           overrides: Sequence[Override]) -> list[tuple[str, ml_collections.ConfigDict]]:
  """Every run of a sweep: its name and its config.

  Names are unique: where short names collide the long form is used, then
  `_<index>` if still needed.

  Args:
    config: the base config.
    overrides: `get_sweep()`'s list.

  Returns:
    `[(run name, config)]` in sweep order.
  """
  names = [run_name(o) for o in overrides]
  names = [run_name(o, long=True) if names.count(n) > 1 else n for n, o in zip(names, overrides)]
  names = [f"{n}_{i}" if names.count(n) > 1 else n for i, n in enumerate(names)]
  seed_only = [n for n, o in zip(names, overrides) if set(o) == {"seed"}]
  if len(seed_only) > 1:
    logging.warning("runs %s differ only in seed: set num_seeds instead (replicas train "
                    "together and the tables report mean ± std over them)", seed_only)
  return [(name, apply_overrides(config, o)) for name, o in zip(names, overrides)]


def apply_command_line(runs: Sequence[tuple[str, ml_collections.ConfigDict]],
                       overrides: Sequence[Override], command_line: Mapping[str, Any] | None,
                       ) -> list[tuple[str, ml_collections.ConfigDict]]:
  """Every run's config with the command-line overrides applied after the sweep's own.

  Args:
    runs: `expand`'s runs (or a selection of them).
    overrides: `get_sweep()`'s list (to find the keys the sweep sets).
    command_line: `{"dotted.key": value}` from `--config.KEY=VALUE` flags.

  Returns:
    The runs with each override set (a key inside a sub-config the sweep replaced
    whole is set in the new sub-config).

  Raises:
    ValueError: an override of a key the sweep sets per run (it would make every
      run's name wrong), or of a key some run lacks (names the key and the runs).
  """
  if not command_line:
    return list(runs)
  swept = {k for o in overrides for k in o}
  for key in command_line:
    clash = sorted(k for k in swept if k == key or k.startswith(key + "."))
    if clash:
      raise ValueError(f"--config.{key} sets what the sweep varies per run ({', '.join(clash)}); "
                       "drop the flag, or pick runs with --runs")
  out = []
  for name, config in runs:
    for key in command_line:
      node = config
      for part in key.split("."):
        if not isinstance(node, ml_collections.ConfigDict) or part not in node:
          lacking = [n for n, c in runs if not _has_key(c, key)]
          raise ValueError(f"--config.{key}: run(s) {', '.join(lacking)} of this sweep have no "
                           f"key {key} (e.g. another positional scheme); pick runs that do "
                           "with --runs")
        node = node[part]
    out.append((name, apply_overrides(config, command_line)))
  return out


def _has_key(config: ml_collections.ConfigDict, key: str) -> bool:
  """Whether the dotted `key` exists in `config`."""
  node = config
  for part in key.split("."):
    if not isinstance(node, ml_collections.ConfigDict) or part not in node:
      return False
    node = node[part]
  return True


def select(runs: Sequence[tuple[str, Any]], names: Sequence[str] | None) -> list[tuple[str, Any]]:
  """The runs named in `names` (all when None), in sweep order.

  Raises:
    ValueError: a name that is not a run of the sweep (lists the valid ones).
  """
  if not names:
    return list(runs)
  valid = [n for n, _ in runs]
  unknown = [n for n in names if n not in valid]
  if unknown:
    raise ValueError(f"no run(s) {unknown} in this sweep; its runs are: {', '.join(valid)}")
  return [r for r in runs if r[0] in names]


def parse_shard(spec: str | None) -> tuple[int, int] | None:
  """`"i/n"` -> `(i, n)`; None or "" -> None (no sharding).

  Args:
    spec: the `--sweep_shard` value.

  Returns:
    `(index, count)` with `0 <= index < count`, or None.

  Raises:
    ValueError: not two integers `i/n`, or not `0 <= i < n` (names the flag).
  """
  problem = _shard_problem(spec)
  if problem:
    raise ValueError(f"--sweep_shard={spec!r}: {problem}")
  if not spec:
    return None
  index, count = spec.split("/")
  return int(index), int(count)


def _shard_problem(spec: str | None) -> str | None:
  """What is wrong with a `--sweep_shard` value, or None if it is valid (or unset)."""
  if not spec:
    return None
  match = re.fullmatch(r"(\d+)/(\d+)", spec)
  if not match:
    return "expected i/n with integers 0 <= i < n, e.g. --sweep_shard=0/4 for the first of 4"
  index, count = int(match.group(1)), int(match.group(2))
  if not 0 <= index < count:
    return (f"need 0 <= i < n (shards are numbered 0 to n-1), e.g. "
            f"--sweep_shard=0/{max(count, 1)}")
  return None


def shard_runs(runs: Sequence[tuple[str, Any]],
               shard: tuple[int, int] | None) -> list[tuple[str, Any]]:
  """Runs `i, i+n, i+2n, ...` of `runs` for `shard = (i, n)`; all of them for None."""
  if shard is None:
    return list(runs)
  index, count = shard
  return list(runs[index::count])


def define_split_seeds_flag() -> flags.FlagHolder:
  """`--split_seeds` (train.py and this module's main share it)."""
  return flags.DEFINE_bool(
      "split_seeds", False, "With --results_dir: train each run one seed at a time, storing "
      "each seed's records as it finishes (results/<table>/parts/) and the run's once all "
      "are stored: for runs longer than one working session.")


def define_allow_dirty_flag() -> flags.FlagHolder:
  """`--allow_dirty`: store records from a working tree with uncommitted changes (marked)."""
  return flags.DEFINE_bool(
      "allow_dirty", False, "With --results_dir: store records even though tracked files have "
      "uncommitted changes (refused by default; the tables mark such rows).")


def define_shard_flag() -> flags.FlagHolder:
  """Defines `--sweep_shard i/n` (validated at flag parsing) for an entry point."""
  holder = flags.DEFINE_string(
      "sweep_shard", None, "Train only runs i, i+n, i+2n, ... of the sweep (0 <= i < n), e.g. "
      "0/4, so n processes share it; the last to finish writes the tables.")
  flags.register_validator("sweep_shard", _valid_shard)
  return holder


def _valid_shard(spec: str | None) -> bool:
  """The absl validator of `--sweep_shard` (absl prefixes the flag and value to the message)."""
  problem = _shard_problem(spec)
  if problem:
    raise flags.ValidationError(problem)
  return True


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
                      overrides: Sequence[Override]) -> None:
  """Records the sweep's source and every run's overrides in `sweep_dir/sweep.json`."""
  os.makedirs(sweep_dir, exist_ok=True)
  runs = [{"name": n, "overrides": {k: _plain(v) if isinstance(v, _MAPPINGS) else v
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
  changed = workdir_lib.identity_changes(workdir_lib.load_config(workdir).to_dict(), config)
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
              split_seeds: bool = False, allow_dirty: bool = False,
              command_line: Mapping[str, Any] | None = None) -> list[dict]:
  """Trains the runs of a sweep into `sweep_dir/<run>`, then evaluates them.

  Finished runs (a checkpoint at `num_steps`) are skipped; interrupted ones
  resume from their last checkpoint. Without `results_dir` the evaluation waits
  for every run: if some are unfinished (other shards still training them), it
  is skipped. With `results_dir` (`results/<table>`, see results.py) each run is
  evaluated as soon as it is trained and its records are stored there; a run
  whose records are already stored is neither trained nor evaluated again, so a
  table can be completed a few runs at a time; with `reuse`, a run that another
  table in the same results folder stored with an identical config
  (`results.find_identical_run`) is copied from there instead of trained.

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
    split_seeds: train each run one seed at a time (`seed_part_config`; needs
      `results_dir`): each seed's records are stored as soon as it is trained
      (`results.parts_dir`) and merged into the run's once all are, so a run
      longer than a working session can be completed over several.
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
    shard_spec = parse_shard(shard)
    base, overrides = load_sweep(config, arg)
    base = base_config if base_config is not None else base
    all_runs = expand(base, overrides)
    variants = eval_variants(config, all_runs)
    runs = apply_command_line(select(all_runs, only), overrides, command_line)
    mine = shard_runs(runs, shard_spec)
  source = config if isinstance(config, str) else getattr(config, "__file__", str(config))
  if distributed.is_writer():
    _write_sweep_file(sweep_dir, source, [n for n, _ in all_runs], overrides)
    if results_dir:
      results.write_table_meta(results_dir, source, [n for n, _ in all_runs],
                               {n: list(v) for n, v in variants.items()})
  if shard_spec:
    logging.info("shard %s: %d of the %d runs: %s", shard, len(mine), len(runs),
                 ", ".join(n for n, _ in mine) or "none")
  records: list[dict] = []
  reuse_root = (os.path.dirname(os.path.abspath(results_dir))
                if results_dir and reuse and lengths is None and batch_size is None else None)

  def stored(name: str, run_config: ml_collections.ConfigDict) -> bool | tuple[str, str]:
    """True if the table holds the run; (table, run) of an identical run to copy; else False."""
    if results_dir and results.has_records(results_dir, name, run_config,
                                           list(variants.get(name, {}))):
      return True
    # A run with eval-time variants is trained here: a copy would lack their records.
    found = reuse_root and not variants.get(name) and results.find_identical_run(
        reuse_root, workdir_lib.config_json(run_config), exclude=results_dir)
    return found or False

  trained_seconds: list[float] = []
  for i, (name, run_config) in enumerate(mine):
    label = f"run {i + 1}/{len(mine)} {name}"
    found = stored(name, run_config)
    if found is True:
      logging.info("%s: records stored in %s, skipping", label, results_dir)
      continue
    if found:
      if distributed.is_writer():
        records += results.copy_run(*found, results_dir, name)
      logging.info("%s: %s stored an identical run (%s), copied instead of trained", label,
                   *found)
      continue
    if split_seeds:
      records += _train_parts(sweep_dir, name, run_config, label, results_dir,
                              variants.get(name, {}), run_eval=run_eval, lengths=lengths,
                              batch_size=batch_size, allow_dirty=allow_dirty)
      continue
    workdir = os.path.join(sweep_dir, name)
    start = time.perf_counter()
    trained = _train_run(workdir, run_config, label)
    if results_dir and run_eval and distributed.is_writer():
      records += evaluate_into_results([workdir], [name], results_dir, variants=variants,
                                       lengths=lengths, batch_size=batch_size,
                                       allow_dirty=allow_dirty)
    if trained:
      trained_seconds.append(time.perf_counter() - start)
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
  return evaluate.evaluate_runs(workdirs, out_dir or os.path.join(sweep_dir, "eval"),
                                lengths=lengths, batch_size=batch_size,
                                names=[n for n, _ in runs])


def seed_part_config(config: ml_collections.ConfigDict, k: int) -> ml_collections.ConfigDict:
  """Part k of a run trained one seed at a time: the run with only its replica k.

  Replica k of a run (seed `config.seed + k`: its own init, dropout and data
  order) is the single-seed run of that seed, computed alone instead of in a
  vmapped step with the others (train_lib_test checks they agree to float
  rounding); alone it takes about 1/num_seeds of the run's time on a CPU.
  """
  if not 0 <= k < config.num_seeds:
    raise ValueError(f"part {k} of a run of {config.num_seeds} seeds")
  part = copy.deepcopy(config)
  part.seed, part.num_seeds = config.seed + k, 1
  return part


def _train_parts(sweep_dir: str, name: str, config: ml_collections.ConfigDict, label: str,
                 results_dir: str, variants: Mapping[str, Sequence[str]], *, run_eval: bool,
                 **options) -> list[dict]:
  """Trains and stores a run's missing seed parts, then merges them if all are stored."""
  parts_dir = results.parts_dir(results_dir)
  config_data = workdir_lib.config_json(config)
  records: list[dict] = []
  for k in range(config.num_seeds):
    part_config = seed_part_config(config, k)
    part = results.part_name(name, part_config.seed)
    if results.has_records(parts_dir, part, config_data, list(variants)):
      logging.info("%s: seed %d stored in %s, skipping", label, part_config.seed, parts_dir)
      continue
    workdir = os.path.join(sweep_dir, part)
    _train_run(workdir, part_config, f"{label} seed {part_config.seed} ({k + 1} of "
               f"{config.num_seeds}, trained alone)")
    if run_eval and distributed.is_writer():
      records += evaluate_into_results(
          [workdir], [part], parts_dir, variants={part: variants},
          info=results.part_info(name, config_data, list(variants)), **options)
  if not distributed.is_writer():
    return []
  merged = results.merge_parts(results_dir, name, config_data, list(variants))
  if merged is None:
    return records
  logging.info("%s: every seed stored: merged into %s", label, results_dir)
  return merged


def evaluate_into_results(workdirs: Sequence[str], names: Sequence[str], results_dir: str, *,
                          variants: Mapping[str, Mapping[str, Sequence[str]]] | None = None,
                          info: Mapping[str, Any] | None = None, allow_dirty: bool = False,
                          **options) -> list[dict]:
  """Evaluates runs (each into its own `<workdir>/eval`) and stores each one's records.

  Unless `options` ask for one particular evaluation (`random_positions` or
  `overrides`), each run gets every evaluation its table shows
  (`results.record_names`): at 0..L-1; for a run trained at random positions
  also at random positions, as Ruoss et al. evaluate it; and each of its
  eval-time variants (`eval_variants`), stored as `<run>@<label>`. A variant's
  `runs/<name>.json` says `variant_of` its run.

  Args:
    workdirs: trained workdirs.
    names: their run names.
    results_dir: the table folder (`results/<table>`).
    variants: run name -> {label: `key=value` eval overrides} (`eval_variants`).
    info: more fields for every `runs/<name>.json` it writes (`results.part_info`).
    allow_dirty: store records from a tree with uncommitted changes (refused by
      default, checked before each run: `provenance.check_clean_tree`).
    **options: `evaluate.evaluate_runs`' options (lengths, batch_size, EvalOptions fields).

  Returns:
    Every run's records.
  """
  records = []
  asked = bool(options.get("random_positions") or options.get("overrides"))
  for workdir, name in zip(workdirs, names):
    with errors.user_errors():
      provenance.check_clean_tree(allow_dirty)
    def store(record_name, workdir, run_records, seconds, run=name):
      results.write_run(results_dir, record_name, run_records, workdir=workdir,
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
      records += evaluate.evaluate_runs([workdir], None, names=[name], on_run=store,
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
  module = load_module(split_config_spec(spec)[0]) if isinstance(spec, str) else spec
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
  """Logs the sweep's pace (runs done here, their mean time) and the time its `left` runs need."""
  mean = sum(seconds) / len(seconds)
  eta = time.strftime("%H:%M", time.localtime(time.time() + mean * left))
  logging.info("sweep: %d run(s) done in this process, %.0f min each on average; %d left to "
               "train here, about %.1f h (done about %s)", len(seconds), mean / 60, left,
               mean * left / 3600, eta)


def _train_run(workdir: str, config: ml_collections.ConfigDict, label: str) -> bool:
  """Trains one run to `num_steps`: skipped if finished (False), resumed if interrupted."""
  step = _trained_step(workdir, config)
  if step >= config.num_steps:
    logging.info("%s: finished (step %d), skipping", label, step)
    return False
  logging.info("%s: training%s", label, f" (resuming from step {step})" if step else "")
  start = time.perf_counter()
  train_lib.train_and_evaluate(config, workdir)
  logging.info("%s: trained in %.0fs", label, time.perf_counter() - start)
  return True


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
                      command_line=config_flags.get_override_values(config_flag))
  if records:
    print(tables.exact_match_table(records))
    print(tables.error_table(records))


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
  define_split_seeds_flag()
  define_shard_flag()
  distributed.define_flag()
  flags.mark_flags_as_required(["config", "sweep_dir"])


if __name__ == "__main__":
  _define_flags()
  errors.run(main)
