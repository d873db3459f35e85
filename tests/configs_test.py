"""Every config file loads, and every ablation's sweep builds models that can run."""

import pathlib

import jax
import jax.numpy as jnp
import ml_collections
import pytest

from relpos_jax import architectures
from relpos_jax import positions
from relpos_jax import train_lib
from relpos_jax.data import pipeline
from relpos_jax.experiments import sweep_spec

CONFIGS = pathlib.Path(__file__).resolve().parents[1] / "configs"
FILES = sorted(p for p in CONFIGS.rglob("*.py") if p.name != "__init__.py")
ABLATIONS = sorted(p for p in (CONFIGS / "ablations").glob("*.py") if p.name != "__init__.py")
IDS = lambda paths: [str(p.relative_to(CONFIGS)) for p in paths]


_DATASETS, _MODELS = {}, {}  # built once per distinct data / model section


def _check_runs(config):
  """Builds the model and data and runs the trainer's checks; traces the model's init."""
  key = (config.seed, config.data.to_json())
  if key not in _DATASETS:  # the runs of a sweep share a few data sections
    _DATASETS[key] = pipeline.make_dataset(seed=config.seed, **config.data)
  dataset = _DATASETS[key]
  key = (config.model.to_json(), dataset.vocab.size)
  if key not in _MODELS:  # ... and a few model sections
    _MODELS[key] = _build_model(config.model, dataset.vocab.size)
  train_lib.check_config(config, _MODELS[key], dataset)


def _build_model(config, vocab_size):
  """The model of `config`, its scheme built both ways and its init traced."""
  model = architectures.make_model(config, vocab_size=vocab_size)
  for causal in (False, True):
    positions.make_scheme(config.position, num_heads=config.num_heads,
                          head_dim=config.head_dim, d_model=config.d_model,
                          causal=causal, parent=None)
  tokens = jnp.ones((1, 8), jnp.int32)
  jax.eval_shape(model.init, jax.random.PRNGKey(0), tokens, tokens)  # every scheme's setup runs
  return model


def test_every_config_is_found():
  assert {p.name for p in ABLATIONS} >= {"schemes.py", "shaw_clipping.py", "shaw_terms.py",
                                         "t5_buckets.py", "randomized.py"}
  assert CONFIGS / "scan_length.py" in FILES and CONFIGS / "default.py" in FILES


@pytest.mark.parametrize("path", FILES, ids=IDS(FILES))
def test_config_loads_and_builds(path):
  module = sweep_spec.load_module(str(path))
  assert "python " in module.__doc__, "the launch command belongs in the docstring"
  for arg in (None, "smoke"):
    config = module.get_config(arg)
    assert isinstance(config, ml_collections.ConfigDict)
    _check_runs(config)
  smoke, full = module.get_config("smoke"), module.get_config()
  assert smoke.num_steps < full.num_steps and smoke.model.d_model <= full.model.d_model


@pytest.mark.parametrize("path", ABLATIONS, ids=IDS(ABLATIONS))
def test_ablation_sweep_builds(path):
  module = sweep_spec.load_module(str(path))
  command = f"python train.py --config configs/ablations/{path.name} --workdir runs/{path.stem}"
  assert command in module.__doc__, "the one command of the table belongs in the docstring"
  assert "Expected runtime" in module.__doc__
  config, overrides = sweep_spec.load_sweep(module, "smoke")  # a get_sweep(arg) gets "smoke" too
  runs = sweep_spec.expand(config, overrides)
  assert len({n for n, _ in runs}) == len(runs) > 1
  for (name, config), override in zip(runs, overrides):
    for key, value in override.items():
      got = config
      for part in key.split("."):
        got = got[part]
      assert (got.to_dict() if isinstance(got, ml_collections.ConfigDict) else got) == (
          value.to_dict() if isinstance(value, ml_collections.ConfigDict) else value), name
    _check_runs(config)


def test_schemes_sweep_is_every_scheme_on_every_task():
  module = sweep_spec.load_module(str(CONFIGS / "ablations/schemes.py"))
  runs = dict(sweep_spec.expand(module.get_config(), module.get_sweep()))
  tasks = ("copy", "reverse", "scan_length")
  assert list(runs) == [f"{s}+{t}" for t in tasks for s in positions.SCHEMES]
  scan = sweep_spec.load_module(str(CONFIGS / "scan_length.py")).get_config()
  for name, config in runs.items():
    scheme, task = name.split("+")
    assert config.model.position.to_dict() == positions.default_config(scheme).to_dict()
    assert (config.num_seeds, config.num_steps, config.batch_size) == (3, 2500, 64)
    model = config.model.to_dict()
    assert {**model, "position": None} == {**runs["t5+copy"].model.to_dict(), "position": None}
    if task == "scan_length":
      assert config.data.to_dict() == scan.data.to_dict()
      assert (config.data.task, config.data.scan_split) == ("scan", "length")
    else:
      assert config.data.task == task and config.data.max_train_length <= 20
      assert max(config.data.eval_lengths) == 4 * config.data.max_train_length


def test_randomized_sweep_has_both_arms_per_scheme_at_one_budget():
  module = sweep_spec.load_module(str(CONFIGS / "ablations/randomized.py"))
  runs = dict(sweep_spec.expand(*sweep_spec.load_sweep(str(CONFIGS / "ablations/randomized.py"))))
  assert len(runs) == 2 * 2 * len(positions.SCHEMES)
  for task in module.TASKS:
    for scheme in positions.SCHEMES:
      plain = runs[f"{scheme}+{task}"]
      randomized = runs[f"{scheme}+randomized+{task}"]
      assert not plain.randomized.enabled and randomized.randomized.enabled
      assert plain.data.task == randomized.data.task == task
      assert plain.num_steps == randomized.num_steps == module.RANDOMIZED_STEPS  # equal budgets
      assert plain.keep_checkpoints == randomized.keep_checkpoints == 11  # every checkpoint
  learned = runs["learned+randomized+copy"]
  assert learned.model.position.max_len >= learned.randomized.max_random_position
  # `steps` and `smoke` set both arms' budget
  for arg, steps in (("smoke,steps=3", 3), ("steps=700", 700)):
    base, overrides = sweep_spec.load_sweep(str(CONFIGS / "ablations/randomized.py") + ":" + arg)
    assert base.num_steps == steps and {o.get("num_steps") for o in overrides} == {None}


def test_shaw_clipping_and_t5_grids():
  clipping = sweep_spec.load_module(str(CONFIGS / "ablations/shaw_clipping.py")).get_sweep()
  assert [o["model.position.max_relative_position"] for o in clipping] == [0, 1, 2, 4, 16, 64]
  grid = sweep_spec.load_module(str(CONFIGS / "ablations/t5_buckets.py")).get_sweep()
  pairs = {(o["model.position.num_buckets"], o["model.position.max_distance"]) for o in grid}
  assert (8, 16) in pairs and (64, 128) in pairs and (64, 16) not in pairs
  assert all(d > n // 2 for n, d in pairs)


def test_scan_length_config():
  config = sweep_spec.load_module(str(CONFIGS / "scan_length.py")).get_config()
  assert config.data.task == "scan" and config.data.scan_split == "length"
