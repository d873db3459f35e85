"""Sweeps: run names, overrides, scheme switches, sharding, skipping finished runs, train.py."""

import json
import logging
import os
import pathlib
import shutil

import ml_collections
import pytest

from relpos_jax import config_args
from relpos_jax import positions
from relpos_jax.experiments import sweep
from relpos_jax.experiments import sweep_spec

import cli_harness  # pytest puts tests/ on the path

REPO = pathlib.Path(__file__).resolve().parents[1]


def _base():
  return ml_collections.ConfigDict({
      "seed": 0, "num_seeds": 1,
      "model": {"d_model": 16, "position": positions.default_config("t5")},
      "randomized": {"enabled": False, "max_random_position": 2048}})


def test_run_names():
  assert sweep_spec.run_name({"model.position": positions.default_config("shaw")}) == "shaw"
  assert sweep_spec.run_name({"model.position.max_relative_position": 4}) == "max_relative_position=4"
  assert sweep_spec.run_name({"model.position": positions.default_config("learned"),
                         "randomized.enabled": True}) == "learned+randomized"
  assert sweep_spec.run_name({"model.position.use_keys": True,
                         "model.position.use_values": False}) == "use_keys+no_use_values"
  assert sweep_spec.run_name({"optimizer.learning_rate": 1e-3}) == "learning_rate=0.001"
  assert sweep_spec.run_name({"data.eval_lengths": (10, 20)}) == "eval_lengths=10-20"
  assert sweep_spec.run_name({}) == "base"
  long = sweep_spec.run_name({"model.position": {"name": "shaw", "max_relative_position": 4}},
                        long=True)
  assert long == "shaw-max_relative_position=4"
  assert all(c.isalnum() or c in "._=+-" for c in long)


def test_expand_switches_the_whole_position_config():
  base = _base()
  overrides = [{"model.position": positions.default_config(n)} for n in positions.SCHEMES]
  runs = sweep_spec.expand(base, overrides)
  assert [n for n, _ in runs] == list(positions.SCHEMES)
  for name, config in runs:
    assert config.model.position.to_dict() == positions.default_config(name).to_dict()
    assert config.model.d_model == 16
  assert base.model.position.name == "t5"  # the base is untouched
  runs[0][1].model.position.name = "changed"  # runs share no sub-config with the overrides
  assert overrides[0]["model.position"].name == runs[0][0]


def test_expand_applies_dotted_keys():
  runs = sweep_spec.expand(_base(), [{"model.position.num_buckets": 8, "seed": 3},
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
  names = [n for n, _ in sweep_spec.expand(_base(), overrides)]
  assert len(set(names)) == 4
  assert names[0] != names[1] and "max_relative_position=4" in names[1]


def test_apply_overrides_errors():
  with pytest.raises(ValueError, match="no key 'model.positon'"):
    config_args.apply_overrides(_base(), {"model.positon.num_buckets": 8})
  with pytest.raises(ValueError, match="no key 'model.position.max_len'"):
    config_args.apply_overrides(_base(), {"model.position.max_len": 8})  # a t5 config has none
  with pytest.raises(TypeError):
    config_args.apply_overrides(_base(), {"randomized.enabled": 3})


def test_select():
  runs = [("a", 1), ("b", 2), ("c", 3)]
  assert sweep_spec.select(runs, None) == runs
  assert sweep_spec.select(runs, ["c", "a"]) == [("a", 1), ("c", 3)]
  with pytest.raises(ValueError, match="its runs are: a, b, c"):
    sweep_spec.select(runs, ["d"])


def test_split_config_spec():
  assert sweep_spec.split_config_spec("configs/x.py:smoke,seed=1") == ("configs/x.py", "smoke,seed=1")
  assert sweep_spec.split_config_spec("configs/x.py") == ("configs/x.py", None)


def test_load_sweep_passes_the_arg():
  config, overrides = sweep_spec.load_sweep(str(REPO / "configs/ablations/shaw_clipping.py:smoke"))
  assert config.model.d_model == 16 and config.model.position.name == "shaw"
  assert overrides[0] == {"model.position.max_relative_position": 0}
  with pytest.raises(ValueError, match="get_sweep"):
    sweep_spec.load_sweep(str(REPO / "configs/default.py"))


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


# ------------------------------------------------------- task names, sharding

SCHEMES_SMOKE = str(REPO / "configs/ablations/schemes.py") + ":smoke,num_seeds=1,steps=2"


def test_task_overrides_name_themselves():
  t5, rope = positions.default_config("t5"), positions.default_config("rope")
  assert sweep_spec.run_name({"model.position": t5, "data.task": "copy"}) == "t5+copy"
  assert sweep_spec.run_name({"model.position": rope, "data.task": "reverse"}) == "rope+reverse"
  scan = {"task": "scan", "scan_split": "length", "vocab_size": 10}
  assert sweep_spec.run_name({"model.position": rope, "data": scan}) == "rope+scan_length"
  assert sweep_spec.run_name({"data": {**scan, "scan_split": "simple"}}) == "scan_simple"
  assert sweep_spec.run_name({"data.task": "tfds:relpos_scan/length"}) == "tfds_relpos_scan_length"
  long = sweep_spec.run_name({"data": scan}, long=True)
  assert "task=scan" in long and "scan_split=length" in long


@pytest.mark.parametrize("spec,expected", [("0/1", (0, 1)), ("3/4", (3, 4)), ("0/24", (0, 24)),
                                           (None, None), ("", None)])
def test_parse_shard(spec, expected):
  assert sweep_spec.parse_shard(spec) == expected


@pytest.mark.parametrize("spec", ["4/4", "5/4", "1/0", "0/0", "-1/4", "1/-2", "a/b", "1", "1/2/3",
                                  "1/ 2", "i/n"])
def test_bad_shard_specs_raise_naming_the_flag(spec):
  with pytest.raises(ValueError, match=r"--sweep_shard=.*(0 <= i < n|expected i/n)"):
    sweep_spec.parse_shard(spec)


@pytest.mark.parametrize("count", [1, 2, 3, 5, 7, 23, 24, 25, 40])
def test_shards_partition_the_sweep(count):
  runs = sweep_spec.expand(*sweep_spec.load_sweep(SCHEMES_SMOKE))
  names = [n for n, _ in runs]
  shards = [[n for n, _ in sweep_spec.shard_runs(runs, (i, count))] for i in range(count)]
  assert sorted(n for shard in shards for n in shard) == sorted(names)  # union, no repeats
  for i, shard in enumerate(shards):
    assert shard == names[i::count]  # every n-th point, in sweep order
  assert max(map(len, shards)) - min(map(len, shards)) <= 1
  assert sweep_spec.shard_runs(runs, None) == runs


def _fake_training(monkeypatch):
  """Fakes training (writes what a finished run leaves) and eval; returns their call logs."""
  trained, evaluated = [], []

  def train(config, workdir):
    trained.append(os.path.basename(workdir))
    os.makedirs(os.path.join(workdir, "checkpoints", str(config.num_steps)))
    pathlib.Path(workdir, "config.json").write_text(config.to_json())

  def evaluate_runs(workdirs, out_dir, *, lengths, batch_size, names):
    evaluated.append((list(workdirs), out_dir, list(names)))
    return [{"run": n} for n in names]

  monkeypatch.setattr(sweep.train_lib, "train_and_evaluate", train)
  monkeypatch.setattr(sweep.runner, "evaluate_runs", evaluate_runs)
  return trained, evaluated


def test_shards_train_their_runs_and_only_the_last_evaluates(tmp_path, monkeypatch, caplog):
  trained, evaluated = _fake_training(monkeypatch)
  names = [n for n, _ in sweep_spec.expand(*sweep_spec.load_sweep(SCHEMES_SMOKE))]
  for i in range(3):
    trained.clear()
    caplog.clear()
    records = sweep.run_sweep(SCHEMES_SMOKE, str(tmp_path), shard=f"{i}/3")
    assert trained == names[i::3]
    sweep_file = json.loads((tmp_path / sweep.SWEEP_FILE).read_text())
    assert [r["name"] for r in sweep_file["runs"]] == names  # every shard records the whole sweep
    if i < 2:
      assert records == [] and not evaluated
      assert f"python eval.py --sweep_dir {tmp_path}" in caplog.text
      assert names[2] in caplog.text  # a run of the last shard is named as missing
  assert evaluated == [([str(tmp_path / n) for n in names], str(tmp_path / "eval"), names)]
  assert [r["run"] for r in records] == names
  trained.clear()
  sweep.run_sweep(SCHEMES_SMOKE, str(tmp_path))  # everything finished: nothing is retrained
  assert trained == [] and len(evaluated) == 2


def test_runs_and_shard_combine_and_unfinished_runs_are_trained_again(tmp_path, monkeypatch):
  trained, evaluated = _fake_training(monkeypatch)
  only = ["t5+copy", "rope+reverse", "none+scan_length"]
  sweep.run_sweep(SCHEMES_SMOKE, str(tmp_path), only=only, shard="1/2")
  assert trained == ["rope+reverse"] and not evaluated
  os.rename(tmp_path / "rope+reverse/checkpoints/2", tmp_path / "rope+reverse/checkpoints/1")
  sweep.run_sweep(SCHEMES_SMOKE, str(tmp_path), only=only)
  assert trained == ["rope+reverse", "t5+copy", "rope+reverse", "none+scan_length"]
  assert evaluated[0][2] == only


def test_a_run_dir_of_another_config_is_an_error(tmp_path, monkeypatch):
  _fake_training(monkeypatch)
  sweep.run_sweep(SCHEMES_SMOKE, str(tmp_path), only=["t5+copy"], run_eval=False)
  with pytest.raises(ValueError, match=r"t5\+copy holds a run with a different config"):
    sweep.run_sweep(SCHEMES_SMOKE.replace("num_seeds=1", "num_seeds=2"), str(tmp_path),
                    only=["t5+copy"], run_eval=False)


def _fake_results_eval(monkeypatch):
  """Fakes a results sweep's per-run evaluation; returns its log of (record name, overrides)."""
  evaluated = []

  def evaluate_runs(workdirs, out_dir, *, names, on_run, random_positions=False, overrides=(),
                    variant=None, **options):
    name = (names[0] + ("@random_positions" if random_positions else "")
            + (f"@{variant}" if variant else ""))
    evaluated.append((name, list(overrides)))
    config = json.loads(pathlib.Path(workdirs[0], "config.json").read_text())
    records = [{"run": name, "seed": config["seed"] + k, "length": 30, "exact_match": 0.5}
               for k in range(config["num_seeds"])]  # one per replica, as eval writes
    on_run(name, workdirs[0], records, 1.0)
    return records

  monkeypatch.setattr(sweep.runner, "evaluate_runs", evaluate_runs)
  monkeypatch.setattr(sweep.results, "write_table_report", lambda table_dir: [])
  return evaluated


def test_a_run_another_table_stored_with_the_same_config_is_copied_not_trained(
    tmp_path, monkeypatch, caplog):
  caplog.set_level(logging.INFO)
  trained, _ = _fake_training(monkeypatch)
  evaluated = _fake_results_eval(monkeypatch)
  root = tmp_path / "results"
  sweep.run_sweep(SCHEMES_SMOKE, str(tmp_path / "schemes"), results_dir=str(root / "schemes"),
                  only=["t5+copy", "learned+copy"])
  assert trained == ["learned+copy", "t5+copy"]  # sweep order
  randomized = str(REPO / "configs/ablations/randomized.py") + ":smoke,num_seeds=1,steps=2"
  trained.clear()
  records = sweep.run_sweep(randomized, str(tmp_path / "randomized"),
                            results_dir=str(root / "randomized"),
                            only=["t5+copy", "t5+randomized+copy", "learned+copy"])
  # t5+copy is the schemes table's run (randomization off: its range setting is inert);
  # randomized.py gives `learned` a longer table, so its run differs and is trained.
  assert trained == ["learned+copy", "t5+randomized+copy"]
  # the pace is logged after each trained run, counting only runs still to train
  assert "2 run(s) done in this process" in caplog.text and "0 left to train here" in caplog.text
  assert "1 left to train here" in caplog.text
  assert not (tmp_path / "randomized" / "t5+copy").exists()
  info = json.loads((root / "randomized" / "runs" / "t5+copy.json").read_text())
  assert info["reused_from"] == os.path.join("schemes", "runs", "t5+copy.json")
  # a randomized run is evaluated (and stored) at 0..L-1 and at random positions
  assert [r["run"] for r in records] == [
      "learned+copy", "t5+copy", "t5+randomized+copy",
      "t5+randomized+copy@random_positions"]
  assert sweep.results.table_status(str(root / "randomized")) == (3, 40)
  # a randomized run missing its random-position records is evaluated again, not retrained
  (root / "randomized" / "records" /
   "t5+randomized+copy@random_positions.jsonl").unlink()
  assert sweep.results.table_status(str(root / "randomized")) == (2, 40)
  trained.clear()
  evaluated.clear()
  sweep.run_sweep(randomized, str(tmp_path / "randomized"), results_dir=str(root / "randomized"),
                  only=["t5+copy", "t5+randomized+copy", "learned+copy"])
  assert trained == [] and [n for n, _ in evaluated] == [
      "t5+randomized+copy", "t5+randomized+copy@random_positions"]
  (root / "randomized" / "records" / "t5+copy.jsonl").unlink()
  trained.clear()
  sweep.run_sweep(randomized, str(tmp_path / "randomized"), results_dir=str(root / "randomized"),
                  only=["t5+copy"], reuse=False)
  assert trained == ["t5+copy"]


def test_split_seeds_stores_each_seed_then_merges_them_into_the_run(tmp_path, monkeypatch):
  trained, _ = _fake_training(monkeypatch)
  evaluated = _fake_results_eval(monkeypatch)
  fake_train = sweep.train_lib.train_and_evaluate

  def killed_at_seed_1(config, workdir):
    if config.seed == 1:
      raise KeyboardInterrupt  # the session ends while seed 1 trains
    fake_train(config, workdir)

  config = str(REPO / "configs/ablations/extrapolation_methods.py") + ":smoke,num_seeds=3,steps=2"
  table = tmp_path / "results" / "extrapolation_methods"
  monkeypatch.setattr(sweep.train_lib, "train_and_evaluate", killed_at_seed_1)
  with pytest.raises(KeyboardInterrupt):
    sweep.run_sweep(config, str(tmp_path / "runs"), results_dir=str(table), only=["rope+copy"],
                    split_seeds=True)
  assert trained == ["rope+copy.seed0"]
  labels = ["", "@pi", "@dynamic_ntk", "@yarn"]  # the run and its eval-time RoPE rows
  assert [n for n, _ in evaluated] == ["rope+copy.seed0" + label for label in labels]
  assert not (table / "records").exists()  # nothing in the table until every seed is stored
  assert sweep.seed_parts.stored_parts(str(table)) == {"rope+copy": ([0], [0, 1, 2])}
  assert "rope+copy (seed 0 of 3)" in sweep.results.render(str(tmp_path / "results"))

  monkeypatch.setattr(sweep.train_lib, "train_and_evaluate", fake_train)
  evaluated.clear()
  records = sweep.run_sweep(config, str(tmp_path / "runs"), results_dir=str(table),
                            only=["rope+copy"], split_seeds=True)
  assert trained == ["rope+copy.seed0", "rope+copy.seed1", "rope+copy.seed2"]
  assert [n for n, _ in evaluated] == [f"rope+copy.seed{s}{label}" for s in (1, 2)
                                       for label in labels]
  saved = json.loads((tmp_path / "runs" / "rope+copy.seed2" / "config.json").read_text())
  assert (saved["seed"], saved["num_seeds"]) == (2, 1)
  assert sorted({r["run"] for r in records}) == sorted("rope+copy" + label for label in labels)
  for label in labels:
    rows = sweep.results.records_lib.read_jsonl(str(table / "records" / f"rope+copy{label}.jsonl"))
    assert [(r["run"], r["replica"]) for r in rows] == [("rope+copy" + label, k) for k in range(3)]
    info = json.loads((table / "runs" / f"rope+copy{label}.json").read_text())
    assert (info["config"]["seed"], info["config"]["num_seeds"]) == (0, 3)
    assert "provenance" not in info["config"]
    assert [p["seed"] for p in info["seed_parts"]] == [0, 1, 2]
    assert [p["run"] for p in info["seed_parts"]] == [f"rope+copy.seed{s}{label}" for s in range(3)]
    assert info.get("variant_of") == ("rope+copy" if label else None)
  assert sweep.results.table_status(str(table))[0] == 1
  assert sweep.seed_parts.stored_parts(str(table)) == {"rope+copy": ([0, 1, 2], [0, 1, 2])}

  stale = tmp_path / "stale"  # a part trained under another config is refused, not merged
  shutil.copytree(table / "parts", stale / "parts")
  info_path = stale / "parts" / "runs" / "rope+copy.seed1.json"
  info = json.loads(info_path.read_text())
  info["config"]["num_steps"] += 1
  info_path.write_text(json.dumps(info))
  run_config = json.loads((table / "runs" / "rope+copy.json").read_text())["config"]
  with pytest.raises(ValueError, match=r"rope\+copy.seed1 in .* was trained with another config"):
    sweep.seed_parts.merge_parts(str(stale), "rope+copy", run_config, ["pi", "dynamic_ntk", "yarn"])

  trained.clear()
  evaluated.clear()  # stored: neither trained nor evaluated again, split or not
  for split in (True, False):
    sweep.run_sweep(config, str(tmp_path / "runs"), results_dir=str(table), only=["rope+copy"],
                    split_seeds=split)
  assert trained == [] and evaluated == []


def test_seeds_per_part_trains_consecutive_missing_seeds_together(tmp_path, monkeypatch):
  trained, _ = _fake_training(monkeypatch)
  evaluated = _fake_results_eval(monkeypatch)
  config = str(REPO / "configs/ablations/extrapolation_methods.py") + ":smoke,num_seeds=3,steps=2"
  table = tmp_path / "results" / "extrapolation_methods"
  labels = ["", "@pi", "@dynamic_ntk", "@yarn"]
  # Seed 0 trained alone first (an earlier session), then the rest two at a time.
  sweep.run_sweep(config, str(tmp_path / "runs"), results_dir=str(table), only=["rope+copy"],
                  split_seeds=True, seeds_per_part=1)
  assert trained == ["rope+copy.seed0", "rope+copy.seed1", "rope+copy.seed2"]
  for k in (1, 2):  # forget seeds 1 and 2: as if only seed 0 had been stored
    for label in labels:
      (table / "parts" / "records" / f"rope+copy.seed{k}{label}.jsonl").unlink()
      (table / "parts" / "runs" / f"rope+copy.seed{k}{label}.json").unlink()
  for name in os.listdir(table / "records"):
    (table / "records" / name).unlink()
  assert sweep.seed_parts.stored_parts(str(table)) == {"rope+copy": ([0], [0, 1, 2])}
  trained.clear()
  evaluated.clear()  # a new session: runs/ is not kept
  records = sweep.run_sweep(config, str(tmp_path / "runs2"), results_dir=str(table),
                            only=["rope+copy"], split_seeds=True, seeds_per_part=2)
  assert trained == ["rope+copy.seeds1-2"]
  saved = json.loads((tmp_path / "runs2" / "rope+copy.seeds1-2" / "config.json").read_text())
  assert (saved["seed"], saved["num_seeds"]) == (1, 2)
  assert [n for n, _ in evaluated] == ["rope+copy.seeds1-2" + label for label in labels]
  assert sweep.seed_parts.stored_parts(str(table)) == {"rope+copy": ([0, 1, 2], [0, 1, 2])}
  assert sorted({r["run"] for r in records}) == sorted("rope+copy" + label for label in labels)
  for label in labels:
    rows = sweep.results.records_lib.read_jsonl(str(table / "records" / f"rope+copy{label}.jsonl"))
    assert [(r["seed"], r["replica"]) for r in rows] == [(k, k) for k in range(3)]
    info = json.loads((table / "runs" / f"rope+copy{label}.json").read_text())
    assert (info["config"]["seed"], info["config"]["num_seeds"]) == (0, 3)
    assert [(p["run"], p["seed"], p.get("num_seeds", 1)) for p in info["seed_parts"]] == [
        (f"rope+copy.seed0{label}", 0, 1), (f"rope+copy.seeds1-2{label}", 1, 2)]

  # A seed stored in two parts is refused, not merged twice.
  shutil.copy(table / "parts" / "runs" / "rope+copy.seed0.json",
              table / "parts" / "runs" / "rope+copy.seed1.json")
  info = json.loads((table / "parts" / "runs" / "rope+copy.seed1.json").read_text())
  info["run"], info["config"]["seed"] = "rope+copy.seed1", 1
  (table / "parts" / "runs" / "rope+copy.seed1.json").write_text(json.dumps(info))
  for label in labels:
    shutil.copy(table / "parts" / "records" / f"rope+copy.seed0{label}.jsonl",
                table / "parts" / "records" / f"rope+copy.seed1{label}.jsonl")
  with pytest.raises(ValueError, match="seed 1 of rope.copy is stored in two parts"):
    sweep.seed_parts.stored_part_of_seeds(str(table), "rope+copy")


def test_part_groups_cut_consecutive_seeds():
  assert sweep.seed_parts.part_groups([1, 2, 3, 4, 5], 2) == [[1, 2], [3, 4], [5]]
  assert sweep.seed_parts.part_groups([0, 2, 3], 3) == [[0], [2, 3]]
  assert sweep.seed_parts.part_groups([4, 5], 1) == [[4], [5]]
  assert sweep.seed_parts.part_groups([], 2) == []
  # A part an earlier session left keeps its grouping; the rest are grouped around it.
  assert sweep.seed_parts.part_groups([0, 1, 2], 2, resumable=[[1]]) == [[0], [1], [2]]
  assert sweep.seed_parts.part_groups([0, 1, 2, 3], 1, resumable=[[2, 3]]) == [[0], [1], [2, 3]]
  assert sweep.seed_parts.part_groups([0, 1], 2, resumable=[[1, 2]]) == [[0, 1]]  # 2 is stored: not it


def test_a_part_left_by_an_interrupted_session_resumes_under_another_grouping(
    tmp_path, monkeypatch):
  trained, _ = _fake_training(monkeypatch)
  evaluated = _fake_results_eval(monkeypatch)
  fake_train = sweep.train_lib.train_and_evaluate

  def killed_in_seed_1(config, workdir):
    if config.seed == 1:  # a checkpoint before the end, then the session ends
      os.makedirs(os.path.join(workdir, "checkpoints", "1"))
      pathlib.Path(workdir, "config.json").write_text(config.to_json())
      raise KeyboardInterrupt
    fake_train(config, workdir)

  config = str(REPO / "configs/ablations/extrapolation_methods.py") + ":smoke,num_seeds=3,steps=2"
  table, runs = tmp_path / "results" / "extrapolation_methods", tmp_path / "runs"
  monkeypatch.setattr(sweep.train_lib, "train_and_evaluate", killed_in_seed_1)
  with pytest.raises(KeyboardInterrupt):
    sweep.run_sweep(config, str(runs), results_dir=str(table), only=["rope+copy"],
                    split_seeds=True)
  assert sweep.seed_parts.leftover_parts(str(runs), "rope+copy") == [[0], [1]]
  monkeypatch.setattr(sweep.train_lib, "train_and_evaluate", fake_train)
  trained.clear()
  sweep.run_sweep(config, str(runs), results_dir=str(table), only=["rope+copy"],
                  split_seeds=True, seeds_per_part=2)
  # Seed 1 resumes in its own workdir (not retrained inside a new seeds1-2 part).
  assert trained == ["rope+copy.seed1", "rope+copy.seed2"]
  assert sweep.seed_parts.stored_parts(str(table)) == {"rope+copy": ([0, 1, 2], [0, 1, 2])}
  assert evaluated


def test_a_part_whose_records_name_other_seeds_is_not_merged(tmp_path, monkeypatch):
  _fake_training(monkeypatch)
  _fake_results_eval(monkeypatch)
  config = str(REPO / "configs/ablations/extrapolation_methods.py") + ":smoke,num_seeds=2,steps=2"
  table = tmp_path / "results" / "extrapolation_methods"
  sweep.run_sweep(config, str(tmp_path / "runs"), results_dir=str(table), only=["rope+copy"],
                  split_seeds=True)
  path = table / "parts" / "records" / "rope+copy.seed1.jsonl"
  path.write_text(path.read_text().replace('"seed": 1', '"seed": 0'))
  with pytest.raises(ValueError, match=r"holds records of seeds \[0\], but the part was "
                     r"trained for seeds \[1\]"):
    sweep.seed_parts.part_records(str(table), "rope+copy.seed1")


def test_seed_parts_are_the_runs_replicas_and_need_a_results_dir(tmp_path):
  base, overrides = sweep_spec.load_sweep(SCHEMES_SMOKE.replace("num_seeds=1", "num_seeds=3"))
  name, config = sweep_spec.expand(base, overrides)[0]
  config.seed = 5
  parts = [sweep.seed_parts.part_config(config, k) for k in range(3)]
  assert [(p.seed, p.num_seeds) for p in parts] == [(5, 1), (6, 1), (7, 1)]
  assert (config.seed, config.num_seeds) == (5, 3)  # the run's config is untouched
  rest = lambda c: {k: v for k, v in c.to_dict().items() if k not in ("seed", "num_seeds")}
  assert rest(parts[2]) == rest(config)
  with pytest.raises(ValueError, match=r"part of seeds 3..3 of a run of 3 seeds"):
    sweep.seed_parts.part_config(config, 3)
  pair = sweep.seed_parts.part_config(config, 1, 2)
  assert (pair.seed, pair.num_seeds) == (6, 2) and rest(pair) == rest(config)
  with pytest.raises(ValueError, match=r"part of seeds 2..3 of a run of 3 seeds"):
    sweep.seed_parts.part_config(config, 2, 2)
  with pytest.raises(ValueError, match="give it a results_dir"):
    sweep.run_sweep(SCHEMES_SMOKE, str(tmp_path), only=[name], split_seeds=True)
  assert not os.listdir(tmp_path)


# ---------------------------------------------------- the entry points, for real

def _run(*args):
  """`python *args` (forked by cli_harness; `-m module` in a fresh interpreter)."""
  return cli_harness.run(args, cwd=REPO, timeout=300, env={**os.environ, "JAX_PLATFORMS": "cpu"})


@pytest.fixture(scope="module")
def trained_sweep(tmp_path_factory):
  """`python train.py` on one smoke point of the schemes sweep: (sweep dir, the process)."""
  workdir = tmp_path_factory.mktemp("schemes")
  proc = _run("train.py", "--config", "configs/ablations/schemes.py:smoke,num_seeds=1,steps=2",
              "--workdir", str(workdir), "--runs", "t5+copy")
  return workdir, proc


@pytest.mark.slow  # starts train.py
def test_train_py_trains_and_tabulates_a_sweep(trained_sweep):
  workdir, proc = trained_sweep
  assert proc.returncode == 0, proc.stderr[-3000:]
  assert os.listdir(workdir / "t5+copy" / "checkpoints") == ["2"]
  assert sorted(p.name for p in workdir.iterdir()) == ["eval", "sweep.json", "t5+copy"]
  assert "t5+copy" in (workdir / "eval" / "extrapolation.md").read_text()
  assert "t5+copy" in proc.stdout  # the tables are printed too


@pytest.mark.slow  # starts train.py
def test_a_finished_run_is_not_retrained(trained_sweep, monkeypatch):
  workdir, proc = trained_sweep
  assert proc.returncode == 0, proc.stderr[-3000:]
  metrics = (workdir / "t5+copy" / "metrics.jsonl").read_text()

  def fail(config, workdir):
    raise AssertionError(f"{workdir} was retrained")

  monkeypatch.setattr(sweep.train_lib, "train_and_evaluate", fail)
  assert sweep.run_sweep(SCHEMES_SMOKE, str(workdir), only=["t5+copy"], run_eval=False) == []
  assert (workdir / "t5+copy" / "metrics.jsonl").read_text() == metrics


@pytest.mark.slow  # starts train.py
def test_bad_flags_fail_before_anything_runs(tmp_path):
  schemes = "configs/ablations/schemes.py:smoke"
  for args in (["train.py", "--config", schemes, "--workdir", str(tmp_path), "--sweep_shard=4/4"],
               ["-m", "relpos_jax.sweep", "--config", schemes, "--sweep_dir", str(tmp_path),
                "--sweep_shard=1-4"]):
    proc = _run(*args)
    assert proc.returncode != 0 and "--sweep_shard" in proc.stderr, proc.stderr[-2000:]
    assert "0 <= i < n" in proc.stderr
  proc = _run("train.py", "--config", "configs/default.py:smoke", "--workdir", str(tmp_path),
              "--sweep_shard=0/2")
  assert proc.returncode != 0 and "need a sweep config" in proc.stderr
  assert not os.listdir(tmp_path)


def test_command_line_overrides_apply_after_the_sweep_or_are_refused():
  base, overrides = sweep_spec.load_sweep(str(REPO / "configs/ablations/kazemnejad.py:smoke"))
  runs = sweep_spec.select(sweep_spec.expand(base, overrides), ["t5+copy", "t5+reverse"])
  done = sweep_spec.apply_command_line(runs, overrides, {"model.position.num_buckets": 16,
                                                    "num_steps": 2})
  assert [c.model.position.num_buckets for _, c in done] == [16, 16]
  assert [c.num_steps for _, c in done] == [2, 2] and runs[0][1].num_steps != 2
  everything = sweep_spec.expand(base, overrides)
  with pytest.raises(ValueError, match=r"--config.model.position.num_buckets: run\(s\) none\+copy"):
    sweep_spec.apply_command_line(everything, overrides, {"model.position.num_buckets": 16})
  with pytest.raises(ValueError, match=r"--config.data.task sets what the sweep varies"):
    sweep_spec.apply_command_line(everything, overrides, {"data.task": "sort"})


@pytest.mark.slow  # starts train.py
def test_train_py_applies_a_command_line_override_inside_a_swept_sub_config(tmp_path):
  proc = _run("train.py", "--config", "configs/ablations/kazemnejad.py:smoke,steps=2",
              "--workdir", str(tmp_path), "--runs", "t5+copy", "--config.num_seeds=1",
              "--config.model.position.num_buckets=16", "--config.model.position.max_distance=16")
  assert proc.returncode == 0, proc.stderr[-3000:]
  saved = json.loads((tmp_path / "t5+copy" / "config.json").read_text())
  assert saved["model"]["position"]["num_buckets"] == 16
  assert saved["model"]["position"]["max_distance"] == 16 and saved["num_seeds"] == 1
  proc = _run("train.py", "--config", "configs/ablations/kazemnejad.py:smoke,steps=2",
              "--workdir", str(tmp_path / "all"), "--config.model.position.num_buckets=16")
  assert proc.returncode == 1 and "Traceback" not in proc.stderr
  assert "error: --config.model.position.num_buckets: run(s) none+copy" in proc.stderr


def test_eval_variants_are_evaluated_and_stored_as_rows_of_their_run(tmp_path, monkeypatch):
  trained, _ = _fake_training(monkeypatch)
  evaluated = _fake_results_eval(monkeypatch)
  config = tmp_path / "table.py"
  config.write_text(
      f"from relpos_jax.experiments import sweep_spec\n"
      f"_SCHEMES = sweep_spec.load_module({str(REPO / 'configs/ablations/schemes.py')!r})\n"
      "def get_config(arg=None):\n"
      "  return _SCHEMES.get_config('smoke,num_seeds=1,steps=2')\n"
      "def get_sweep():\n"
      "  return [{'model.position.num_buckets': 8}, {'model.position.num_buckets': 16}]\n"
      "def get_eval_variants(config):\n"
      "  if config.model.position.num_buckets != 16:\n"
      "    return {}\n"
      "  return {'wide': {'model.position.max_distance': 256}}\n")
  table = tmp_path / "results" / "t"
  sweep.run_sweep(str(config), str(tmp_path / "runs"), results_dir=str(table))
  assert trained == ["num_buckets=8", "num_buckets=16"]
  assert evaluated == [("num_buckets=8", []), ("num_buckets=16", []),
                       ("num_buckets=16@wide", ["model.position.max_distance=256"])]
  meta = json.loads((table / "table.json").read_text())
  assert meta["eval_variants"] == {"num_buckets=16": ["wide"]}
  info = json.loads((table / "runs" / "num_buckets=16@wide.json").read_text())
  assert info["variant_of"] == "num_buckets=16"
  assert sweep.results.table_status(str(table)) == (2, 2)
  (table / "records" / "num_buckets=16@wide.jsonl").unlink()
  assert sweep.results.table_status(str(table)) == (1, 2)
  trained.clear()
  evaluated.clear()
  sweep.run_sweep(str(config), str(tmp_path / "runs"), results_dir=str(table))
  assert trained == [] and [n for n, _ in evaluated] == ["num_buckets=16", "num_buckets=16@wide"]


def test_a_resumed_run_reports_the_steps_it_trained_so_the_pace_counts_whole_runs(
    tmp_path, monkeypatch):
  config = ml_collections.ConfigDict({"num_steps": 5000})
  monkeypatch.setattr(sweep.train_lib, "train_and_evaluate", lambda config, workdir: None)
  monkeypatch.setattr(sweep, "_trained_step", lambda workdir, config: 1500)
  assert sweep._train_run(str(tmp_path), config, "run") == 3500
  monkeypatch.setattr(sweep, "_trained_step", lambda workdir, config: 5000)
  assert sweep._train_run(str(tmp_path), config, "run") == 0
