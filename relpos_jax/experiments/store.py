"""Results storage: a table's records, run infos and seed parts under `results/<table>/`.

`results/<table>/records/<run>.jsonl` holds a run's eval records,
`runs/<run>.json` its config, timings, machine, provenance and training curve
(`curves.py`); a run trained in seed parts (one seed each, or several trained
together) stores them under `parts/` (`seed_parts.py`) until they are joined into the
run's records. A run already stored in another table
with an identical config is copied, not trained again (`find_identical_run`,
`copy_run`). `results.py` reads and renders.
"""

from __future__ import annotations

import json
import os
import platform
import re
import sys
from typing import Any, Sequence

from relpos_jax import metric_writers
from relpos_jax import precision
from relpos_jax import provenance
from relpos_jax import run_identity as run_identity_lib
from relpos_jax import workdir as workdir_lib
from relpos_jax.experiments import curves
from relpos_jax.experiments import records as records_lib
from relpos_jax.experiments import tables
from relpos_jax.positions import randomized as randomized_lib

Record = tables.Record
TABLE_FILE = "table.json"
_UNSAFE = re.compile(r"[^A-Za-z0-9._=+@,\-]")


def file_name(run: str) -> str:
  """A run name as a file name (path-unsafe characters replaced)."""
  return _UNSAFE.sub("_", run)


def record_path(table_dir: str, run: str) -> str:
  """`<table_dir>/records/<run>.jsonl`."""
  return os.path.join(table_dir, "records", f"{file_name(run)}.jsonl")


def has_run(table_dir: str, run: str) -> bool:
  """Whether a run's records are stored in the table folder."""
  return os.path.exists(record_path(table_dir, run))


def record_names(run: str, config: dict[str, Any], variants: Sequence[str] = ()) -> list[str]:
  """The names a sweep stores a run's records under.

  `run`; for a run trained at random positions also `run` +
  `randomized.EVAL_SUFFIX` (decoded at random positions); and `run@<label>` for
  each of the sweep's eval-time variants of the run (`sweep.eval_variants`).

  Args:
    run: the run name.
    config: its config (JSON data or ConfigDict).
    variants: the labels of its eval-time variants.

  Returns:
    The record names.
  """
  names = [run]
  if randomized_lib.validation_sampler(config.get("randomized")) is not None:
    names.append(run + randomized_lib.EVAL_SUFFIX)
  return names + [f"{run}@{label}" for label in variants]


def has_records(table_dir: str, run: str, config: dict[str, Any],
                variants: Sequence[str] = ()) -> bool:
  """Whether every one of `record_names(run, config, variants)` is in the table folder."""
  return all(has_run(table_dir, name) for name in record_names(run, config, variants))


# Keys of a stored config that do not change a run's records: where it was trained, and
# how often it logged.
_NOT_IDENTITY = ("provenance", "provenance_earlier", "log_every")


def run_identity(config: dict[str, Any]) -> dict[str, Any]:
  """What decides a run's records, from its config.json data.

  Everything but `_NOT_IDENTITY`; model keys the config lacks at their
  architecture's default (as a resume counts them); a section switched off
  (`enabled: false`, e.g. `randomized`) reduced to that switch, since its other
  settings act only when it is on; and `model.dtype = "auto"` as the precision it
  resolved to where the run's provenance records it (two `auto` runs on machines
  that chose differently are different runs: a table never mixes precisions).

  Args:
    config: a run's config as JSON data (config.json, or `workdir.config_json`).

  Returns:
    The config to compare runs by.
  """
  resolved = ((config.get("provenance") or {}).get("precision") or {}).get("auto")
  config = run_identity_lib.with_model_defaults(
      {k: v for k, v in config.items() if k not in _NOT_IDENTITY})
  if config.get("model", {}).get("dtype") == "auto":
    config["model"] = {**config["model"], "dtype": f"auto:{resolved or 'unrecorded'}"}
  return {k: {"enabled": False} if isinstance(v, dict) and v.get("enabled") is False else v
          for k, v in config.items()}


def find_identical_run(root: str, config: dict[str, Any], *,
                       exclude: str | None = None) -> tuple[str, str] | None:
  """A stored run of any table under `root` with the same `run_identity` as `config`.

  Or with more seeds, the same otherwise: a run given seeds since (`added_seeds`)
  holds the asked seeds as its first ones, and is copied whole.

  Args:
    root: the results folder (`results`).
    config: the config of the run about to be trained (JSON data).
    exclude: a table folder not to search (the run's own).

  Returns:
    (table folder, run name) of the first match, tables in alphabetical order;
    None if no table holds one.
  """
  wanted = run_identity(config)
  skip = os.path.realpath(exclude) if exclude else None
  for table in sorted(os.listdir(root)) if os.path.isdir(root) else []:
    table_dir = os.path.join(root, table)
    runs_dir = os.path.join(table_dir, "runs")
    if os.path.realpath(table_dir) == skip or not os.path.isdir(runs_dir):
      continue
    for name in sorted(os.listdir(runs_dir)):
      with open(os.path.join(runs_dir, name)) as f:
        info = json.load(f)
      if (not info.get("reused_from") and not info.get("variant_of")
          and has_records(table_dir, info["run"], info["config"])
          and _holds(run_identity(info["config"]), wanted)):
        return table_dir, info["run"]
  return None


def _holds(stored: dict[str, Any], wanted: dict[str, Any]) -> bool:
  """Whether a stored run's identity is the wanted one, with as many seeds or more."""
  rest = lambda identity: {k: v for k, v in identity.items() if k != "num_seeds"}
  # a config without the key (a hand-written one) trained one replica
  seeds = lambda identity: int(identity.get("num_seeds", 1))
  return rest(stored) == rest(wanted) and seeds(stored) >= seeds(wanted)


def copy_run(source_dir: str, source_run: str, table_dir: str, run: str) -> list[Record]:
  """Stores another table's run as `run` of this table: its records and run info, marked.

  Every one of its `record_names` is copied (a randomized run's random-position
  records too).

  Args:
    source_dir: the table folder that holds it.
    source_run: its name there.
    table_dir: this table's folder.
    run: its name here (each record's `run` is set to it).

  Returns:
    The copied records.
  """
  config = read_run_info(source_dir, source_run)["config"]
  records = []
  for source_name, name in zip(record_names(source_run, config), record_names(run, config)):
    source_info = _run_info_path(source_dir, source_name)
    info = read_run_info(source_dir, source_name)
    info.update(run=name, reused_from=os.path.join(
        os.path.basename(os.path.normpath(source_dir)), "runs", os.path.basename(source_info)))
    copied = [{**r, "run": name}
              for r in records_lib.read_jsonl(record_path(source_dir, source_name))]
    records_lib.write_jsonl(copied, record_path(table_dir, name))
    write_run_info(table_dir, name, info)
    records += copied
  return records


def write_table_meta(table_dir: str, config: str, runs: Sequence[str],
                     variants: dict[str, Sequence[str]] | None = None) -> None:
  """Writes `table.json`: the sweep's config file, its run names in sweep order, and
  the labels of each run's eval-time variants (`eval_variants`, where there are any).

  Args:
    table_dir: `results/<table>`.
    config: the sweep config file (with its `:arg`, if any).
    runs: every run name of the sweep, in order.
    variants: run name -> its eval-time variant labels.
  """
  os.makedirs(table_dir, exist_ok=True)
  meta: dict[str, Any] = {"config": config, "runs": list(runs)}
  if variants := {run: list(labels) for run, labels in (variants or {}).items() if labels}:
    meta["eval_variants"] = variants
  with open(os.path.join(table_dir, TABLE_FILE), "w") as f:
    json.dump(meta, f, indent=1)
    f.write("\n")


def train_seconds(workdir: str) -> float | None:
  """Wall time of the training steps of a run, from its metrics.jsonl (None if absent).

  Each `train` line holds `steps_per_sec` over the steps since the previous
  line, so the sum of (steps / steps_per_sec) over one replica's lines is the
  time spent in training steps (not compilation before the first step, nor
  periodic eval or checkpointing).
  """
  try:
    lines = [m for m in metric_writers.read_metrics(workdir) if m.get("kind") == "train"]
  except FileNotFoundError:
    return None
  if not lines:
    return None
  seed = lines[0]["seed"]
  total, previous = 0.0, 0
  for line in (m for m in lines if m["seed"] == seed):
    if line.get("steps_per_sec"):
      total += (line["step"] - previous) / line["steps_per_sec"]
    previous = line["step"]
  return total


def _cpu_model() -> str:
  """The CPU's model name (/proc/cpuinfo on Linux), else the platform's word for it."""
  try:
    with open("/proc/cpuinfo") as f:
      for line in f:
        if line.startswith("model name"):
          return line.split(":", 1)[1].strip()
  except OSError:
    pass
  return platform.processor() or platform.machine()


# The vector and matrix units a CPU's speed on these models turns on: two "AMD EPYC"
# machines trained FIRE seeds in 59 min and at a pace of ~105 min (docs/evaluation.md).
TIMING_FLAGS = ("avx2", "avx512f", "avx512_bf16", "amx_bf16", "amx_tile")


def machine() -> dict[str, Any]:
  """The machine a run was timed on: processor, its `TIMING_FLAGS`, core count, Python."""
  flags = precision.cpu_flags()
  return {"processor": _cpu_model(), "cpus": os.cpu_count(),
          "cpu_flags": [f for f in TIMING_FLAGS if f in flags],
          "python": sys.version.split()[0], "platform": platform.platform()}


def write_run(table_dir: str, run: str, records: Sequence[Record], *, workdir: str,
              eval_seconds: float, info: dict[str, Any] | None = None) -> None:
  """Stores one run's records and its run info in the table folder.

  Args:
    table_dir: `results/<table>`.
    run: the run name.
    records: its eval records.
    workdir: its training workdir (config.json and metrics.jsonl are read).
    eval_seconds: how long its evaluation took.
    info: more fields for `runs/<run>.json` (e.g. package versions).

  The run info ends with the run's `training_curve` (`curves.training_curve`)
  where its metrics.jsonl has one, except for a variant (`variant_of` in
  `info`: another evaluation of a run that holds the curve).
  """
  records_lib.write_jsonl(records, record_path(table_dir, run))
  with open(workdir_lib.config_path(workdir)) as f:
    config = json.load(f)
  run_info = {"run": run, "config": config, "train_seconds": train_seconds(workdir),
              "eval_seconds": eval_seconds, "machine": machine(),
              "eval_provenance": provenance.provenance(), **(info or {})}
  curve = None if run_info.get("variant_of") else curves.training_curve(workdir)
  if curve:
    run_info["training_curve"] = curve
  write_run_info(table_dir, run, run_info)


def _run_info_path(table_dir: str, run: str) -> str:
  """`<table_dir>/runs/<run>.json`."""
  return os.path.join(table_dir, "runs", f"{file_name(run)}.json")


def read_run_info(table_dir: str, run: str) -> dict[str, Any]:
  """Reads `<table_dir>/runs/<run>.json` (a run's info: `write_run`'s fields)."""
  with open(_run_info_path(table_dir, run)) as f:
    return json.load(f)


def write_run_info(table_dir: str, run: str, info: dict[str, Any]) -> None:
  """Writes `<table_dir>/runs/<run>.json` (its folder is created)."""
  path = _run_info_path(table_dir, run)
  os.makedirs(os.path.dirname(path), exist_ok=True)
  with open(path, "w") as f:
    json.dump(info, f, indent=1)
    f.write("\n")
