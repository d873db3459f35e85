"""The failure-anatomy table: how the failures of each run and length fail (`report.markdown`'s last part)."""

from __future__ import annotations

from typing import Sequence

from relpos_jax.experiments import records as records_lib
from relpos_jax.experiments import tables

Record = tables.Record


def error_table(records: Sequence[Record], *, digits: int = 2) -> str:
  """The failure anatomy: per run and eval length, how the failed examples fail.

  Args:
    records: records of one or more runs.
    digits: decimals.

  Returns:
    Markdown: a row per (run, length): `× train`, failures (1 − exact match),
    the shares of the failures that are too short, too long, of the right
    length and pure stopping errors, the median first wrong position, and the
    oracle-length exact match when the records have it; a legend.
  """
  has_oracle = any("oracle_exact_match" in r for r in records)
  header = (["run", "length", "× train", "failures"] + list(records_lib.ANATOMY_COLUMNS.values())
            + (["oracle exact"] if has_oracle else []))
  rows, seen = [], set()
  for run, recs in tables.by_run(records).items():
    max_train = tables.max_train_length(recs)
    lengths, _, exact_SxL, na_SxL = tables.seed_matrix(recs, "exact_match")
    anatomy = {m: tables.seed_matrix(recs, m)[2] for m in records_lib.ANATOMY_COLUMNS}
    oracle_SxL = tables.seed_matrix(recs, "oracle_exact_match")[2] if has_oracle else None
    for i, n in enumerate(lengths):
      cells = [tables.length_cell(1.0 - exact_SxL[:, i], na_SxL[:, i], digits)]
      cells += [tables.length_cell(anatomy[m][:, i], na_SxL[:, i], records_lib.BY_KEY[m].digits or digits)
                for m in records_lib.ANATOMY_COLUMNS]
      if has_oracle:
        cells.append(tables.length_cell(oracle_SxL[:, i], na_SxL[:, i], digits))
      seen.update(cells)
      rows.append([run, str(n), f"{n / max_train:.2g}"] + cells)
  legend = [
      "Failure anatomy per eval length (mean ± sample std over seeds). " + tables.LENGTH_UNIT
      + " × train: the length over the longest training length.",
      ("failures: 1 − exact match. too short / too long / right length: shares of the failed "
       "examples whose EOS comes too early / too late / at the right position (they sum to 1; "
       "a right-length failure always has a wrong token)."),
      ("pure stop: share of the failures that are pure stopping errors (every emitted token "
       "right, EOS too early or too late). first wrong (median): median position (0-based, "
       "the EOS position included) of the first wrong token among the failures.")]
  if tables.EMPTY in seen:
    legend.append(f"{tables.EMPTY}: nothing failed at that length (no share to take).")
  if has_oracle:
    legend.append("oracle exact: exact match when EOS is forbidden before the true length and "
                  "forced at it, i.e. content alone; oracle exact − exact match is what the "
                  "stop decision costs.")
  if tables.NA in seen:
    legend.append(tables.NA_LEGEND)
  return tables.document("Failure anatomy" + tables.task_suffix(records), header, rows, legend)
