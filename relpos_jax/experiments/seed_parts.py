"""Runs trained in seed parts: each part one seed, or several trained together, stored
under `results/<table>/parts/` until `merge_parts` joins them into the run's records
(`added_seeds.append_parts` appends the parts of seeds added to a stored run).

A part is the run with `seed` and `num_seeds` narrowed to its seeds (`part_config`),
named `<run>.seed<k>` or `<run>.seeds<a>-<b>`; `parts/` is a table folder of its own
(`store.py`'s layout), its run infos saying which run each part belongs to (`part_info`).
"""

from __future__ import annotations

import copy
import json
import os
import re
from typing import Any, Sequence

from absl import logging
import ml_collections

from relpos_jax import workdir as workdir_lib
from relpos_jax.experiments import curves
from relpos_jax.experiments import records as records_lib
from relpos_jax.experiments import store
from relpos_jax.experiments import tables

Record = tables.Record

PARTS_DIR = "parts"


def part_config(config: ml_collections.ConfigDict, k: int,
                num_seeds: int = 1) -> ml_collections.ConfigDict:
  """The part of a run that holds its replicas k..k+num_seeds−1 (one seed by default).

  Replica k of a run (seed `config.seed + k`: its own init, dropout and data
  order) is the single-seed run of that seed, computed alone or in a vmapped step
  with fewer seeds instead of with all of them (train_lib_test and added_seeds_test
  check they agree to float rounding). Whether seeds together cost less than alone
  depends on the model and the machine (docs/evaluation.md), hence parts of one or
  several seeds (`--seeds_per_part`).
  """
  if not (0 <= k and num_seeds >= 1 and k + num_seeds <= config.num_seeds):
    raise ValueError(f"part of seeds {k}..{k + num_seeds - 1} of a run of "
                     f"{config.num_seeds} seeds")
  part = copy.deepcopy(config)
  part.seed, part.num_seeds = config.seed + k, num_seeds
  return part


def part_groups(missing: Sequence[int], seeds_per_part: int,
                 resumable: Sequence[Sequence[int]] = ()) -> list[list[int]]:
  """The missing seeds in parts, by first seed: each of `resumable` (parts an earlier
  session left unfinished, all of whose seeds are missing) as it is, then consecutive
  runs of the rest, cut into groups of at most `seeds_per_part`."""
  groups = [list(g) for g in resumable if g and all(s in missing for s in g)]
  taken = {s for g in groups for s in g}
  rest: list[list[int]] = []
  for seed in (s for s in missing if s not in taken):
    if rest and rest[-1][-1] == seed - 1 and len(rest[-1]) < seeds_per_part:
      rest[-1].append(seed)
    else:
      rest.append([seed])
  return sorted(groups + rest)


def plan(results_dir: str, sweep_dir: str, run: str, config: dict[str, Any],
         variants: Sequence[str], seeds: Sequence[int], seeds_per_part: int) -> list[list[int]]:
  """The parts to train for those of `seeds` whose records are not stored: groups of
  seeds, by first seed (`part_groups`).

  A stored seed is skipped (logged). A part workdir an earlier session left in
  `sweep_dir` with a checkpoint resumes as it was grouped, whatever `seeds_per_part`
  now asks: it holds replicas of its own seeds only.

  Args:
    results_dir: `results/<table>`.
    sweep_dir: the sweep's workdir (where part workdirs are trained).
    run: the run name.
    config: the run's config (JSON data).
    variants: the labels of its eval-time variants.
    seeds: the seeds wanted (ascending).
    seeds_per_part: the most seeds a new part trains together.

  Returns:
    The parts to train, each a list of consecutive seeds.

  Raises:
    ValueError: a seed stored in two parts.
  """
  stored = stored_part_of_seeds(results_dir, run, config, variants)
  for seed in seeds:
    if seed in stored:
      logging.info("%s: seed %d stored in %s, skipping", run, seed, stored[seed])
  leftover = leftover_parts(sweep_dir, run)
  groups = part_groups([s for s in seeds if s not in stored], seeds_per_part, leftover)
  for group in groups:
    if group in leftover and len(group) != seeds_per_part:
      logging.info("%s: resuming %s, left by an earlier session", run,
                   part_name(run, group[0], len(group)))
  return groups


def describe(group: Sequence[int], k: int, num_seeds: int) -> str:
  """The log's name of a part: "seed 4 (2 of 3, trained alone)", "seeds 3-4 (1-2 of 3, ...)"."""
  if len(group) == 1:
    return f"seed {group[0]} ({k + 1} of {num_seeds}, trained alone)"
  return (f"seeds {group[0]}-{group[-1]} ({k + 1}-{k + len(group)} of {num_seeds}, "
          "trained together)")


def leftover_parts(sweep_dir: str, name: str) -> list[list[int]]:
  """The seeds of each part workdir of run `name` in `sweep_dir` (`<name>.seed<k>`,
  `<name>.seeds<a>-<b>`) holding a checkpoint: parts an interrupted session left."""
  pattern = re.compile(re.escape(name) + r"\.(?:seed(\d+)|seeds(\d+)-(\d+))")
  found = []
  for entry in sorted(os.listdir(sweep_dir)) if os.path.isdir(sweep_dir) else []:
    match = pattern.fullmatch(entry)
    if match and workdir_lib.has_checkpoint(os.path.join(sweep_dir, entry)):
      one, first, last = match.groups()
      found.append([int(one)] if one else list(range(int(first), int(last) + 1)))
  return found


def part_name(run: str, seed: int, num_seeds: int = 1) -> str:
  """The name a run's part is stored under: `<run>.seed<seed>` for one seed,
  `<run>.seeds<first>-<last>` for seeds trained together in one part."""
  if num_seeds == 1:
    return f"{run}.seed{seed}"
  return f"{run}.seeds{seed}-{seed + num_seeds - 1}"


def parts_dir(table_dir: str) -> str:
  """`<table_dir>/parts`: a table folder of its own for the seed parts of unfinished runs."""
  return os.path.join(table_dir, PARTS_DIR)


def stored_parts(table_dir: str) -> dict[str, tuple[list[int], list[int]]]:
  """The seed parts stored so far: run -> (its seeds whose records are all stored, all its seeds).

  A run's seeds are those of the largest run its parts were trained for (parts of
  seeds added to a stored run, `added_seeds`, name more seeds than the run's first).

  Args:
    table_dir: `results/<table>`.

  Returns:
    Runs with at least one stored part (merged runs included), seeds ascending.
  """
  found: dict[str, tuple[list[int], list[int]]] = {}
  for info in _part_infos(table_dir):
    done, seeds = found.setdefault(info["part_of"], ([], []))
    done.extend(run_seeds(info["config"]))
    if len(info["seeds_of_run"]) > len(seeds):  # seeds added to a run: its parts' largest
      seeds[:] = sorted(info["seeds_of_run"])
  return {run: (sorted(set(done)), seeds) for run, (done, seeds) in found.items()}


def _part_infos(table_dir: str, run: str | None = None, config: dict[str, Any] | None = None,
                variants: Sequence[str] = ()) -> list[dict[str, Any]]:
  """The run infos of the parts (of `run`, or of every run) whose records are all stored:
  those `config` and `variants` name where given, else those each part was made with."""
  directory = os.path.join(parts_dir(table_dir), "runs")
  infos = []
  for name in sorted(os.listdir(directory)) if os.path.isdir(directory) else []:
    with open(os.path.join(directory, name)) as f:
      info = json.load(f)
    of, seeds = info.get("part_of"), run_seeds(info["config"])
    wanted = ((config, variants) if config is not None
              else (info["config"], info.get("part_variants", ())))
    if (of and (run is None or of == run) and info["run"] == part_name(of, seeds[0], len(seeds))
        and store.has_records(parts_dir(table_dir), info["run"], *wanted)):
      infos.append(info)
  return infos


def stored_part_of_seeds(table_dir: str, run: str, config: dict[str, Any] | None = None,
                         variants: Sequence[str] = ()) -> dict[int, str]:
  """Seed -> the name of the stored part of `run` that holds it (a part holds one seed,
  or several trained together); with `config`, only parts holding every record that
  config and `variants` name.

  Raises:
    ValueError: two stored parts hold the same seed (one of them must go).
  """
  found: dict[int, str] = {}
  for info in _part_infos(table_dir, run, config, variants):
    for seed in run_seeds(info["config"]):
      if seed in found:
        raise ValueError(f"seed {seed} of {run} is stored in two parts in "
                         f"{parts_dir(table_dir)}, {found[seed]} and {info['run']}: delete "
                         "one's records and runs files")
      found[seed] = info["run"]
  return found


def parts_of_seeds(table_dir: str, run: str, seeds: Sequence[int], config: dict[str, Any],
                   variants: Sequence[str] = ()) -> list[str] | None:
  """The stored parts that hold exactly `seeds` of `run` (with every record `config` and
  `variants` name), in seed order; None while a seed has no such part.

  Raises:
    ValueError: a seed is stored twice, or a part also holds a seed outside `seeds`.
  """
  found = stored_part_of_seeds(table_dir, run, config, variants)
  if not all(seed in found for seed in seeds):
    return None
  parts = list(dict.fromkeys(found[seed] for seed in seeds))
  outside = sorted(s for s, part in found.items() if part in parts and s not in seeds)
  if outside:
    raise ValueError(f"{run}'s parts in {parts_dir(table_dir)} also hold seeds {outside}, "
                     f"not among the seeds {list(seeds)} being stored")
  return parts


def part_info(run: str, config: dict[str, Any], variants: Sequence[str] = ()) -> dict[str, Any]:
  """The fields a part's `runs/<part>.json` adds: its run, the run's seeds, its variants."""
  return {"part_of": run, "seeds_of_run": run_seeds(config), "part_variants": list(variants)}


def run_seeds(config: dict[str, Any]) -> list[int]:
  """The seeds of a run's replicas: `seed`, `seed + 1`, ... (`num_seeds` of them; JSON data)."""
  return [int(config["seed"]) + k for k in range(int(config["num_seeds"]))]


_PART_PROVENANCE = ("provenance", "provenance_earlier")  # each part's own: in seed_parts


def merge_parts(table_dir: str, run: str, config: dict[str, Any],
                variants: Sequence[str] = ()) -> list[Record] | None:
  """Stores a run from its parts (of one seed each, or of several trained together) once
  every seed's are stored.

  Seed `config.seed + k`, in whichever part, becomes replica k: its records are the
  run's records for that seed, as if the seeds had been trained together
  (train_lib_test checks replica k of a run equals the single run of its seed to
  float rounding). `runs/<run>.json` holds the run's config (the parts' own, with
  `seed` and `num_seeds` of the run), the summed training and eval time,
  `seed_parts`: each part's name, first seed (and `num_seeds` where it holds
  several), times and training provenance, and the parts' training curves as one
  (`curves.merge`; left out if a part has none).

  Args:
    table_dir: `results/<table>`.
    run: the run name.
    config: the run's config (JSON data): `seed`, `num_seeds`, `randomized`.
    variants: the labels of its eval-time variants.

  Returns:
    The merged records (every one of `record_names`), or None while a part is missing.

  Raises:
    ValueError: a part was trained with another config than the run's (but its seed).
  """
  seeds = run_seeds(config)
  source = parts_dir(table_dir)
  names = store.record_names(run, config, variants)
  parts = parts_of_seeds(table_dir, run, seeds, config, variants)
  if parts is None:
    return None
  part_infos = check_parts(table_dir, run, config, parts)
  merged = []
  for name in names:
    suffix = name[len(run):]  # "", "@random_positions", "@<label>"
    records = [{**r, "run": name, "replica": seeds.index(int(r["seed"]))}
               for part in parts for r in part_records(table_dir, part + suffix)]
    infos = part_infos if not suffix else [store.read_run_info(source, part + suffix)
                                           for part in parts]
    run_config = {k: v for k, v in infos[0]["config"].items() if k not in _PART_PROVENANCE}
    run_config.update(seed=seeds[0], num_seeds=len(seeds))
    info = {"run": name, "config": run_config,
            "train_seconds": sum(i.get("train_seconds") or 0.0 for i in infos),
            "eval_seconds": sum(i.get("eval_seconds") or 0.0 for i in infos),
            "machine": infos[0]["machine"], "eval_provenance": infos[0]["eval_provenance"],
            "seed_parts": [part_entry(i) for i in infos]}
    if name != run:
      info["variant_of"] = run
    elif curve := curves.merge([i.get("training_curve") for i in infos]):
      info["training_curve"] = curve
    records_lib.write_jsonl(records, store.record_path(table_dir, name))
    store.write_run_info(table_dir, name, info)
    merged += records
  return merged


def part_records(table_dir: str, part: str) -> list[Record]:
  """A stored part's records (`part` may name a variant: `<part>@<label>`), each checked
  to be of a seed the part holds (a record's seed decides its replica in the run).

  Raises:
    ValueError: a record of a seed the part was not trained for.
  """
  source = parts_dir(table_dir)
  records = records_lib.read_jsonl(store.record_path(source, part))
  seeds = run_seeds(store.read_run_info(source, part)["config"])
  wrong = sorted({r.get("seed") for r in records} - set(seeds), key=str)
  if wrong:
    raise ValueError(f"{store.record_path(source, part)} holds records of seeds {wrong}, "
                     f"but the part was trained for seeds {seeds}: not merged")
  return records


def check_parts(table_dir: str, run: str, config: dict[str, Any],
                parts: Sequence[str]) -> list[dict[str, Any]]:
  """The run infos of a run's stored `parts` (names), each checked to be that run's.

  Raises:
    ValueError: a part was trained with another config than the run's (but its seeds).
  """
  source = parts_dir(table_dir)
  wanted = store.run_identity(config)
  part_infos = [store.read_run_info(source, part) for part in parts]
  for name, part in zip(parts, part_infos):
    if store.run_identity({**part["config"], "seed": config["seed"],
                           "num_seeds": config["num_seeds"]}) != wanted:
      raise ValueError(f"{name} in {source} was trained with another config "
                       f"than {run}'s (the sweep changed since?): delete its records and runs "
                       "files there to train it again")
  return part_infos


def part_entry(info: dict[str, Any]) -> dict[str, Any]:
  """A part's entry in its run's `seed_parts`: name, first seed (and `num_seeds` where it
  holds several), times, machine, training provenance."""
  num_seeds = int(info["config"].get("num_seeds", 1))
  return {"run": info["run"], "seed": info["config"]["seed"],
          **({"num_seeds": num_seeds} if num_seeds > 1 else {}),
          "train_seconds": info.get("train_seconds"), "eval_seconds": info.get("eval_seconds"),
          "machine": info["machine"],
          **{k: info["config"][k] for k in _PART_PROVENANCE if k in info["config"]}}

