"""LM evaluation: shared eval bytes, bits per byte by hand, sliding windows, n/a, the report."""

import math
import os

import jax
import jax.numpy as jnp
import numpy as np
import numpy.testing as npt
import pytest

from relpos_jax import architectures
from relpos_jax import lm_eval
from relpos_jax import positions
from relpos_jax.data import corpus as corpus_lib
from relpos_jax.data import lm
from relpos_jax.experiments import lm_figures
from relpos_jax.experiments import lm_report
from relpos_jax.experiments import stats
from relpos_jax.data.vocab import NUM_SPECIAL, PAD_ID

import cli_harness  # pytest puts tests/ on the path

L = 4


def _main(*args):
  """`python *args` (train.py or eval.py), forked by cli_harness; returns its stdout."""
  proc = cli_harness.run(args, env={**os.environ, "JAX_PLATFORMS": "cpu"})
  assert proc.returncode == 0, proc.stderr[-3000:]
  return proc.stdout


def _dataset(sliding_stride=0, eval_bytes=64):
  """An LMDataset over random byte ids (no corpus read)."""
  rng = np.random.default_rng(0)
  splits = {s: (rng.integers(0, 256, size=n) + NUM_SPECIAL).astype(np.uint16)
            for s, n in (("train", 500), ("validation", 40), ("test", 100))}
  return lm.LMDataset(corpus_lib.Corpus("toy", splits, {}), seed=0, train_length=L,
                      eval_multiples=(1, 2, 4), eval_bytes=eval_bytes, valid_bytes=32,
                      sliding_stride=sliding_stride)


def _model(scheme="alibi", **position):
  config = architectures.default_config("decoder_only")
  config.update(d_model=8, num_heads=2, head_dim=4, d_ff=16, num_layers=1)
  config.position = positions.default_config(scheme)
  config.position.update(position)
  model = architectures.make_model(config, vocab_size=NUM_SPECIAL + 256)
  params = model.init(jax.random.PRNGKey(0), jnp.zeros((1, 1), jnp.int32),
                      jnp.ones((1, 4), jnp.int32))["params"]
  return model, params


@pytest.mark.parametrize("context", [4, 8, 16])
def test_nonoverlapping_windows_cover_the_same_bytes_for_every_context(context):
  ids = np.arange(100)
  span = lm.eval_span(len(ids), 64, 16)
  windows = lm_eval.nonoverlapping_windows(ids, context, span)
  assert windows.shape == (64 // context, context)
  npt.assert_array_equal(windows.reshape(-1), ids[:64])


@pytest.mark.parametrize("context,stride", [(4, 2), (8, 4), (16, 4), (16, 16)])
def test_sliding_windows_score_each_byte_of_the_span_once(context, stride):
  ids = np.arange(100)
  windows, first = lm_eval.sliding_windows(ids, context, stride, 64)
  scored = np.concatenate([w[f:] for w, f in zip(windows, first)])
  npt.assert_array_equal(scored, ids[:64])
  assert (first[1:] == context - stride).all() and first[0] == 0


def test_a_stub_models_bits_per_byte_and_position_loss():
  # loss of the id at window position p = p + 1 nats: mean over a window of C is (C + 1) / 2.
  def stub(windows_BxC):
    return np.broadcast_to(np.arange(1, windows_BxC.shape[1] + 1, dtype=np.float32),
                           windows_BxC.shape)
  ids = np.arange(64)
  record = lm_eval.context_record(stub, ids, 8, 64, rows=3)  # 8 windows in chunks of 3
  assert record["num_windows"] == 8 and record["eval_bytes"] == 64
  npt.assert_allclose(record["loss"], 4.5)
  npt.assert_allclose(record["bits_per_byte"], 4.5 / math.log(2))
  npt.assert_allclose(record["perplexity"], math.exp(4.5))
  npt.assert_allclose(record["position_loss"], np.arange(1, 9))
  # Sliding, stride 2: the first window scores positions 0..7 (mean 4.5), the 28 others
  # positions 6 and 7 (losses 7 and 8).
  sliding = lm_eval.context_record(stub, ids, 8, 64, rows=5, stride=2)
  npt.assert_allclose(sliding["loss"], (8 * 4.5 + 28 * (7 + 8)) / 64)
  assert sliding["position_loss"] is None and sliding["mode"] == "sliding"


def test_bits_per_byte_equals_a_hand_computation_on_a_tiny_model():
  model, params = _model()
  ds = _dataset()
  records = lm_eval.evaluate_contexts(model, params, ds, contexts=[4, 8], num_bytes=40,
                                      budget_mib=1e-6)  # 1 window per pass
  ids = ds.split("test")[:40].astype(np.int32)  # the span: 40 // 8 * 8
  for record, C in zip(records, (4, 8)):
    total = 0.0
    for w in ids.reshape(-1, C):
      logits = np.asarray(model.apply({"params": params}, np.full((1, 1), PAD_ID, np.int32),
                                      w[None]), np.float64)[0]
      shifted = logits - logits.max(-1, keepdims=True)
      log_probs = shifted - np.log(np.exp(shifted).sum(-1, keepdims=True))
      total += -log_probs[np.arange(C), w].sum()
    assert record["context"] == C and record["error"] is None
    npt.assert_allclose(record["bits_per_byte"], total / 40 / math.log(2), rtol=1e-5)
  # Batch chunking does not change the numbers.
  again = lm_eval.evaluate_contexts(model, params, ds, contexts=[4, 8], num_bytes=40)
  npt.assert_allclose([r["loss"] for r in again], [r["loss"] for r in records], rtol=1e-5)


def test_learned_positions_beyond_their_table_read_na():
  model, params = _model("learned", max_len=L + 1)
  records = lm_eval.evaluate_contexts(model, params, _dataset())
  assert [r["context"] for r in records] == [4, 8, 16]
  assert records[0]["error"] is None and np.isfinite(records[0]["bits_per_byte"])
  for r in records[1:]:
    assert "learned positions" in r["error"] and math.isnan(r["bits_per_byte"])
  rows = [{**r, "run": "learned", "scheme": "learned", "train_length": L, "seed": 0}
          for r in records]
  table = lm_report.markdown(rows)
  assert "| learned | " in table and table.count("n/a") == 2 + 1  # 2 cells + the legend


def test_rows_per_pass_follows_the_attention_budget():
  model, _ = _model()
  # 2 heads x 17^2 x 4 bytes = 2,312 bytes per window of 16.
  assert lm_eval.rows_per_pass(model, 16, budget_mib=2312 * 10 / 2**20) == 10
  assert lm_eval.rows_per_pass(model, 16, budget_mib=1e-9) == 1
  assert lm_eval.rows_per_pass(model, 16, budget_mib=1e6) == lm_eval.MAX_IDS_PER_PASS // 16


def test_every_context_and_mode_is_scored_on_the_same_test_blocks():
  # A stub whose loss at an id is the id's value: a block's mean depends only on which
  # bytes it holds, so equal blocks at every C and in both modes mean the same bytes.
  def stub(windows_BxC):
    return windows_BxC.astype(np.float32)
  ids = np.arange(64)
  want = (np.arange(4) * 16 + 7.5) / math.log(2)  # blocks of 16: ids 16b..16b+15
  for C, stride in ((4, 0), (8, 0), (16, 0), (8, 2), (16, 4)):
    record = lm_eval.context_record(stub, ids, C, 64, rows=3, stride=stride, block=16)
    assert record["block_bytes"] == 16, (C, stride)
    npt.assert_allclose(record["block_bits_per_byte"], want, err_msg=f"C={C} S={stride}")
    npt.assert_allclose(np.mean(record["block_bits_per_byte"]), record["bits_per_byte"])
  with pytest.raises(ValueError, match="blocks of 24"):
    lm_eval.context_record(stub, ids, 8, 64, rows=3, block=24)
  model, params = _model()
  records = lm_eval.evaluate_contexts(model, params, _dataset(), contexts=[4, 8], num_bytes=40)
  assert [(r["block_bytes"], len(r["block_bits_per_byte"])) for r in records] == [(8, 5)] * 2


def test_report_files_and_interval(tmp_path):
  rows = []
  for seed, bpb in enumerate([1.0, 1.2, 1.4]):
    for C in (4, 8):
      rows.append({"run": "a", "scheme": "alibi", "mode": "nonoverlapping", "context": C,
                   "train_length": 4, "seed": seed, "bits_per_byte": bpb, "perplexity": 2.0,
                   "eval_bytes": 64, "stride": 0, "error": None,
                   "position_loss": [bpb] * C})
  # Without test blocks the interval is the seeds' alone: the t interval of 3 seed means
  # (the bootstrap's standard error, so equal within its resampling noise).
  got = lm_report.bpb_interval(rows[::2])
  npt.assert_allclose(got.mean, 1.2)
  npt.assert_allclose(got.hi - got.mean, 4.302653 * 0.2 / math.sqrt(3), rtol=0.05)  # t_{.975, 2}
  paths = lm_report.write_report(rows, str(tmp_path))
  assert all(os.path.getsize(p) > 0 for p in paths.values())
  cell = stats.format_interval(got, digits=3)
  assert f"| a | {cell} | {cell} |" in open(paths["tables"]).read()
  # Blocks bring the test text's noise in: seeds that agree exactly still leave the
  # finite text's uncertainty.
  same = [{**r, "bits_per_byte": 1.2, "block_bits_per_byte": [0.9, 1.5, 1.0, 1.4]}
          for r in rows[::2]]
  alone = lm_report.bpb_interval([{**r, "block_bits_per_byte": None} for r in same])
  blocked = lm_report.bpb_interval(same)
  npt.assert_allclose([alone.lo, alone.hi, blocked.mean], [1.2, 1.2, 1.2])
  assert blocked.lo < 1.1 and blocked.hi > 1.3


def test_figures_put_the_trained_runs_and_each_kind_of_eval_variant_in_panels(tmp_path):
  runs = ["none", "none@length_scaled", "rope", "rope@dynamic_ntk", "rope@length_scaled",
          "rope@pi", "rope@yarn", "alibi", "alibi@length_scaled"]
  panels = lm_figures.figure_panels(runs)
  assert [(runs, faint) for _, runs, faint in panels] == [
      (["none", "rope", "alibi"], []),
      (["none@length_scaled", "rope@length_scaled", "alibi@length_scaled"], []),
      (["rope@dynamic_ntk", "rope@pi", "rope@yarn"], ["rope"])]
  assert "@length_scaled" in panels[1][0] and "faint: rope as trained" in panels[2][0]
  assert lm_figures.figure_panels(["a"]) == [("as trained", ["a"], [])]
  # A variant whose trained run is not stored is drawn without a faint reference.
  assert lm_figures.figure_panels(["rope@yarn"]) == [("rope at eval: @yarn", ["rope@yarn"], [])]
  rows = [{"run": run, "scheme": run.partition("@")[0], "mode": "nonoverlapping",
           "context": C, "train_length": 4, "seed": seed, "bits_per_byte": 1.0 + seed / 10,
           "perplexity": 2.0, "eval_bytes": 64, "stride": 0, "error": None,
           "position_loss": [0.7] * C}
          for run in runs for C in (4, 8) for seed in range(2)]
  for key in ("plot", "position_plot"):
    path = lm_report.write_report(rows, str(tmp_path))[key]
    assert os.path.getsize(path) > 0


@pytest.mark.slow
def test_train_and_eval_end_to_end(tmp_path):
  workdir = str(tmp_path / "lm")
  _main("train.py", "--config", "configs/lm.py:scheme=t5,smoke", "--workdir", workdir)
  out = _main("eval.py", "--workdir", workdir)
  assert "| lm | " in out
  for name in [*lm_report.REPORT_FILES.values(), "t5_bias.png"]:  # and the scheme's figure
    assert os.path.exists(os.path.join(workdir, "eval", name)), name
  # Stored in a results/ table: records/<run>.jsonl, runs/<run>.json and the table's report.
  table = str(tmp_path / "results" / "lm_context")
  _main("eval.py", "--workdir", workdir, "--results_dir", table, "--allow_dirty")
  for name in ("records/lm.jsonl", "runs/lm.json", *lm_report.REPORT_FILES.values()):
    assert os.path.exists(os.path.join(table, name)), name
  # A corpus that differs from the run's manifest is refused in one line.
  config_path = os.path.join(workdir, "config.json")
  text = open(config_path).read().replace('"python_version": "', '"python_version": "0.')
  open(config_path, "w").write(text)
  bad = cli_harness.run(["eval.py", "--workdir", workdir],
                        env={**os.environ, "JAX_PLATFORMS": "cpu"})
  assert bad.returncode == 1 and "differs from the one this run was trained on" in bad.stderr


@pytest.mark.slow
def test_passkey_train_and_eval_end_to_end(tmp_path):
  workdir = str(tmp_path / "pk")
  _main("train.py", "--config", "configs/lm.py:scheme=learned,objective=passkey,smoke",
        "--workdir", workdir)
  out = _main("eval.py", "--workdir", workdir)
  assert "Passkey accuracy" in out and "| 192 (2×L) | n/a |" in out
  for name in lm_report.PASSKEY_FILES.values():
    assert os.path.exists(os.path.join(workdir, "eval", name)), name
