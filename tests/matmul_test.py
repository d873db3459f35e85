"""`relpos_jax.matmul`: bf16 matmuls, their gradients, and the compiled train step's dots.

`dot_census` reads a compiled (post-optimization) HLO module and counts its dots
by operand and result dtype, and the dot operands that are float32 converted from
bfloat16 (traced back through fusions and layout ops). The regression test
compiles a tiny bf16 model's real train step and asserts every dot is a native
bf16 x bf16 -> f32 one. Run this file as a script for the demo model's counts:

  PYTHONPATH=. .venv/bin/python tests/matmul_test.py [scheme ...]
"""

import collections
import re
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from relpos_jax import architectures
from relpos_jax import matmul
from relpos_jax import optim
from relpos_jax import train_lib
from relpos_jax.positions import randomized

_INSTRUCTION = re.compile(r"^\s*(?:ROOT )?%(\S+) = (\([^=]*?\)|\S+) ([\w-]+)\((.*?)\)(.*)$")
_COMPUTATION = re.compile(r"^(?:ENTRY )?%(\S+) ")
_LAYOUT_OPS = {"bitcast", "copy", "transpose", "reshape", "broadcast", "slice"}


def dot_census(hlo_text: str) -> tuple[collections.Counter, int]:
  """`(dots by "lhs x rhs -> out" dtypes, dot operands converted from bf16)` of compiled HLO."""
  insts, callers, roots, computation = {}, {}, {}, None
  for line in hlo_text.splitlines():
    if line.endswith("{") and _COMPUTATION.match(line):
      computation = _COMPUTATION.match(line).group(1)
      continue
    m = _INSTRUCTION.match(line)
    if not m:
      continue
    name, shape, op, args, rest = m.groups()
    operands = [a.strip().lstrip("%") for a in re.sub(r"/\*.*?\*/", "", args).split(",") if a]
    called = re.search(r"calls=%([\w.\-]+)", rest)
    insts[name] = (shape.split("[")[0], op, operands, args, called and called.group(1), computation)
    if called:
      callers[called.group(1)] = name
    if line.lstrip().startswith("ROOT "):
      roots[computation] = name

  def from_bf16(name):
    """Whether `name` is (a layout op of) a convert from bf16, through fusion boundaries."""
    dtype, op, operands, args, called, comp = insts[name]
    if op == "convert":
      return insts[operands[0]][0] == "bf16"
    if op == "parameter" and comp in callers:
      return from_bf16(insts[callers[comp]][2][int(args)])
    if op == "fusion":
      return from_bf16(roots[called])
    return op in _LAYOUT_OPS and from_bf16(operands[0])

  kinds, converted = collections.Counter(), 0
  for dtype, op, operands, *_ in insts.values():
    if op == "dot":
      lhs, rhs = (insts[o][0] for o in operands)
      kinds[f"{lhs} x {rhs} -> {dtype}"] += 1
      converted += sum(from_bf16(o) for o in operands)
  return kinds, converted


def compiled_train_step(model_config, batch_size: int, lengths: tuple[int, int]) -> str:
  """The compiled HLO of train_lib's step, vmapped over one seed as `train_lib` runs it."""
  model = architectures.make_model(model_config, vocab_size=16)
  tx, schedule = optim.make_optimizer(num_steps=10)
  step = train_lib.make_train_step(model, tx, schedule, label_smoothing=0.0,
                                   randomized=randomized.RandomizedPositions())
  state = jax.eval_shape(lambda: train_lib.init_replicas(model, tx, [0]))
  batch = {key: jax.ShapeDtypeStruct((1, batch_size, n), jnp.int32)
           for key, n in zip(("inputs", "targets"), lengths)}
  seeds = jax.ShapeDtypeStruct((1,), jnp.int32)
  return jax.jit(jax.vmap(step)).lower(state, batch, seeds).compile().as_text()


@pytest.mark.parametrize("arch", ["encoder_decoder", "decoder_only"])
def test_the_bf16_train_step_compiles_to_native_bf16_dots(arch):
  """Forward and backward: every dot bf16 x bf16 -> f32, none fed by a convert from bf16."""
  config = architectures.default_config(arch)
  config.update(d_model=32, num_heads=2, head_dim=16, d_ff=64, dtype="bfloat16")
  config.update(**({"num_encoder_layers": 1, "num_decoder_layers": 1}
                   if arch == "encoder_decoder" else {"num_layers": 1}))
  kinds, converted = dot_census(compiled_train_step(config, 8, (12, 12)))
  assert kinds and set(kinds) == {"bf16 x bf16 -> f32"}, kinds
  assert converted == 0


def _reference(spec, a, b):
  """The same product in float32 from the bf16-rounded operands."""
  r = lambda x: x.astype(jnp.bfloat16).astype(jnp.float32)
  return jnp.einsum(spec, r(a), r(b), precision="highest")


@pytest.mark.parametrize("spec,a_shape,b_shape", [
    ("bqhe,bkhe->bhqk", (2, 5, 3, 8), (2, 7, 3, 8)),  # attention logits, natural layout
    ("bhqk,bhke->bhqe", (2, 3, 5, 7), (2, 3, 7, 8)),  # weights x values, head-major
    ("...d,vd->...v", (2, 5, 8), (11, 8)),             # tied output logits
    ("abc,cde->abde", (2, 5, 8), (8, 3, 4)),           # DenseGeneral
])
def test_bf16_einsum_and_its_gradients_match_float32(spec, a_shape, b_shape):
  rng = np.random.default_rng(0)
  a = jnp.asarray(rng.normal(size=a_shape), jnp.bfloat16)  # an activation
  b = jnp.asarray(rng.normal(size=b_shape), jnp.float32)    # a weight, cast inside
  out = matmul.bf16_einsum(spec, a, b)
  assert out.dtype == jnp.float32
  np.testing.assert_allclose(out, _reference(spec, a, b), rtol=1e-5, atol=1e-5)
  w = jnp.asarray(rng.normal(size=out.shape), jnp.float32)
  grads = jax.grad(lambda a, b: jnp.sum(matmul.bf16_einsum(spec, a, b) * w), (0, 1))(a, b)
  want = jax.grad(lambda a, b: jnp.sum(_reference(spec, a, b) * w.astype(jnp.bfloat16)),
                  (0, 1))(a.astype(jnp.float32), b)
  assert grads[0].dtype == jnp.bfloat16 and grads[1].dtype == jnp.float32  # each its own
  for got, ref in zip(grads, want):  # the cotangent is rounded to bf16; the products are exact
    scale = float(jnp.abs(ref).max())
    np.testing.assert_allclose(np.float32(got), ref, rtol=0, atol=1e-2 * scale)


def test_bf16_dot_general_is_lax_dot_general_with_a_cast_result():
  rng = np.random.default_rng(1)
  x = jnp.asarray(rng.normal(size=(2, 5, 3, 8)), jnp.bfloat16)
  w = jnp.asarray(rng.normal(size=(3, 8, 6)), jnp.float32)
  dims = (((2, 3), (0, 1)), ((), ()))
  want = jax.lax.dot_general(x, w.astype(jnp.bfloat16), dims, preferred_element_type=jnp.float32)
  got = matmul.bf16_dot_general(x, w, dims)
  assert got.dtype == jnp.bfloat16
  np.testing.assert_array_equal(np.float32(got), np.float32(want.astype(jnp.bfloat16)))
  got32 = matmul.bf16_dot_general(x, w, dims, preferred_element_type=jnp.float32)
  np.testing.assert_allclose(got32, want, rtol=1e-6, atol=1e-6)


def test_an_index_summed_within_one_operand_is_refused():
  with pytest.raises(ValueError, match="summed within one operand"):
    matmul.bf16_einsum("ab,bc->c", jnp.ones((2, 3)), jnp.ones((3, 4)))


def test_float32_is_untouched():
  assert matmul.dense_kwargs(jnp.float32) == {}
  a, b = jnp.ones((2, 3)), jnp.ones((3, 4))
  np.testing.assert_array_equal(matmul.einsum("ab,bc->ac", a, b, jnp.float32),
                                jnp.einsum("ab,bc->ac", a, b, preferred_element_type=jnp.float32))


if __name__ == "__main__":
  from configs import default  # pylint: disable=g-import-not-at-top
  for scheme in sys.argv[1:] or ["t5"]:
    for dtype in ("float32", "bfloat16"):
      demo = default.get_config(f"scheme={scheme}")
      demo.model.dtype = dtype
      counts, n_converted = dot_census(compiled_train_step(demo.model, demo.batch_size, (20, 21)))
      print(f"{scheme} {dtype}: {dict(counts)}; dot operands converted from bf16: {n_converted}")
