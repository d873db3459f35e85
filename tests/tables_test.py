"""Tables from hand-made records: known numbers give known markdown and CSV."""

import csv

import numpy as np
import pytest

from relpos_jax.experiments import anatomy_table
from relpos_jax.experiments import report
from relpos_jax.experiments import table_csv
from relpos_jax.experiments import tables

NAN = float("nan")
LENGTHS = [10, 20, 30, 40, 80]  # max train 20: in-dist 10, 20; 1.5× 30; 2× 40; 4× 80
# run "a": 3 seeds (rows) × LENGTHS (columns).
A_EXACT = np.array([[1.0, 0.9, 0.4, 0.0, 0.0],
                    [1.0, 0.8, 0.5, 0.1, 0.0],
                    [0.9, 0.7, 0.6, 0.2, 0.1]])
B_EXACT = [1.0, 1.0, 0.25, 0.5, NAN]  # run "b", 1 seed; 80 is not representable


def _record(run, seed, length, exact, *, scheme="t5", max_train=20, **metrics):
  """One record; a NaN exact match makes it not representable."""
  na = np.isnan(exact)
  return {"run": run, "scheme": scheme, "task": "copy", "seed": seed, "replica": seed,
          "length": length, "min_train_length": 1, "max_train_length": max_train,
          "num_examples": 0 if na else 64, "exact_match": exact,
          "token_accuracy": NAN if na else 0.5 + exact / 2, **metrics,
          "error": "max_len too short" if na else None}


def _records():
  records = [_record("a", s, n, float(A_EXACT[s, i]))
             for s in range(3) for i, n in enumerate(LENGTHS)]
  records += [_record("b", 0, n, e, scheme="learned") for n, e in zip(LENGTHS, B_EXACT)]
  return records


def _cell(values):
  return f"{np.mean(values):.2f} ± {np.std(values, ddof=1):.2f}"


def test_mean_std_matches_numpy():
  mean, std, count = tables.mean_std(np.array([0.4, 0.5, 0.6, NAN]))
  assert count == 3
  np.testing.assert_allclose([mean, std], [0.5, np.std([0.4, 0.5, 0.6], ddof=1)])
  assert tables.mean_std([0.3]) == (0.3, 0.0, 1)
  assert tables.mean_std([NAN])[2] == 0


def test_format_stat():
  assert tables.format_stat(0.5, 0.1, 3) == "0.50 ± 0.10"
  assert tables.format_stat(0.5, 0.0, 1) == "0.50"
  assert tables.format_stat(NAN, NAN, 0) == "—"
  assert tables.format_stat(0.12345, 0.01, 2, digits=3) == "0.123 ± 0.010"


@pytest.mark.parametrize("lengths, max_train, expected", [
    ((5, 10, 15, 20, 30, 40, 60, 80), 20,  # the ablation preset
     {"in-dist": [5, 10, 15, 20], "1.5×": [30], "2×": [40], "4×": [80],
      "extrap": [30, 40, 60, 80]}),
    ((4, 8), 6, {"in-dist": [4], "1.5×": [8], "2×": [], "4×": [], "extrap": [8]}),  # smoke
    (range(24, 49), 22,  # SCAN's length split: nothing near 4 × 22
     {"in-dist": [], "1.5×": [33], "2×": [44], "4×": [], "extrap": list(range(24, 49))}),
    ((10, 25, 35), 20, {"in-dist": [10], "1.5×": [], "2×": [35], "4×": [],  # 25: 17% off
                        "extrap": [25, 35]}),
])
def test_length_groups(lengths, max_train, expected):
  assert tables.length_groups(lengths, max_train) == expected


def test_metric_table_known_markdown():
  text = tables.exact_match_table(_records())
  lines = text.splitlines()
  assert lines[0] == "### Exact match vs length — task copy"
  assert lines[2] == ("| run | scheme | seeds | train | in-dist | 1.5× | 2× | 4× | extrap "
                      "| pooled | 10 | 20 | 30 | 40 | 80 |")
  in_dist = A_EXACT[:, :2].mean(axis=1)  # each seed over lengths <= 20 first
  extrap = A_EXACT[:, 2:].mean(axis=1)
  row_a = ("| a | t5 | 3 | 1–20 | " + " | ".join(
      [_cell(in_dist), _cell(A_EXACT[:, 2]), _cell(A_EXACT[:, 3]), _cell(A_EXACT[:, 4]),
       _cell(extrap), _cell(extrap)] + [_cell(A_EXACT[:, i]) for i in range(5)]) + " |")
  assert lines[4] == row_a
  assert row_a.startswith("| a | t5 | 3 | 1–20 | 0.88 ± 0.08 | 0.50 ± 0.10 | 0.10 ± 0.10 | "
                          "0.03 ± 0.06 | 0.21 ± 0.08 |")
  # b: 80 is not representable: its cell and the 4× group read n/a; extrap averages
  # the representable lengths only (‡).
  assert lines[5] == ("| b | learned | 1 | 1–20 | 1.00 | 0.25 | 0.50 | n/a | 0.38‡ | 0.38‡ | "
                      "1.00 | 1.00 | 0.25 | 0.50 | n/a |")
  legend = text.split("\n\n", 1)[1]
  assert "n/a: not representable" in legend and "learned position table" in legend
  assert "‡" in legend and "ddof=1" in legend and "pooled over every extrapolation" in legend
  assert "†" not in legend  # no convergence fields: nothing marked
  assert "1.5× = 30, 2× = 40, 4× = 80" in legend


def test_table_without_na_has_no_na_legend():
  text = tables.exact_match_table([r for r in _records() if r["run"] == "a"])
  body = text.split("\n", 1)[1]  # the title has a dash of its own
  assert "n/a" not in body and "‡" not in body and "—" not in body


def test_empty_group_is_a_dash():
  text = tables.exact_match_table([_record("scan", 0, n, 0.1, max_train=22) for n in (24, 33)])
  assert "| scan | t5 | 1 | 1–22 | — | 0.10 | — | — | 0.10 | 0.10 | 0.10 | 0.10 |" in text
  assert "—: no value" in text


def test_other_metric_and_digits():
  text = tables.exact_match_table(_records(), metric="token_accuracy", digits=3)
  assert text.startswith("### Token accuracy vs length")
  assert f"| {(0.5 + A_EXACT[:, 0] / 2).mean():.3f} ± " in text


def _anatomy_records():
  """Run "a", 2 seeds at lengths 10 and 30 with known anatomy; run "b" n/a at 30."""
  values = {  # (seed, length): exact, too short, too long, right length, pure stop, first wrong
      (0, 10): (1.0, NAN, NAN, NAN, NAN, NAN),  # nothing failed
      (1, 10): (1.0, NAN, NAN, NAN, NAN, NAN),
      (0, 30): (0.2, 0.5, 0.25, 0.25, 0.5, 12.0),
      (1, 30): (0.6, 0.0, 1.0, 0.0, 0.25, 20.0)}
  keys = ("fail_too_short", "fail_too_long", "fail_right_length", "fail_pure_stop",
          "first_wrong_median")
  records = [_record("a", s, n, v[0], **dict(zip(keys, v[1:])),
                     oracle_exact_match=min(1.0, v[0] + 0.3))
             for (s, n), v in values.items()]
  records += [_record("b", 0, 10, 0.5, **dict(zip(keys, (1.0, 0.0, 0.0, 1.0, 3.0))),
                      oracle_exact_match=0.5),
              _record("b", 0, 30, NAN, **dict.fromkeys(keys, NAN), oracle_exact_match=NAN)]
  return records


def test_error_table_is_the_failure_anatomy():
  text = anatomy_table.error_table(_anatomy_records())
  lines = text.splitlines()
  assert lines[0] == "### Failure anatomy — task copy"
  assert lines[2] == ("| run | length | × train | failures | too short | too long | right length "
                      "| pure stop | first wrong (median) | oracle exact |")
  assert lines[4] == "| a | 10 | 0.5 | 0.00 ± 0.00 | — | — | — | — | — | 1.00 ± 0.00 |"
  assert lines[5] == ("| a | 30 | 1.5 | 0.60 ± 0.28 | 0.25 ± 0.35 | 0.62 ± 0.53 | "
                      "0.12 ± 0.18 | 0.38 ± 0.18 | 16.0 ± 5.7 | 0.70 ± 0.28 |")
  assert lines[6] == "| b | 10 | 0.5 | 0.50 | 1.00 | 0.00 | 0.00 | 1.00 | 3.0 | 0.50 |"
  assert lines[7] == "| b | 30 | 1.5 | n/a | n/a | n/a | n/a | n/a | n/a | n/a |"
  legend = text.split("\n\n", 1)[1]
  assert "—: nothing failed" in legend and "n/a: not representable" in legend
  assert "oracle exact" in legend


def test_error_table_without_oracle_or_dashes():
  records = [{k: v for k, v in r.items() if k != "oracle_exact_match"}
             for r in _anatomy_records() if r["run"] == "b" and r["length"] == 10]
  body = anatomy_table.error_table(records).split("\n", 1)[1]
  assert "oracle" not in body and "—" not in body and "n/a" not in body


def test_report_holds_every_main_metric_present():
  text = report.markdown(_anatomy_records())
  titles = [line for line in text.splitlines() if line.startswith("### ")]
  assert titles == ["### Exact match vs length — task copy",
                    "### Token accuracy vs length — task copy",
                    "### Oracle exact match vs length — task copy",
                    "### Failure anatomy — task copy"]


def test_write_csv_one_row_per_run(tmp_path):
  path = tmp_path / "sub" / "extrapolation.csv"
  table_csv.write_csv(_records(), str(path))
  with open(path) as f:
    rows = {r["run"]: r for r in csv.DictReader(f)}
  assert list(rows) == ["a", "b"]
  a, b = rows["a"], rows["b"]
  assert (a["seeds"], a["max_train_length"], a["scheme"]) == ("3", "20", "t5")
  assert (a["length_1.5x"], a["length_2x"], a["length_4x"]) == ("30", "40", "80")
  in_dist = A_EXACT[:, :2].mean(axis=1)
  np.testing.assert_allclose(float(a["exact_match_in_dist_mean"]), in_dist.mean())
  np.testing.assert_allclose(float(a["exact_match_in_dist_std"]), np.std(in_dist, ddof=1))
  np.testing.assert_allclose(float(a["exact_match_2x_mean"]), A_EXACT[:, 3].mean())
  np.testing.assert_allclose(float(a["exact_match_L30_mean"]), A_EXACT[:, 2].mean())
  np.testing.assert_allclose(float(a["token_accuracy_L10_std"]),
                             np.std(0.5 + A_EXACT[:, 0] / 2, ddof=1))
  assert b["exact_match_L80_mean"] == b["exact_match_4x_mean"] == "n/a"  # not representable
  np.testing.assert_allclose(float(b["exact_match_extrap_mean"]), np.mean(B_EXACT[2:4]))


def test_write_csv_empty_cells(tmp_path):
  path = tmp_path / "x.csv"
  records = [_record("scan", 0, n, 0.1, max_train=22) for n in (24, 33)]
  records.append(_record("other", 0, 10, 1.0, max_train=22, fail_pure_stop=NAN))
  table_csv.write_csv(records, str(path))
  with open(path) as f:
    rows = {r["run"]: r for r in csv.DictReader(f)}
  assert rows["scan"]["exact_match_in_dist_mean"] == ""  # no length in the group
  assert rows["scan"]["length_4x"] == ""
  assert rows["other"]["exact_match_L24_mean"] == ""  # the run has no such length
  assert rows["other"]["fail_pure_stop_L10_mean"] == ""  # no failures: no value


def test_write_csv_gives_run_fields_once(tmp_path):
  """Validation score and threshold are per (run, seed): one column each, not per length."""
  records = [{**_record("a", seed, n, 0.5), "valid_exact_match": valid,
              "best_valid_exact_match": valid, "converged": valid >= 0.95,
              "converged_at": 0.95}
             for seed, valid in enumerate((0.97, 0.99)) for n in (10, 30)]
  path = tmp_path / "x.csv"
  table_csv.write_csv(records, str(path))
  with open(path) as f:
    reader = csv.DictReader(f)
    row = next(reader)
  assert {c for c in reader.fieldnames if c.startswith(tables.RUN_FIELDS)} == {
      "converged_at", "valid_exact_match_mean", "valid_exact_match_std"}
  assert (row["converged_seeds"], row["converged_at"]) == ("2", "0.95")
  np.testing.assert_allclose(float(row["valid_exact_match_mean"]), 0.98)
  np.testing.assert_allclose(float(row["valid_exact_match_std"]), np.std([0.97, 0.99], ddof=1))
  assert tables.metric_keys(records) == ["exact_match", "token_accuracy"]


def test_by_run_keeps_first_appearance_order():
  records = _records()
  assert list(tables.by_run(records[::-1])) == ["b", "a"]
  assert tables.metric_keys(records) == ["exact_match", "token_accuracy"]


def test_group_stats_partial_and_not_representable():
  b = [r for r in _records() if r["run"] == "b"]
  groups = tables.length_groups(LENGTHS, 20)
  mean, _, count, partial, na = tables.group_stats(b, "exact_match", groups["extrap"])
  assert (mean, count, partial, na) == (pytest.approx(np.mean(B_EXACT[2:4])), 1, True, False)
  assert tables.group_stats(b, "exact_match", groups["4×"])[3:] == (False, True)
  assert tables.group_stats(b, "exact_match", []) is None


def test_pooled_weighs_examples_and_length_mean_weighs_lengths():
  # Two extrapolation lengths with 10 and 90 examples: the length-mean is 0.5, the
  # pooled exact match (10 * 1.0 + 90 * 0.0) / 100 = 0.1.
  records = [dict(_record("scan", 0, 30, 1.0, max_train=22), num_examples=10),
             dict(_record("scan", 0, 40, 0.0, max_train=22), num_examples=90),
             dict(_record("scan", 1, 30, 0.5, max_train=22), num_examples=10),
             dict(_record("scan", 1, 40, 0.5, max_train=22), num_examples=90)]
  groups = tables.length_groups([30, 40], 22)
  mean, std, count, partial, na = tables.pooled_stats(records, "exact_match", groups["extrap"])
  np.testing.assert_allclose([mean, std], [np.mean([0.1, 0.5]), np.std([0.1, 0.5], ddof=1)])
  assert (count, partial, na) == (2, False, False)
  length_mean = tables.group_stats(records, "exact_match", groups["extrap"])
  np.testing.assert_allclose(length_mean[0], np.mean([0.5, 0.5]))
  text = tables.exact_match_table(records)
  assert ("| scan | t5 | 2 | 1–22 | — | 0.75 ± 0.35 | 0.25 ± 0.35 | — | 0.50 ± 0.00 | 0.30 ± 0.28 |"
          in text)


def test_unconverged_runs_are_marked_and_valid_is_shown():
  records = []
  for seed, valid in enumerate((0.99, 0.60)):
    for n in (10, 30):
      records.append({**_record("nope", seed, n, 0.5), "valid_exact_match": valid,
                      "best_valid_exact_match": valid, "converged": valid >= 0.95,
                      "converged_at": 0.95, "checkpoint_rule": "best",
                      "valid_source": "copy, lengths 6-20"})
  records += [{**_record("t5", 0, n, 0.9), "valid_exact_match": 1.0, "converged": True,
               "converged_at": 0.95} for n in (10, 30)]
  assert tables.convergence(records[:4]) == (1, 2)
  assert not tables.is_converged(records[:4]) and tables.is_converged(records[4:])
  lines = tables.exact_match_table(records).splitlines()
  assert lines[2].startswith("| run | scheme | seeds | train | conv. | valid | in-dist |")
  assert lines[4].startswith(f"| nope † | t5 | 2 | 1–20 | 1/2 | {_cell([0.99, 0.60])} |")
  assert lines[5].startswith("| t5 | t5 | 1 | 1–20 | 1/1 | 1.00 |")
  text = "\n".join(lines)
  assert "†: some seed of the run is below its validation threshold" in text
  assert "≥ 0.95" in text and "best (by validation exact match)" in text
