"""Records -> markdown and CSV tables, mean ± std over seeds.

A record is one (run, seed, length) result, as `runner.evaluate_workdir`
writes them: identity keys (`run`, `scheme`, `task`, `seed`, `length`,
`min_train_length`, `max_train_length`, `error`, ...) and float metrics
(`exact_match`, `token_accuracy`, `loss`, `fail_pure_stop`, ...). A record with
an `error` is *not representable*: the scheme cannot encode that length (e.g. a
learned position table too short); its metrics are NaN and its cells read `n/a`.
A NaN metric without an error has no value for another reason (a share of the
failures where nothing failed) and reads `—`.

Statistics over seeds: the mean, and the sample standard deviation (ddof=1) when
there are two or more seeds. Lengths are grouped relative to the run's longest
training length L (`length_groups`): in-distribution (≤ L), the eval lengths
nearest 1.5 L, 2 L and 4 L, and all of extrapolation (> L). A group's value
averages each seed over the group's lengths first, then takes mean ± std over
seeds, so the spread is the spread between seeds. Extrapolation is reported
twice: the mean over lengths (each length weighs the same) and *pooled* over
every extrapolation example (each example weighs the same, as Kazemnejad et al.
report it), `pooled_stats`.

Convergence: records that carry `valid_exact_match` (the held-out validation
score of the evaluated checkpoint) and `converged` get a `valid` column and a
`conv.` column (seeds at or above `converged_at`); a run with any seed below it
is marked `†` after its name, and its extrapolation numbers must not be read as
a property of the scheme (it did not learn the task).
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from relpos_jax.experiments import records as records_lib

# One eval record: the JSON object of one (run, seed, length), as evaluate writes it.
Record = dict[str, Any]

NA = "n/a"
EMPTY = "—"
PARTIAL = "‡"
UNCONVERGED = "†"
MULTIPLES = (1.5, 2.0, 4.0)
MULTIPLE_TOLERANCE = 0.15  # a length within 15% of m·L stands for "m×"
# Float fields fixed per (run, seed) when its checkpoint is picked, repeated in every
# length's record: not metrics over length, so tables give them once per run.
RUN_FIELDS = ("valid_exact_match", "valid_token_accuracy", "best_valid_exact_match",
              "converged_at")
IN_DIST, EXTRAP, POOLED = "in-dist", "extrap", "pooled"
LENGTH_UNIT = ("Lengths are eval lengths: input tokens for synthetic tasks, target tokens "
               "for SCAN and TFDS sources.")
NA_LEGEND = (f"{NA}: not representable: the scheme cannot encode that length (e.g. a learned "
             "position table shorter than the padded sequence; see the records' `error`).")


def by_run(records: Sequence[Record]) -> dict[str, list[Record]]:
  """Records grouped by `run`, in order of first appearance.

  Args:
    records: records of any runs.

  Returns:
    run name -> its records.
  """
  groups: dict[str, list[Record]] = {}
  for record in records:
    groups.setdefault(record["run"], []).append(record)
  return groups


def num_seeds(records: Sequence[Record]) -> int:
  """The number of distinct seeds in the records.

  Args:
    records: records (usually of one run).

  Returns:
    The count.
  """
  return len({r["seed"] for r in records})


def task_suffix(records: Sequence[Record]) -> str:
  """A title suffix naming the records' tasks.

  Args:
    records: records of one or more runs.

  Returns:
    `" — task copy, reverse"`, or empty when the records name no task.
  """
  tasks = sorted({str(r.get("task", "")) for r in records} - {""})
  return f" — task {', '.join(tasks)}" if tasks else ""


def metric_keys(records: Sequence[Record]) -> list[str]:
  """The metrics in the records: their float-valued keys but `RUN_FIELDS`, in record order."""
  keys: list[str] = []
  for record in records:
    keys += [k for k, v in record.items()
             if isinstance(v, float) and k not in keys and k not in RUN_FIELDS]
  return keys


def seed_matrix(records: Sequence[Record],
                metric: str) -> tuple[list[int], list[int], np.ndarray, np.ndarray]:
  """One run's metric as a seeds × lengths matrix.

  Args:
    records: the records of one run.
    metric: a metric key.

  Returns:
    `(lengths, seeds, values_SxL, na_SxL)`: sorted lengths and seeds; the
    values (NaN where missing or without value) and whether the record is not
    representable (has an `error`).
  """
  lengths = sorted({int(r["length"]) for r in records})
  seeds = sorted({int(r["seed"]) for r in records})
  values_SxL = np.full((len(seeds), len(lengths)), np.nan)
  na_SxL = np.zeros_like(values_SxL, bool)
  for r in records:
    s, l = seeds.index(int(r["seed"])), lengths.index(int(r["length"]))
    value = r.get(metric)
    values_SxL[s, l] = np.nan if value is None else float(value)
    na_SxL[s, l] = bool(r.get("error"))
  return lengths, seeds, values_SxL, na_SxL


def mean_std(values: np.ndarray) -> tuple[float, float, int]:
  """`(mean, sample std (ddof=1; 0 for one value), count)` of the non-NaN values."""
  values = np.asarray(values, float)
  values = values[~np.isnan(values)]
  if not values.size:
    return float("nan"), float("nan"), 0
  std = float(np.std(values, ddof=1)) if values.size > 1 else 0.0
  return float(np.mean(values)), std, int(values.size)


def length_stats(records: Sequence[Record], metric: str = "exact_match"):
  """Per-length mean and std over seeds of one run.

  Args:
    records: the records of one run.
    metric: a metric key.

  Returns:
    `(lengths, mean_L, std_L, count_L)`: numpy arrays; NaN mean where no seed
    has a value.
  """
  lengths, _, values_SxL, _ = seed_matrix(records, metric)
  stats = [mean_std(values_SxL[:, l]) for l in range(len(lengths))]
  return (np.asarray(lengths), np.asarray([s[0] for s in stats]),
          np.asarray([s[1] for s in stats]), np.asarray([s[2] for s in stats]))


def multiple_label(multiple: float) -> str:
  """`1.5` -> `"1.5×"`, `2.0` -> `"2×"`."""
  return f"{multiple:g}×"


def length_groups(lengths: Sequence[int], max_train_length: int) -> dict[str, list[int]]:
  """The eval lengths of each column group, relative to the longest training length L.

  Args:
    lengths: a run's eval lengths.
    max_train_length: L.

  Returns:
    `{"in-dist": lengths ≤ L, "1.5×": [n], "2×": [n], "4×": [n], "extrap":
    lengths > L}`, where the m× group holds the eval length > L nearest m·L if
    it lies within 15% of m·L (else none).
  """
  lengths = sorted({int(n) for n in lengths})
  beyond = [n for n in lengths if n > max_train_length]
  groups = {IN_DIST: [n for n in lengths if n <= max_train_length]}
  for m in MULTIPLES:
    goal = m * max_train_length
    near = min(beyond, key=lambda n, goal=goal: (abs(n - goal), n), default=None)
    ok = near is not None and abs(near - goal) <= MULTIPLE_TOLERANCE * goal
    groups[multiple_label(m)] = [near] if ok else []
  groups[EXTRAP] = beyond
  return groups


def group_stats(records: Sequence[Record], metric: str,
                group: Sequence[int]) -> tuple[float, float, int, bool, bool] | None:
  """Mean ± std over seeds of each seed's mean over a group of lengths.

  Args:
    records: the records of one run.
    metric: a metric key.
    group: eval lengths (one of `length_groups`).

  Returns:
    `(mean, std, seeds, partial, not_representable)`: `partial`: some lengths of
    the group are not representable and left out; `not_representable`: all are.
    None if the group is empty.
  """
  if not group:
    return None
  lengths, _, values_SxL, na_SxL = seed_matrix(records, metric)
  cols = [lengths.index(n) for n in group if n in lengths]
  if not cols:
    return None
  values_SxG, na_SxG = values_SxL[:, cols], na_SxL[:, cols]
  per_seed_S = np.array([np.mean(row[~np.isnan(row)]) if (~np.isnan(row)).any() else np.nan
                         for row in values_SxG])
  mean, std, count = mean_std(per_seed_S)
  return mean, std, count, bool(na_SxG.any()) and count > 0, bool(na_SxG.all())


def pooled_stats(records: Sequence[Record], metric: str,
                 group: Sequence[int]) -> tuple[float, float, int, bool, bool] | None:
  """Mean ± std over seeds of each seed's metric pooled over the group's examples.

  Each seed's value is `Σ_l metric_l · n_l / Σ_l n_l` over the group's lengths l
  with a value, n_l = `num_examples` of that record: every example weighs the
  same, so a length with more examples counts more (SCAN's 576 commands of 30
  actions against 64 of 48).

  Args:
    records: the records of one run.
    metric: a rate metric (exact_match, token_accuracy, ...).
    group: eval lengths.

  Returns:
    As `group_stats`; None if the group is empty.
  """
  group = set(int(n) for n in group)
  if not group:
    return None
  per_seed: dict[int, list[tuple[float, int]]] = {}
  na: list[bool] = []
  for r in records:
    if int(r["length"]) not in group:
      continue
    na.append(bool(r.get("error")))
    value = r.get(metric)
    if value is None or np.isnan(float(value)) or not r.get("num_examples"):
      per_seed.setdefault(int(r["seed"]), [])
      continue
    per_seed.setdefault(int(r["seed"]), []).append((float(value), int(r["num_examples"])))
  if not na:
    return None
  pooled_S = np.array([sum(v * n for v, n in pairs) / sum(n for _, n in pairs) if pairs
                       else np.nan for _, pairs in sorted(per_seed.items())])
  mean, std, count = mean_std(pooled_S)
  return mean, std, count, any(na) and count > 0, all(na)


def seed_values(records: Sequence[Record], key: str) -> np.ndarray:
  """One run-level value per seed (e.g. `valid_exact_match`), NaN where absent.

  Args:
    records: the records of one run (a run-level key repeats in each of a seed's records).
    key: the record key.

  Returns:
    `[S]` floats, seeds in ascending order.
  """
  by_seed: dict[int, float] = {}
  for r in records:
    value = r.get(key)
    if value is not None and not (isinstance(value, float) and np.isnan(value)):
      by_seed[int(r["seed"])] = float(value)
    else:
      by_seed.setdefault(int(r["seed"]), float("nan"))
  return np.array([by_seed[s] for s in sorted(by_seed)])


def convergence(records: Sequence[Record]) -> tuple[int, int] | None:
  """(seeds that converged, seeds) of one run; None if the records do not say.

  Args:
    records: the records of one run.

  Returns:
    The counts, from each seed's `converged` flag.
  """
  flags = {}
  for r in records:
    if "converged" in r and r["converged"] is not None:
      flags[int(r["seed"])] = bool(r["converged"])
  if not flags:
    return None
  return sum(flags.values()), len(flags)


def is_converged(records: Sequence[Record]) -> bool:
  """Whether every seed of a run converged (True when the records do not say)."""
  counts = convergence(records)
  return counts is None or counts[0] == counts[1]


def marked_run(run: str, records: Sequence[Record]) -> str:
  """The run's name, followed by `UNCONVERGED` when some seed did not converge."""
  return run if is_converged(records) else f"{run} {UNCONVERGED}"


def format_stat(mean: float, std: float, count: int, digits: int = 2) -> str:
  """`"m ± s"`, just `"m"` for one seed, `"—"` without a value.

  Args:
    mean, std, count: `mean_std`'s result.
    digits: decimals.

  Returns:
    The cell text.
  """
  if count == 0 or np.isnan(mean):
    return EMPTY
  if count == 1:
    return f"{mean:.{digits}f}"
  return f"{mean:.{digits}f} ± {std:.{digits}f}"


def length_cell(values_S: np.ndarray, na_S: np.ndarray, digits: int = 2) -> str:
  """One length's cell: `n/a` if every seed is not representable, else `format_stat`."""
  if np.asarray(na_S).all():
    return NA
  return format_stat(*mean_std(values_S), digits=digits)


def _group_cell(stats: tuple[float, float, int, bool, bool] | None, digits: int = 2) -> str:
  """One group's cell: `—` (empty group), `n/a`, or `format_stat` (`†` if partial)."""
  if stats is None:
    return EMPTY
  mean, std, count, partial, na = stats
  if na:
    return NA
  return format_stat(mean, std, count, digits) + (PARTIAL if partial else "")


def exact_match_table(records: Sequence[Record], *, metric: str = "exact_match",
                      digits: int = 2) -> str:
  """One metric's table: a row per run, convergence, the length groups, one column per length.

  Args:
    records: records of one or more runs.
    metric: the metric in the cells (default exact match).
    digits: decimals.

  Returns:
    Markdown: a title, the table (`run | scheme | seeds | train | [conv. | valid |]
    in-dist | 1.5× | 2× | 4× | extrap | pooled | <lengths>`) and a legend that
    names each aggregate. `conv.` and `valid` appear when the records carry the
    held-out validation score; `pooled` when they carry `num_examples`.
  """
  lengths = sorted({int(r["length"]) for r in records})
  has_valid = any("valid_exact_match" in r for r in records)
  has_pooled = metric in records_lib.POOLABLE and all("num_examples" in r for r in records)
  group_names = list(length_groups([], 1))
  header = (["run", "scheme", "seeds", "train"] + (["conv.", "valid"] if has_valid else [])
            + group_names + ([POOLED] if has_pooled else []) + [str(n) for n in lengths])
  rows, cells_seen, unconverged = [], set(), False
  for run, recs in by_run(records).items():
    run_lengths, _, values_SxL, na_SxL = seed_matrix(recs, metric)
    cells = {n: length_cell(values_SxL[:, i], na_SxL[:, i], digits)
             for i, n in enumerate(run_lengths)}
    groups = length_groups(run_lengths, max_train_length(recs))
    summaries = [_group_cell(group_stats(recs, metric, groups[g]), digits) for g in group_names]
    if has_pooled:
      summaries.append(_group_cell(pooled_stats(recs, metric, groups[EXTRAP]), digits))
    row_cells = summaries + [cells.get(n, "") for n in lengths]
    cells_seen.update(c for c in row_cells if c in (NA, EMPTY) or c.endswith(PARTIAL))
    name = marked_run(run, recs)
    unconverged |= not is_converged(recs)
    valid_cells = []
    if has_valid:
      counts = convergence(recs)
      valid_cells = [f"{counts[0]}/{counts[1]}" if counts else EMPTY,
                     format_stat(*mean_std(seed_values(recs, "valid_exact_match")), digits)]
    rows.append([name, scheme(recs), str(num_seeds(recs)), _train_range(recs)] + valid_cells
                + row_cells)
  legend = [
      (f"{records_lib.LABELS.get(metric, metric)}; mean ± sample std (ddof=1) over seeds "
       "(one seed: its value)."),
      LENGTH_UNIT + " train: the training lengths.",
      _groups_legend(records)]
  if has_pooled:
    legend.append(f"{POOLED}: the metric pooled over every extrapolation example (lengths > L; "
                  "each example weighs the same, so lengths with more examples count more), "
                  "per seed, then mean ± std over seeds.")
  if has_valid:
    legend.append(_valid_legend(records))
  if unconverged:
    legend.append(f"{UNCONVERGED}: some seed of the run is below its validation threshold: it "
                  "did not learn the task in distribution, so its extrapolation columns measure "
                  "the training budget, not the scheme.")
  if EMPTY in cells_seen:
    legend.append(f"{EMPTY}: no value (no eval length in that group, or nothing to average).")
  if NA in cells_seen:
    legend.append(NA_LEGEND)
  if any(c.endswith(PARTIAL) for c in cells_seen):
    legend.append(f"{PARTIAL}: a group mean over the lengths that are representable "
                  f"({NA} lengths left out).")
  return document(_title(metric, records), header, rows, legend)


def _valid_legend(records: Sequence[Record]) -> str:
  """What the `valid` and `conv.` columns measured, from the records' validation fields."""
  rules = sorted({str(r["checkpoint_rule"]) for r in records if r.get("checkpoint_rule")})
  sources = sorted({str(r["valid_source"]) for r in records if r.get("valid_source")})
  threshold = thresholds(records) or "converged_at"
  text = (f"valid: exact match on the held-out validation set (disjoint from training) of the "
          f"evaluated checkpoint; conv.: seeds whose best validation exact match is ≥ "
          f"{threshold}.")
  if rules:
    text += f" Evaluated checkpoint: {', '.join(rules)} (by validation exact match)."
  if sources:
    text += f" Validation set: {'; '.join(sources)}."
  if any(r.get("valid_positions") == "random" for r in records):
    text += (" A run trained at random positions is validated at random positions (its "
             "training distribution) in both of its rows; `@random_positions` rows are also "
             "evaluated there, the others at 0..L−1.")
  return text


def thresholds(records: Sequence[Record]) -> str:
  """The run's convergence threshold(s) as a CSV cell, ` or `-joined; empty if none."""
  return " or ".join(f"{t:g}" for t in sorted({float(r["converged_at"]) for r in records
                                              if r.get("converged_at") is not None}))


def _groups_legend(records: Sequence[Record]) -> str:
  """Says which eval length stands for each multiple of the longest training length."""
  parts = []
  for max_train in sorted({int(r["max_train_length"]) for r in records}):
    lengths = sorted({int(r["length"]) for r in records if int(r["max_train_length"]) == max_train})
    groups = length_groups(lengths, max_train)
    picked = ", ".join(f"{multiple_label(m)} = {groups[multiple_label(m)][0]}"
                       if groups[multiple_label(m)] else f"{multiple_label(m)}: none"
                       for m in MULTIPLES)
    parts.append(f"longest training length {max_train}: {picked}")
  return (f"{IN_DIST}: mean over lengths ≤ the longest training length L; m×: the eval length "
          f"> L nearest m·L, if within {MULTIPLE_TOLERANCE:.0%} of it ({'; '.join(parts)}); "
          f"{EXTRAP}: mean over all lengths > L. Group means average each seed over the "
          "group's lengths, then take mean ± std over seeds.")


def max_train_length(records: Sequence[Record]) -> int:
  """A run's longest training length (the same in all its records)."""
  return max(int(r["max_train_length"]) for r in records)


def _train_range(records: Sequence[Record]) -> str:
  """`"min–max"` training lengths of a run."""
  low = min(int(r.get("min_train_length", 1)) for r in records)
  return f"{low}–{max_train_length(records)}"


def scheme(records: Sequence[Record]) -> str:
  """A run's scheme name(s)."""
  return ", ".join(sorted({str(r.get("scheme", "")) for r in records}))


def _title(metric: str, records: Sequence[Record]) -> str:
  """`"<metric> vs length — task ..."`."""
  return f"{metric.replace('_', ' ').capitalize()} vs length{task_suffix(records)}"


def document(title: str, header: list[str], rows: list[list[str]], legend: list[str]) -> str:
  """A markdown title, table and legend."""
  lines = [f"### {title}", "", _row(header), _row(["---"] * len(header))]
  lines += [_row(r) for r in rows]
  lines += [""] + [f"- {line}" for line in legend]
  return "\n".join(lines) + "\n"


def _row(cells: Sequence[str]) -> str:
  """One markdown table row."""
  return "| " + " | ".join(cells) + " |"
