"""A table's records as CSV: one row per (run, metric), every group, pooled range and length."""

from __future__ import annotations

import csv
import os
from typing import Sequence

from relpos_jax.experiments import records as records_lib
from relpos_jax.experiments import tables

Record = tables.Record


def write_csv(records: Sequence[Record], path: str) -> None:
  """Writes one row per run: every metric per length group and per length, mean and std.

  Columns: `run, scheme, task, seeds, min_train_length, max_train_length,
  converged_seeds, converged_at, valid_exact_match_mean, valid_exact_match_std`
  (empty when the records do not say; the validation score of the evaluated
  checkpoint, over seeds), the
  eval length standing for each multiple (`length_1.5x`, `length_2x`,
  `length_4x`; empty if none), then for each metric and each group (`in_dist`,
  `1.5x`, `2x`, `4x`, `extrap`, and `pooled` for rates) and each length (`L<n>`):
  `<metric>_<group>_mean`
  and `_std`. A cell is `n/a` where not representable and empty where there
  is no value.

  Args:
    records: records of one or more runs.
    path: the .csv file (its folder is created).
  """
  metrics = tables.metric_keys(records)
  lengths = sorted({int(r["length"]) for r in records})
  group_names = list(tables.length_groups([], 1))
  pooled = lambda metric: [tables.POOLED] if metric in records_lib.POOLABLE else []
  columns = lambda metric: ([_csv_name(g) for g in group_names] + pooled(metric)
                            + [f"L{n}" for n in lengths])
  os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
  with open(path, "w", newline="") as f:
    writer = csv.writer(f)
    writer.writerow(["run", "scheme", "task", "seeds", "min_train_length", "max_train_length",
                     "converged_seeds", "converged_at", "valid_exact_match_mean",
                     "valid_exact_match_std"]
                    + [f"length_{_csv_name(tables.multiple_label(m))}" for m in tables.MULTIPLES]
                    + [f"{m}_{c}_{s}" for m in metrics for c in columns(m)
                       for s in ("mean", "std")])
    for run, recs in tables.by_run(records).items():
      run_lengths = sorted({int(r["length"]) for r in recs})
      groups = tables.length_groups(run_lengths, tables.max_train_length(recs))
      counts = tables.convergence(recs)
      row = [run, tables.scheme(recs), recs[0].get("task", ""), tables.num_seeds(recs),
             min(int(r.get("min_train_length", 1)) for r in recs), tables.max_train_length(recs),
             "" if counts is None else counts[0], tables.thresholds(recs)]
      row += _csv_stat(tables.mean_std(tables.seed_values(recs, "valid_exact_match")) + (False, False))
      row += [groups[tables.multiple_label(m)][0] if groups[tables.multiple_label(m)] else ""
              for m in tables.MULTIPLES]
      for metric in metrics:
        _, _, values_SxL, na_SxL = tables.seed_matrix(recs, metric)
        for g in group_names:
          row += _csv_stat(tables.group_stats(recs, metric, groups[g]))
        if metric in records_lib.POOLABLE:
          row += _csv_stat(tables.pooled_stats(recs, metric, groups[tables.EXTRAP]))
        for n in lengths:
          if n not in run_lengths:
            row += ["", ""]
            continue
          i = run_lengths.index(n)
          if na_SxL[:, i].all():
            row += [tables.NA, tables.NA]
          else:
            row += _csv_stat(tables.mean_std(values_SxL[:, i]) + (False, False))
      writer.writerow(row)


def _csv_stat(stats: tuple[float, float, int, bool, bool] | None) -> list[str]:
  """`[mean, std]` as CSV cells: `repr` floats, `n/a`, or empty without a value."""
  if stats is None:
    return ["", ""]
  mean, std, count, _, na = stats
  if na:
    return [tables.NA, tables.NA]
  if count == 0:
    return ["", ""]
  return [repr(float(mean)), repr(float(std))]


def _csv_name(group: str) -> str:
  """A group's name in CSV columns: `in-dist` -> `in_dist`, `1.5×` -> `1.5x`."""
  return group.replace("-", "_").replace("×", "x")
