"""Every figure writes a real PNG; the scheme figures find their modules in any model."""

import os
import pathlib

import jax.numpy as jnp
import matplotlib.colors
import numpy as np
import pytest

from relpos_jax import architectures
from relpos_jax import positions
from relpos_jax.experiments import palette
from relpos_jax.experiments import plots
from relpos_jax.experiments import report
from relpos_jax.experiments import sweep_spec

import model_harness  # the tests' shared eager init (pytest puts tests/ on the path)

DEFAULT = sweep_spec.load_module(
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
  monkeypatch.setattr(plots, "save_png", lambda fig, path: drawn.append(fig) or path)
  return drawn


@pytest.mark.parametrize("oracle", [True, False])
def test_accuracy_vs_length_writes_png(tmp_path, oracle):
  path = str(tmp_path / "new_dir" / "acc.png")
  assert plots.accuracy_vs_length(_records(oracle), path) == path
  _assert_png(path)


def _run_legends(fig):
  """The run legends (one per row of panels), as lists of their texts."""
  return [[t.get_text() for t in ax.get_legend().get_texts()]
          for ax in fig.axes if ax.get_legend() is not None]


def _data_lines(ax):
  """The axes' lines that draw a run (not the grey reference line)."""
  return [line for line in ax.lines if line.get_gid() != plots.REFERENCE]


def test_the_run_legend_marks_a_run_with_an_unconverged_seed(tmp_path, figures):
  records = [{**r, "converged": not (r["run"] == "t5" and r["seed"] == 1)}
             for r in _records(oracle=False)]
  plots.accuracy_vs_length(records, str(tmp_path / "acc.png"))
  assert _run_legends(figures[0]) == [["t5 † 2/3", "learned (1 seed)"]]
  notes = [t.get_text() for t in figures[0].legends[0].get_texts()]
  assert plots.UNCONVERGED_NOTE in notes
  plots.accuracy_vs_length(_records(oracle=False), str(tmp_path / "acc.png"))
  assert _run_legends(figures[1]) == [["t5 (3 seeds)", "learned (1 seed)"]]
  assert plots.UNCONVERGED_NOTE not in [t.get_text() for t in figures[1].legends[0].get_texts()]


def _scheme_records(schemes, arms=("",), task="copy"):
  """One record per (arm, scheme): runs named `<scheme>+<task>[+<arm>]`."""
  record = _one_record()
  return [{**record, "run": "+".join([scheme, task] + [arm] * bool(arm)), "scheme": scheme,
           "task": task} for arm in arms for scheme in schemes]


def _color_of(fig, run):
  (color,) = {matplotlib.colors.to_rgb(line.get_color()) for ax in fig.axes
              for line in ax.lines if line.get_gid() == run}
  return color


def test_a_scheme_has_the_same_colour_in_every_figure(tmp_path, figures):
  everything = list(positions.SCHEMES)
  plots.accuracy_vs_length(_scheme_records(everything), str(tmp_path / "a.png"))
  plots.failure_anatomy(_scheme_records(["rope", "t5"], task="reverse"), "reverse",
                        str(tmp_path / "b.png"))
  rope = palette.scheme_color("rope")
  assert _color_of(figures[0], "rope+copy") == pytest.approx(rope)
  assert _color_of(figures[1], "rope+reverse") == pytest.approx(rope)
  assert _color_of(figures[0], "t5+copy") == pytest.approx(_color_of(figures[1], "t5+reverse"))
  colors = {_color_of(figures[0], f"{s}+copy") for s in everything}
  assert len(colors) == len(everything)  # no two schemes alike


@pytest.mark.parametrize("draw", ["accuracy", "anatomy"])
def test_no_panel_draws_more_than_the_stated_number_of_lines(tmp_path, figures, draw):
  # 10 schemes × 3 arms of one task: 30 runs, split into rows of at most 10.
  records = _scheme_records(list(positions.SCHEMES),
                            arms=("", "randomized", "randomized@random_positions"))
  if draw == "accuracy":
    plots.accuracy_vs_length(records, str(tmp_path / "acc.png"))
  else:
    plots.failure_anatomy(records, "copy", str(tmp_path / "anatomy.png"))
  panels = [ax for ax in figures[0].axes if ax.lines]
  assert len(panels) >= 3 * 2
  for ax in panels:
    assert len(_data_lines(ax)) <= plots.MAX_RUNS_PER_PANEL
    assert len(ax.lines) <= plots.MAX_RUNS_PER_PANEL + 1  # + the reference line
  drawn = [line.get_gid() for ax in panels[:1] for line in _data_lines(ax)]
  assert drawn == [f"{s}+copy" for s in positions.SCHEMES]  # the plain arm's row first
  assert len(_run_legends(figures[0])) == 3


def test_variants_of_a_scheme_share_its_colour_family_but_not_its_style(tmp_path, figures):
  records = _scheme_records(["rope"], arms=("", "randomized"))
  records += [{**r, "run": r["run"] + "@pi"} for r in _scheme_records(["rope"])]
  plots.accuracy_vs_length(records, str(tmp_path / "acc.png"))
  (panel, *_) = [ax for ax in figures[0].axes if ax.lines]
  styles = {(matplotlib.colors.to_rgb(l.get_color()), l.get_linestyle(), l.get_marker())
            for l in _data_lines(panel)}
  assert len(styles) == 3
  assert _run_legends(figures[0]) == [["rope", "rope+randomized", "rope@pi"]]


def test_legends_and_titles_never_cover_a_panel(tmp_path, figures):
  records = _scheme_records(list(positions.SCHEMES),
                            arms=("", "randomized+num_steps=5000@random_positions"))
  records += [{**r, "converged": False, "error": "too long"} for r in
              _scheme_records(["learned"], task="reverse")]
  plots.accuracy_vs_length(records, str(tmp_path / "acc.png"))
  fig = figures[0]
  fig.canvas.draw()
  renderer = fig.canvas.get_renderer()
  panels = [ax.get_window_extent(renderer) for ax in fig.axes if ax.lines]
  boxes = [ax.get_legend().get_window_extent(renderer) for ax in fig.axes if ax.get_legend()]
  boxes += [legend.get_window_extent(renderer) for legend in fig.legends]
  boxes.append(fig._suptitle.get_window_extent(renderer))  # pylint: disable=protected-access
  for box in boxes:
    for panel in panels:
      assert not box.overlaps(panel), (box, panel)


def test_rendering_twice_gives_identical_bytes(tmp_path):
  first, second = str(tmp_path / "1.png"), str(tmp_path / "2.png")
  plots.accuracy_vs_length(_records(), first)
  plots.accuracy_vs_length(_records(), second)
  assert pathlib.Path(first).read_bytes() == pathlib.Path(second).read_bytes()


def test_panel_groups_split_a_task_by_arm_past_the_limit():
  records = _scheme_records(["none", "rope"], arms=("", "randomized"))
  assert plots.panel_groups(records) == [
      ("copy", "copy", ["none+copy", "rope+copy", "none+copy+randomized",
                        "rope+copy+randomized"])]
  many = _scheme_records(list(positions.SCHEMES), arms=("", "randomized"))
  rows = plots.panel_groups(many)
  assert [title for _, title, _ in rows] == ["copy: plain", "copy: randomized"]
  assert [len(runs) for _, _, runs in rows] == [10, 10]


def test_a_report_over_several_tasks_writes_one_anatomy_figure_per_task(tmp_path):
  records = _records(oracle=False)
  records += [{**r, "run": r["run"] + "+reverse", "task": "reverse"} for r in records]
  paths = report.write_report(records, str(tmp_path))
  for key in ("plot", "anatomy_copy", "anatomy_reverse"):
    _assert_png(paths[key])
  assert "anatomy" not in paths
  assert os.path.basename(paths["anatomy_reverse"]) == "failure_anatomy_reverse.png"
  one_task = report.write_report(_records(oracle=False), str(tmp_path / "one"))
  assert sorted(os.listdir(tmp_path / "one")) == sorted(report.REPORT_FILES.values())
  _assert_png(one_task["anatomy"])


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
  paths = plots.scheme_figures(model, params, str(tmp_path / "shaw"))
  assert list(paths) == ["shaw_key_norms"]
  _assert_png(paths["shaw_key_norms"])
  model, params = _model_and_params("scheme=t5", arch="decoder_only", prefix_lm=prefix_lm)
  _assert_png(plots.scheme_figures(model, params, str(tmp_path / "t5"))["t5_bias"])


@pytest.mark.parametrize("share", [True, False])
def test_t5_bias_figure(tmp_path, figures, share):
  model, params = _model_and_params("scheme=t5", share_across_layers=share)
  paths = plots.scheme_figures(model, params, str(tmp_path), max_train_distance=5, seed=0)
  assert list(paths) == ["t5_bias"]
  (fig,) = figures
  panels = [ax for ax in fig.axes if ax.lines]
  assert [ax.get_title() for ax in panels] == (
      ["encoder/position (bidirectional)", "decoder/position (causal)"] if share
      else ["bidirectional", "causal"])  # unshared: each panel holds a stack's layers
  heads = [line for line in panels[0].lines if line.get_label().endswith("head 0")]
  assert len(heads) == (1 if share else 2)  # unshared: one curve per layer's table
  assert "seed 0" in fig.get_suptitle()


def test_shaw_key_norms_draws_one_curve_per_layer(tmp_path, figures):
  model, params = _model_and_params("scheme=shaw", max_relative_position=4)
  plots.scheme_figures(model, params, str(tmp_path), max_train_distance=5)
  (fig,) = figures
  encoder = [ax for ax in fig.axes if ax.get_title() == "bidirectional"][0]
  curves = [l.get_label() for l in encoder.lines if l.get_label().startswith("encoder/")]
  assert curves == ["encoder/position_0", "encoder/position_1"]


@pytest.mark.parametrize("arg, position, expected", [
    ("scheme=t5", {}, ["t5_bias"]), ("scheme=shaw", {"use_keys": False}, []),
    ("scheme=sinusoidal", {}, ["sinusoid"]), ("scheme=rope", {}, [])])
def test_scheme_figures_draws_what_the_scheme_offers(tmp_path, arg, position, expected):
  paths = plots.scheme_figures(*_model_and_params(arg, **position), str(tmp_path))
  assert list(paths) == expected
  assert sorted(os.listdir(tmp_path)) == sorted(f"{name}.png" for name in expected)


def test_plotting_leaves_the_pyplot_backend_alone(tmp_path):
  import matplotlib  # pylint: disable=g-import-not-at-top
  before = matplotlib.rcParams["backend"]
  plots.accuracy_vs_length(_records(), str(tmp_path / "x.png"))
  assert matplotlib.rcParams["backend"] == before
