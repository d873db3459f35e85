"""Records -> markdown and CSV tables, mean ± std over seeds.

A record is one (run, seed, length) result, as `evaluate.evaluate_workdir`
writes them: identity keys (`run`, `scheme`, `task`, `seed`, `length`,
`min_train_length`, `max_train_length`, ...) and float metrics (`exact_match`,
`content_errors`, `stop_errors`, ...). A NaN metric means "n/a": the scheme could
not encode that length (e.g. a learned position table too short).

Statistics over seeds: the mean, and the sample standard deviation (ddof=1) when
there are two or more seeds. Summaries over a range of lengths ("in-dist",
"extrap") average each seed over the lengths first, then take mean ± std over
seeds, so the spread is the spread between seeds.
"""

from __future__ import annotations

import csv
import os
from typing import Any, Sequence

import numpy as np

Record = dict[str, Any]

NA = "n/a"
EMPTY = "—"
PARTIAL = "†"
METRIC_NAMES = {
    "exact_match": "Exact match (greedy decoding; every target token and the EOS right)",
    "token_accuracy": "Token accuracy (fraction of target positions, EOS included, right)",
    "length_accuracy": "Length accuracy (EOS at the right position)",
    "content_errors": "Content errors (a wrong token before either sequence ends)",
    "stop_errors": "Stop errors (every shared token right, EOS too early or too late)",
    "mean_first_error": "Mean index of the first wrong token (target length + 1 if exact)",
}
LENGTH_UNIT = ("Columns are eval lengths: input tokens for synthetic tasks, target tokens "
               "for SCAN and TFDS sources.")


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


def metric_keys(records: Sequence[Record]) -> list[str]:
  """The metrics in the records: their float-valued keys, in record order."""
  keys: list[str] = []
  for record in records:
    keys += [k for k, v in record.items() if isinstance(v, float) and k not in keys]
  return keys


def seed_matrix(records: Sequence[Record],
                metric: str) -> tuple[list[int], list[int], np.ndarray, np.ndarray]:
  """One run's metric as a seeds × lengths matrix.

  Args:
    records: the records of one run.
    metric: a metric key.

  Returns:
    `(lengths, seeds, values_SxL, present_SxL)`: sorted lengths and seeds; the
    values (NaN where missing or n/a) and whether a record exists at all.
  """
  lengths = sorted({int(r["length"]) for r in records})
  seeds = sorted({int(r["seed"]) for r in records})
  values_SxL = np.full((len(seeds), len(lengths)), np.nan)
  present_SxL = np.zeros_like(values_SxL, bool)
  for r in records:
    s, l = seeds.index(int(r["seed"])), lengths.index(int(r["length"]))
    value = r.get(metric)
    values_SxL[s, l] = np.nan if value is None else float(value)
    present_SxL[s, l] = True
  return lengths, seeds, values_SxL, present_SxL


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
    `(lengths, mean_L, std_L, count_L)`: numpy arrays; NaN mean where every
    seed is n/a or missing.
  """
  lengths, _, values_SxL, _ = seed_matrix(records, metric)
  stats = [mean_std(values_SxL[:, l]) for l in range(len(lengths))]
  return (np.asarray(lengths), np.asarray([s[0] for s in stats]),
          np.asarray([s[1] for s in stats]), np.asarray([s[2] for s in stats]))


def range_stats(records: Sequence[Record], metric: str,
                beyond_training: bool) -> tuple[float, float, int, bool] | None:
  """Mean ± std over seeds of each seed's mean over a range of lengths.

  Args:
    records: the records of one run.
    metric: a metric key.
    beyond_training: lengths > max_train_length (extrapolation) or <= it.

  Returns:
    `(mean, std, seeds, partial)` (NaN mean if every length is n/a; `partial`:
    some lengths of the range were n/a and left out), or None if the run has
    no eval length in the range.
  """
  max_train = _max_train_length(records)
  lengths, _, values_SxL, present_SxL = seed_matrix(records, metric)
  in_range_L = (np.asarray(lengths) > max_train) == beyond_training
  if not in_range_L.any():
    return None
  values_SxR = values_SxL[:, in_range_L]
  partial = bool((np.isnan(values_SxR) & present_SxL[:, in_range_L]).any())
  with np.errstate(all="ignore"):
    per_seed_S = np.array([np.nanmean(row) if (~np.isnan(row)).any() else np.nan
                           for row in values_SxR])
  mean, std, count = mean_std(per_seed_S)
  return mean, std, count, partial and count > 0


def format_stat(mean: float, std: float, count: int, digits: int = 2) -> str:
  """`"m ± s"`, just `"m"` for one seed, `"n/a"` without a value.

  Args:
    mean, std, count: `mean_std`'s result.
    digits: decimals.

  Returns:
    The cell text.
  """
  if count == 0 or np.isnan(mean):
    return NA
  if count == 1:
    return f"{mean:.{digits}f}"
  return f"{mean:.{digits}f} ± {std:.{digits}f}"


def exact_match_table(records: Sequence[Record], *, metric: str = "exact_match",
                      digits: int = 2) -> str:
  """The main table: one row per run, one column per eval length, plus summaries.

  Args:
    records: records of one or more runs.
    metric: the metric in the cells (default exact match).
    digits: decimals.

  Returns:
    Markdown: a title, the table (`run | scheme | seeds | train | <lengths> |
    in-dist | extrap`) and a legend.
  """
  groups = by_run(records)
  lengths = sorted({int(r["length"]) for r in records})
  header = ["run", "scheme", "seeds", "train"] + [str(n) for n in lengths] + ["in-dist", "extrap"]
  rows, any_na, any_partial, any_empty = [], False, False, False
  for run, recs in groups.items():
    run_lengths, mean_L, std_L, count_L = length_stats(recs, metric)
    cells = {int(n): format_stat(m, s, c, digits)
             for n, m, s, c in zip(run_lengths, mean_L, std_L, count_L)}
    any_na |= NA in cells.values()
    summaries = []
    for beyond in (False, True):
      stats = range_stats(recs, metric, beyond)
      if stats is None:
        summaries.append(EMPTY)
        any_empty = True
        continue
      mean, std, count, partial = stats
      summaries.append(format_stat(mean, std, count, digits) + (PARTIAL if partial else ""))
      any_partial |= partial
    rows.append([run, _scheme(recs), str(len({r["seed"] for r in recs})), _train_range(recs)]
                + [cells.get(n, "") for n in lengths] + summaries)
  legend = [
      f"{METRIC_NAMES.get(metric, metric)}; mean ± sample std (ddof=1) over seeds "
      "(one seed: its value).",
      LENGTH_UNIT + " train: the training lengths.",
      "in-dist: mean over lengths ≤ the longest training length; extrap: mean over longer "
      "lengths (each seed's mean over those lengths, then mean ± std over seeds)."]
  if any_empty:
    legend.append(f"{EMPTY}: the run has no eval length in that range.")
  if any_na:
    legend.append(f"{NA}: not evaluated because the scheme cannot encode that length (e.g. "
                  "a learned position table shorter than the padded sequence; see the "
                  "records' `error`).")
  if any_partial:
    legend.append(f"{PARTIAL}: a summary over the lengths that have a value ({NA} lengths "
                  "left out).")
  return _document(f"{_title(metric, records)}", header, rows, legend)


def error_table(records: Sequence[Record], *, digits: int = 2) -> str:
  """Failures beyond the training range, split into content and stopping errors.

  Args:
    records: records of one or more runs.
    digits: decimals.

  Returns:
    Markdown: per run, `content / stop` at each length beyond its training
    range, then over all those lengths: content, stop, and the share of failures
    that are pure stopping errors; a legend.
  """
  groups = by_run(records)
  lengths = sorted({int(r["length"]) for r in records
                    if int(r["length"]) > int(r["max_train_length"])})
  header = ["run", "scheme", "seeds"] + [str(n) for n in lengths] + [
      "content", "stop", "stop share", "first error"]
  rows = []
  for run, recs in groups.items():
    max_train = _max_train_length(recs)
    content = dict(zip(*length_stats(recs, "content_errors")[:2]))
    stop = dict(zip(*length_stats(recs, "stop_errors")[:2]))
    cells = [_content_stop(content.get(n), stop.get(n), digits) if n > max_train else ""
             for n in lengths]
    content_stats = range_stats(recs, "content_errors", True)
    stop_stats = range_stats(recs, "stop_errors", True)
    first_stats = range_stats(recs, "mean_first_error", True)
    if content_stats is None:
      summary = [EMPTY] * 4
    else:
      (c_mean, c_std, c_count, _), (s_mean, s_std, s_count, _) = content_stats, stop_stats
      failures = c_mean + s_mean
      summary = [format_stat(c_mean, c_std, c_count, digits),
                 format_stat(s_mean, s_std, s_count, digits),
                 f"{s_mean / failures:.{digits}f}" if failures > 0 else NA,
                 format_stat(*first_stats[:3], digits=1)]
    rows.append([run, _scheme(recs), str(len({r["seed"] for r in recs}))] + cells + summary)
  legend = [
      "Failures at each eval length beyond the training range, as fractions of all "
      "examples at that length (mean over seeds): `content / stop`. " + LENGTH_UNIT,
      "content: a wrong token before either sequence ends. stop: every shared token "
      "right, but EOS too early or too late. content + stop = 1 − exact match.",
      "content, stop: mean over those lengths (mean ± sample std over seeds). stop share: "
      "stop / (content + stop), the part of the failures that are pure stopping errors. "
      "first error: mean position of the first wrong token over those lengths (an exact "
      "prediction counts as target length + 1).",
      f"{NA}: no failures to split, or the scheme cannot encode the lengths. "
      f"{EMPTY}: the run has no eval length beyond its training range."]
  if not lengths:
    legend.insert(0, "No eval length lies beyond the training range.")
  return _document("Errors beyond the training range", header, rows, legend)


def write_csv(records: Sequence[Record], path: str) -> None:
  """Writes one row per (run, length): every metric's mean and std over seeds.

  Columns: `run, scheme, task, length, min_train_length, max_train_length,
  in_train_range, seeds`, then `<metric>_mean, <metric>_std` for each metric
  (empty where n/a).

  Args:
    records: records of one or more runs.
    path: the .csv file (its folder is created).
  """
  metrics = metric_keys(records)
  os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
  with open(path, "w", newline="") as f:
    writer = csv.writer(f)
    writer.writerow(["run", "scheme", "task", "length", "min_train_length", "max_train_length",
                     "in_train_range", "seeds"]
                    + [f"{m}_{s}" for m in metrics for s in ("mean", "std")])
    for run, recs in by_run(records).items():
      stats = {m: length_stats(recs, m) for m in metrics}
      lengths = stats[metrics[0]][0] if metrics else []
      max_train = _max_train_length(recs)
      for i, n in enumerate(lengths):
        row = [run, _scheme(recs), recs[0].get("task", ""), int(n),
               recs[0].get("min_train_length", ""), max_train, bool(n <= max_train),
               len({r["seed"] for r in recs if int(r["length"]) == n})]
        for m in metrics:
          _, mean_L, std_L, count_L = stats[m]
          row += ["", ""] if count_L[i] == 0 else [repr(float(mean_L[i])), repr(float(std_L[i]))]
        writer.writerow(row)


def _content_stop(content: float | None, stop: float | None, digits: int) -> str:
  """`"c / s"`, or n/a."""
  if content is None or stop is None or np.isnan(content) or np.isnan(stop):
    return NA
  return f"{content:.{digits}f} / {stop:.{digits}f}"


def _max_train_length(records: Sequence[Record]) -> int:
  """A run's longest training length (the same in all its records)."""
  return max(int(r["max_train_length"]) for r in records)


def _train_range(records: Sequence[Record]) -> str:
  """`"min–max"` training lengths of a run."""
  low = min(int(r.get("min_train_length", 1)) for r in records)
  return f"{low}–{_max_train_length(records)}"


def _scheme(records: Sequence[Record]) -> str:
  """A run's scheme name(s)."""
  return ", ".join(sorted({str(r.get("scheme", "")) for r in records}))


def _title(metric: str, records: Sequence[Record]) -> str:
  """`"<metric> vs length (task ...)"`."""
  tasks = sorted({str(r.get("task", "")) for r in records} - {""})
  suffix = f" — task {', '.join(tasks)}" if tasks else ""
  return f"{metric.replace('_', ' ').capitalize()} vs length{suffix}"


def _document(title: str, header: list[str], rows: list[list[str]], legend: list[str]) -> str:
  """A markdown title, table and legend."""
  lines = [f"### {title}", "", _row(header), _row(["---"] * len(header))]
  lines += [_row(r) for r in rows]
  lines += [""] + [f"- {line}" for line in legend]
  return "\n".join(lines) + "\n"


def _row(cells: Sequence[str]) -> str:
  """One markdown table row."""
  return "| " + " | ".join(cells) + " |"
