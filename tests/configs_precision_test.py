"""configs/ablations/precision.py: six runs, pairs identical but model.dtype, trained not copied."""

import pathlib

from relpos_jax import workdir
from relpos_jax.experiments import precision_calibration as calibration
from relpos_jax.experiments import store
from relpos_jax.experiments import sweep_spec

ROOT = pathlib.Path(__file__).resolve().parents[1]
CONFIGS = ROOT / "configs" / "ablations"
SCHEMES = ("none", "t5", "alibi")


def _runs(spec):
  """run name -> config.json data of every run of a sweep config file."""
  return {name: workdir.config_json(config)
          for name, config in sweep_spec.expand(*sweep_spec.load_sweep(spec))}


def test_six_runs_three_schemes_in_two_dtypes():
  runs = _runs(str(CONFIGS / "precision.py"))
  assert list(runs) == [f"{s}+copy+dtype={d}" for s in SCHEMES for d in ("float32", "bfloat16")]
  assert all(c["num_seeds"] == 3 and c["data"]["task"] == "copy" for c in runs.values())
  assert list(calibration.pairs(list(runs))) == [f"{s}+copy" for s in SCHEMES]


def test_each_pair_is_identical_but_the_dtype():
  for arg in ("", ":smoke"):
    runs = _runs(str(CONFIGS / "precision.py") + arg)
    for scheme in SCHEMES:
      f32, bf16 = runs[f"{scheme}+copy+dtype=float32"], runs[f"{scheme}+copy+dtype=bfloat16"]
      assert (f32["model"]["dtype"], bf16["model"]["dtype"]) == ("float32", "bfloat16")
      assert {**bf16, "model": {**bf16["model"], "dtype": "float32"}} == f32, (arg, scheme)
      assert f32["model"]["position"]["name"] == scheme
      assert calibration.config_problem({"run": "a", "config": f32},
                                        {"run": "b", "config": bf16}) is None


def test_the_f32_arm_is_kazemnejads_run_validated_at_every_checkpoint():
  ours = _runs(str(CONFIGS / "precision.py"))
  theirs = _runs(str(CONFIGS / "kazemnejad.py"))
  for scheme in SCHEMES:
    f32, kazemnejad = ours[f"{scheme}+copy+dtype=float32"], theirs[f"{scheme}+copy"]
    assert (f32["eval_every"], kazemnejad["eval_every"]) == (1000, 6000)
    assert f32["eval_every"] == f32["checkpoint_every"]
    assert {**f32, "eval_every": kazemnejad["eval_every"]} == kazemnejad, scheme
    # ... so the sweep trains it (with its curve) rather than copying kazemnejad's records
    assert store.run_identity(f32) != store.run_identity(kazemnejad)
    assert store.find_identical_run(str(ROOT / "results"), f32,
                                    exclude=str(ROOT / "results" / "precision")) is None
    # (which it would copy, were the configs identical)
    found = store.find_identical_run(str(ROOT / "results"), {**f32, "eval_every": 6000})
    assert found is not None and found[1] == f"{scheme}+copy"
