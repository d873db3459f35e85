"""Sweep expansion: run names, overrides, scheme switches, the sweep directory."""

import json
import os
import pathlib

import ml_collections
import pytest

from relpos_jax import positions
from relpos_jax import sweep

REPO = pathlib.Path(__file__).resolve().parents[1]


def _base():
  return ml_collections.ConfigDict({
      "seed": 0, "num_seeds": 1,
      "model": {"d_model": 16, "position": positions.default_config("t5")},
      "randomized": {"enabled": False, "max_random_position": 2048}})


def test_run_names():
  assert sweep.run_name({"model.position": positions.default_config("shaw")}) == "shaw"
  assert sweep.run_name({"model.position.max_relative_position": 4}) == "max_relative_position=4"
  assert sweep.run_name({"model.position": positions.default_config("learned"),
                         "randomized.enabled": True}) == "learned+randomized"
  assert sweep.run_name({"model.position.use_keys": True,
                         "model.position.use_values": False}) == "use_keys+no_use_values"
  assert sweep.run_name({"optimizer.learning_rate": 1e-3}) == "learning_rate=0.001"
  assert sweep.run_name({"data.eval_lengths": (10, 20)}) == "eval_lengths=10-20"
  assert sweep.run_name({}) == "base"
  long = sweep.run_name({"model.position": {"name": "shaw", "max_relative_position": 4}},
                        long=True)
  assert long == "shaw-max_relative_position=4"
  assert all(c.isalnum() or c in "._=+-" for c in long)


def test_expand_switches_the_whole_position_config():
  base = _base()
  overrides = [{"model.position": positions.default_config(n)} for n in positions.SCHEMES]
  runs = sweep.expand(base, overrides)
  assert [n for n, _ in runs] == list(positions.SCHEMES)
  for name, config in runs:
    assert config.model.position.to_dict() == positions.default_config(name).to_dict()
    assert config.model.d_model == 16
  assert base.model.position.name == "t5"  # the base is untouched
  runs[0][1].model.position.name = "changed"  # runs share no sub-config with the overrides
  assert overrides[0]["model.position"].name == runs[0][0]


def test_expand_applies_dotted_keys():
  runs = sweep.expand(_base(), [{"model.position.num_buckets": 8, "seed": 3},
                                {"randomized.enabled": True}])
  assert [n for n, _ in runs] == ["num_buckets=8+seed=3", "randomized"]
  assert runs[0][1].model.position.num_buckets == 8 and runs[0][1].seed == 3
  assert runs[0][1].model.position.max_distance == 128  # the other keys stay
  assert runs[1][1].randomized.enabled and not runs[0][1].randomized.enabled


def test_expand_names_are_unique():
  shaw4 = positions.default_config("shaw")
  shaw4.max_relative_position = 4
  overrides = [{"model.position": positions.default_config("shaw")}, {"model.position": shaw4},
               {"seed": 1}, {"seed": 1}]
  names = [n for n, _ in sweep.expand(_base(), overrides)]
  assert len(set(names)) == 4
  assert names[0] != names[1] and "max_relative_position=4" in names[1]


def test_apply_overrides_errors():
  with pytest.raises(ValueError, match="no key 'model.positon'"):
    sweep.apply_overrides(_base(), {"model.positon.num_buckets": 8})
  with pytest.raises(ValueError, match="no key 'model.position.max_len'"):
    sweep.apply_overrides(_base(), {"model.position.max_len": 8})  # a t5 config has none
  with pytest.raises(TypeError):
    sweep.apply_overrides(_base(), {"randomized.enabled": 3})


def test_select():
  runs = [("a", 1), ("b", 2), ("c", 3)]
  assert sweep.select(runs, None) == runs
  assert sweep.select(runs, ["c", "a"]) == [("a", 1), ("c", 3)]
  with pytest.raises(ValueError, match="its runs are: a, b, c"):
    sweep.select(runs, ["d"])


def test_split_config_spec():
  assert sweep.split_config_spec("configs/x.py:smoke,seed=1") == ("configs/x.py", "smoke,seed=1")
  assert sweep.split_config_spec("configs/x.py") == ("configs/x.py", None)


def test_load_sweep_passes_the_arg():
  config, overrides = sweep.load_sweep(str(REPO / "configs/ablations/shaw_clipping.py:smoke"))
  assert config.model.d_model == 16 and config.model.position.name == "shaw"
  assert overrides[0] == {"model.position.max_relative_position": 0}
  with pytest.raises(ValueError, match="get_sweep"):
    sweep.load_sweep(str(REPO / "configs/default.py"))


def test_run_dirs_follow_the_sweep_order(tmp_path):
  for name in ("b", "a", "c", "not_a_run"):
    os.makedirs(tmp_path / name)
  for name in ("b", "a", "c"):
    (tmp_path / name / "config.json").write_text("{}")
  assert sweep.run_dirs(str(tmp_path)) == [str(tmp_path / n) for n in ("a", "b", "c")]
  (tmp_path / sweep.SWEEP_FILE).write_text(json.dumps({"runs": [{"name": "c"}, {"name": "x"},
                                                                {"name": "a"}]}))
  assert sweep.run_dirs(str(tmp_path)) == [str(tmp_path / n) for n in ("c", "a", "b")]
  with pytest.raises(FileNotFoundError):
    sweep.run_dirs(str(tmp_path / "missing"))
