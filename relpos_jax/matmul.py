"""Matmuls of a bfloat16 model that compile to native bf16 dots, forward and backward.

A bfloat16 model (`model.dtype`) multiplies bf16 activations by bf16 copies of
its float32 weights. On XLA:CPU (JAX 0.10.2) such a dot runs natively (YNNPACK,
AMX on recent Intel CPUs) only when both operands are bf16 *and its result is
float32*: a dot with a bf16 result, or with one float32 operand, has its operands
converted to float32 and runs as a float32 dot. Written naively, most of a train
step's dots are of those kinds:

- forward: Flax's `Dense` asks for a bf16 result;
- backward: the transpose of a dot with a float32 result (the attention logits,
  the output logits) receives a float32 cotangent, so its two gradient dots are
  float32 x bf16;
- and whatever the dtypes, XLA:CPU decides before it assigns layouts, from the
  layouts operands arrive with: an operand that is a transpose arrives permuted,
  and its dot is converted too (`_matmul` shows how that is avoided).

`bf16_einsum` is the one matmul that avoids all three: it multiplies bf16 copies of
its operands into a float32 result, and its gradient (a `custom_vjp`) rounds the
incoming cotangent to bf16 once and computes both gradient matmuls the same way,
bf16 x bf16 -> float32. Each gradient comes back in its operand's own dtype, so
a float32 weight passed in uncast gets a float32 gradient, never rounded to bf16.
Rounding the cotangent (the gradient of the attention logits, of the output
logits) to bf16 is what t5x does too, where those logits are bf16 themselves.

In a float32 model nothing here changes anything: `einsum` and `dense_kwargs`
fall back to `jnp.einsum` and Flax's own `lax.dot_general`, bit for bit.
"""

from __future__ import annotations

import functools
import math
import string
from typing import Any

import jax
import jax.numpy as jnp

Array = jax.Array


def _subscripts(spec: str, a_ndim: int, b_ndim: int) -> tuple[str, str, str]:
  """`(a, b, out)` subscripts of a two-operand einsum, `...` spelled out in letters.

  Checked to have a plain gradient: each operand's gradient is the einsum of the
  output's cotangent with the other operand, which needs every index of an
  operand to appear in the output or in the other operand.
  """
  inputs, out = spec.replace(" ", "").split("->")
  a, b = inputs.split(",")
  if "..." in spec:
    spare = [c for c in string.ascii_letters if c not in spec]
    n_a = a_ndim - len(a) + 3 if "..." in a else 0
    n_b = b_ndim - len(b) + 3 if "..." in b else 0
    dots = "".join(spare[:max(n_a, n_b)])
    a = a.replace("...", dots[len(dots) - n_a:])
    b = b.replace("...", dots[len(dots) - n_b:])
    out = out.replace("...", dots)
  for mine, other in ((a, b), (b, a)):
    lonely = set(mine) - set(other) - set(out)
    if lonely:
      raise ValueError(f"bf16_einsum {spec!r}: index {sorted(lonely)} is summed within one "
                       "operand; sum it before the matmul")
  return a, b, out


def _matmul(a_spec: str, b_spec: str, out_spec: str, a: Array, b: Array) -> Array:
  """`einsum(a_spec,b_spec->out_spec)` of two bf16 arrays as one float32-result batched matmul.

  Both operands go in as fresh `[1, batch, m, k]` and `[1, batch, k, n]` arrays
  (transposed and reshaped here), the form XLA:CPU's bf16 dot accepts. The reshape
  matters: XLA:CPU decides whether a dot runs in bf16 before it assigns layouts,
  from the layouts the operands arrive with, and an operand that is a transpose
  (`heads_first`, a gradient's) arrives with a permuted layout, for which it
  converts the dot to float32. A reshape (the leading 1 makes it a real one, which
  JAX cannot drop) arrives row-major. XLA removes the extra dimension afterwards.
  """
  batch = [c for c in a_spec if c in b_spec and c in out_spec]
  contract = [c for c in a_spec if c in b_spec and c not in out_spec]
  a_free = [c for c in a_spec if c not in b_spec]
  b_free = [c for c in b_spec if c not in a_spec]
  size = dict(zip(a_spec, a.shape)) | dict(zip(b_spec, b.shape))
  # a_flat: [1, batch, m, k]; b_flat: [1, batch, k, n] (letters here are not the shape legend's)
  prod = lambda letters: math.prod(size[c] for c in letters)
  a_flat = jnp.transpose(a, [a_spec.index(c) for c in batch + a_free + contract]).reshape(
      1, prod(batch), prod(a_free), prod(contract))
  b_flat = jnp.transpose(b, [b_spec.index(c) for c in batch + contract + b_free]).reshape(
      1, prod(batch), prod(contract), prod(b_free))
  out = jax.lax.dot_general(a_flat, b_flat, (((3,), (2,)), ((0, 1), (0, 1))),
                            preferred_element_type=jnp.float32)
  out_order = batch + a_free + b_free
  out = out.reshape([size[c] for c in out_order])
  return jnp.transpose(out, [out_order.index(c) for c in out_spec])


@functools.partial(jax.custom_vjp, nondiff_argnums=(0,))
def bf16_einsum(spec: str, a: Array, b: Array) -> Array:
  """`einsum(spec, a, b)` of bf16 copies of `a` and `b`, accumulated and returned in float32.

  Differentiable with native bf16 gradient matmuls (see the module docstring);
  the gradients have the dtypes of `a` and `b`.
  """
  a_spec, b_spec, out_spec = _subscripts(spec, a.ndim, b.ndim)
  return _matmul(a_spec, b_spec, out_spec, a.astype(jnp.bfloat16), b.astype(jnp.bfloat16))


def _bf16_einsum_fwd(spec, a, b):
  return bf16_einsum(spec, a, b), (a, b)


def _bf16_einsum_bwd(spec, residuals, g):
  a, b = residuals
  a_spec, b_spec, out_spec = _subscripts(spec, a.ndim, b.ndim)
  a16, b16, g16 = a.astype(jnp.bfloat16), b.astype(jnp.bfloat16), g.astype(jnp.bfloat16)
  da = _matmul(out_spec, b_spec, a_spec, g16, b16)
  db = _matmul(a_spec, out_spec, b_spec, a16, g16)
  return da.astype(a.dtype), db.astype(b.dtype)


bf16_einsum.defvjp(_bf16_einsum_fwd, _bf16_einsum_bwd)


def einsum(spec: str, a: Array, b: Array, dtype: Any) -> Array:
  """A float32 `einsum` of two operands read in the compute dtype `dtype`.

  bfloat16: `bf16_einsum` (native bf16 dots, forward and backward). float32:
  `jnp.einsum` with float32 accumulation, exactly as before this module existed.
  """
  if jnp.dtype(dtype) == jnp.bfloat16:
    return bf16_einsum(spec, a, b)
  return jnp.einsum(spec, a.astype(dtype), b.astype(dtype), preferred_element_type=jnp.float32)


def _dot_general_spec(lhs_ndim: int, rhs_ndim: int, dimension_numbers) -> str:
  """The einsum subscripts of a `lax.dot_general` (batch, lhs free, rhs free dims out)."""
  (lhs_contract, rhs_contract), (lhs_batch, rhs_batch) = dimension_numbers
  letters = iter(string.ascii_letters)
  lhs = [next(letters) for _ in range(lhs_ndim)]
  rhs = [None] * rhs_ndim
  for i, j in zip(tuple(lhs_contract) + tuple(lhs_batch), tuple(rhs_contract) + tuple(rhs_batch)):
    rhs[j] = lhs[i]
  rhs = [c if c is not None else next(letters) for c in rhs]
  shared = set(lhs_contract) | set(lhs_batch)
  out = ([lhs[i] for i in lhs_batch] + [c for i, c in enumerate(lhs) if i not in shared]
         + [c for j, c in enumerate(rhs) if j not in set(rhs_contract) | set(rhs_batch)])
  return f"{''.join(lhs)},{''.join(rhs)}->{''.join(out)}"


def bf16_dot_general(lhs: Array, rhs: Array, dimension_numbers, precision=None,
                     preferred_element_type=None) -> Array:
  """`lax.dot_general` as `bf16_einsum`, the result cast to `preferred_element_type` (else bf16).

  The signature of `lax.dot_general`, so Flax's `Dense`/`DenseGeneral` take it as
  `dot_general`; `precision` is ignored (a bf16 dot has one precision).
  """
  del precision
  spec = _dot_general_spec(lhs.ndim, rhs.ndim, dimension_numbers)
  return bf16_einsum(spec, lhs, rhs).astype(preferred_element_type or jnp.bfloat16)


def _promote_all_but_kernel(inputs, kernel, bias, *, dtype=None, inexact=True):
  """Flax's `promote_dtype` for Dense/DenseGeneral, leaving the float32 kernel uncast.

  `bf16_dot_general` casts the kernel itself, so its gradient comes back float32.
  """
  del inexact
  cast = lambda x: None if x is None else jnp.asarray(x, dtype)
  return cast(inputs), kernel, cast(bias)


def dense_kwargs(dtype: Any, out_dtype: Any = None) -> dict[str, Any]:
  """Extra `nn.Dense` / `nn.DenseGeneral` arguments for the compute dtype `dtype`.

  bfloat16: native bf16 matmuls (`bf16_dot_general`) returning `out_dtype`
  (default bf16), with float32 weight gradients. float32: none (Flax's defaults,
  unchanged).
  """
  if jnp.dtype(dtype) == jnp.bfloat16:
    return {"dot_general": functools.partial(bf16_dot_general, preferred_element_type=out_dtype),
            "promote_dtype": _promote_all_but_kernel}
  return {}
