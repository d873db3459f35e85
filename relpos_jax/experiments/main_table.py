"""Each table's compact main table: every mean with its 95% interval, one pooled definition.

A row per run: `conv.` (seeds converged / seeds, judged per row: below), `valid`
(held-out validation exact match at the row's own positions), exact match in
distribution (lengths ≤ L, L = the longest training length), at the eval lengths
nearest 1.5×, 2× and 4× L, and pooled over two fixed ranges that every table shares:

* `(L, 2L]`: every eval example with L < length ≤ 2L (every stored grid covers it);
* `(L, 4L]`: the same up to 4L, where the grid reaches 4L (else "—");
* SCAN rows add the pooled exact match over the whole test split (its own column).

Pooled means each example weighs the same within a seed; a cell is the mean over
seeds with the hierarchical-bootstrap interval of `stats.mean_interval` (seeds, and
the examples within each seed; an example's value is its exact-match rate over its
position draws). The legend lists the lengths each pooled column covers per task.

Convergence per row (DESIGN.md): a row is converged by validation at the positions
it is decoded at. Records since that rule carry it (`checkpoint_valid_positions`
marks them); older records of a randomized run's 0..L−1 row were validated only at
random positions, so that row is judged here by its test exact match at the
training lengths against the same threshold, and marked `*`.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

import numpy as np

from relpos_jax.experiments import stats
from relpos_jax.experiments import tables

Record = tables.Record
IN_DIST = "in-dist"
POOLED_2X, POOLED_4X, POOLED_TEST = "pooled (L, 2L]", "pooled (L, 4L]", "pooled test split"
MULTIPLE_COLUMNS = ("1.5×", "2×", "4×")
FALLBACK = "*"
PROVENANCE = "§"
OLD_RANDOM = "◊"
DRAW_SD = "draw sd (L, 2L]"


def is_scan(records: Sequence[Record]) -> bool:
  """Whether the run is a SCAN task (scored on its whole test split)."""
  return any(str(r.get("task", "")).startswith("scan") for r in records)


def pooled_ranges(lengths: Sequence[int], max_train_length: int,
                  scan: bool = False) -> dict[str, list[int]]:
  """The eval lengths of each pooled column.

  Args:
    lengths: the run's eval lengths.
    max_train_length: L.
    scan: add the whole test split (every eval length).

  Returns:
    `{POOLED_2X: L < n ≤ 2L, POOLED_4X: L < n ≤ 4L (empty unless the grid
    reaches 4L)[, POOLED_TEST: every length]}`.
  """
  lengths = sorted({int(n) for n in lengths})
  L = int(max_train_length)
  ranges = {POOLED_2X: [n for n in lengths if L < n <= 2 * L],
            POOLED_4X: ([n for n in lengths if L < n <= 4 * L]
                        if lengths and max(lengths) >= 4 * L else [])}
  if scan:
    ranges[POOLED_TEST] = lengths
  return ranges


def example_values(record: Record) -> np.ndarray | None:
  """One record's per-example exact-match rates; None if not representable or empty.

  From `exact_counts` / `position_draws` where stored; older records, whose
  examples are each scored once, give `round(exact_match · num_examples)` ones.
  """
  n = int(record.get("num_examples") or 0)
  value = record.get("exact_match")
  if record.get("error") or not n or value is None or np.isnan(float(value)):
    return None
  if record.get("exact_counts") is not None:
    return np.asarray(record["exact_counts"], float) / int(record.get("position_draws") or 1)
  k = int(round(float(value) * n))
  return np.concatenate([np.ones(k), np.zeros(n - k)])


def seed_samples(records: Sequence[Record], lengths: Sequence[int]) -> list[np.ndarray]:
  """Per seed (ascending), its per-example values over `lengths` (seeds without any left out)."""
  by_seed = samples_by_seed(records, lengths)
  return [by_seed[s] for s in sorted(by_seed)]


def samples_by_seed(records: Sequence[Record], lengths: Sequence[int]) -> dict[int, np.ndarray]:
  """Seed -> its per-example values over `lengths`, for the seeds that have any."""
  wanted = {int(n) for n in lengths}
  by_seed: dict[int, list[np.ndarray]] = {}
  for r in records:
    if int(r["length"]) in wanted:
      values = example_values(r)
      if values is not None:
        by_seed.setdefault(int(r["seed"]), []).append(values)
  return {s: np.concatenate(v) for s, v in by_seed.items()}


def cell(records: Sequence[Record], lengths: Sequence[int]) -> stats.Interval | None:
  """The pooled exact match over `lengths` with its interval; None if nothing to pool."""
  samples = seed_samples(records, lengths)
  return stats.mean_interval(samples) if lengths and samples else None


def row_convergence(records: Sequence[Record]) -> tuple[int, int, bool, list[float]]:
  """(seeds converged, seeds, judged by the fallback, each seed's validation score).

  See the module docstring: the row's own validation, or for an old randomized
  0..L−1 row its test exact match at the training lengths.
  """
  by_seed: dict[int, list[Record]] = {}
  for r in records:
    by_seed.setdefault(int(r["seed"]), []).append(r)
  converged, scores, fallback = 0, [], False
  for seed in sorted(by_seed):
    recs = by_seed[seed]
    first = recs[0]
    threshold = float(first.get("converged_at") or 0.95)
    old_mismatch = ("checkpoint_valid_positions" not in first
                    and first.get("valid_positions") not in (None, first.get("eval_positions")))
    if old_mismatch:
      fallback = True
      L = int(first["max_train_length"])
      values = [float(r["exact_match"]) for r in recs
                if int(r["length"]) <= L and not r.get("error")]
      score = float(np.mean(values)) if values else float("nan")
      ok = bool(values) and score >= threshold
    else:
      score = float(first.get("valid_exact_match", float("nan")))
      ok = bool(first.get("converged", True))
    converged += ok
    scores.append(score)
  return converged, len(by_seed), fallback, scores


def old_random_protocol(records: Sequence[Record]) -> bool:
  """Whether a random-position row was decoded under the superseded protocol.

  Before `position_draws` was recorded, decoding at random positions drew one sample
  per batch, shared by every seed and sized by the padded decode width.
  """
  return any(r.get("eval_positions") == "random" and "position_draws" not in r
             for r in records)


def draw_spread(records: Sequence[Record], lengths: Sequence[int]) -> float | None:
  """Mean over seeds and `lengths` of the sd (ddof=1) of exact match across position draws.

  None when the records were decoded once (0..L−1, or before draws were recorded).
  """
  wanted = {int(n) for n in lengths}
  sds = [float(np.std(r["exact_match_draws"], ddof=1)) for r in records
         if int(r["length"]) in wanted and len(r.get("exact_match_draws") or []) > 1]
  return float(np.mean(sds)) if sds else None


def provenance_problems(records: Sequence[Record], run_info: Mapping[str, Any] | None) -> list[str]:
  """What is wrong with a run's provenance: a dirty eval or training tree, no training commit."""
  problems = []
  if any(((r.get("provenance") or {}).get("git") or {}).get("dirty") for r in records):
    problems.append("evaluated from a tree with uncommitted changes")
  if run_info is not None:
    config = run_info.get("config") or {}
    parts = run_info.get("seed_parts") or []
    # Seeds trained alone carry their own provenance; the others were trained together,
    # under the config's (a run stored with n seeds and given more keeps it for those n).
    trained = [p.get("provenance") for p in parts]
    if (sum(int(p.get("num_seeds", 1)) for p in parts) < int(config.get("num_seeds") or 0)
        or not parts):
      trained.append(config.get("provenance"))
    if not all(trained):
      problems.append("no training provenance recorded" if not any(trained)
                      else "no training provenance recorded for some seeds")
    if any(((p or {}).get("git") or {}).get("dirty") for p in trained):
      problems.append("trained from a tree with uncommitted changes")
  return problems


def table(records: Sequence[Record], *, run_infos: Mapping[str, Mapping[str, Any]] | None = None,
          digits: int = 2) -> str:
  """The main table of one results table (module docstring), as markdown with its legend.

  Args:
    records: the table's records (one or more runs).
    run_infos: run name -> its `runs/<run>.json` (for training provenance; a
      variant `<run>@...` uses its own or its run's).
    digits: decimals.

  Returns:
    Markdown: the table and a legend naming each column, the pooled lengths per
    task and every mark used.
  """
  runs = tables.by_run(records)
  scan = any(is_scan(recs) for recs in runs.values())
  draws = any(len(r.get("exact_match_draws") or []) > 1 for r in records)
  header = (["run", "conv.", "valid", IN_DIST, *MULTIPLE_COLUMNS, POOLED_2X, POOLED_4X]
            + ([POOLED_TEST] if scan else []) + ([DRAW_SD] if draws else []))
  rows, covered, marks = [], {}, set()
  for run, recs in runs.items():
    lengths = sorted({int(r["length"]) for r in recs})
    L = int(recs[0]["max_train_length"])
    groups = tables.length_groups(lengths, L)
    ranges = pooled_ranges(lengths, L, is_scan(recs))
    covered.setdefault((str(recs[0].get("task")), L), ranges)
    done, total, fallback, valid_S = row_convergence(recs)
    name = run
    if done < total:
      name += f" {tables.UNCONVERGED}"
      marks.add(tables.UNCONVERGED)
    if old_random_protocol(recs):
      name += f" {OLD_RANDOM}"
      marks.add(OLD_RANDOM)
    info = (run_infos or {}).get(run) or (run_infos or {}).get(run.split("@")[0])
    if provenance_problems(recs, info):
      name += f" {PROVENANCE}"
      marks.add(PROVENANCE)
    valid = _seed_level(valid_S, digits)
    if fallback:
      valid += f" {FALLBACK}"
      marks.add(FALLBACK)
    cells = [cell(recs, groups[IN_DIST])] + [cell(recs, groups[c]) for c in MULTIPLE_COLUMNS]
    cells += [cell(recs, ranges[POOLED_2X]), cell(recs, ranges[POOLED_4X])]
    if scan:
      cells.append(cell(recs, ranges.get(POOLED_TEST, [])))
    row = [name, f"{done}/{total}", valid] + [stats.format_interval(c, digits) for c in cells]
    if draws:
      spread = draw_spread(recs, ranges[POOLED_2X])
      row.append(tables.EMPTY if spread is None else f"{spread:.{digits}f}")
    rows.append(row)
  legend = _legend(covered, marks)
  if draws:
    legend.append(f"{DRAW_SD}: rows decoded at random positions score each example over "
                  "several independent position draws (records' `position_draws`); the sd "
                  "across draws of a length's exact match, averaged over (L, 2L] and seeds. "
                  "The intervals resample each example's mean over its draws.")
  return tables.document("", header, rows, legend).lstrip("#").lstrip()


def _seed_level(values_S: Sequence[float], digits: int) -> str:
  """Mean over seeds with the seed-level interval (one value per seed)."""
  values = [v for v in values_S if np.isfinite(v)]
  if not values:
    return tables.EMPTY
  return stats.format_interval(stats.mean_interval([[v] for v in values]), digits)


def _span(lengths: Sequence[int]) -> str:
  """`25–40 (4 lengths)` or `—`."""
  if not lengths:
    return tables.EMPTY
  return f"{min(lengths)}–{max(lengths)} ({len(lengths)} length{'s' * (len(lengths) > 1)})"


def _legend(covered: Mapping[tuple[str, int], Mapping[str, list[int]]], marks: set[str]) -> list[str]:
  """The legend lines: what each column is, the pooled lengths per task, the marks."""
  lines = [
      "Exact match (greedy decoding), mean over seeds [95% interval: hierarchical bootstrap "
      "over seeds and eval examples, t quantile with Welch–Satterthwaite df; "
      "relpos_jax/experiments/stats.py]. in-dist: lengths ≤ L (the longest training length); 1.5×, 2×, 4×: the eval "
      "length nearest that multiple of L (within 15%); pooled: every example of the range "
      "weighs the same. valid: held-out validation exact match at the positions the row is "
      "decoded at, [interval over seeds]; conv.: seeds at or above the run's threshold.",
      "Lengths pooled: " + "; ".join(
          f"{task} (L = {L}): (L, 2L] = {_span(r[POOLED_2X])}, (L, 4L] = {_span(r[POOLED_4X])}"
          + (f", test split = {_span(r[POOLED_TEST])}" if POOLED_TEST in r else "")
          for (task, L), r in sorted(covered.items())) + "."]
  if tables.UNCONVERGED in marks:
    lines.append(f"{tables.UNCONVERGED}: some seed is below its validation threshold at the "
                 "positions this row is decoded at: it did not learn the task there, so its "
                 "columns are not read as extrapolation.")
  if FALLBACK in marks:
    lines.append(f"{FALLBACK}: a randomized run's 0..L−1 row stored before validation per row: "
                 "judged (and `valid` shown) by its test exact match at the training lengths.")
  if OLD_RANDOM in marks:
    lines.append(f"{OLD_RANDOM}: decoded at random positions under the superseded protocol (one "
                 "draw per batch, shared by all seeds, sized by the padded decode width): off "
                 "the training distribution at long lengths and without the draws' variance; "
                 "to be re-run (results/randomized/notes.md).")
  if PROVENANCE in marks:
    lines.append(f"{PROVENANCE}: provenance incomplete (trained or evaluated from a tree with "
                 "uncommitted changes, or no training provenance recorded); see the run's "
                 "runs/<run>.json.")
  return lines
