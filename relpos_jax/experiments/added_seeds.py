"""Adding seeds to a stored run: seeds n..N−1 trained alone, appended to its n seeds' records.

A table that stores a run with n seeds is asked for N > n by the same sweep with
`num_seeds` raised (`--config.num_seeds=N`, with `--results_dir`). `sweep.run_sweep`
then trains only seeds n..N−1, one at a time (or `--seeds_per_part` at a time), as the
run's seed parts (the very parts
`--split_seeds` trains for those seeds: `seed_parts.part_name`, under `parts/`), evaluates
each with every evaluation the table stores of the run (its `store.record_names`:
random positions, eval-time variants), and once all are stored, `append_parts`
appends their records to the run's: the stored seeds' lines stay byte for byte,
and the run then reads as an N-seed run everywhere (tables, intervals, `compare`).

Seed k is the seed it would have been: replica k of a run has seed `seed + k`, and
its initialisation, data order, dropout, randomized positions and eval sets are
functions of that seed alone, the same trained alone as in a vmapped program of any
size. Its *training* agrees with that replica to float rounding, not bit for bit
(tests/added_seeds_test.py: equal metrics, parameters within 1e-5 after a smoke
run): the initial parameters, the batches and the first loss are bit for bit the
same, but XLA compiles the step of one replica into other kernels than the step of
several, so the gradients differ in their last bits from the first step; and a
stacked batch is padded to its longest replica's length, one alone to its own.
Thousands of steps can amplify that, so an added seed is an independent draw of the
same run, not a replay of the replica a vmapped N-seed run would have trained.

Before anything trains, the request is refused in one line when the stored run is
not the asked run with fewer seeds: its stored config differs apart from
`num_seeds`, its records hold other seeds than `seed`..`seed + n − 1` (as replicas
0..n−1), they were evaluated under a protocol the current sweep no longer uses
(checkpoint rule, eval seed, threshold, the draws of a random-position row, a
randomized run's row validated before per-row validation), or it is another table's
run copied here (`reused_from`: add the seeds there). Before anything is appended,
the new seeds' records must match the stored ones on every protocol field
(`PROTOCOL_KEYS`, per length); otherwise they stay in `parts/` and nothing changes.

Provenance stays per seed: each record names the commit that evaluated it; the
run's `runs/<run>.json` keeps its config (`num_seeds` now N; its `provenance` is
the first training's, of the seeds trained together) and gains a `seed_parts`
entry per added seed (its part, training and eval time, machine, training and eval
provenance), as a run merged from parts has for every seed, and the added seeds'
training curves beside the stored seeds' (`curves.py`; none if those have none).
"""

from __future__ import annotations

import os
from typing import Any, Sequence

from relpos_jax.experiments import curves
from relpos_jax.experiments import records as records_lib
from relpos_jax.experiments import seed_parts
from relpos_jax.experiments import store
from relpos_jax.positions import randomized as randomized_lib

Record = store.Record
# Record fields that say how a seed was evaluated (not what it scored): equal for every
# seed of a run at each length. Seq2seq records, then a language model's.
PROTOCOL_KEYS = ("scheme", "task", "min_train_length", "max_train_length", "checkpoint_rule",
                 "converged_at", "valid_source", "valid_num_examples", "overrides",
                 "eval_positions", "valid_positions", "checkpoint_valid_positions",
                 "final_step", "length", "num_examples", "num_available", "eval_seed",
                 "position_draws", "train_length", "context", "depth", "sliding", "manifest")
_ZERO_TO_L = "0..L-1"  # where a run not trained at random positions is decoded and validated


def seeds_to_add(table_dir: str, run: str, config: dict[str, Any],
                 variants: Sequence[str] = ()) -> list[int]:
  """The replicas k (seed `config["seed"] + k`) a stored run lacks of the run `config` asks for.

  Args:
    table_dir: `results/<table>` (it stores the run's records).
    run: the run name.
    config: the asked run's config as JSON data (`workdir.config_json`).
    variants: the labels of its eval-time variants.

  Returns:
    `[n, ..., N−1]` for a run stored with n < N = `config["num_seeds"]` seeds; `[]`
    when it stores at least N (a run stored with more seeds serves a table of fewer).

  Raises:
    ValueError: the stored run cannot be extended to the asked one (module
      docstring), in one line naming the file and what to do.
  """
  info = store.read_run_info(table_dir, run)
  stored = info["config"]
  n, wanted = int(stored["num_seeds"]), int(config["num_seeds"])
  if n >= wanted:
    return []
  where = os.path.join(table_dir, "runs", f"{store.file_name(run)}.json")
  if info.get("reused_from"):
    raise ValueError(
        f"{where} is a copy of {info['reused_from']} (reused_from): add the seeds to that "
        f"table's run, then delete this table's copy (records/{store.file_name(run)}*.jsonl, "
        f"runs/{store.file_name(run)}*.json) and rerun: the sweep copies it again")
  changed = _changed_keys(stored, config)
  if changed:
    raise ValueError(
        f"{where} stores {run} with another config than asked, apart from num_seeds "
        f"({', '.join(changed)}): seeds added now would belong to another run. Keep its "
        f"{n} seeds, or train the asked run under another name or table")
  for name in store.record_names(run, config, variants):
    path = store.record_path(table_dir, name)
    records = records_lib.read_jsonl(path)
    problem = (_seeds_problem(records, int(stored["seed"]), n)
               or _config_protocol_problem(records, config))
    if problem:
      raise ValueError(f"{path}: {problem}; no seeds are added to {run}")
  return list(range(n, wanted))


def append_parts(table_dir: str, run: str, config: dict[str, Any], variants: Sequence[str],
                 first: int) -> list[Record] | None:
  """Appends the stored parts of replicas `first`..N−1 to the run's records, once all are stored.

  Args:
    table_dir: `results/<table>`.
    run: the run name (stored with `first` seeds).
    config: the N-seed run's config (JSON data).
    variants: the labels of its eval-time variants.
    first: the replicas the table stores (n).

  Returns:
    The appended records (of every one of `record_names`), or None while a part is missing.

  Raises:
    ValueError: a part was trained with another config, or evaluated under another
      protocol than the stored seeds (nothing is written then).
  """
  seeds = seed_parts.run_seeds(config)[first:]
  source = seed_parts.parts_dir(table_dir)
  parts = seed_parts.parts_of_seeds(table_dir, run, seeds, config, variants)
  if parts is None:
    return None
  part_infos = seed_parts.check_parts(table_dir, run, config, parts)
  randomized = randomized_lib.validation_sampler(config.get("randomized")) is not None
  plan = []
  for name in store.record_names(run, config, variants):
    suffix = name[len(run):]  # "", "@random_positions", "@<label>"
    added = [{**r, "run": name, "replica": int(r["seed"]) - int(config["seed"])}
             for part in parts for r in seed_parts.part_records(table_dir, part + suffix)]
    problem = _protocol_difference(
        records_lib.read_jsonl(store.record_path(table_dir, name)), added, randomized)
    if problem:
      raise ValueError(f"{name}: {problem}; seeds {seeds} not appended (their records stay "
                       f"in {source})")
    infos = part_infos if not suffix else [
        store.read_run_info(source, part + suffix) for part in parts]
    plan.append((name, added, infos))
  appended = []
  for name, added, infos in reversed(plan):  # the run's own info last: it says "stored"
    _append_lines(store.record_path(table_dir, name), added)
    store.write_run_info(table_dir, name, _extended_info(
        store.read_run_info(table_dir, name), infos, int(config["num_seeds"])))
    appended = added + appended
  return appended


def _changed_keys(stored: dict[str, Any], config: dict[str, Any]) -> list[str]:
  """The dotted keys on which two runs' identities differ, `num_seeds` aside."""
  a, b = (_leaves({k: v for k, v in store.run_identity(c).items() if k != "num_seeds"})
          for c in (stored, config))
  return sorted(k for k in set(a) | set(b) if a.get(k, "(absent)") != b.get(k, "(absent)"))


def _leaves(tree: dict[str, Any], prefix: str = "") -> dict[str, Any]:
  """A nested dict as {dotted key: leaf}."""
  out = {}
  for key, value in tree.items():
    if isinstance(value, dict) and value:
      out.update(_leaves(value, f"{prefix}{key}."))
    else:
      out[f"{prefix}{key}"] = value
  return out


def _point(record: Record) -> tuple:
  """Where a record evaluates: its length (seq2seq) or context / depth / mode (LM)."""
  return tuple(record.get(k) for k in ("length", "context", "depth", "sliding"))


def _seeds_problem(records: Sequence[Record], seed: int, n: int) -> str | None:
  """What is wrong with a stored record file's seeds for a run of `n` from `seed`, or None."""
  pairs = sorted({(int(r["seed"]), int(r["replica"])) for r in records})
  if pairs != [(seed + k, k) for k in range(n)]:
    return (f"its (seed, replica) pairs are {pairs}, not seeds {seed}..{seed + n - 1} as "
            f"replicas 0..{n - 1} (its run file says {n} seeds from {seed})")
  points = {}
  for r in records:
    points.setdefault(int(r["seed"]), []).append(_point(r))
  if len({tuple(p) for p in points.values()}) > 1:
    return "its seeds were evaluated at different lengths"
  return None


def _config_protocol_problem(records: Sequence[Record], config: dict[str, Any]) -> str | None:
  """A stored record evaluated otherwise than the sweep evaluates a new seed now, or None."""
  rule = config.get("eval_checkpoint", "best")
  randomized = config.get("randomized") or {}
  random_run = randomized_lib.validation_sampler(randomized) is not None
  for r in records:
    if r.get("checkpoint_rule", rule) != rule:
      return f"evaluated at checkpoint rule {r['checkpoint_rule']!r}, the config's is {rule!r}"
    if int(r.get("eval_seed", 0)) != 0:
      return f"evaluated with eval_seed {r['eval_seed']}, a sweep uses 0"
    if "converged_at" in config and float(r.get("converged_at", config["converged_at"])) != float(
        config["converged_at"]):
      return f"judged converged at {r['converged_at']}, the config at {config['converged_at']}"
    if r.get("eval_positions") == "random" and r.get("position_draws") != randomized.get(
        "eval_draws"):
      return (f"decoded at random positions under another protocol (position_draws "
              f"{r.get('position_draws')}, now {randomized.get('eval_draws')}): re-evaluate its "
              "stored seeds first")
    if random_run and "checkpoint_valid_positions" not in r:
      return ("validated under the rule before per-row validation (no "
              "checkpoint_valid_positions): re-evaluate its stored seeds first")
  return None


def _protocol_value(record: Record, key: str, randomized: bool) -> Any:
  """A protocol field, with the value records older than the field implied.

  A run not trained at random positions was always validated at 0..L−1, and a record
  decoded at 0..L−1 has one position draw (records before `position_draws` omit it).
  """
  if key in ("valid_positions", "checkpoint_valid_positions") and key not in record and (
      not randomized):
    return _ZERO_TO_L
  if key == "position_draws" and key not in record and record.get("eval_positions") != "random":
    return 1
  return record.get(key)


def _protocol_difference(stored: Sequence[Record], added: Sequence[Record],
                         randomized: bool) -> str | None:
  """The first protocol field on which an added seed's records differ from stored seed 0's."""
  first = [r for r in stored if int(r["replica"]) == 0]
  metrics = lambda r: sorted(k for k in records_lib.KEYS if k in r)
  for seed in sorted({int(r["seed"]) for r in added}):
    mine = [r for r in added if int(r["seed"]) == seed]
    if [_point(r) for r in mine] != [_point(r) for r in first]:
      return f"seed {seed} was evaluated at other lengths than the stored seeds"
    for a, b in zip(first, mine):
      for key in PROTOCOL_KEYS:
        old, new = _protocol_value(a, key, randomized), _protocol_value(b, key, randomized)
        if old != new:
          return f"seed {seed} at {_point(b)[0]}: {key} is {new!r}, the stored seeds' {old!r}"
      if metrics(a) != metrics(b) or bool(a.get("error")) != bool(b.get("error")):
        return f"seed {seed} at {_point(b)[0]}: other metrics than the stored seeds'"
  return None


def _append_lines(path: str, records: Sequence[Record]) -> None:
  """Appends records to a .jsonl file (its bytes kept), replacing it whole (atomically)."""
  with open(path, "rb") as f:
    data = f.read()
  if data and not data.endswith(b"\n"):
    data += b"\n"
  partial = f"{path}.{os.getpid()}.tmp"
  with open(partial, "wb") as f:
    f.write(data + "".join(records_lib.jsonl_line(r) for r in records).encode())
  os.replace(partial, path)


def _extended_info(info: dict[str, Any], part_infos: Sequence[dict[str, Any]],
                   num_seeds: int) -> dict[str, Any]:
  """A run's info with its added parts: `num_seeds`, times, `seed_parts`, training curves."""
  out = {**info, "config": {**info["config"], "num_seeds": num_seeds},
         "train_seconds": (info.get("train_seconds") or 0.0) + sum(
             i.get("train_seconds") or 0.0 for i in part_infos),
         "eval_seconds": (info.get("eval_seconds") or 0.0) + sum(
             i.get("eval_seconds") or 0.0 for i in part_infos),
         "seed_parts": list(info.get("seed_parts") or []) + [
             {**seed_parts.part_entry(i), "eval_provenance": i.get("eval_provenance")}
             for i in part_infos]}
  out.pop("training_curve", None)  # a curve of only some seeds would look like fewer seeds
  if not info.get("variant_of") and (curve := curves.merge(
      [info.get("training_curve")] + [i.get("training_curve") for i in part_infos])):
    out["training_curve"] = curve
  return out
