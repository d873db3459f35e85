"""relpos_jax/experiments/scale_figures.py: the parameter count, the points and the two figures."""

import json
import os

import numpy.testing as npt
from matplotlib import container

from relpos_jax import architectures
from relpos_jax import positions
from relpos_jax.experiments import records as records_lib
from relpos_jax.experiments import results
from relpos_jax.experiments import scale_figures
from relpos_jax.experiments import store

SIZES = (8, 16)  # tiny models: the count is traced, never computed


def _model(d_model, scheme="none"):
  model = architectures.default_config("decoder_only").to_dict()
  model.update(d_model=d_model, num_heads=d_model // 8, head_dim=8, d_ff=4 * d_model,
               num_layers=1, position=positions.default_config(scheme).to_dict())
  return model


def _records(run, scheme, task, exact_by_seed, converged=True):
  """A run's records: copy at lengths 5 (in distribution), 25 and 40; SCAN at 26 and 30."""
  lengths, L = ((5, 25, 40), 20) if task == "copy" else ((26, 30), 25)
  return [{"run": run, "scheme": scheme, "task": task, "seed": seed, "replica": seed,
           "length": n, "max_train_length": L, "num_examples": 10, "error": None,
           "exact_match": exact if n > L else 1.0, "converged": converged,
           "valid_exact_match": 1.0 if converged else 0.5, "converged_at": 0.95}
          for seed, exact in enumerate(exact_by_seed) for n in lengths]


def _table(cells):
  """Records and run infos of `(scheme, task, d_model, steps, exact_by_seed[, converged])`."""
  records, infos = [], {}
  for scheme, task, d_model, steps, exact, *converged in cells:
    run = f"{scheme}+{task}+d_model={d_model}" + (f"+num_steps={steps}" if steps > 6 else "")
    records += _records(run, scheme, task, exact, *converged)
    infos[run] = {"run": run, "machine": {"cpus": 2, "processor": "cpu"},
                  "config": {"num_steps": steps, "batch_size": 64,
                             "model": _model(d_model, scheme),
                             "data": {"task": task.split("_")[0],
                                      "scan_split": "length_cutoff_25"}}}
  return records, infos


def test_non_embedding_parameters_counts_the_layers_by_hand():
  # one layer: q, k, v, o (4·D·H·E), the MLP (2·D·F + F + D biases), two norms; final norm
  d, f = 16, 64
  by_hand = 4 * d * d + 2 * d * f + f + d + 2 * d + d
  assert scale_figures.non_embedding_parameters(_model(d)) == by_hand
  # T5's table is counted: 32 buckets × 2 heads
  assert scale_figures.non_embedding_parameters(_model(d, "t5")) == by_hand + 32 * 2


def test_size_points_pool_the_right_column_per_task_and_skip_missing_cells():
  records, infos = _table([("none", "copy", 8, 6, [0.2, 0.4, 0.6]),
                           ("none", "copy", 16, 6, [0.8, 0.8, 0.8]),
                           ("alibi", "scan_length", 16, 6, [0.5, 0.5, 0.5]),
                           ("alibi", "scan_length", 16, 24, [0.9, 0.9, 0.9])])
  del infos["none+copy+d_model=16"]  # a run without its run info is left out
  points = scale_figures.size_points(records, infos)
  assert set(points) == {"copy", "scan_length"}
  assert list(points["copy"]) == [("none", 6, 8)]
  (small,) = points["copy"][("none", 6, 8)]
  assert small["d_model"] == 8 and small["column"] == "pooled (L, 2L]"
  npt.assert_allclose(small["interval"].mean, 0.4)
  assert small["interval"].lo < 0.4 < small["interval"].hi
  scan = points["scan_length"]
  assert sorted(scan) == [("alibi", 6, 8), ("alibi", 24, 8)]
  assert scan[("alibi", 24, 8)][0]["column"] == "pooled test split"
  npt.assert_allclose(scan[("alibi", 24, 8)][0]["interval"].mean, 0.9)


def test_size_figure_draws_one_line_per_scheme_with_error_bars():
  cells = [(s, "copy", d, 6, [0.3, 0.5, 0.7]) for s in ("none", "t5") for d in SIZES]
  cells.append(("none", "scan_length", 8, 6, [0.1, 0.2, 0.3], False))  # only one SCAN cell
  records, infos = _table(cells)
  fig = scale_figures.size_figure(scale_figures.size_points(records, infos))
  copy_ax, scan_ax = fig.axes[:2]
  lines = {l.get_gid(): l for l in copy_ax.lines if l.get_gid()}
  assert sorted(lines) == ["none@6", "t5@6"]
  npt.assert_allclose(lines["none@6"].get_ydata(), [0.5, 0.5])
  assert lines["none@6"].get_color() != lines["t5@6"].get_color()
  bars = [c for c in copy_ax.containers if isinstance(c, container.ErrorbarContainer)]
  assert len(bars) == 4
  # the missing SCAN cells leave one hollow point (unconverged), no error
  (scan_bar,) = [c for c in scan_ax.containers if isinstance(c, container.ErrorbarContainer)]
  assert scan_bar.lines[0].get_markerfacecolor() == "none"


def test_another_head_dim_is_its_own_line_and_legend_entry():
  """The heads control (same width, other heads) is not joined to the main runs' line."""
  records, infos = _table([("alibi", "copy", d, 6, [0.5, 0.6, 0.7]) for d in SIZES])
  control_records, control_infos = _table([("alibi", "copy", 16, 6, [0.9, 0.9, 0.9])])
  control = "alibi+copy+d_model=16+num_heads=4+head_dim=4"
  for r in control_records:
    r["run"] = control
  (info,) = control_infos.values()
  info["config"]["model"].update(num_heads=4, head_dim=4)
  points = scale_figures.size_points(records + control_records, {**infos, control: info})
  assert sorted(points["copy"]) == [("alibi", 6, 4), ("alibi", 6, 8)]
  assert [p["d_model"] for p in points["copy"][("alibi", 6, 8)]] == [8, 16]
  fig = scale_figures.size_figure(points)
  lines = {l.get_gid(): l for l in fig.axes[0].lines if l.get_gid()}
  assert sorted(lines) == ["alibi@6", "alibi@6@head_dim=4"]
  npt.assert_allclose(lines["alibi@6@head_dim=4"].get_ydata(), [0.9])
  assert lines["alibi@6@head_dim=4"].get_linestyle() != lines["alibi@6"].get_linestyle()
  labels = [t.get_text() for t in fig.axes[-1].get_legend().get_texts()]
  assert "main runs" in labels and "head dim 4" in labels


def test_scan_figure_has_a_panel_per_size_and_budget(tmp_path):
  records, infos = _table([(s, "scan_length", d, 6, [0.4, 0.6, 0.5])
                           for s in ("none", "alibi") for d in SIZES]
                          + [("none", "scan_length", 16, 24, [0.9, 0.9, 0.9])])
  fig = scale_figures.scan_figure(records, infos)
  titles = [ax.get_title() for ax in fig.axes]
  assert titles == ["d_model 8, 6 steps", "d_model 16, 6 steps", "d_model 16, 24 steps"]
  assert sorted(l.get_gid() for l in fig.axes[2].lines if l.get_gid()) == [
      "none+scan_length+d_model=16+num_steps=24"]
  paths = scale_figures.write_figures(records, infos, str(tmp_path))
  assert sorted(paths) == ["scan", "size"] and all(os.path.exists(p) for p in paths.values())
  assert scale_figures.write_figures([], {}, str(tmp_path / "empty")) == {}


def test_results_draws_the_figures_of_the_scale_table_only(tmp_path):
  records, infos = _table([("none", "copy", 8, 6, [0.3, 0.5, 0.7])])
  for name in ("scale", "other"):
    table = tmp_path / name
    for run, info in infos.items():
      records_lib.write_jsonl(records, store.record_path(str(table), run))
      os.makedirs(table / "runs", exist_ok=True)
      (table / "runs" / f"{run}.json").write_text(json.dumps(info))
    results.write_table_report(str(table))
  assert (tmp_path / "scale" / scale_figures.FIGURE_FILES["size"]).exists()
  assert not (tmp_path / "other" / scale_figures.FIGURE_FILES["size"]).exists()
  text = results.render(str(tmp_path))
  assert f"results/scale/{scale_figures.FIGURE_FILES['size']}" in text
  assert f"results/other/{scale_figures.FIGURE_FILES['size']}" not in text


def test_the_committed_scale_table_is_listed_with_the_runs_it_stores():
  root = os.path.join(os.path.dirname(__file__), "..", "results")
  table = os.path.join(root, "scale")
  done, total = results.table_status(table)
  stored = {name[:-len(".jsonl")] for name in os.listdir(os.path.join(table, "records"))
            if name.endswith(".jsonl") and "@" not in name}
  assert total == 35 and done == len(stored) >= 9  # the 9 d_model 128 cells are reused
  assert f"`configs/ablations/scale.py`: {done} of 35 runs stored" in results.render(root)
