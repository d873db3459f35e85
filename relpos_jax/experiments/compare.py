"""Paired comparisons of two stored runs: the difference, its 95% interval and p.

Every comparative sentence in the notes and the README cites one of these:

  python -m relpos_jax.compare results/schemes alibi+reverse results/schemes none+reverse
  python -m relpos_jax.compare results/schemes t5+copy results/t5_buckets \\
      num_buckets=32+max_distance=128 --column "pooled (L, 2L]"

Run A minus run B on one column of the main table (`main_table`: in-dist, 1.5×,
2×, 4×, pooled (L, 2L], pooled (L, 4L], pooled test split), over the seeds both
runs have (paired by seed: the same seed shares data order and eval set; a run with
more seeds than the other, seeds added to it, is compared on the shared ones, and
the output says so) and, when
both runs' records list per-example outcomes (`exact_counts`), over the same eval
examples (`stats.paired_difference`).
"""

from __future__ import annotations

import os
from typing import Sequence

from absl import app
from absl import flags

from relpos_jax.experiments import main_table
from relpos_jax.experiments import records as records_lib
from relpos_jax.experiments import results
from relpos_jax.experiments import stats
from relpos_jax.experiments import store
from relpos_jax.experiments import tables

Record = tables.Record
COLUMNS = (main_table.IN_DIST, *main_table.MULTIPLE_COLUMNS, main_table.POOLED_2X,
           main_table.POOLED_4X, main_table.POOLED_TEST)


def column_lengths(records: Sequence[Record], column: str) -> list[int]:
  """The eval lengths a main-table column covers for one run.

  Raises:
    ValueError: an unknown column.
  """
  if column not in COLUMNS:
    raise ValueError(f"unknown column {column!r}; choose one of: {', '.join(COLUMNS)}")
  lengths = sorted({int(r["length"]) for r in records})
  L = int(records[0]["max_train_length"])
  if column in (main_table.IN_DIST, *main_table.MULTIPLE_COLUMNS):
    return tables.length_groups(lengths, L)[column]
  return main_table.pooled_ranges(lengths, L, scan=True)[column]


def run_records(table_dir: str, run: str) -> list[Record]:
  """One stored run's records.

  Raises:
    FileNotFoundError: the table holds no such run (the message lists its runs).
  """
  if not store.has_run(table_dir, run):
    stored = sorted(tables.by_run(results.read_table(table_dir)))
    raise FileNotFoundError(f"{table_dir} holds no run {run!r}; it holds: {', '.join(stored)}")
  return records_lib.read_jsonl(store.record_path(table_dir, run))


def compare(records_a: Sequence[Record], records_b: Sequence[Record],
            column: str = main_table.POOLED_2X) -> stats.Interval:
  """A minus B on `column` over their shared seeds (and shared examples where listed).

  Args:
    records_a, records_b: the two runs' records.
    column: a main-table column (`COLUMNS`).

  Returns:
    The difference's `stats.Interval` (with p).

  Raises:
    ValueError: the column covers different lengths for the two runs (different
      grids or training lengths: not comparable), or no shared seed.
  """
  lengths = column_lengths(records_a, column)
  if lengths != column_lengths(records_b, column):
    raise ValueError(f"{column} covers lengths {lengths} in run A but "
                     f"{column_lengths(records_b, column)} in run B: not comparable")
  seeds = shared_seeds(records_a, records_b, column)
  if not seeds:
    raise ValueError(f"the two runs share no seed with values on {column}")
  a, b = (main_table.samples_by_seed(recs, lengths) for recs in (records_a, records_b))
  a_S, b_S = [a[s] for s in seeds], [b[s] for s in seeds]
  paired = (all(r.get("exact_counts") is not None for r in records_a + records_b)
            and all(x.shape == y.shape for x, y in zip(a_S, b_S)))
  return stats.paired_difference(a_S, b_S, paired_examples=paired)


def shared_seeds(records_a: Sequence[Record], records_b: Sequence[Record],
                 column: str = main_table.POOLED_2X) -> list[int]:
  """The seeds both runs have values for on `column` (ascending): those a comparison pairs.

  A run with more seeds than the other (seeds added to one of them) is compared on
  the other's seeds only; a seed with no value on the column (not representable
  there) in either run is left out.
  """
  a, b = (main_table.samples_by_seed(recs, column_lengths(recs, column))
          for recs in (records_a, records_b))
  return sorted(set(a) & set(b))


def describe(interval: stats.Interval) -> str:
  """The sentence fragment: the difference, interval, p, and whether it is distinguishable."""
  verdict = ("distinguishable" if interval.excludes_zero()
             else f"not distinguishable with {interval.n_seeds} seeds")
  return f"{stats.format_difference(interval)} ({verdict})"


_COLUMN = flags.DEFINE_string("column", main_table.POOLED_2X,
                              f"The main-table column to compare: {', '.join(COLUMNS)}.")


def main(argv: Sequence[str]) -> None:
  if len(argv) != 5:
    raise app.UsageError("usage: python -m relpos_jax.compare TABLE_A RUN_A TABLE_B RUN_B "
                         "[--column COLUMN]")
  table_a, run_a, table_b, run_b = argv[1:]
  a, b = run_records(table_a, run_a), run_records(table_b, run_b)
  interval = compare(a, b, _COLUMN.value)
  name = lambda table, run: f"{os.path.basename(os.path.normpath(table))}/{run}"
  print(f"{name(table_a, run_a)} − {name(table_b, run_b)}, {_COLUMN.value}: "
        f"{describe(interval)}{seeds_note(a, b, _COLUMN.value)}")


def seeds_note(records_a: Sequence[Record], records_b: Sequence[Record], column: str) -> str:
  """`" (seeds 0–2 of A's 5 and B's 3)"` when a run has seeds the pairing leaves out; else ""."""
  seeds = shared_seeds(records_a, records_b, column)
  counts = [tables.num_seeds(recs) for recs in (records_a, records_b)]
  if all(n == len(seeds) for n in counts):
    return ""
  return (f" (paired on seeds {', '.join(map(str, seeds))}: run A has {counts[0]}, "
          f"run B {counts[1]})")


if __name__ == "__main__":
  app.run(main)
