"""`benchmarks/schemes.py --quick`: runs end to end and writes every table and figure.

Speed is reported by the benchmark (benchmarks/RESULTS.md), never asserted here.
"""

from benchmarks import schemes


def _header(text, title):
  """The column names of the markdown table that follows `title`."""
  after = text[text.index(title):]
  line = next(l for l in after.splitlines() if l.startswith("| "))
  return [c.strip() for c in line.strip("|").split("|")]


def test_quick_run_writes_every_table(tmp_path):
  out = tmp_path / "results.md"
  text = schemes.main(["--quick", f"--out={out}"])
  assert out.read_text() == text
  assert _header(text, "## Train step") == list(schemes.TRAIN_COLUMNS)
  assert _header(text, "## Greedy decoding") == list(schemes.DECODE_COLUMNS)
  assert _header(text, "## Several seeds") == list(schemes.SEEDS_COLUMNS)
  for needed in ("step ms", "× none", "% of matmul", "temp MiB", "mem × none", "compile s",
                 "cached tok/s", "uncached tok/s", "cached ÷ uncached", "% of bound"):
    assert needed in text
  for row in ("| 8 | 4 | none |", "| 8 | 4 | shaw |", f"| 8 | 4 | {schemes.NAIVE_SHAW} |"):
    assert row in text  # the naive Shaw form is compiled for its memory figure
  assert "## Machine" in text and "GFLOP/s" in text and "## Targets" in text


def test_flop_counts_match_the_reference_shape():
  """6 × matmul params × tokens plus attention: about 9.5e10 FLOP per DEFAULT step."""
  flops = schemes.train_flops(schemes.Shape(), 64, 64, 64)
  assert 9.4e10 < flops < 9.6e10
  assert schemes.batch_at(schemes.parse_args([]), 1024) == 4
