"""relpos_jax/experiments/precision_calibration.py: the bf16-vs-f32 table, verdict and figure."""

import json
import os
import re

import numpy as np
import numpy.testing as npt

from relpos_jax import architectures
from relpos_jax.experiments import compare
from relpos_jax.experiments import main_table
from relpos_jax.experiments import precision_calibration as calibration
from relpos_jax.experiments import results
from relpos_jax.experiments import store

SWEEP = [f"{s}+copy+dtype={d}" for s in ("none", "t5") for d in ("float32", "bfloat16")]
N = 50  # eval examples per length


def _records(run, exact_by_seed, converged=True):
  """A run's records: copy, L = 20, lengths 10, 25 and 40, per-example outcomes listed."""
  out = []
  for seed, exact in enumerate(exact_by_seed):
    for length in (10, 25, 40):
      k = N if length <= 20 else int(round(exact * N))
      counts = [1] * k + [0] * (N - k)
      out.append({"run": run, "scheme": run.split("+")[0], "task": "copy", "seed": seed,
                  "replica": seed, "length": length, "max_train_length": 20, "num_examples": N,
                  "exact_match": k / N, "exact_counts": counts, "position_draws": 1,
                  "error": None, "converged": converged, "converged_at": 0.95,
                  "valid_exact_match": 1.0 if converged else 0.5})
  return out


def _info(run, dtype, **changes):
  model = architectures.default_config("decoder_only").to_dict()
  model.update(dtype=dtype, position={"name": run.split("+")[0]})
  config = {"seed": 0, "num_seeds": 3, "num_steps": 6000, "batch_size": 64,
            "optimizer": {"learning_rate": 1e-3}, "model": model, **changes}
  return {"run": run, "config": config}


def _table(cells):
  """Records and run infos of `(run, exact_by_seed)`; the dtype read from the name."""
  records, infos = [], {}
  for run, exact in cells:
    records += _records(run, exact)
    infos[run] = _info(run, calibration.split_run(run)[1])
  return records, infos


def test_run_names_split_into_pair_and_dtype():
  assert calibration.split_run("t5+copy+dtype=bfloat16") == ("t5+copy", "bfloat16")
  assert calibration.split_run("t5+copy") is None
  assert calibration.split_run("t5+copy+dtype=float32@pi") is None  # an eval-time variant
  assert calibration.pairs(SWEEP + ["alibi+copy+dtype=bfloat16"]) == {
      "none+copy": {"float32": SWEEP[0], "bfloat16": SWEEP[1]},
      "t5+copy": {"float32": SWEEP[2], "bfloat16": SWEEP[3]},
      "alibi+copy": {"bfloat16": "alibi+copy+dtype=bfloat16"}}


def test_nothing_stored_renders_not_run_and_no_value():
  text = calibration.markdown([], {}, SWEEP)
  rows = [line for line in text.splitlines() if line.startswith("| none") or
          line.startswith("| t5")]
  assert len(rows) == 2
  for row in rows:
    assert row.count(calibration.NOT_RUN) == 2 and "pooled (L, 2L]" in row
  assert not re.search(r"\d\.\d\d \[", text)  # no interval anywhere
  assert "**Not decided**: runs not stored yet" in text


def test_a_bf16_value_outside_the_f32_interval_is_reported_outside():
  records, infos = _table([(SWEEP[0], [0.60, 0.62, 0.64]), (SWEEP[1], [0.60, 0.62, 0.64]),
                           (SWEEP[2], [0.60, 0.62, 0.64]), (SWEEP[3], [0.20, 0.22, 0.24])])
  same, apart = calibration.calibration_rows(records, infos, SWEEP)
  assert (same.base, same.column, apart.base) == ("none+copy", "pooled (L, 2L]", "t5+copy")
  npt.assert_allclose([same.reference.mean, same.candidate.mean], [0.62, 0.62], atol=1e-9)
  assert same.reference.lo < 0.62 < same.reference.hi and same.inside
  npt.assert_allclose(same.difference.mean, 0.0, atol=1e-12)
  npt.assert_allclose(apart.candidate.mean, 0.22, atol=1e-9)
  assert apart.candidate.mean < apart.reference.lo and apart.inside is False
  npt.assert_allclose(apart.difference.mean, -0.40, atol=1e-9)
  assert apart.difference.hi < 0 and apart.difference.p < 0.05
  text = calibration.markdown(records, infos, SWEEP)
  assert "**Not calibrated**: 1 of 2 pooled bf16 values lie outside" in text
  assert "(t5+copy pooled (L, 2L])" in text
  assert re.search(r"\| t5\+copy \| pooled \(L, 2L\] \| 0\.62 \[.*\] \| 0\.22 \[.*\] \| \*\*no\*\* "
                   r"\| -0\.40 \[", text)
  assert re.search(r"\| none\+copy \| .* \| yes \| \+0\.00 \[", text)


def test_the_paired_difference_is_compares_bf16_minus_f32():
  records, infos = _table([(SWEEP[0], [0.5, 0.7, 0.6]), (SWEEP[1], [0.55, 0.6, 0.7])])
  (row,) = calibration.calibration_rows(records, infos, SWEEP[:2])
  by_run = {run: [r for r in records if r["run"] == run] for run in SWEEP[:2]}
  expected = compare.compare(by_run[SWEEP[1]], by_run[SWEEP[0]], main_table.POOLED_2X)
  assert row.difference == expected


def test_every_pooled_value_inside_is_calibrated_and_a_missing_arm_is_not_decided():
  cells = [(run, [0.5, 0.6, 0.7]) for run in SWEEP]
  records, infos = _table(cells)
  assert "**Calibrated**: every pooled bf16 value lies inside" in calibration.markdown(
      records, infos, SWEEP)
  records, infos = _table(cells[:3])  # t5's bf16 run not stored yet
  text = calibration.markdown(records, infos, SWEEP)
  assert "**Not decided**: runs not stored yet" in text and "so far 1 of 1" in text
  assert re.search(r"\| t5\+copy \| pooled \(L, 2L\] \| 0\.60 \[.*\] \| not run \| — \| — \|",
                   text)


def test_configs_that_differ_beyond_the_dtype_are_not_compared():
  records, infos = _table([(SWEEP[0], [0.5, 0.6, 0.7]), (SWEEP[1], [0.5, 0.6, 0.7])])
  infos[SWEEP[1]] = _info(SWEEP[1], "bfloat16", optimizer={"learning_rate": 1e-2})
  (row,) = calibration.calibration_rows(records, infos, SWEEP[:2])
  assert "optimizer.learning_rate" in row.problem and row.inside is None
  assert row.difference is None
  text = calibration.markdown(records, infos, SWEEP[:2])
  assert "not comparable (none+copy): configs differ beyond model.dtype" in text
  # a run whose name says bf16 but trained in f32 is not a bf16 run
  infos[SWEEP[1]] = _info(SWEEP[1], "float32")
  (row,) = calibration.calibration_rows(records, infos, SWEEP[:2])
  assert "trained in model.dtype float32, not bfloat16" in row.problem
  # provenance and logging are not part of the comparison
  infos[SWEEP[1]] = _info(SWEEP[1], "bfloat16", provenance={"git": "x"}, log_every=7)
  assert calibration.calibration_rows(records, infos, SWEEP[:2])[0].problem is None


def test_a_convergence_difference_is_named_in_the_verdict():
  records, infos = _table([(SWEEP[0], [0.5, 0.6, 0.7]), (SWEEP[1], [0.5, 0.6, 0.7])])
  records = [{**r, "converged": False} if r["run"] == SWEEP[1] and r["seed"] == 2 else r
             for r in records]
  text = calibration.markdown(records, infos, SWEEP[:2])
  assert "convergence differs: none+copy (f32 3/3, bf16 2/3 seeds converged)" in text
  assert re.search(r"\| 0\.60 \[[^|]*\] † \|", text)


def _curve(seeds, scale=1.0):
  steps = [100, 200, 300]
  return [{"seed": s, "step": steps, "loss": [scale / t for t in steps],
           "token_accuracy": [0.5, 0.8, 1.0], "valid_step": [300], "valid_exact_match": [1.0]}
          for s in seeds]


def test_the_figure_overlays_both_dtypes_per_pair_a_line_per_seed():
  fig = calibration.curves_figure({
      "none+copy": {"float32": _curve((0, 1, 2)), "bfloat16": _curve((0, 1, 2), 1.1)},
      "t5+copy": {"float32": _curve((0, 1, 2))}})
  axes = fig.axes[:6]  # 3 rows (loss, accuracy, validation) x 2 pairs
  assert len(fig.axes) == 6
  gids = {line.get_gid() for ax in axes for line in ax.lines}
  for dtype in ("float32", "bfloat16"):
    for seed in (0, 1, 2):
      for key in ("loss", "token_accuracy", "valid_exact_match"):
        assert f"none+copy/{dtype}/seed{seed}/{key}" in gids
  assert not any(g.startswith("t5+copy/bfloat16") for g in gids)
  loss = next(ax for ax in axes if any(l.get_gid() == "none+copy/float32/seed0/loss"
                                       for l in ax.lines))
  assert loss.get_yscale() == "log"
  line = next(l for l in loss.lines if l.get_gid() == "none+copy/bfloat16/seed1/loss")
  npt.assert_allclose(line.get_ydata(), [1.1 / 100, 1.1 / 200, 1.1 / 300])
  texts = [t.get_text() for ax in fig.axes for t in ax.texts]
  assert "bfloat16: not run" in texts


def test_a_stored_table_renders_its_calibration_and_draws_the_curves(tmp_path):
  root = tmp_path / "results"
  table = str(root / "precision")
  store.write_table_meta(table, "configs/ablations/precision.py", SWEEP)
  assert "| none+copy | pooled (L, 2L] | not run | not run |" in results.render(str(root))
  for run, dtype in ((SWEEP[0], "float32"), (SWEEP[1], "bfloat16")):
    workdir = tmp_path / run
    workdir.mkdir()
    (workdir / "config.json").write_text(json.dumps(_info(run, dtype)["config"]))
    lines = [{"step": step, "kind": "train", "seed": seed, "loss": 1.0 / step,
              "token_accuracy": 0.9, "steps_per_sec": 2.0}
             for step in (100, 200) for seed in (0, 1, 2)]
    (workdir / "metrics.jsonl").write_text("".join(json.dumps(l) + "\n" for l in lines))
    store.write_run(table, run, _records(run, [0.5, 0.6, 0.7]), workdir=str(workdir),
                    eval_seconds=1.0)
  assert results.write_table_report(table)
  assert os.path.exists(os.path.join(table, calibration.FIGURE_FILES["curves"]))
  text = results.render(str(root))
  assert "2 of 4 runs stored" in text
  assert re.search(r"\| none\+copy \| pooled \(L, 2L\] \| 0\.60 \[.*\] \| 0\.60 \[.*\] \| yes \|",
                   text)
  assert "| t5+copy | pooled (L, 2L] | not run | not run |" in text
  assert f"`results/precision/{calibration.FIGURE_FILES['curves']}`" in text
  infos = results.run_infos(table)
  npt.assert_allclose(np.array(infos[SWEEP[1]]["training_curve"][2]["loss"]), [0.01, 0.005])
