"""benchmarks/peers_rpe.py: the comparison with DeepMind's randomized_positional_encodings.

Fast tests: the skip records (no checkout, not a checkout, haiku missing) and
their notes, the config of the matching size, and the rendering of a made-up
record. The real measurement needs haiku and a checkout of their repository at
RPE_CHECKOUT (CI has neither, so it skips there). Speed is reported by the
benchmark, never asserted here.
"""

import importlib
import os
import pathlib
import sys

from absl import flags
import numpy as np
import pytest

from benchmarks import peers_rpe
from benchmarks import report
from benchmarks import run
from benchmarks import schemes
from relpos_jax import train_lib
from relpos_jax.data import pipeline

# A checkout made by `git archive` of their repository (see docs/performance.md).
RPE_CHECKOUT = "/tmp/rpe_src/randomized_positional_encodings"


def _settings(*argv: str) -> run.Settings:
  fv = flags.FlagValues()
  run.define_flags(fv)
  fv(["bench", *argv])
  return run.settings_from_flags(fv)


def _results(rpe_repo: str = "") -> dict:
  """A run of the rpe part alone (nothing compiled when it is skipped)."""
  return run.measure(_settings("--parts=rpe", f"--rpe_repo={rpe_repo}"), ["--parts=rpe"],
                     log=lambda msg: None)


def test_flags():
  s = _settings()
  assert "rpe" in s.parts and (s.rpe_runs, s.rpe_seeds, s.rpe_size_arg) == (20, 3, "")
  quick = _settings("--quick")
  assert (quick.rpe_runs, quick.rpe_seeds, quick.rpe_size_arg) == (1, 2, "smoke")
  assert _settings("--quick", "--rpe_size_arg=").rpe_size_arg == ""


def test_the_checkout_defaults_to_the_environment(monkeypatch):
  monkeypatch.setenv("RPE_REPO", "/somewhere/rpe")
  assert _settings().rpe_repo == "/somewhere/rpe"
  assert _settings("--rpe_repo=/else").rpe_repo == "/else"


def test_skipped_with_a_note_without_a_checkout(tmp_path, monkeypatch):
  # As where dm-haiku is installed: the missing checkout is what the note names.
  monkeypatch.setattr(peers_rpe, "IMPORT_ERROR", None)
  results = _results("")
  assert "no checkout" in results["rpe"]["skipped"]
  text = report.render(results)
  assert f"## {report.RPE_TITLE}\n\nSkipped: no checkout of their repository" in text
  assert "--parts=rpe --rpe_repo PATH" in text and "requirements-peers.txt" in text
  assert "## Targets" not in text and "## Train step" not in text
  record = peers_rpe.measure(str(tmp_path), num_seeds=2, runs=1)
  assert "is not a checkout" in record["skipped"]


@pytest.fixture
def without_haiku(monkeypatch):
  """`benchmarks.peers_rpe` as imported where dm-haiku is not installed."""
  monkeypatch.setitem(sys.modules, "haiku", None)  # `import haiku` raises ImportError
  importlib.reload(peers_rpe)
  yield
  monkeypatch.undo()
  importlib.reload(peers_rpe)


def test_skipped_with_a_note_without_haiku(without_haiku):
  assert peers_rpe.IMPORT_ERROR and "haiku" in peers_rpe.IMPORT_ERROR
  results = _results(RPE_CHECKOUT)  # the checkout is not even looked at
  assert results["rpe"] == {"skipped": f"dm-haiku is not importable here "
                                       f"({peers_rpe.IMPORT_ERROR})"}
  text = report.render(results)
  assert f"## {report.RPE_TITLE}\n\nSkipped: dm-haiku is not importable here" in text
  assert "make install-peers" in text


def test_a_checkout_of_any_name_is_importable_by_their_package_name(tmp_path):
  for name in (peers_rpe.PACKAGE, "checkout"):
    checkout = tmp_path / name
    checkout.mkdir()
    parent = pathlib.Path(peers_rpe.package_parent(str(checkout)))
    assert [p.name for p in parent.iterdir()] == [peers_rpe.PACKAGE]  # nothing else
    link = parent / peers_rpe.PACKAGE
    assert link.is_symlink() and link.resolve() == checkout.resolve()


def test_the_config_is_the_issues_size():
  spec = peers_rpe.PAIRS[0].spec()
  assert spec == "benchmarks/rpe_size.py:scheme=xl,randomized"
  assert peers_rpe.PAIRS[1].spec("smoke") == "benchmarks/rpe_size.py:scheme=sinusoidal,smoke"
  config = schemes.load_config(spec)
  m = config.model
  assert (m.arch, m.num_layers, m.d_model, m.num_heads, m.head_dim, m.d_ff, m.dropout_rate,
          m.position.name) == ("decoder_only", 4, 64, 4, 16, 256, 0.1, "xl")
  assert (config.batch_size, config.data.task, config.data.min_train_length,
          config.data.max_train_length) == (32, "copy", 1, 20)
  assert config.randomized.enabled and config.randomized.max_random_position == 2048
  assert not schemes.load_config(peers_rpe.PAIRS[1].spec()).randomized.enabled
  # The step-0 batch of the 3 seeds (what compile_seeds_steps times) is full width:
  # 20 input slots + SEP and 20 target tokens.
  datasets = [pipeline.make_dataset(seed=config.seed + i, **config.data) for i in range(3)]
  batch = train_lib.stacked_batch(datasets, 0, config.batch_size)
  assert (batch["inputs"].shape, batch["targets"].shape) == ((3, 32, 20), (3, 32, 21))


def _row(ours: str, theirs: str, one, n, their) -> dict:
  """A made-up pair of an rpe record (seconds)."""
  size = {"num_layers": 4, "d_model": 64, "num_heads": 4, "head_dim": 16, "d_ff": 256,
          "dropout": 0.1, "batch": 32, "L": 20, "max_random_position": 2048}
  return {"ours": ours, "theirs": theirs, "size": size, "ours_tokens": 41,
          "theirs_tokens": 40, "ours_1_s": one, "ours_n_s": n, "theirs_s": their}


RECORD = {"url": peers_rpe.URL, "repo": "/x", "commit": None,
          "commit_read": peers_rpe.COMMIT_READ, "haiku": "0.0.17", "task": "reverse_string",
          "config": peers_rpe.CONFIG, "size_arg": "", "num_seeds": 3, "runs": 3, "warmup": 2,
          "batches": 4,
          "pairs": [_row("xl+randomized", "NOISY_RELATIVE", [0.10, 0.12, 0.11],
                         [0.24, 0.30, 0.27], [0.18, 0.22, 0.20]),
                    _row("sinusoidal", "SIN_COS", [0.2, 0.2, 0.2], [0.6, 0.6, 0.6],
                         [0.25, 0.25, 0.25])]}


def test_report_of_a_made_up_record():
  f = report.rpe_figures(RECORD["pairs"][0], 3)
  np.testing.assert_allclose(
      [f["ours_1_s"], f["ours_n_s"], f["ours_per_seed_s"], f["theirs_s"], f["one_ratio"],
       f["per_seed_ratio"]], [0.11, 0.27, 0.09, 0.20, 0.55, 0.45])
  results = dict(_results(""), rpe=RECORD)
  text = report.render(results)
  header = next(l for l in text[text.index(report.RPE_TITLE):].splitlines()
                if l.startswith("| "))
  assert header == ("| this project | theirs | ours 1 seed ms | ours 3 seeds ms | "
                    "ours per seed ms | theirs ms | 1 seed ÷ theirs | per seed ÷ theirs |")
  assert ("| `xl+randomized` (float32) | `NOISY_RELATIVE` | 110.0 | 270.0 | 90.0 | 200.0 | 0.55× | "
          "0.45× |") in text
  assert "| `sinusoidal` (float32) | `SIN_COS` | 200.0 | 600.0 | 200.0 | 250.0 | 0.80× | 0.80× |" in text
  assert ("* ✅ holds: train step per seed (3 seeds vmapped, float32), xl+randomized, 41 tokens: "
          "≤ 0.6× the update of DeepMind's RPE code (NOISY_RELATIVE, 40 tokens): **0.45×**"
          "\n") in text
  missed = ("* ❌ missed: train step per seed (3 seeds vmapped, float32), sinusoidal, 41 tokens: "
            "≤ 0.6× the update of DeepMind's RPE code (SIN_COS, 40 tokens): **0.80×** "
            f"({report.BOUNDS['rpe']})\n")
  assert missed in text and "compute-bound on 2 cores" in missed
  assert "docs/performance.md" in report.BOUNDS["rpe"]
  assert "4 layers, d_model 64, 4 heads of 16, d_ff 256, dropout 0.1, batch 32, L = 20 " \
      "(40 tokens per row theirs, 41 ours)" in text
  assert f"follows commit {peers_rpe.COMMIT_READ[:12]}" in text and "dm-haiku 0.0.17" in text


@pytest.mark.slow
def test_a_tiny_real_measurement():
  """Both pairs at the smoke size (1 layer, d_model 16), one timed round."""
  if peers_rpe.IMPORT_ERROR:
    pytest.skip(f"dm-haiku is not installed ({peers_rpe.IMPORT_ERROR})")
  if not os.path.isdir(RPE_CHECKOUT):
    pytest.skip(f"no checkout of their repository at {RPE_CHECKOUT}")
  record = peers_rpe.measure(RPE_CHECKOUT, num_seeds=2, runs=1, size_arg="smoke",
                             log=lambda msg: None)
  assert "skipped" not in record, record.get("skipped")
  assert [(r["ours"], r["theirs"]) for r in record["pairs"]] == [
      ("xl+randomized", "NOISY_RELATIVE"), ("sinusoidal", "SIN_COS")]
  for row in record["pairs"]:
    assert (row["size"]["num_layers"], row["size"]["d_model"]) == (1, 16)
    assert (row["ours_tokens"], row["theirs_tokens"]) == (13, 12)  # L = 6
    assert len(row["theirs_s"]) == 1 and row["theirs_s"][0] > 0
    for key in ("ours_1_s", "ours_n_s"):
      assert list(row[key]) == ["float32"] and len(row[key]["float32"]) == 1
      assert row[key]["float32"][0] > 0
  assert record["pairs"][0]["theirs_params"] == {"noise_max_length": 2048}
  assert record["pairs"][1]["theirs_params"] == {}


def test_the_size_config_takes_a_dropout_for_both_sides():
  assert schemes.load_config("benchmarks/rpe_size.py:scheme=xl").model.dropout_rate == 0.1
  config = schemes.load_config("benchmarks/rpe_size.py:scheme=xl,randomized,dropout=0")
  assert config.model.dropout_rate == 0.0 and config.randomized.enabled
  with pytest.raises(ValueError, match="dropout"):
    schemes.load_config("benchmarks/rpe_size.py:dropout=x")
