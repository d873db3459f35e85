"""Tables from hand-made records: known numbers give known markdown and CSV."""

import csv

import numpy as np
import pytest

from relpos_jax import tables

NAN = float("nan")


def _record(run, seed, length, exact, *, content=None, stop=None, scheme="t5", max_train=20):
  """One record; content/stop default to splitting the failures 3:1."""
  fail = 1.0 - exact if not np.isnan(exact) else NAN
  return {"run": run, "scheme": scheme, "task": "copy", "seed": seed, "replica": seed,
          "length": length, "min_train_length": 1, "max_train_length": max_train,
          "num_examples": 0 if np.isnan(exact) else 128, "exact_match": exact,
          "content_errors": 0.75 * fail if content is None else content,
          "stop_errors": 0.25 * fail if stop is None else stop,
          "error": "too long" if np.isnan(exact) else None}


# run "a": 3 seeds; rows are seeds, columns lengths 10, 20, 30, 40.
A_EXACT = np.array([[1.0, 0.9, 0.4, 0.0],
                    [1.0, 0.8, 0.5, 0.1],
                    [0.9, 0.7, 0.6, 0.2]])
LENGTHS = [10, 20, 30, 40]


def _records():
  records = [_record("a", s, n, float(A_EXACT[s, i]))
             for s in range(3) for i, n in enumerate(LENGTHS)]
  records += [_record("b", 0, n, e, scheme="learned")
              for n, e in zip(LENGTHS, [1.0, 1.0, 0.25, NAN])]
  return records


def _cell(values):
  return f"{np.mean(values):.2f} ± {np.std(values, ddof=1):.2f}"


def test_mean_std_matches_numpy():
  values = np.array([0.4, 0.5, 0.6, NAN])
  mean, std, count = tables.mean_std(values)
  assert count == 3
  np.testing.assert_allclose([mean, std], [0.5, np.std([0.4, 0.5, 0.6], ddof=1)])
  assert tables.mean_std([0.3]) == (0.3, 0.0, 1)
  assert tables.mean_std([NAN])[2] == 0


def test_format_stat():
  assert tables.format_stat(0.5, 0.1, 3) == "0.50 ± 0.10"
  assert tables.format_stat(0.5, 0.0, 1) == "0.50"
  assert tables.format_stat(NAN, NAN, 0) == "n/a"
  assert tables.format_stat(0.12345, 0.01, 2, digits=3) == "0.123 ± 0.010"


def test_exact_match_table_known_markdown():
  text = tables.exact_match_table(_records())
  in_dist = A_EXACT[:, :2].mean(axis=1)   # each seed over lengths <= 20
  extrap = A_EXACT[:, 2:].mean(axis=1)    # each seed over lengths > 20
  row_a = ("| a | t5 | 3 | 1–20 | "
           + " | ".join(_cell(A_EXACT[:, i]) for i in range(4))
           + f" | {_cell(in_dist)} | {_cell(extrap)} |")
  row_b = "| b | learned | 1 | 1–20 | 1.00 | 1.00 | 0.25 | n/a | 1.00 | 0.25† |"
  lines = text.splitlines()
  assert lines[0] == "### Exact match vs length — task copy"
  assert lines[2] == "| run | scheme | seeds | train | 10 | 20 | 30 | 40 | in-dist | extrap |"
  assert lines[4] == row_a
  assert lines[5] == row_b
  assert row_a == ("| a | t5 | 3 | 1–20 | 0.97 ± 0.06 | 0.80 ± 0.10 | 0.50 ± 0.10 | "
                   "0.10 ± 0.10 | 0.88 ± 0.08 | 0.30 ± 0.10 |")
  legend = text.split("\n\n", 1)[1]
  assert "n/a" in legend and "cannot encode" in legend and "learned" in legend
  assert "†" in legend and "ddof=1" in legend


def test_exact_match_table_without_na_has_no_na_legend():
  text = tables.exact_match_table([r for r in _records() if r["run"] == "a"])
  assert "n/a" not in text and "†" not in text


def test_empty_range_is_a_dash():
  records = [_record("scan", 0, n, 0.1, max_train=22) for n in (24, 30)]
  text = tables.exact_match_table(records)
  assert "| scan | t5 | 1 | 1–22 | 0.10 | 0.10 | — | 0.10 |" in text
  assert "—: the run has no eval length in that range" in text


def test_other_metric_and_digits():
  text = tables.exact_match_table(_records(), metric="content_errors", digits=3)
  assert text.startswith("### Content errors vs length")
  assert f"| {0.75 * (1 - A_EXACT[:, 0]).mean():.3f} ± " in text


def test_error_table_splits_content_and_stop():
  records = [{**_record("a", s, n, e, content=c, stop=st), "mean_first_error": first}
             for s, (e, c, st, first) in enumerate([(0.2, 0.6, 0.2, 7.0), (0.4, 0.3, 0.3, 12.0)])
             for n in (10, 30)]
  text = tables.error_table(records)
  lines = text.splitlines()
  assert lines[2] == "| run | scheme | seeds | 30 | content | stop | stop share | first error |"
  content, stop = np.mean([0.6, 0.3]), np.mean([0.2, 0.3])
  assert lines[4] == (f"| a | t5 | 2 | {content:.2f} / {stop:.2f} | {_cell([0.6, 0.3])} | "
                      f"{_cell([0.2, 0.3])} | {stop / (content + stop):.2f} | 9.5 ± 3.5 |")
  assert "stop share" in text.split("\n\n", 1)[1]


def test_error_table_na_and_no_failures():
  text = tables.error_table(_records())
  row_b = next(l for l in text.splitlines() if l.startswith("| b "))
  assert row_b == "| b | learned | 1 | 0.56 / 0.19 | n/a | 0.56 | 0.19 | 0.25 | n/a |"
  perfect = [_record("p", 0, n, 1.0) for n in (10, 30)]
  assert "| p | t5 | 1 | 0.00 / 0.00 | 0.00 | 0.00 | n/a | n/a |" in tables.error_table(perfect)


def test_write_csv(tmp_path):
  path = tmp_path / "sub" / "results.csv"
  tables.write_csv(_records(), str(path))
  with open(path) as f:
    rows = list(csv.DictReader(f))
  assert len(rows) == 8
  a30 = next(r for r in rows if r["run"] == "a" and r["length"] == "30")
  np.testing.assert_allclose(float(a30["exact_match_mean"]), A_EXACT[:, 2].mean())
  np.testing.assert_allclose(float(a30["exact_match_std"]), np.std(A_EXACT[:, 2], ddof=1))
  assert a30["seeds"] == "3" and a30["in_train_range"] == "False" and a30["scheme"] == "t5"
  b40 = next(r for r in rows if r["run"] == "b" and r["length"] == "40")
  assert b40["exact_match_mean"] == "" and b40["stop_errors_mean"] == ""


def test_by_run_keeps_first_appearance_order():
  records = _records()
  assert list(tables.by_run(records[::-1])) == ["b", "a"]
  assert tables.metric_keys(records) == ["exact_match", "content_errors", "stop_errors"]


@pytest.mark.parametrize("beyond, expected", [(False, A_EXACT[:, :2]), (True, A_EXACT[:, 2:])])
def test_range_stats(beyond, expected):
  records = [r for r in _records() if r["run"] == "a"]
  mean, std, count, partial = tables.range_stats(records, "exact_match", beyond)
  per_seed = expected.mean(axis=1)
  np.testing.assert_allclose([mean, std], [per_seed.mean(), np.std(per_seed, ddof=1)])
  assert count == 3 and not partial
