"""results/: runs stored one by one, read back in sweep order, rendered into RESULTS.md."""

import json
import os
import pathlib

import numpy as np

from relpos_jax.experiments import results
from relpos_jax.experiments import store

ROOT = pathlib.Path(__file__).resolve().parents[1]


def _workdir(tmp_path, name, steps_per_sec=(10.0, 5.0)):
  """A fake training workdir: config.json and two train lines per seed in metrics.jsonl."""
  workdir = tmp_path / "runs" / name
  workdir.mkdir(parents=True)
  (workdir / "config.json").write_text(json.dumps({"num_steps": 200, "batch_size": 8}))
  lines = [{"step": 100 * (i + 1), "kind": "train", "seed": seed, "steps_per_sec": sps}
           for i, sps in enumerate(steps_per_sec) for seed in (0, 1)]
  lines.append({"step": 200, "kind": "eval", "seed": 0, "valid_exact_match": 1.0})
  (workdir / "metrics.jsonl").write_text("".join(json.dumps(l) + "\n" for l in lines))
  return str(workdir)


def _records(run, exact):
  return [{"run": run, "scheme": "t5", "task": "copy", "seed": s, "length": n,
           "min_train_length": 1, "max_train_length": 20, "num_examples": 4,
           "exact_match": exact, "token_accuracy": exact, "valid_exact_match": 1.0,
           "converged": True, "converged_at": 0.95, "error": None}
          for s in (0, 1) for n in (10, 30)]


def test_train_seconds_sums_steps_over_rate(tmp_path):
  workdir = _workdir(tmp_path, "a")
  np.testing.assert_allclose(store.train_seconds(workdir), 100 / 10.0 + 100 / 5.0)
  assert store.train_seconds(str(tmp_path)) is None  # no metrics.jsonl


def test_runs_are_stored_one_by_one_and_read_in_sweep_order(tmp_path):
  table = str(tmp_path / "results" / "t")
  store.write_table_meta(table, "configs/ablations/t.py", ["b", "a@x=1", "c"])
  assert not store.has_run(table, "a@x=1")
  for run, exact in (("a@x=1", 0.5), ("b", 1.0)):
    store.write_run(table, run, _records(run, exact), workdir=_workdir(tmp_path, run),
                      eval_seconds=3.0, info={"note": "x"})
  assert store.has_run(table, "a@x=1") and not store.has_run(table, "c")
  assert [r["run"] for r in results.read_table(table)][::4] == ["b", "a@x=1"]
  assert results.table_status(table) == (2, 3)
  with open(os.path.join(table, "runs", "b.json")) as f:
    info = json.load(f)
  assert info["eval_seconds"] == 3.0 and info["note"] == "x" and info["machine"]["cpus"]
  np.testing.assert_allclose(info["train_seconds"], 30.0)
  assert results.write_table_report(table)
  assert os.path.exists(os.path.join(table, "extrapolation.md"))


def test_render_shows_status_notes_and_the_pooled_table(tmp_path):
  root = tmp_path / "results"
  table = str(root / "t")
  store.write_table_meta(table, "configs/ablations/t.py", ["a", "b"])
  store.write_run(table, "a", _records("a", 0.25), workdir=_workdir(tmp_path, "a"),
                    eval_seconds=60.0)
  (root / "t" / "notes.md").write_text("What the table shows.\n")
  text = results.render(str(root))
  assert text.startswith(results.HEADER)
  assert "## t\n\n`configs/ablations/t.py`: 1 of 2 runs stored (the table is incomplete)." in text
  assert "What the table shows." in text and "| pooled (L, 2L] |" in text
  assert "- [t](#t): 1 of 2 runs" in text and "## Summary" in text  # contents, summary
  assert "Budget: 200 steps of batch 8." in text


def test_run_identity_ignores_provenance_logging_and_a_disabled_section():
  config = {"model": {"arch": "encoder_decoder", "d_model": 8, "position": {"name": "t5"}},
            "randomized": {"enabled": False, "max_random_position": 2048},
            "log_every": 100, "num_steps": 10, "provenance": {"git": "a"}}
  same = {**config, "randomized": {"enabled": False, "max_random_position": 256},
          "log_every": 7, "provenance": {"git": "b"}, "provenance_earlier": [{}]}
  assert store.run_identity(same) == store.run_identity(config)
  for other in ({**config, "num_steps": 11},
                {**config, "randomized": {"enabled": True, "max_random_position": 2048}},
                {**config, "model": {**config["model"], "d_model": 16}}):
    assert store.run_identity(other) != store.run_identity(config)
  # a model key the stored config lacks counts as its default, as a resume counts it
  assert store.run_identity(config)["model"]["dtype"] == "float32"
  # "auto" counts as the precision the run resolved it to
  auto = lambda resolved: {**config, "model": {**config["model"], "dtype": "auto"},
                           "provenance": {"precision": {"auto": resolved}}}
  assert store.run_identity(auto("bfloat16")) != store.run_identity(auto("float32"))
  assert store.run_identity(auto("float32")) == store.run_identity(
      {**auto("float32"), "provenance": {"precision": {"auto": "float32"}, "git": "x"}})


def test_find_identical_run_and_copy_run(tmp_path):
  root = tmp_path / "results"
  workdir = _workdir(tmp_path, "a")
  config = json.loads(pathlib.Path(workdir, "config.json").read_text())
  store.write_run(str(root / "t1"), "a", _records("a", 0.5), workdir=workdir,
                    eval_seconds=1.0)
  assert store.find_identical_run(str(root), config) == (str(root / "t1"), "a")
  assert store.find_identical_run(str(root), config, exclude=str(root / "t1")) is None
  assert store.find_identical_run(str(root), {**config, "num_steps": 1}) is None
  copied = store.copy_run(str(root / "t1"), "a", str(root / "t2"), "a2")
  assert {r["run"] for r in copied} == {"a2"}
  assert results.read_table(str(root / "t2")) == copied
  info = json.loads((root / "t2" / "runs" / "a2.json").read_text())
  assert info["run"] == "a2" and info["reused_from"] == os.path.join("t1", "runs", "a.json")
  # a copy is never the source of another copy: the original is
  assert store.find_identical_run(str(root), config, exclude=str(root / "t1")) is None
  store.write_table_meta(str(root / "t2"), "configs/ablations/t2.py", ["a2"])
  assert "1 of the 1 runs are another table's identical runs" in results.render(str(root))


def test_committed_results_md_is_the_rendering_of_results():
  # RESULTS.md is generated: regenerate it with `python -m relpos_jax.results`.
  with open(ROOT / "RESULTS.md") as f:
    assert f.read() == results.render(str(ROOT / "results"))


def test_committed_readme_headline_is_the_rendering_of_results():
  with open(ROOT / "README.md") as f:
    readme = f.read()
  assert readme == results.with_headline(readme, results.render_headline(str(ROOT / "results")))


def test_with_headline_replaces_only_the_block():
  text = f"a\n{results.HEADLINE_BEGIN}\nold\n{results.HEADLINE_END}\nb\n"
  assert results.with_headline(text, "new") == (
      f"a\n{results.HEADLINE_BEGIN}\nnew\n{results.HEADLINE_END}\nb\n")


def test_a_randomized_run_is_stored_at_both_positions_and_counted_once(tmp_path):
  root = tmp_path / "results"
  workdir = _workdir(tmp_path, "r")
  config = {"num_steps": 200, "randomized": {"enabled": True, "max_random_position": 64}}
  pathlib.Path(workdir, "config.json").write_text(json.dumps(config))
  assert store.record_names("r", config) == ["r", "r@random_positions"]
  assert store.record_names("r", {"randomized": {"enabled": False}}) == ["r"]
  assert store.record_names("r", {}) == ["r"]
  table = str(root / "t1")
  store.write_table_meta(table, "configs/ablations/t1.py", ["r"])
  store.write_run(table, "r", _records("r", 0.0), workdir=workdir, eval_seconds=1.0)
  assert results.table_status(table) == (0, 1)  # its random-position records are missing
  assert store.find_identical_run(str(root), config) is None
  store.write_run(table, "r@random_positions", _records("r@random_positions", 0.9),
                    workdir=workdir, eval_seconds=1.0)
  assert results.table_status(table) == (1, 1)
  assert store.find_identical_run(str(root), config) == (table, "r")
  copied = store.copy_run(table, "r", str(root / "t2"), "r2")
  assert [r["run"] for r in copied][::4] == ["r2", "r2@random_positions"]
  info = json.loads((root / "t2" / "runs" / "r2@random_positions.json").read_text())
  assert info["reused_from"] == os.path.join("t1", "runs", "r@random_positions.json")
  assert store.has_records(str(root / "t2"), "r2", config)
