"""Every figure writes a real PNG; the scheme figures find their modules in any model."""

import os
import pathlib

import jax.numpy as jnp
import matplotlib.colors
import numpy as np
import pytest

from relpos_jax import architectures
from relpos_jax import evaluate
from relpos_jax import report
from relpos_jax import plots
from relpos_jax import sweep

import model_harness  # the tests' shared eager init (pytest puts tests/ on the path)

DEFAULT = sweep.load_module(
    str(pathlib.Path(__file__).resolve().parents[1] / "configs" / "default.py"))
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
NAN = float("nan")


def _assert_png(path):
  with open(path, "rb") as f:
    head = f.read(8)
  assert head == PNG_SIGNATURE
  assert os.path.getsize(path) > 5000  # axes, curves and text, not an empty canvas


def _records(oracle=True):
  rng = np.random.default_rng(0)
  records = []
  for run, seeds in (("t5", 3), ("learned", 1)):
    for seed in range(seeds):
      for length in (5, 10, 20, 40, 80):
        exact = float(np.clip(1.2 - length / 30 + rng.normal(0, 0.05), 0, 1))
        na = run == "learned" and length == 80
        share = float("nan") if na else float(rng.uniform())
        record = {"run": run, "scheme": run, "task": "copy", "seed": seed, "length": length,
                  "min_train_length": 1, "max_train_length": 20,
                  "exact_match": NAN if na else exact,
                  "token_accuracy": NAN if na else (1 + exact) / 2,
                  "fail_pure_stop": share, "fail_too_short": share / 2,
                  "fail_too_long": share / 3, "first_wrong_median": NAN if na else length / 3,
                  "error": "too long" if na else None}
        if oracle:
          record.update(oracle_exact_match=NAN if na else min(1.0, exact + 0.2),
                        oracle_token_accuracy=NAN if na else min(1.0, exact + 0.3))
        records.append(record)
  return records


def _one_record():
  """One record (t5, seed 0, length 5), for figures that only need many run names."""
  (record,) = [r for r in _records(oracle=False) if r["run"] == "t5" and r["seed"] == 0
               and r["length"] == 5]
  return record


@pytest.fixture
def figures(monkeypatch):
  """The figures `plots` draws, kept in memory instead of saved."""
  drawn = []
  monkeypatch.setattr(plots, "_save", lambda fig, path: drawn.append(fig) or path)
  return drawn


@pytest.mark.parametrize("oracle", [True, False])
def test_accuracy_vs_length_writes_png(tmp_path, oracle):
  path = str(tmp_path / "new_dir" / "acc.png")
  assert plots.accuracy_vs_length(_records(oracle), path) == path
  _assert_png(path)


def test_the_run_legend_marks_a_run_with_an_unconverged_seed(tmp_path, figures):
  records = [{**r, "converged": not (r["run"] == "t5" and r["seed"] == 1)}
             for r in _records(oracle=False)]
  plots.accuracy_vs_length(records, str(tmp_path / "acc.png"))
  (legend,) = figures[0].legends
  assert [t.get_text() for t in legend.get_texts()] == [
      "t5 † (2/3 seeds converged)", "learned", plots.UNCONVERGED_NOTE]
  plots.accuracy_vs_length(_records(oracle=False), str(tmp_path / "acc.png"))
  assert [t.get_text() for t in figures[1].legends[0].get_texts()] == ["t5 (3 seeds)", "learned"]


@pytest.mark.parametrize("num_runs", [3, 13, 25])
def test_every_run_of_a_figure_has_its_own_colour_and_marker(tmp_path, figures, num_runs):
  record = _one_record()
  records = [{**record, "run": f"run{i}"} for i in range(num_runs)]
  plots.accuracy_vs_length(records, str(tmp_path / "acc.png"))
  handles = figures[0].legends[0].legend_handles
  styles = {(tuple(matplotlib.colors.to_rgba(h.get_color())), h.get_marker()) for h in handles}
  assert len(handles) == num_runs and len(styles) == num_runs
  if num_runs <= 10:  # small figures keep matplotlib's default colours
    assert [h.get_color() for h in handles] == [f"C{i}" for i in range(num_runs)]


def test_the_title_does_not_run_into_the_run_legend(tmp_path, figures):
  tasks = ["add_index_hints", "copy", "reverse"]  # a long title, as in a multi-task table
  record = _one_record()
  records = [{**record, "run": f"scheme{i}+{task}+randomized@random_positions", "task": task}
             for i in range(10) for task in tasks]
  plots.accuracy_vs_length(records, str(tmp_path / "acc.png"))
  fig = figures[0]
  fig.canvas.draw()
  renderer = fig.canvas.get_renderer()
  title = fig.get_suptitle()
  assert all(task in title for task in tasks)
  title_box = fig._suptitle.get_window_extent(renderer)  # pylint: disable=protected-access
  legend_box = fig.legends[0].get_window_extent(renderer)
  assert not title_box.overlaps(legend_box), (title_box, legend_box)


def test_a_report_over_several_tasks_writes_one_figure_per_task(tmp_path):
  records = _records(oracle=False)
  records += [{**r, "run": r["run"] + "+reverse", "task": "reverse"} for r in records]
  paths = report.write_report(records, str(tmp_path))
  for key in ("plot", "plot_copy", "plot_reverse"):
    _assert_png(paths[key])
  assert os.path.basename(paths["plot_reverse"]) == "accuracy_vs_length_reverse.png"
  one_task = report.write_report(_records(oracle=False), str(tmp_path / "one"))
  assert not any(k.startswith("plot_") for k in one_task)


def _model_and_params(arg, arch="encoder_decoder", prefix_lm=False, **position):
  """A smoke-sized 2-layer model of the default config and its initial params."""
  config = DEFAULT.get_config(f"smoke,{arg}")
  if arch == "decoder_only":
    model_config = architectures.default_config(arch)
    model_config.update(d_model=16, num_heads=2, head_dim=8, d_ff=32, num_layers=2,
                        prefix_lm=prefix_lm)
    model_config.position = config.model.position
    config.model = model_config
  else:
    config.model.update(num_encoder_layers=2, num_decoder_layers=2)
  config.model.position.update(position)
  model = architectures.make_model(config.model, vocab_size=12)
  tokens = jnp.ones((1, 4), jnp.int32)
  return model, model_harness.init(model, tokens, tokens)


def test_scheme_instances_find_every_module_with_its_settings():
  model, params = _model_and_params("scheme=t5", share_across_layers=False)
  found = plots.scheme_instances(model, params)
  assert [(p, m.causal) for p, m in found] == [
      (("encoder", "position_0"), False), (("encoder", "position_1"), False),
      (("decoder", "position_0"), True), (("decoder", "position_1"), True)]
  shared = plots.scheme_instances(*_model_and_params("scheme=t5"))
  assert [p for p, _ in shared] == [("encoder", "position"), ("decoder", "position")]


@pytest.mark.parametrize("prefix_lm", [False, True])
def test_scheme_instances_of_a_decoder_only_model(prefix_lm, tmp_path):
  model, params = _model_and_params("scheme=shaw", arch="decoder_only", prefix_lm=prefix_lm)
  found = plots.scheme_instances(model, params)
  assert [(p, m.causal) for p, m in found] == [
      (("decoder", f"position_{i}"), not prefix_lm) for i in range(2)]
  _assert_png(plots.shaw_key_norms(model, params, str(tmp_path / "shaw.png")))
  model, params = _model_and_params("scheme=t5", arch="decoder_only", prefix_lm=prefix_lm)
  _assert_png(plots.learned_bias_curves(model, params, str(tmp_path / "t5.png")))


def test_bucket_edges_of_t5_defaults():
  edges = plots.bucket_edges(np.arange(-192, 193), bidirectional=True, num_buckets=32,
                             max_distance=128)
  assert len(edges) == 30  # 16 buckets left (15 edges), 0 -> 1 changes half, 15 right (14)
  exact = np.concatenate([np.arange(-7.5, 0, 1), np.arange(0.5, 8, 1)])  # |d| < 8: one each
  np.testing.assert_array_equal(edges[(edges > -8) & (edges < 8)], exact)
  causal = plots.bucket_edges(np.arange(-192, 1), bidirectional=False, num_buckets=32,
                              max_distance=128)
  assert len(causal) == 31 and causal[-1] == -0.5


@pytest.mark.parametrize("share", [True, False])
def test_learned_bias_curves(tmp_path, share):
  model, params = _model_and_params("scheme=t5", share_across_layers=share)
  path = str(tmp_path / "bias.png")
  assert plots.learned_bias_curves(model, params, path, max_train_distance=5, seed=0) == path
  _assert_png(path)


def test_learned_bias_curves_refuses_a_model_without_t5():
  with pytest.raises(ValueError, match="no T5 bias table"):
    plots.learned_bias_curves(*_model_and_params("scheme=shaw"), "unused.png")


def test_shaw_key_norms(tmp_path):
  model, params = _model_and_params("scheme=shaw", max_relative_position=4)
  path = str(tmp_path / "shaw.png")
  assert plots.shaw_key_norms(model, params, path, max_train_distance=5, seed=0) == path
  _assert_png(path)


@pytest.mark.parametrize("arg, position", [("scheme=t5", {}),
                                           ("scheme=shaw", {"use_keys": False})])
def test_shaw_key_norms_refuses_a_model_without_key_tables(arg, position):
  with pytest.raises(ValueError, match="no Shaw key table"):
    plots.shaw_key_norms(*_model_and_params(arg, **position), "unused.png")


def test_encoding_heatmap(tmp_path):
  path = str(tmp_path / "sinusoid.png")
  plots.encoding_heatmap(path, num_positions=64, dim=16, max_train_position=19)
  _assert_png(path)


def test_plotting_leaves_the_pyplot_backend_alone(tmp_path):
  import matplotlib  # pylint: disable=g-import-not-at-top
  before = matplotlib.rcParams["backend"]
  plots.encoding_heatmap(str(tmp_path / "x.png"), num_positions=8, dim=4)
  assert matplotlib.rcParams["backend"] == before
