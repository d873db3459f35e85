"""relpos_jax/experiments/curves.py: training curves from metrics.jsonl, stored with each run."""

import json
import os

import numpy as np
import numpy.testing as npt
import pytest

from relpos_jax.experiments import curves
from relpos_jax.experiments import records as records_lib
from relpos_jax.experiments import seed_parts
from relpos_jax.experiments import store


def _metrics(num_logs, seeds=(0, 1), eval_every=None, log_every=10):
  """metrics.jsonl records: a train line per log and seed (loss 1/step), eval lines."""
  lines = []
  for i in range(1, num_logs + 1):
    step = i * log_every
    for seed in seeds:
      lines.append({"step": step, "kind": "train", "seed": seed, "loss": 1.0 / step + seed,
                    "token_accuracy": step / (num_logs * log_every), "grad_norm": 1.0,
                    "steps_per_sec": 5.0})
      if eval_every and step % eval_every == 0:
        lines.append({"step": step, "kind": "eval", "seed": seed,
                      "valid_exact_match": step / (num_logs * log_every),
                      "longest_exact_match": 0.0})
  return lines


def _workdir(tmp_path, lines, name="run"):
  workdir = tmp_path / name
  workdir.mkdir()
  (workdir / "config.json").write_text(json.dumps({"seed": 0, "num_seeds": 2, "num_steps": 60,
                                                   "batch_size": 8}))
  (workdir / "metrics.jsonl").write_text("".join(json.dumps(l) + "\n" for l in lines))
  return str(workdir)


def test_subsample_keeps_first_and_last_and_at_most_the_budget():
  npt.assert_array_equal(curves.subsample(5, 200), np.arange(5))
  for n, budget in ((1000, 200), (201, 200), (7, 3), (60, 2)):
    kept = curves.subsample(n, budget)
    assert kept[0] == 0 and kept[-1] == n - 1 and len(kept) <= budget
    assert np.all(np.diff(kept) > 0)
  npt.assert_array_equal(curves.subsample(7, 3), [0, 3, 6])  # evenly spaced
  with pytest.raises(ValueError, match="max_points must be >= 2"):
    curves.subsample(10, 1)


def test_a_curve_is_read_per_seed_from_a_metrics_file(tmp_path):
  workdir = _workdir(tmp_path, _metrics(6, eval_every=20))
  curve = curves.training_curve(workdir)
  assert [e["seed"] for e in curve] == [0, 1]
  first, second = curve
  assert first["step"] == [10, 20, 30, 40, 50, 60]
  npt.assert_allclose(first["loss"], [1 / s for s in first["step"]], rtol=1e-4)
  npt.assert_allclose(second["loss"], [1 / s + 1 for s in second["step"]], rtol=1e-4)
  npt.assert_allclose(first["token_accuracy"], np.arange(1, 7) / 6, rtol=1e-4)
  assert first["valid_step"] == [20, 40, 60]
  npt.assert_allclose(first["valid_exact_match"], [1 / 3, 2 / 3, 1.0], rtol=1e-4)
  assert set(first) == {"seed", "step", "loss", "token_accuracy", "valid_step",
                        "valid_exact_match"}  # nothing else the log holds


def test_a_long_curve_is_subsampled_keeping_the_first_and_last_step():
  curve = curves.from_metrics(_metrics(1000, seeds=(3,), eval_every=10_000), max_points=50)
  (entry,) = curve
  assert entry["seed"] == 3 and len(entry["step"]) == len(entry["loss"]) <= 50
  assert entry["step"][0] == 10 and entry["step"][-1] == 10_000
  npt.assert_allclose(entry["loss"][-1], 1e-4 + 3, rtol=1e-4)
  assert entry["valid_step"] == [10_000]


def test_values_are_rounded_a_repeated_step_keeps_its_last_line_and_no_train_lines_is_none():
  lines = [{"step": 1, "kind": "train", "seed": 0, "loss": 2.0, "token_accuracy": 0.1},
           {"step": 2, "kind": "train", "seed": 0, "loss": 1.234567891, "token_accuracy": 0.5},
           {"step": 2, "kind": "train", "seed": 0, "loss": 0.987654321, "token_accuracy": 0.6}]
  (entry,) = curves.from_metrics(lines)
  assert entry["step"] == [1, 2] and entry["loss"] == [2.0, 0.98765]
  assert "valid_step" not in entry  # no eval line: no validation series
  assert curves.from_metrics([{"step": 5, "kind": "eval", "seed": 0,
                               "valid_exact_match": 1.0}]) is None


def test_a_workdir_without_metrics_has_no_curve(tmp_path):
  assert curves.training_curve(str(tmp_path)) is None


def test_merge_joins_single_seed_parts_by_seed():
  part = lambda seed: curves.from_metrics(_metrics(3, seeds=(seed,)))
  merged = curves.merge([part(2), part(0), part(1)])
  assert [e["seed"] for e in merged] == [0, 1, 2]
  assert curves.merge([part(0), None]) is None  # a part without a curve: no partial curve
  with pytest.raises(ValueError, match="repeat a seed"):
    curves.merge([part(0), part(0)])


def _records(run, seeds=(0, 1)):
  return [{"run": run, "scheme": "none", "task": "copy", "seed": s, "replica": s, "length": n,
           "max_train_length": 20, "num_examples": 4, "exact_match": 0.5, "error": None,
           "converged": True, "valid_exact_match": 1.0, "converged_at": 0.95}
          for s in seeds for n in (10, 30)]


def test_write_run_stores_the_curve_and_a_variant_does_not(tmp_path):
  table = str(tmp_path / "results" / "t")
  workdir = _workdir(tmp_path, _metrics(4, eval_every=20))
  store.write_run(table, "a", _records("a"), workdir=workdir, eval_seconds=1.0)
  store.write_run(table, "a@x", _records("a@x"), workdir=workdir, eval_seconds=1.0,
                  info={"variant_of": "a"})
  info = json.loads((tmp_path / "results" / "t" / "runs" / "a.json").read_text())
  assert info["training_curve"] == curves.training_curve(workdir)
  assert list(info)[-1] == "training_curve"  # after the fields a reader looks at first
  variant = json.loads((tmp_path / "results" / "t" / "runs" / "a@x.json").read_text())
  assert "training_curve" not in variant


def test_merged_parts_carry_every_seed_curve(tmp_path):
  table = str(tmp_path / "results" / "t")
  config = {"seed": 0, "num_seeds": 2, "num_steps": 60, "batch_size": 8,
            "randomized": {"enabled": False}}
  for seed in (0, 1):
    name = seed_parts.part_name("a", seed)
    workdir = _workdir(tmp_path, _metrics(3, seeds=(seed,)), name)
    with open(os.path.join(workdir, "config.json"), "w") as f:
      json.dump({**config, "seed": seed, "num_seeds": 1}, f)
    store.write_run(seed_parts.parts_dir(table), name, _records(name, seeds=(seed,)),
                    workdir=workdir, eval_seconds=1.0, info=seed_parts.part_info("a", config))
  assert seed_parts.merge_parts(table, "a", config) is not None
  info = json.loads((tmp_path / "results" / "t" / "runs" / "a.json").read_text())
  assert [e["seed"] for e in info["training_curve"]] == [0, 1]
  assert len(records_lib.read_jsonl(store.record_path(table, "a"))) == 4
