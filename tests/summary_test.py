"""The summary: schemes × tasks from the stored records, one pooled definition."""

import json

from relpos_jax import positions
from relpos_jax.experiments import summary


def _write(root, table, run, ems, L=20):
  folder = root / table / "records"
  folder.mkdir(parents=True, exist_ok=True)
  lines = []
  for seed, em in enumerate(ems):
    for length in (10, 25, 40, 80):
      lines.append(json.dumps({"run": run, "seed": seed, "length": length,
                               "exact_match": em if length > 10 else 1.0, "num_examples": 4,
                               "max_train_length": L, "task": "copy", "converged": em > 0,
                               "valid_exact_match": 1.0, "error": None}))
  (folder / f"{run}.jsonl").write_text("\n".join(lines) + "\n")


def test_cells_come_from_each_scheme_plain_run(tmp_path):
  _write(tmp_path, "schemes", "t5+copy", [0.5, 0.75, 0.25])
  _write(tmp_path, "schemes", "t5+copy@yarn", [1.0, 1.0, 1.0])  # a variant: not a cell
  _write(tmp_path, "extrapolation_methods", "fire+copy", [1.0, 1.0, 0.0])  # decoder-only copy
  cells = summary.summary_cells(str(tmp_path))
  assert set(cells) == {("t5", 0), ("fire", 3)}
  interval, converged = cells[("t5", 0)]
  assert interval.mean == 0.5 and converged  # pooled over (20, 40]: lengths 25 and 40
  assert cells[("fire", 3)][1] is False  # a seed did not converge
  text = summary.markdown(cells)
  assert "| t5 | 0.50 [" in text and "†" in text
  summary.write(str(tmp_path))
  assert (tmp_path / "summary.png").stat().st_size > 0
  assert list(summary.schemes_in(cells)) == [s for s in positions.SCHEMES if s in ("t5", "fire")]


def test_the_legend_names_cells_resting_on_other_seed_counts(tmp_path):
  _write(tmp_path, "schemes", "t5+copy", [0.5, 0.75, 0.25])
  _write(tmp_path, "schemes", "xl+reverse", [0.5, 0.75, 0.25, 1.0, 0.5])  # seeds added
  text = summary.markdown(summary.summary_cells(str(tmp_path)))
  assert "mean over 3 seeds (5: xl on encoder: reverse) [95% interval" in text
  for run in ("rope+copy", "sinusoidal+copy", "learned+copy"):  # 3 seeds stay the common count
    _write(tmp_path, "schemes", run, [0.5, 0.75, 0.25])
  _write(tmp_path, "schemes", "fire+reverse", [0.5, 0.75, 0.25, 1.0, 0.5])
  _write(tmp_path, "schemes", "t5+reverse", [0.5, 0.75, 0.25, 1.0])
  text = summary.markdown(summary.summary_cells(str(tmp_path)))
  assert ("mean over 3 seeds (4: t5 on encoder: reverse; 5: fire and xl on encoder: reverse) "
          "[95% interval") in text
  for run in ("fire+reverse", "t5+reverse"):
    _write(tmp_path, "schemes", run, [0.5, 0.75, 0.25])
  _write(tmp_path, "schemes", "xl+reverse", [0.5, 0.75, 0.25])
  assert "mean over 3 seeds [95% interval" in summary.markdown(
      summary.summary_cells(str(tmp_path)))
