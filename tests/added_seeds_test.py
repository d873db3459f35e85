"""Adding seeds to a stored run: only the missing seeds trained, appended, guarded; for real too."""

import json
import os
import pathlib

import jax
import numpy as np
import pytest

from relpos_jax import architectures
from relpos_jax import errors
from relpos_jax import workdir as workdir_lib
from relpos_jax.data import pipeline
from relpos_jax.experiments import added_seeds
from relpos_jax.experiments import main_table
from relpos_jax.experiments import records as records_lib
from relpos_jax.experiments import results
from relpos_jax.experiments import seed_parts
from relpos_jax.experiments import sweep
from relpos_jax.experiments import tables

REPO = pathlib.Path(__file__).resolve().parents[1]
METHODS = str(REPO / "configs/ablations/extrapolation_methods.py") + ":smoke,num_seeds=2,steps=2"
RUN = "rope+copy"
LABELS = ["", "@pi", "@dynamic_ntk", "@yarn"]  # the run and its eval-time RoPE rows


def _fake_record(name, seed, replica, length, *, overrides=(), **changes):
  """A record with the protocol fields an evaluation writes; its score a function of the seed."""
  return {"run": name, "scheme": "rope", "task": "copy", "workdir": "w", "min_train_length": 1,
          "max_train_length": 6, "checkpoint_rule": "best", "converged_at": 0.95,
          "valid_source": "8 examples", "overrides": list(overrides), "eval_positions": "0..L-1",
          "valid_positions": "0..L-1", "checkpoint_valid_positions": "0..L-1",
          "provenance": {"git": {"commit": "c", "dirty": False}}, "seed": seed,
          "replica": replica, "step": 2, "final_step": 2, "valid_exact_match": 1.0,
          "valid_token_accuracy": 1.0, "valid_num_examples": 8, "best_valid_exact_match": 1.0,
          "best_valid_step": 2, "converged": True, "length": length, "num_examples": 8,
          "exact_match": (seed + 1) / 8 if length > 6 else 1.0, "num_available": 8,
          "eval_seed": 0, "error": None, **changes}


def _fake(monkeypatch, **changes):
  """Fakes training (config.json and a checkpoint) and evaluation (records per replica).

  Returns the log of trained workdirs and evaluated record names; `changes` alter
  every record of a workdir whose seed is above 1 (another protocol).
  """
  trained, evaluated = [], []

  def train(config, workdir):
    trained.append(os.path.basename(workdir))
    os.makedirs(os.path.join(workdir, "checkpoints", str(config.num_steps)))
    saved = {**workdir_lib.config_json(config), "provenance": {"git": {"dirty": False}}}
    pathlib.Path(workdir, "config.json").write_text(json.dumps(saved))
    lines = [{"kind": "train", "step": config.num_steps, "seed": config.seed + k, "loss": 1.0,
              "token_accuracy": 0.5, "steps_per_sec": 1.0} for k in range(config.num_seeds)]
    pathlib.Path(workdir_lib.metrics_path(workdir)).write_text(
        "".join(json.dumps(line) + "\n" for line in lines))

  def evaluate_runs(workdirs, out_dir, *, names, on_run, random_positions=False, overrides=(),
                    variant=None, **options):
    config = workdir_lib.load_config(workdirs[0])
    name = names[0] + (f"@{variant}" if variant else "")
    evaluated.append(name)
    records = [_fake_record(name, config.seed + k, k, length, overrides=overrides,
                            **(changes if config.seed > 1 else {}))
               for k in range(config.num_seeds) for length in (4, 8)]
    on_run(name, workdirs[0], records, 1.0)
    return records

  monkeypatch.setattr(sweep.train_lib, "train_and_evaluate", train)
  monkeypatch.setattr(sweep.runner, "evaluate_runs", evaluate_runs)
  monkeypatch.setattr(sweep.results, "write_table_report", lambda table_dir: [])
  return trained, evaluated


def _sweep(tmp_path, num_seeds=None, **options):
  """The smoke extrapolation-methods sweep of RUN into tmp_path/results/methods."""
  return sweep.run_sweep(METHODS, str(tmp_path / "runs"), only=[RUN],
                         results_dir=str(tmp_path / "results" / "methods"),
                         command_line={"num_seeds": num_seeds} if num_seeds else None, **options)


def _files(table):
  """Every stored record and run file of the table, as bytes."""
  return {p.relative_to(table): p.read_bytes()
          for folder in ("records", "runs") for p in sorted((table / folder).glob("*"))}


def test_a_stored_run_gets_only_its_missing_seeds_appended(tmp_path, monkeypatch):
  trained, evaluated = _fake(monkeypatch)
  table = tmp_path / "results" / "methods"
  _sweep(tmp_path)
  assert trained == [RUN]  # two seeds, vmapped
  before = _files(table)

  trained.clear()
  evaluated.clear()
  records = _sweep(tmp_path, num_seeds=4)
  assert trained == [f"{RUN}.seed2", f"{RUN}.seed3"]  # the missing seeds alone, in order
  assert evaluated == [f"{RUN}.seed{s}{label}" for s in (2, 3) for label in LABELS]
  part = json.loads((tmp_path / "runs" / f"{RUN}.seed3" / "config.json").read_text())
  assert (part["seed"], part["num_seeds"]) == (3, 1)
  assert sorted({(r["run"], r["seed"]) for r in records}) == sorted(
      (RUN + label, s) for label in LABELS for s in (2, 3))
  for label in LABELS:
    path = table / "records" / f"{RUN}{label}.jsonl"
    new = path.read_bytes()
    old = before[pathlib.Path("records", f"{RUN}{label}.jsonl")]
    assert new.startswith(old)  # the stored seeds' lines byte for byte
    rows = records_lib.read_jsonl(str(path))
    assert [(r["seed"], r["replica"]) for r in rows] == [(s, s) for s in range(4) for _ in (4, 8)]
    assert {r["run"] for r in rows} == {RUN + label}
    info = json.loads((table / "runs" / f"{RUN}{label}.json").read_text())
    assert info["config"]["num_seeds"] == 4 and info["config"]["seed"] == 0
    assert "provenance" in info["config"]  # the two seeds trained together keep theirs
    assert [(p["run"], p["seed"]) for p in info["seed_parts"]] == [
        (f"{RUN}.seed2{label}", 2), (f"{RUN}.seed3{label}", 3)]
    assert all(p["provenance"] and p["eval_provenance"] for p in info["seed_parts"])
    assert info["train_seconds"] == 2.0 * 3  # the run's 2 steps, then each added seed's
    assert ([c["seed"] for c in info["training_curve"]] == [0, 1, 2, 3] if not label
            else "training_curve" not in info)  # a variant row has no curve of its own
  # Every renderer reads it as a 4-seed run.
  stored = results.read_table(str(table))
  assert tables.num_seeds([r for r in stored if r["run"] == RUN]) == 4
  assert f"| {RUN} | 4/4 |" in main_table.table(stored)
  assert f"| {RUN} | rope | 4 |" in tables.exact_match_table(stored)

  trained.clear()
  evaluated.clear()
  after = _files(table)
  for asked in (4, 3, None):  # as many or fewer seeds than stored: nothing to do
    _sweep(tmp_path, num_seeds=asked)
  assert trained == [] and evaluated == [] and _files(table) == after


def test_seeds_interrupted_midway_resume_and_show_in_results(tmp_path, monkeypatch):
  trained, _ = _fake(monkeypatch)
  _sweep(tmp_path)
  fake_train = sweep.train_lib.train_and_evaluate

  def killed_at_seed_3(config, workdir):
    if config.seed == 3:
      raise KeyboardInterrupt  # the session ends while seed 3 trains
    fake_train(config, workdir)

  monkeypatch.setattr(sweep.train_lib, "train_and_evaluate", killed_at_seed_3)
  with pytest.raises(KeyboardInterrupt):
    _sweep(tmp_path, num_seeds=4)
  table = tmp_path / "results" / "methods"
  assert tables.num_seeds(records_lib.read_jsonl(str(table / "records" / f"{RUN}.jsonl"))) == 2
  text = results.render(str(tmp_path / "results"))
  assert f"Seeds being added to stored runs, stored so far (`parts/`, appended once all are): " \
         f"{RUN} (2 seeds; of seeds 2–3: 2)." in text
  monkeypatch.setattr(sweep.train_lib, "train_and_evaluate", fake_train)
  trained.clear()
  _sweep(tmp_path, num_seeds=4)
  assert trained == [f"{RUN}.seed3"]  # seed 2's records were stored: not trained again
  assert tables.num_seeds(records_lib.read_jsonl(str(table / "records" / f"{RUN}.jsonl"))) == 4
  assert "Seeds being added" not in results.render(str(tmp_path / "results"))


def _refused(tmp_path, match):
  """Asks for 3 seeds and checks the one-line refusal."""
  with pytest.raises(errors.UserError, match=match):
    _sweep(tmp_path, num_seeds=3)


def test_refusals_name_what_differs(tmp_path, monkeypatch):
  trained, _ = _fake(monkeypatch)
  _sweep(tmp_path)
  table = tmp_path / "results" / "methods"
  before = _files(table)
  trained.clear()
  with pytest.raises(errors.UserError, match=r"another config than asked, apart from num_seeds "
                     r"\(model.d_model\): seeds added now would belong to another run"):
    sweep.run_sweep(METHODS, str(tmp_path / "runs"), only=[RUN], results_dir=str(table),
                    command_line={"num_seeds": 3, "model.d_model": 32})

  path = table / "records" / f"{RUN}@yarn.jsonl"
  rows = records_lib.read_jsonl(str(path))
  records_lib.write_jsonl([r for r in rows if r["seed"] == 0], str(path))  # seed 1 lost
  _refused(tmp_path, r"yarn.jsonl: its \(seed, replica\) pairs are \[\(0, 0\)\], not seeds 0..1")
  records_lib.write_jsonl([{**r, "checkpoint_rule": "last"} for r in rows], str(path))
  _refused(tmp_path, r"yarn.jsonl: evaluated at checkpoint rule 'last', the config's is 'best'")
  path.write_bytes(before[pathlib.Path("records", f"{RUN}@yarn.jsonl")])

  info_path = table / "runs" / f"{RUN}.json"
  info = json.loads(info_path.read_text())
  info_path.write_text(json.dumps({**info, "reused_from": "other/runs/rope+copy.json"}))
  _refused(tmp_path, r"is a copy of other/runs/rope\+copy.json \(reused_from\): add the seeds "
           "to that table's run")
  info_path.write_bytes(before[pathlib.Path("runs", f"{RUN}.json")])
  assert trained == [] and _files(table) == before


def test_a_copy_takes_its_seeds_from_its_source_table(tmp_path, monkeypatch):
  trained, _ = _fake(monkeypatch)
  root = tmp_path / "results"
  schemes = str(REPO / "configs/ablations/schemes.py") + ":smoke,num_seeds=2,steps=2"
  randomized = str(REPO / "configs/ablations/randomized.py") + ":smoke,num_seeds=2,steps=2"
  run_sweep = lambda spec, table, **kw: sweep.run_sweep(
      spec, str(tmp_path / table), only=["t5+copy"], results_dir=str(root / table), **kw)
  run_sweep(schemes, "schemes")
  run_sweep(randomized, "randomized")  # copied from the schemes table, not trained
  assert trained == ["t5+copy"]
  with pytest.raises(errors.UserError, match=r"is a copy of schemes/runs/t5\+copy.json"):
    run_sweep(randomized, "randomized", command_line={"num_seeds": 3})
  run_sweep(schemes, "schemes", command_line={"num_seeds": 3})
  assert trained == ["t5+copy", "t5+copy.seed2"]
  for path in [*(root / "randomized").glob("records/t5+copy*"),
               *(root / "randomized").glob("runs/t5+copy*")]:
    path.unlink()  # the copy, deleted as the refusal says: the sweep copies it again
  run_sweep(randomized, "randomized", command_line={"num_seeds": 3})
  assert trained == ["t5+copy", "t5+copy.seed2"]
  assert (root / "randomized" / "records" / "t5+copy.jsonl").read_bytes() == (
      root / "schemes" / "records" / "t5+copy.jsonl").read_bytes()
  run_sweep(randomized, "again")  # a table asking for 2 seeds copies the 3-seed run whole
  assert trained == ["t5+copy", "t5+copy.seed2"]
  assert (root / "again" / "records" / "t5+copy.jsonl").read_bytes() == (
      root / "schemes" / "records" / "t5+copy.jsonl").read_bytes()


def test_seeds_evaluated_under_another_protocol_are_not_appended(tmp_path, monkeypatch):
  _fake(monkeypatch)
  _sweep(tmp_path)
  table = tmp_path / "results" / "methods"
  before = _files(table)
  _fake(monkeypatch, num_examples=16)  # the added seed is scored on more examples
  with pytest.raises(errors.UserError, match=r"rope\+copy: seed 2 at 4: num_examples is 16, the "
                     r"stored seeds' 8; seeds \[2\] not appended \(their records stay in"):
    _sweep(tmp_path, num_seeds=3)
  assert _files(table) == before
  assert seed_parts.stored_parts(str(table)) == {RUN: ([2], [0, 1, 2])}


def test_old_records_without_position_draws_take_new_seeds_decoded_at_0_to_L():
  """Records stored before `position_draws` existed omit it: at 0..L−1 that is one draw."""
  new = [{**_fake_record(RUN, 2, 2, 8), "eval_positions": "0..L-1", "position_draws": 1}]
  old = [{k: v for k, v in {**_fake_record(RUN, s, s, 8), "eval_positions": "0..L-1"}.items()
          if k != "position_draws"} for s in (0, 1)]
  assert added_seeds._protocol_difference(old, new, randomized=False) is None
  # Decoded at random positions, a missing count is another protocol: refused.
  rand_new = [{**r, "eval_positions": "random", "position_draws": 8} for r in new]
  rand_old = [{**r, "eval_positions": "random"} for r in old]
  assert "position_draws is 8, the stored seeds' None" in (
      added_seeds._protocol_difference(rand_old, rand_new, randomized=True))


def test_old_records_without_the_newer_position_fields_take_new_seeds():
  old = [{k: v for k, v in _fake_record(RUN, s, s, 8).items()
          if k not in ("valid_positions", "checkpoint_valid_positions")} for s in (0, 1)]
  new = [_fake_record(RUN, 2, 2, 8)]
  assert added_seeds._protocol_difference(old, new, randomized=False) is None
  # A run trained at random positions validated its 0..L−1 row elsewhere before the rule.
  assert "valid_positions is '0..L-1', the stored seeds' None" in (
      added_seeds._protocol_difference(old, new, randomized=True))
  config = {"randomized": {"enabled": True, "max_random_position": 64, "eval_draws": 8}}
  assert "before per-row validation" in added_seeds._config_protocol_problem(old, config)
  assert "position_draws None, now 8" in added_seeds._config_protocol_problem(
      [{**old[0], "eval_positions": "random", "position_draws": None}], {**config})


def test_provenance_is_per_seed_in_the_run_info():
  clean, dirty = {"git": {"dirty": False}}, {"git": {"dirty": True}}
  records = [{"provenance": clean}]
  extended = {"config": {"num_seeds": 5, "provenance": dirty},
              "seed_parts": [{"seed": 3, "provenance": clean}, {"seed": 4, "provenance": clean}]}
  assert main_table.provenance_problems(records, extended) == [
      "trained from a tree with uncommitted changes"]  # seeds 0-2, trained together
  extended["config"] = {"num_seeds": 5}
  assert main_table.provenance_problems(records, extended) == [
      "no training provenance recorded for some seeds"]
  merged = {"config": {"num_seeds": 2}, "seed_parts": [{"provenance": clean}] * 2}
  assert main_table.provenance_problems(records, merged) == []
  # A part of two seeds trained together covers both: no seed lacks provenance.
  grouped = {"config": {"num_seeds": 3}, "seed_parts": [
      {"seed": 0, "provenance": clean}, {"seed": 1, "num_seeds": 2, "provenance": clean}]}
  assert main_table.provenance_problems(records, grouped) == []
  grouped["seed_parts"][1]["num_seeds"] = 1  # seed 2 then comes from nowhere
  assert main_table.provenance_problems(records, grouped) == [
      "no training provenance recorded for some seeds"]


@pytest.mark.slow  # trains four smoke runs
def test_an_added_seed_is_the_seed_a_vmapped_run_would_have_trained(tmp_path):
  smoke = str(REPO / "configs/ablations/schemes.py") + ":smoke,num_seeds=2"
  two = tmp_path / "results" / "two"
  sweep.run_sweep(smoke, str(tmp_path / "two"), only=["t5+copy"], results_dir=str(two),
                  reuse=False)
  stored = (two / "records" / "t5+copy.jsonl").read_bytes()
  sweep.run_sweep(smoke, str(tmp_path / "two"), only=["t5+copy"], results_dir=str(two),
                  command_line={"num_seeds": 3}, reuse=False)
  assert (two / "records" / "t5+copy.jsonl").read_bytes().startswith(stored)
  three = tmp_path / "results" / "three"
  sweep.run_sweep(smoke, str(tmp_path / "three"), only=["t5+copy"], results_dir=str(three),
                  command_line={"num_seeds": 3}, reuse=False)

  added = records_lib.read_jsonl(str(two / "records" / "t5+copy.jsonl"))
  vmapped = records_lib.read_jsonl(str(three / "records" / "t5+copy.jsonl"))
  assert [(r["seed"], r["replica"], r["length"]) for r in added] == [
      (r["seed"], r["replica"], r["length"]) for r in vmapped]
  for a, b in zip(added, vmapped):
    assert a["step"] == b["step"] and a["converged"] == b["converged"]
    for key in ("exact_match", "token_accuracy", "valid_exact_match"):
      assert a[key] == b[key], (a["seed"], a["length"], key)
    np.testing.assert_allclose(a["loss"], b["loss"], rtol=1e-4)
  # Evaluated as the vmapped run's seeds are (every protocol field, per length).
  assert added_seeds._protocol_difference(vmapped, [r for r in added if r["seed"] == 2],
                                          randomized=False) is None
  # The parameters: seed 2 trained alone against replica 2 of the vmapped run. Equal to
  # float rounding, not bit for bit (XLA compiles the 3-replica step into other kernels).
  part = str(tmp_path / "two" / "t5+copy.seed2")
  config = workdir_lib.load_config(part)
  model = architectures.make_model(
      config.model, vocab_size=pipeline.make_dataset(seed=2, **config.data).vocab.size)
  vmapped_dir = str(tmp_path / "three" / "t5+copy")
  _, alone = workdir_lib.load_params(part, config, model)
  _, together = workdir_lib.load_params(vmapped_dir, workdir_lib.load_config(vmapped_dir), model)
  for x, y in zip(jax.tree_util.tree_leaves(alone), jax.tree_util.tree_leaves(together)):
    np.testing.assert_allclose(np.asarray(x)[0], np.asarray(y)[2], atol=1e-5)


@pytest.mark.slow  # trains three smoke runs
def test_a_part_of_two_seeds_gives_the_records_the_seeds_trained_together_give(tmp_path):
  smoke = str(REPO / "configs/ablations/schemes.py") + ":smoke,num_seeds=3"
  parts, whole = tmp_path / "results" / "parts", tmp_path / "results" / "whole"
  sweep.run_sweep(smoke, str(tmp_path / "parts"), only=["t5+copy"], results_dir=str(parts),
                  reuse=False, split_seeds=True, seeds_per_part=2)
  assert {"t5+copy.seeds0-1", "t5+copy.seed2"} <= set(os.listdir(tmp_path / "parts"))
  assert "t5+copy.seed0" not in os.listdir(tmp_path / "parts")
  sweep.run_sweep(smoke, str(tmp_path / "whole"), only=["t5+copy"], results_dir=str(whole),
                  reuse=False)
  split = records_lib.read_jsonl(str(parts / "records" / "t5+copy.jsonl"))
  vmapped = records_lib.read_jsonl(str(whole / "records" / "t5+copy.jsonl"))
  assert sorted((r["seed"], r["replica"], r["length"]) for r in split) == sorted(
      (r["seed"], r["replica"], r["length"]) for r in vmapped)
  key = lambda r: (r["seed"], r["length"])
  for a, b in zip(sorted(split, key=key), sorted(vmapped, key=key)):
    assert a["step"] == b["step"]
    for k in ("exact_match", "token_accuracy", "valid_exact_match"):
      assert a[k] == b[k], (a["seed"], a["length"], k)
    np.testing.assert_allclose(a["loss"], b["loss"], rtol=1e-4)
