"""configs/ablations/scale.py: its runs, their sizes and budgets, and the reuse of kazemnejad's."""

import pathlib

import numpy.testing as npt

from relpos_jax import workdir
from relpos_jax.experiments import store
from relpos_jax.experiments import sweep_spec

CONFIGS = pathlib.Path(__file__).resolve().parents[1] / "configs/ablations"
SCALE = str(CONFIGS / "scale.py")
SCHEMES = ("none", "t5", "alibi", "rope", "fire")
TASKS = ("copy", "scan_length_cutoff_25")
SIZE = "d_model={d}+num_heads={h}+d_ff={f}"
BUDGET = "+num_steps=24000+checkpoint_every=4000"


def _runs(spec=SCALE):
  return dict(sweep_spec.expand(*sweep_spec.load_sweep(spec)))


def _expected_names():
  names = [f"{s}+{t}+" + SIZE.format(d=d, h=d // 32, f=4 * d)
           for t in TASKS for d in (64, 128, 256) for s in SCHEMES]
  return names + [f"{s}+scan_length_cutoff_25+" + SIZE.format(d=128, h=4, f=512) + BUDGET
                  for s in ("none", "t5", "alibi")]


def test_the_sweep_is_exactly_the_stated_runs():
  runs = _runs()
  assert len(runs) == 33
  assert list(runs) == _expected_names()


def test_sizes_steps_seeds_and_recipe():
  for name, config in _runs().items():
    d = config.model.d_model
    assert d in (64, 128, 256), name
    npt.assert_equal((config.model.num_layers, config.model.head_dim, config.model.num_heads,
                      config.model.d_ff), (4, 32, d // 32, 4 * d), err_msg=name)
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


def test_smoke_sizes_shrink_in_proportion():
  runs = _runs(SCALE + ":smoke")
  assert len(runs) == 33
  sizes = sorted({(c.model.d_model, c.model.num_heads, c.model.d_ff) for c in runs.values()})
  head_dim = {c.model.head_dim for c in runs.values()}
  assert head_dim == {8}
  assert sizes == [(8, 1, 32), (16, 2, 64), (32, 4, 128)]
  steps = sorted({c.num_steps for c in runs.values()})
  assert steps == [6, 24]
