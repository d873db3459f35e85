"""Every figure writes a real PNG; the T5 plot finds its tables in both layouts."""

import os

import ml_collections
import numpy as np
import pytest

from relpos_jax import plots
from relpos_jax import positions

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def _assert_png(path):
  with open(path, "rb") as f:
    head = f.read(8)
  assert head == PNG_SIGNATURE
  assert os.path.getsize(path) > 5000  # axes, curves and text, not an empty canvas


def _records():
  rng = np.random.default_rng(0)
  records = []
  for run, seeds in (("t5", 3), ("learned", 1)):
    for seed in range(seeds):
      for length in (5, 10, 20, 40, 80):
        exact = float(np.clip(1.2 - length / 30 + rng.normal(0, 0.05), 0, 1))
        if run == "learned" and length == 80:
          exact = float("nan")  # n/a: breaks the curve
        records.append({"run": run, "scheme": run, "task": "copy", "seed": seed,
                        "length": length, "max_train_length": 20, "exact_match": exact})
  return records


def test_accuracy_vs_length_writes_png(tmp_path):
  path = str(tmp_path / "new_dir" / "acc.png")
  assert plots.accuracy_vs_length(_records(), path) == path
  _assert_png(path)


def _t5_config(share=True):
  config = ml_collections.ConfigDict({"model": {"position": positions.default_config("t5")}})
  config.model.position.share_across_layers = share
  return config


def _t5_params(share, num_buckets=32, num_heads=2, layers=2):
  rng = np.random.default_rng(1)
  bias = lambda: {"rel_bias": rng.normal(0, 0.1, (num_buckets, num_heads))}
  names = ["position"] if share else [f"position_{i}" for i in range(layers)]
  stack = lambda: {**{n: bias() for n in names}, "layer_0": {"mlp": {}}}
  return {"encoder": stack(), "decoder": stack(), "embedding": {"embedding": np.zeros((5, 4))}}


@pytest.mark.parametrize("share", [True, False])
def test_learned_bias_curves(tmp_path, share):
  params = _t5_params(share)
  found = plots.t5_bias_tables(params)
  assert list(found) == ["encoder", "decoder"]
  assert list(found["encoder"]) == (["position"] if share else ["position_0", "position_1"])
  path = str(tmp_path / "bias.png")
  plots.learned_bias_curves(params, _t5_config(share), path, max_train_length=20, seed=0)
  _assert_png(path)


def test_learned_bias_curves_refuses_params_without_t5():
  config = ml_collections.ConfigDict({"model": {"position": positions.default_config("shaw")}})
  with pytest.raises(ValueError, match="no T5"):
    plots.learned_bias_curves({"encoder": {"layer_0": {}}}, config, "unused.png")


def test_encoding_heatmap(tmp_path):
  path = str(tmp_path / "sinusoid.png")
  plots.encoding_heatmap(path, num_positions=64, dim=16, max_train_length=20)
  _assert_png(path)


def test_plotting_leaves_the_pyplot_backend_alone(tmp_path):
  import matplotlib  # pylint: disable=g-import-not-at-top
  before = matplotlib.rcParams["backend"]
  plots.encoding_heatmap(str(tmp_path / "x.png"), num_positions=8, dim=4)
  assert matplotlib.rcParams["backend"] == before
