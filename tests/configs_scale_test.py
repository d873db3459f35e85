"""configs/ablations/scale.py: its runs, their sizes and budgets, and the reuse of kazemnejad's."""

import pathlib

import numpy.testing as npt
import pytest

from configs.ablations import scale
from relpos_jax import workdir
from relpos_jax.experiments import store
from relpos_jax.experiments import sweep_spec

CONFIGS = pathlib.Path(__file__).resolve().parents[1] / "configs/ablations"
SCALE = str(CONFIGS / "scale.py")
SCHEMES = ("none", "t5", "alibi", "rope", "fire")
TASKS = ("copy", "scan_length_cutoff_25")
SIZE = "d_model={d}+num_heads={h}+d_ff={f}"
BUDGET = "+num_steps=24000+checkpoint_every=4000"
HEADS = "alibi+copy+d_model={d}+num_heads={h}+head_dim={e}+d_ff={f}"


def _runs(spec=SCALE):
  return dict(sweep_spec.expand(*sweep_spec.load_sweep(spec)))


def _expected_names():
  names = [f"{s}+{t}+" + SIZE.format(d=d, h=d // 32, f=4 * d)
           for t in TASKS for d in (64, 128, 256) for s in SCHEMES]
  names += [f"{s}+scan_length_cutoff_25+" + SIZE.format(d=128, h=4, f=512) + BUDGET
            for s in ("none", "t5", "alibi")]
  return names + [HEADS.format(d=64, h=4, e=16, f=256), HEADS.format(d=128, h=2, e=64, f=512)]


def test_the_sweep_is_exactly_the_stated_runs():
  runs = _runs()
  assert len(runs) == 35
  assert list(runs) == _expected_names()


def test_sizes_steps_seeds_and_recipe():
  for name, config in _runs().items():
    d = config.model.d_model
    assert d in (64, 128, 256), name
    heads = config.model.num_heads if "head_dim=" in name else d // 32
    npt.assert_equal((config.model.num_layers, config.model.head_dim, config.model.num_heads,
                      config.model.d_ff), (4, d // heads, heads, 4 * d), err_msg=name)
    assert config.model.arch == "decoder_only" and config.num_seeds == 3
    assert config.optimizer.learning_rate == 1e-3 and config.batch_size == 64
    budget = name.endswith(BUDGET)
    npt.assert_equal((config.num_steps, config.checkpoint_every),
                     (24000, 4000) if budget else (6000, 1000), err_msg=name)
    # every checkpoint is kept, so the best by validation is chosen over the whole run
    assert config.keep_checkpoints * config.checkpoint_every > config.num_steps
    scheme, task = name.split("+")[:2]
    assert config.model.position.name == scheme
    assert config.data.task == task.split("_")[0]
    if task.startswith("scan"):
      assert config.data.scan_split == "length_cutoff_25"
    if scheme == "t5":
      assert (config.model.position.num_buckets, config.model.position.max_distance) == (32, 128)
    if scheme == "rope":
      assert config.model.position.fraction == 0.25


def test_the_d_model_128_cells_are_kazemnejads_runs():
  """The 128 / 6,000-step cells equal kazemnejad.py's runs, so --results_dir copies them."""
  kazemnejad = _runs(str(CONFIGS / "kazemnejad.py"))
  scale = _runs()
  size = SIZE.format(d=128, h=4, f=512)
  shared = [(s, t) for t in TASKS for s in ("none", "t5", "alibi", "rope")]
  for scheme, task in shared:
    mine = store.run_identity(workdir.config_json(scale[f"{scheme}+{task}+{size}"]))
    theirs = store.run_identity(workdir.config_json(kazemnejad[f"{scheme}+{task}"]))
    assert mine == theirs, (scheme, task)
  # and only those: another size or budget is a run of its own
  for name, config in scale.items():
    if (name.split("+")[0], name.split("+")[1]) in shared and size in name:
      continue
    identity = store.run_identity(workdir.config_json(config))
    assert all(identity != store.run_identity(workdir.config_json(c))
               for c in kazemnejad.values()), name


def test_fire_on_copy_at_128_is_the_extrapolation_methods_run():
  theirs = _runs(str(CONFIGS / "extrapolation_methods.py"))["fire+copy"]
  mine = _runs()["fire+copy+" + SIZE.format(d=128, h=4, f=512)]
  assert (store.run_identity(workdir.config_json(mine))
          == store.run_identity(workdir.config_json(theirs)))


def test_the_heads_control_completes_a_width_by_heads_square_for_alibi_on_copy():
  """ALiBi's slopes follow the head count: width {64, 128} × heads {2, 4}, all four trained."""
  runs = _runs()
  alibi_copy = {(c.model.d_model, c.model.num_heads): c for name, c in runs.items()
                if name.startswith("alibi+copy+") and c.model.d_model in (64, 128)}
  assert sorted(alibi_copy) == [(64, 2), (64, 4), (128, 2), (128, 4)]
  for (d, h), config in alibi_copy.items():
    assert config.model.num_heads * config.model.head_dim == d  # attention as wide as the model
  # each control differs from the main run of its width in the heads alone
  for d, h, main_h in ((64, 4, 2), (128, 2, 4)):
    control, main = alibi_copy[(d, h)].to_dict(), alibi_copy[(d, main_h)].to_dict()
    for key in ("num_heads", "head_dim"):
      control["model"].pop(key), main["model"].pop(key)
    assert control == main, d


def test_smoke_sizes_shrink_in_proportion():
  runs = _runs(SCALE + ":smoke")
  assert len(runs) == 35
  main = [c for name, c in runs.items() if "head_dim=" not in name]
  sizes = sorted({(c.model.d_model, c.model.num_heads, c.model.d_ff) for c in main})
  head_dim = {c.model.head_dim for c in main}
  assert head_dim == {8}
  assert sizes == [(8, 1, 32), (16, 2, 64), (32, 4, 128)]
  control = sorted((c.model.d_model, c.model.num_heads, c.model.head_dim)
                   for name, c in runs.items() if "head_dim=" in name)
  assert control == [(8, 4, 2), (16, 2, 8)]
  steps = sorted({c.num_steps for c in runs.values()})
  assert steps == [6, 24]


def test_a_heads_control_that_does_not_split_d_model_is_refused(monkeypatch):
  monkeypatch.setattr(scale, "HEADS_CONTROL", ((64, 3),))
  with pytest.raises(ValueError, match="d_model 64 does not split into 3 heads"):
    scale.get_sweep()
