"""benchmarks/profile.py: ops attributed to their kind and model part, and a real profile."""

import numpy as np

from benchmarks import profile
from benchmarks import schemes

TINY = schemes.Shape(d_model=16, num_heads=2, head_dim=8, d_ff=32, num_encoder_layers=1,
                     num_decoder_layers=1, vocab_size=16)

HLO = """
ENTRY %main {
  %p.1 = f32[4,8]{1,0} parameter(0)
  %ynn_fusion.3 = f32[4,8]{1,0} fusion(%p.1), kind=kCustom, calls=%f.1, metadata={op_name="jit(step)/transpose(jvp(EncoderDecoder))/decoder/layer_1/mlp/wi/dot_general" stack_frame_id=3}
  %dot.7 = f32[4,8]{1,0} dot(%ynn_fusion.3, %p.1), lhs_contracting_dims={1}
  ROOT %copy.2 = f32[4,8]{0,1} copy(%dot.7)
}
"""


def test_op_sources_follow_metadata_and_inherit_through_operands():
  sources = profile.op_sources(HLO)
  path = "jit(step)/transpose(jvp(EncoderDecoder))/decoder/layer_1/mlp/wi/dot_general"
  assert sources == {"ynn_fusion.3": path, "dot.7": path, "copy.2": path}


def test_op_kinds_and_model_parts():
  assert [profile.op_kind(n) for n in ("dot.316", "ynn_fusion.2", "transpose_copy_fusion.4",
                                       "wrapped_broadcast.3", "add_select_fusion", "while.7")] == [
      "dot", "ynn fusion", "copy/transpose", "loop fusion", "loop fusion", "other"]
  part = profile.model_part
  assert part("jit(step)/transpose(jvp(EncoderDecoder))/decoder/layer_1/mlp/wi/dot_general") == (
      "backward decoder/layer_*/mlp")
  assert part("jit(_greedy_decode)/EncoderDecoder.prime/EncoderDecoder.cross_kv/decoder.cross_kv/"
              "cross_attention.project_kv/key/dot_general") == "decoder/cross_attention/key"
  assert part("jit(_greedy_decode)/while/body/EncoderDecoder.decode_step/decoder/layer_0/"
              "self_attention/dot_general") == "loop: decoder/layer_*/self_attention"
  assert part("jit(step)/mul") == profile.OUTSIDE_MODULES and part("") == "(no source)"
  assert part("jit(step)/jvp(EncoderDecoder)/EncoderDecoder.decode/...d,vd->...v/dot_general") == (
      profile.OUTSIDE_MODULES)


def test_profiling_a_tiny_train_step_attributes_its_ops():
  step = schemes.compile_train_step(TINY, "t5", 2, 8)
  ops, span, wall, plain = profile.profile(step.run, runs=2)
  assert ops and wall > 0 and span > 0 and plain > 0
  assert all(op.seconds >= 0 and op.calls >= 1 for op in ops)
  sources = profile.op_sources(step.compiled.as_text())
  parts = {profile.model_part(sources.get(op.name, "")) for op in ops}
  assert any(p.startswith("backward ") for p in parts) and any("mlp" in p for p in parts)
  text = profile.report(ops, sources, wall, 2, title="tiny", plain=plain)
  assert "without the profiler" in text
  for title in ("By op kind", "By model part", "By thread", "Largest ops"):
    assert f"### {title}" in text
  shares = [float(line.rsplit("|", 2)[-2].strip(" %")) for line in
            text.split("### By op kind")[1].split("###")[0].splitlines() if line.endswith("% |")]
  np.testing.assert_allclose(sum(shares), 100, atol=len(shares))  # rounded shares


def test_seeds_program_profiles_one_and_n_seeds_of_any_config_file():
  assert schemes.config_spec("ablation") == ("configs/default.py", "ablation")
  assert schemes.config_spec("configs/ablations/kazemnejad.py:smoke") == (
      "configs/ablations/kazemnejad.py", "smoke")
  text = profile.profile_program("seeds", TINY, "t5", 2, 8, 1,
                                 seeds_config="configs/ablations/kazemnejad.py:smoke",
                                 num_seeds=2)
  assert text.count("## seeds: ") == 2 and "configs/ablations/kazemnejad.py:smoke" in text
  assert "batch 2x8x6" in text  # the replicas' stacked step-0 batch
