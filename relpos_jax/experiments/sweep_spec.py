"""A sweep's spec: its config file, its runs (names and configs), the command line, shards.

`sweep.py` trains and evaluates what this module describes (see its docstring
for the config file's `get_sweep()` and the command). Overrides go through
`config_args.apply_overrides`, the one way a config is changed by key.
"""

from __future__ import annotations

import importlib.util
import inspect
import os
import re
import types
from typing import Any, Mapping, Sequence

from absl import flags
from absl import logging
import ml_collections

from relpos_jax import config_args

Override = Mapping[str, Any]
_MAPPINGS = (Mapping, ml_collections.ConfigDict)  # a ConfigDict is not a `Mapping`
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
  package module), e.g. `sweep_spec.load_module(os.path.join(os.path.dirname(__file__),
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

def run_name(overrides: Override, *, long: bool = False) -> str:
  """A short, path-safe name for a run made from its overrides.

  A scheme config gives its name (`shaw`), a data config or a `task` key its
  task (`reverse`; SCAN with its split: `scan_length`), an `objective` key its
  value (`passkey`), a bool its key or
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
    items = config_args.plain(value)
    if "name" in items and not long:
      return str(items["name"])
    if "task" in items and not long:
      return _task_name(items["task"], items.get("scan_split"))
    inner = [f"{k}={_value_text(v)}" for k, v in sorted(items.items()) if k != "name"]
    return "-".join([str(items.get("name", leaf))] + inner)
  if keys[-1] == "task" and not long:
    return _task_name(value)
  if keys[-1] == "objective" and not long:  # `alibi+passkey`: the objective names the table row
    return str(value)
  if isinstance(value, bool):
    return leaf if value else f"no_{leaf}"
  return f"{leaf}={_value_text(value)}"


def _task_name(task: str, scan_split: str | None = None) -> str:
  """A task as it appears in a run name: `copy`, `scan_length`, `tfds:x` (made safe later)."""
  return f"{task}_{scan_split}" if task == "scan" and scan_split else str(task)


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
  return [(name, config_args.apply_overrides(config, o, what="sweep override")) for name, o in zip(names, overrides)]


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
    out.append((name, config_args.apply_overrides(config, command_line, what="sweep override")))
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


def define_seeds_per_part_flag() -> flags.FlagHolder:
  """`--seeds_per_part` (train.py and this module's main share it)."""
  return flags.DEFINE_integer(
      "seeds_per_part", 1, "With --split_seeds, and for seeds added to a stored run: train up "
      "to this many consecutive seeds together in one part (vmapped, as a whole run trains "
      "them), each part stored as it finishes; whether that is cheaper than one at a time "
      "depends on the model and machine (docs/evaluation.md).", lower_bound=1)


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
