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

Language-model runs (results/lm_context) compare on an eval context instead:

  python -m relpos_jax.compare results/lm_context alibi results/lm_context rope --column 4×L

bits per byte paired by seed and by test block (the same bytes in both runs: the
corpus manifest, span and blocks must match), the interval unbounded; passkey runs
(`<scheme>+passkey`) compare their accuracy over every key depth at that context.
Every eval context scores the same test bytes in the same blocks, so `--column_b`
compares run A at one context with run B at another, e.g. how much a run loses
from L to 2L (A and B the same run):

  python -m relpos_jax.compare results/lm_context none results/lm_context none \
      --column 2×L --column_b 1×L

Whether a change helps one scheme more than another is a difference of differences
(an interaction): with four runs, (A − B) − (C − D), each example's difference in one
pair minus its difference in the other, over the seeds all four share
(`difference_of_differences`, seq2seq runs; paired by example where all four list
per-example outcomes), e.g.
whether randomized positions lift RoPE more than FIRE:

  python -m relpos_jax.compare results/extrapolation_methods \
      rope+add_index_hints+randomized@random_positions \
      results/extrapolation_methods rope+add_index_hints \
      results/extrapolation_methods fire+add_index_hints+randomized@random_positions \
      results/extrapolation_methods fire+add_index_hints
"""

from __future__ import annotations

import math
import os
from typing import Sequence

from absl import app
from absl import flags
import numpy as np

from relpos_jax.experiments import lm_report
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
            column: str | None = None, column_b: str | None = None) -> stats.Interval:
  """A minus B on `column` over their shared seeds (and shared examples where listed).

  Args:
    records_a, records_b: the two runs' records.
    column: a main-table column (`COLUMNS`; default pooled (L, 2L]) or, for
      language-model runs, an eval context (`lm_report.columns`: '2×L' (default),
      '4×L sliding'; passkey: accuracy over every depth at that context).
    column_b: B's column when it differs from A's (language-model runs only, whose
      contexts all score the same test blocks); default `column`.

  Returns:
    The difference's `stats.Interval` (with p).

  Raises:
    ValueError: the column covers different lengths for the two runs (different
      grids or training lengths: not comparable), language-model runs scored on
      different text or objectives, one LM run and one not, no shared seed, or
      a `column_b` other than `column` for runs that are not language models.
  """
  column = column or default_column(records_a)
  column_b = column_b or column
  if lm_report.is_lm_records(records_a) != lm_report.is_lm_records(records_b):
    raise ValueError("one run is a language model and the other is not: not comparable")
  if lm_report.is_lm_records(records_a):
    return _compare_lm(records_a, records_b, column, column_b)
  if column_b != column:
    # Two columns of a seq2seq table score different examples: no pairing by example.
    raise ValueError(f"--column_b {column_b!r} differs from --column {column!r}: only "
                     "language-model runs, whose contexts score the same bytes, compare "
                     "two columns")
  (a_S, b_S), paired = _seq2seq_samples((records_a, records_b), column)
  return stats.paired_difference(a_S, b_S, paired_examples=paired)


def _seq2seq_samples(runs: Sequence[Sequence[Record]], column: str
                     ) -> tuple[list[list[np.ndarray]], bool]:
  """Per run, its per-example values on `column` for each seed all runs share (ascending),
  and whether the runs' examples pair (every record lists `exact_counts`, equal counts).

  Raises:
    ValueError: the column covers different lengths in two runs, or no shared seed.
  """
  lengths = column_lengths(runs[0], column)
  for letter, recs in zip("BCD", runs[1:]):
    if column_lengths(recs, column) != lengths:
      raise ValueError(f"{column} covers lengths {lengths} in run A but "
                       f"{column_lengths(recs, column)} in run {letter}: not comparable")
  by_seed = [main_table.samples_by_seed(recs, lengths) for recs in runs]
  seeds = sorted(set.intersection(*(set(samples) for samples in by_seed)))
  if not seeds:
    count = {2: "two", 4: "four"}.get(len(runs), str(len(runs)))
    raise ValueError(f"the {count} runs share no seed with values on {column}")
  runs_KxS = [[samples[s] for s in seeds] for samples in by_seed]
  paired = (all(r.get("exact_counts") is not None for recs in runs for r in recs)
            and all(len({x.shape for x in group}) == 1 for group in zip(*runs_KxS)))
  return runs_KxS, paired


def difference_of_differences(records_a: Sequence[Record], records_b: Sequence[Record],
                              records_c: Sequence[Record], records_d: Sequence[Record],
                              column: str | None = None) -> stats.Interval:
  """(A − B) − (C − D) on `column`: whether A gains more over B than C over D.

  Paired by seed (the seeds all four runs share) and, when every run's records list
  per-example outcomes (`exact_counts`) of the same examples, by eval example: each
  example's A − B minus its C − D; otherwise each run's examples are resampled on
  their own (`stats.contrast`).

  Args:
    records_a, records_b, records_c, records_d: the four runs' records.
    column: a main-table column (`COLUMNS`; default pooled (L, 2L]).

  Returns:
    The difference of differences as a `stats.Interval` (with p), bounded by ±2.

  Raises:
    ValueError: language-model runs, the column covering different lengths in two of
      the runs, or no seed shared by all four.
  """
  runs = (records_a, records_b, records_c, records_d)
  if any(lm_report.is_lm_records(recs) for recs in runs):
    raise ValueError("a difference of differences compares seq2seq runs only")
  runs_KxS, paired = _seq2seq_samples(runs, column or main_table.POOLED_2X)
  return stats.contrast(runs_KxS, (1.0, -1.0, -1.0, 1.0), paired_examples=paired,
                        bounds=(-2.0, 2.0))


def _compare_lm(records_a: Sequence[Record], records_b: Sequence[Record],
                column: str, column_b: str) -> stats.Interval:
  """`compare` for language-model runs: bits per byte paired by seed and test block,
  passkey accuracy paired by seed (its records keep counts, not examples)."""
  if lm_report.eval_set(records_a) != lm_report.eval_set(records_b):
    raise ValueError("the two runs were not scored on the same objective, corpus, test "
                     "bytes and blocks: not comparable")
  a = lm_report.column_samples(records_a, column)
  b = lm_report.column_samples(records_b, column_b)
  seeds = [s for s in a if s in b]
  if not seeds:
    raise ValueError(f"the two runs share no seed with values on {column}"
                     + (f" and {column_b}" if column_b != column else ""))
  a_S, b_S = [a[s] for s in seeds], [b[s] for s in seeds]
  if "accuracy" in records_a[0]:
    return stats.paired_difference(a_S, b_S, paired_examples=False)
  paired = all(x.shape == y.shape and x.size > 1 for x, y in zip(a_S, b_S))
  return stats.paired_difference(a_S, b_S, paired_examples=paired,
                                 bounds=(-math.inf, math.inf))


def default_column(records: Sequence[Record]) -> str:
  """Pooled (L, 2L] for the seq2seq tables, 2×L for language-model runs."""
  return (lm_report.column_name(2.0) if lm_report.is_lm_records(records)
          else main_table.POOLED_2X)


def shared_seeds(records_a: Sequence[Record], records_b: Sequence[Record],
                 column: str | None = None, column_b: str | None = None) -> list[int]:
  """The seeds both runs have values for on `column` (ascending): those a comparison pairs.

  A run with more seeds than the other (seeds added to one of them) is compared on
  the other's seeds only; a seed with no value on the column (not representable
  there) in either run is left out.
  """
  column = column or default_column(records_a)
  if lm_report.is_lm_records(records_a):
    a = lm_report.column_samples(records_a, column)
    b = lm_report.column_samples(records_b, column_b or column)
  else:
    a, b = (main_table.samples_by_seed(recs, column_lengths(recs, column))
            for recs in (records_a, records_b))
  return sorted(set(a) & set(b))


def describe(interval: stats.Interval, digits: int = 2) -> str:
  """The sentence fragment: the difference, interval, p, and whether it is distinguishable."""
  verdict = ("distinguishable" if interval.excludes_zero()
             else f"not distinguishable with {interval.n_seeds} seeds")
  return f"{stats.format_difference(interval, digits)} ({verdict})"


_COLUMN = flags.DEFINE_string(
    "column", None, f"The main-table column to compare: {', '.join(COLUMNS)} (default "
    f"{main_table.POOLED_2X}); for language-model runs an eval context, e.g. 4×L or "
    "'4×L sliding' (default 2×L).")
_COLUMN_B = flags.DEFINE_string(
    "column_b", None, "Run B's column when it differs from run A's (language-model runs "
    "only: every eval context scores the same test bytes), e.g. --column 2×L --column_b "
    "1×L with A and B the same run: what it loses from L to 2L. Default: --column.")


def main(argv: Sequence[str]) -> None:
  if len(argv) not in (5, 9):
    raise app.UsageError("usage: python -m relpos_jax.compare TABLE_A RUN_A TABLE_B RUN_B "
                         "[TABLE_C RUN_C TABLE_D RUN_D] [--column COLUMN] "
                         "[--column_b COLUMN]")
  name = lambda table, run: f"{os.path.basename(os.path.normpath(table))}/{run}"
  if len(argv) == 9:
    if _COLUMN_B.value:
      raise app.UsageError("--column_b compares two runs; a difference of differences "
                           "takes one --column")
    pairs = list(zip(argv[1::2], argv[2::2]))
    runs = [run_records(table, run) for table, run in pairs]
    column = _COLUMN.value or main_table.POOLED_2X
    interval = difference_of_differences(*runs, column)
    a, b, c, d = (name(table, run) for table, run in pairs)
    print(f"({a} − {b}) − ({c} − {d}), {column}: {describe(interval)}")
    return
  table_a, run_a, table_b, run_b = argv[1:]
  a, b = run_records(table_a, run_a), run_records(table_b, run_b)
  column = _COLUMN.value or default_column(a)
  column_b = _COLUMN_B.value or column
  interval = compare(a, b, column, column_b)
  where = column if column_b == column else f"{column} − {column_b}"
  print(f"{name(table_a, run_a)} − {name(table_b, run_b)}, {where}: "
        f"{describe(interval, digits=3 if _is_bits(a) else 2)}"
        f"{seeds_note(a, b, column, column_b)}")


def _is_bits(records: Sequence[Record]) -> bool:
  """Whether records are bits per byte (three decimals), not a rate."""
  return lm_report.is_lm_records(records) and "accuracy" not in records[0]


def seeds_note(records_a: Sequence[Record], records_b: Sequence[Record],
               column: str | None = None, column_b: str | None = None) -> str:
  """`" (seeds 0–2 of A's 5 and B's 3)"` when a run has seeds the pairing leaves out; else ""."""
  seeds = shared_seeds(records_a, records_b, column, column_b)
  counts = [tables.num_seeds(recs) for recs in (records_a, records_b)]
  if all(n == len(seeds) for n in counts):
    return ""
  return (f" (paired on seeds {', '.join(map(str, seeds))}: run A has {counts[0]}, "
          f"run B {counts[1]})")


if __name__ == "__main__":
  app.run(main)
