"""benchmarks/: the flags, the report of every table, HF T5's peer or its skip note.

The fast tests render made-up records and run the peer at a tiny shape (skipped
without torch); the end-to-end `--quick` run compiles every program and is slow.
Speed is reported by the benchmark (benchmarks/RESULTS.md), never asserted here.
"""

import ast
import dataclasses
import importlib
import json
import pathlib
import sys

from absl import app
from absl import flags
import numpy as np
import pytest

from benchmarks import peers
from benchmarks import report
from benchmarks import run
from benchmarks import schemes

TINY = schemes.Shape(d_model=16, num_heads=2, head_dim=8, d_ff=32, num_encoder_layers=1,
                     num_decoder_layers=1, vocab_size=16)


def _settings(*argv: str) -> run.Settings:
  fv = flags.FlagValues()
  run.define_flags(fv)
  fv(["bench", *argv])
  return run.settings_from_flags(fv)


def _header(text, title):
  """The column names of the markdown table that follows `title`."""
  after = text[text.index(title):]
  line = next(l for l in after.splitlines() if l.startswith("| "))
  return [c.strip() for c in line.strip("|").split("|")]


def test_flags_spell_the_settings():
  s = _settings("--schemes=none,t5", "--lengths=64", "--naive_shaw=0", "--d_model=32")
  assert (s.schemes, s.decode_schemes, s.lengths, s.naive_shaw) == (
      ("none", "t5"), ("none", "t5"), (64,), False)
  assert s.shape.d_model == 32 and s.parts == run.PARTS and s.shape.dtype == "float32"
  assert _settings("--dtype=bfloat16").shape.dtype == "bfloat16"
  assert schemes.make_model(_settings("--dtype=bfloat16").shape, "t5", 8).dtype == "bfloat16"
  default = _settings()
  assert default.shape == schemes.Shape() and default.batch_at(1024) == 4
  quick = _settings("--quick", "--runs=3", "--parts=peers")
  assert quick.shape.d_model == 16 and quick.lengths == (8,) and quick.runs == 3
  assert quick.parts == ("peers",)
  assert default.peer_dtypes == ("float32", "bfloat16")
  assert _settings("--peer_dtypes=bfloat16").peer_dtypes == ("bfloat16",)
  for bad in ("--schemes=nope", "--parts=schemes,nope", "--lengths=x", "--peer_dtypes=float16"):
    with pytest.raises(app.UsageError):
      _settings(bad)
  assert run.measuring_argv(["--out", "a.md", "--quick", "--json=b", "--lengths=8"]) == [
      "--quick", "--lengths=8"]


def test_flop_counts_match_the_reference_shape():
  """6 × matmul params × tokens plus attention: about 9.5e10 FLOP per DEFAULT step."""
  flops = schemes.train_flops(schemes.Shape(), 64, 64, 64)
  assert 9.4e10 < flops < 9.6e10


def _records(peer) -> dict:
  """Made-up records of a run of every part at L = 8 and 16."""
  settings = run.Settings(schemes=("none", "shaw", "t5"), lengths=(8, 16), batch=4,
                          tokens_per_batch=32, shape=TINY, num_seeds=2)
  train = [{"scheme": s, "L": L, "batch": 4, "compile_s": 1.0, "temp_bytes": 2.0 ** 20 * m,
            "xla_flops": 2e6, "model_flops": 1e6, "seconds": 0.01 * m, "matmul_rate": 1e9}
           for L in (8, 16) for s, m in (("none", 1), ("shaw", 1.2), (schemes.NAIVE_SHAW, 3),
                                         ("t5", 1.1))]
  decode = [{"scheme": "none", "L": 8, "batch": 4, "steps": 8, "compile_s": 1.0,
             "cached_tok_s": 1000.0, "matmul_rate": 1e9, "bound_tok_s": 2000.0,
             "uncached_tok_s": 100.0, "uncached_compile_s": 2.0,
             "uncached_matmul_rate": 1e9}]
  seeds = [{"seeds": n, "seconds": 0.01 * n, "matmul_rate": 1e9, "shape": "4x8"}
           for n in (1, 2)]
  info = dict(run.machine(), load_end="0.00 0.00 0.00")
  return {"argv": [], "settings": dataclasses.asdict(settings), "date": "today",
          "info": info, "train": train, "decode": decode, "seeds": seeds, "peers": peer,
          "matmul_rates": [1e9, 2e9], "seconds": 60.0}


PEER = {"scheme": "t5", "L": 8, "batch": 4, "new_tokens": 8, "torch": "2.13.0",
        "transformers": "5.0", "torch_threads": "2", "torch_interop_threads": "2",
        "train_runs": 3, "decode_runs": 3, "ours_train_s": [0.5, 0.4, 0.6],
        "theirs_train_s": [1.0, 0.8, 1.2], "ours_decode_s": [0.032] * 3,
        "theirs_decode_s": [0.128] * 3}


def test_report_renders_every_table():
  text = report.render(_records(PEER))
  assert _header(text, "## Train step") == list(report.TRAIN_COLUMNS)
  assert _header(text, "## Greedy decoding") == list(report.DECODE_COLUMNS)
  assert _header(text, "## Several seeds") == list(report.SEEDS_COLUMNS)
  assert _header(text, report.PEERS_TITLE) == list(report.PEERS_COLUMNS)
  assert "| 16 | 4 | shaw | 12.0 | 1.20 |" in text
  assert "| train step ms (float32) | 500.0 | 1000.0 | 2.00× |" in text
  assert "| cached decode tok/s (float32) | 1000 | 250 | 4.00× |" in text
  assert "✅ holds: train step, shaw, L=8: ≤ 1.5× none: **1.20×**" in text
  assert "Shaw peak temporary memory, L=16: ≤ 2× none: **1.20×; the naive gather form: 3.00×" \
      in text
  assert "## Machine" in text and "torch 2.13.0" in text and "docs/performance.md" in text
  # Ours takes half HF's step time (0.50× ≤ 1.2×) and decodes 4× as fast (≥ 2×).
  assert "✅ holds: train step (float32), L=8: ≤ 1.2× HF T5's float32 step time: **0.50×**" \
      in text
  assert "✅ holds: cached decoding (float32), 8 new tokens: ≥ 2× HF T5's generate: **4.00×**" \
      in text


# A record of #52's peers part: ours in both dtypes beside HF's float32 step.
PEER_BOTH = dict(PEER, ours_dtypes=["float32", "bfloat16"],
                 ours_train_s={"float32": [0.5, 0.4, 0.6], "bfloat16": [0.9, 0.9, 0.9]},
                 ours_decode_s={"float32": [0.032] * 3, "bfloat16": [0.016] * 3})

# A made-up record of the precision part (benchmarks/mixed_precision.py).
PRECISION = {
    "auto": {"auto": "bfloat16", "reason": "CPU with AMX"}, "scheme": "t5", "L": 8,
    "batch": 4, "seeds_config": "configs/ablations/kazemnejad.py:scheme=t5", "num_seeds": 3,
    "programs": [
        {"program": "default", "runs": 3, "compile_s": {},
         "seconds": {"float32": [1.0, 1.2, 1.1], "bfloat16": [0.4, 0.45, 0.5]},
         "dots": {"float32": {"f32 x f32": 10}, "bfloat16": {"bf16 x bf16": 9, "f32 x f32": 1,
                                                             "converted": 1}}},
        {"program": "seeds", "runs": 3, "compile_s": {}, "batch": "3x64x20",
         "seconds": {"float32": [0.3] * 3, "bfloat16": [0.24] * 3},
         "dots": {"float32": {}, "bfloat16": {}}},
        {"program": "decode", "runs": 3, "compile_s": {}, "tokens": 32,
         "seconds": {"float32": [0.032] * 3, "bfloat16": [0.016] * 3},
         "dots": {"float32": {}, "bfloat16": {"bf16 x bf16": 4}}}]}


def test_report_of_both_dtypes_beside_the_peer_and_the_precision_part():
  text = report.render(dict(_records(PEER_BOTH), precision=PRECISION))
  assert "| train step ms (bfloat16) | 900.0 | 1000.0 | 1.11× |" in text
  assert "| cached decode tok/s (bfloat16) | 2000 | 250 | 8.00× |" in text
  # bf16 takes 0.90× HF's float32 step (> 0.8×) and decodes 8× as fast (≥ 1.5×).
  assert "❌ missed: train step (bfloat16), L=8: ≤ 0.8× HF T5's float32 step time: **0.90×**" \
      in text
  assert "✅ holds: cached decoding (bfloat16), 8 new tokens: ≥ 1.5× HF T5's generate: " \
      "**8.00×**" in text
  assert "✅ holds: train step (float32), L=8: ≤ 1.2× HF T5's float32 step time" in text
  assert _header(text, report.PRECISION_TITLE) == list(report.PRECISION_COLUMNS)
  # Medians 0.45 s / 1.1 s = 0.41× holds; 0.24 / 0.3 = 0.80× misses.
  assert ("| encoder-decoder train step at the Setup's shape, `t5`, L=8, batch 4 | 4x8+8 | "
          "1100.0 ms | 450.0 ms | 0.41× | 9 of 10 | 1 |") in text
  assert ("| `configs/ablations/kazemnejad.py:scheme=t5`, 3 seeds vmapped | 3x64x20 | 300.0 ms "
          "| 240.0 ms | 0.80× | — | — |") in text
  assert "| 4 | 1000 tok/s | 2000 tok/s | 0.50× | 4 of 4 | 0 |" in text
  assert "✅ holds: bfloat16 train step ≤ 0.5× the float32 one, encoder-decoder" in text
  assert ("❌ missed: bfloat16 train step ≤ 0.5× the float32 one, "
          "`configs/ablations/kazemnejad.py:scheme=t5`, 3 seeds vmapped: **0.80×**") in text
  assert "`model.dtype=auto` here: bfloat16 (CPU with AMX)" in text


@pytest.fixture
def without_torch(monkeypatch):
  """`benchmarks.peers` as imported where torch and transformers are not installed."""
  monkeypatch.setitem(sys.modules, "torch", None)  # `import torch` raises ImportError
  monkeypatch.setitem(sys.modules, "transformers", None)
  importlib.reload(peers)
  yield
  monkeypatch.undo()
  importlib.reload(peers)


def test_peers_are_skipped_with_a_note_without_torch(without_torch):
  assert peers.IMPORT_ERROR and "torch" in peers.IMPORT_ERROR
  results = run.measure(_settings("--parts=peers"), log=lambda msg: None)
  assert results["peers"] == {"skipped": peers.IMPORT_ERROR}
  text = report.render(results)
  assert f"## {report.PEERS_TITLE}\n\nSkipped: torch and transformers are not importable" in text
  assert "requirements-peers.txt" in text and "## Train step" not in text


def test_runs_alternate():
  calls = []
  ours, theirs = peers.interleave(lambda: calls.append("ours"), lambda: calls.append("theirs"),
                                  runs=3, warmup=1)
  assert calls == ["ours", "theirs"] * 4 and len(ours) == len(theirs) == 3


def test_peer_at_a_tiny_shape():
  torch = pytest.importorskip("torch")
  pytest.importorskip("transformers")
  threads = torch.get_num_threads()
  torch.set_num_threads(1)  # tiny ops; spares a busy test machine OpenMP's spin-waits
  try:
    _check_peer()
  finally:
    torch.set_num_threads(threads)


def _check_peer():
  config = peers.t5_config(TINY)
  assert (config.d_kv, config.num_layers, config.relative_attention_num_buckets,
          config.relative_attention_max_distance, config.is_gated_act) == (8, 1, 32, 128, False)
  rng = np.random.default_rng(0)
  x, y = (schemes.random_tokens(rng, TINY, 2, 6) for _ in range(2))
  step = peers.hf_train_step(TINY, x, y)
  losses = [step() for _ in range(3)]
  assert np.isfinite(losses).all() and losses[-1] < losses[0]  # it trains
  assert tuple(peers.hf_decode(TINY, x)().shape) == (2, 7)  # start token + L new ones


@pytest.mark.slow
def test_quick_run_writes_every_table(tmp_path):
  out = tmp_path / "results.md"
  results = run.measure(_settings("--quick"), ["--quick"], log=lambda msg: None)
  text = run.write(results, str(out), str(tmp_path / "results.json"))
  assert out.read_text() == text
  assert report.render(json.loads((tmp_path / "results.json").read_text())) == text
  assert _header(text, "## Train step") == list(report.TRAIN_COLUMNS)
  assert _header(text, "## Greedy decoding") == list(report.DECODE_COLUMNS)
  assert _header(text, "## Several seeds") == list(report.SEEDS_COLUMNS)
  for row in ("| 8 | 4 | none |", "| 8 | 4 | shaw |", f"| 8 | 4 | {schemes.NAIVE_SHAW} |"):
    assert row in text  # the naive Shaw form is compiled for its memory figure
  assert "## Machine" in text and "## Targets" in text and report.PEERS_TITLE in text
  if peers.IMPORT_ERROR is None:
    assert _header(text, report.PEERS_TITLE) == list(report.PEERS_COLUMNS)


@pytest.mark.parametrize("packages, importer", [
    (("torch", "transformers"), "benchmarks/peers.py"),
    (("haiku", "randomized_positional_encodings"), "benchmarks/peers_rpe.py")])
def test_only_the_peer_modules_import_the_peers(packages, importer):
  """The peers' libraries (torch, transformers; dm-haiku and DeepMind's RPE code) stay an
  optional extra of the benchmark, each imported by its one module."""
  root = pathlib.Path(__file__).resolve().parents[1]
  importers = set()
  for path in [*root.glob("relpos_jax/**/*.py"), *root.glob("benchmarks/*.py"),
               *root.glob("*.py"), *root.glob("configs/**/*.py")]:
    for node in ast.walk(ast.parse(path.read_text())):
      names = ([a.name for a in node.names] if isinstance(node, ast.Import) else
               [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
      if any(n.split(".")[0] in packages for n in names):
        importers.add(path.relative_to(root).as_posix())
  assert importers == {importer}
