"""Every large matmul of the model in its compute dtype: the dense layers, attention, the logits.

In float32 this module changes nothing: `einsum` is `jnp.einsum` with float32
accumulation and `dense_kwargs` is empty (Flax's own `lax.dot_general`), bit for bit
what the model computed before it existed.

In bfloat16 every matmul goes through `bf16_einsum`: bf16 operands, float32
accumulation and result, and a `custom_vjp` whose two gradient matmuls are bf16 x
bf16 -> f32 as well (the incoming cotangent is rounded to bf16 once, as t5x does,
whose logits are bf16 themselves). XLA:CPU (JAX 0.10.2) runs a dot natively in bf16
(a YNNPACK fusion; AMX on Intel CPUs that have it) only in a few forms, measured in
`benchmarks/dots.py`, and otherwise converts its operands to float32, which costs
more than float32 throughout. What it decides, it decides in its bf16 normalization
pass, before layout assignment, from each operand's layout at that point:

- the result must be float32 (`preferred_element_type`); a bf16-result dot is
  converted;
- both operands must arrive row-major with the contracted dim last in the lhs and
  first or last in the rhs (`mk,kn`, `mk,nk`, batch dims leading); the weight
  gradient `km,kn` (contract the leading dims) is converted;
- an operand that is a `transpose` arrives with a permuted layout (XLA makes
  transposes layout changes), even behind `lax.optimization_barrier`, so its dot is
  converted. `row_major_transpose` makes the copy physical instead;
- a size-1 dim that XLA removes *after* that decision (the earlier attempt's
  `[1, batch, m, k]` operands, un-vmapped) lets the algebraic simplifier fold a
  transpose back into a dot already declared bf16, which no YNNPACK fusion then
  takes, and the run fails (`UNIMPLEMENTED ... DotThunk ... BF16 x BF16 = F32`).
  So batch dims are merged into one only when there are some, and never padded
  with a 1.

`bf16_einsum` therefore brings each operand to `[Z, M, K]` and `[Z, K, N]` (or
`[Z, N, K]`, whichever needs no transpose), Z the merged batch dims (absent when
there are none), transposing only by `row_major_transpose`; a dense layer's
activations `[..., K]` have no batch dim in common with the weight, so their
leading dims fold into the rows M. The weight gradient `xᵀ·dy` contracts the
token dim, leading in both, so one of them must be copied transposed: `_matmul`
copies the smaller (dy of a layer that narrows, d_ff -> d_model: `(dyᵀ·x)ᵀ`, whose
small result is transposed too; x otherwise); the input gradient `dy·Wᵀ` reads W
as `nk`. Weights go in float32 and are cast inside, so their gradients come back
float32, never rounded to bf16.
"""

from __future__ import annotations

import functools
import math
import string
from typing import Any

import jax
import jax.numpy as jnp

Array = jax.Array


def row_major_transpose(x: Array, perm: tuple[int, ...]) -> Array:
  """`jnp.transpose(x, perm)` as a row-major copy, never a layout change XLA folds into a dot.

  A reversal along one moved dim of size > 1 before the transpose, undone after it,
  keeps XLA from treating the transpose as a relabelling of the layout (it does not
  cancel reversals across a transpose), so the result is materialized row-major.
  Same values as `jnp.transpose`; costs one fused copy.
  """
  perm = tuple(perm)
  if perm == tuple(range(x.ndim)):
    return x
  moved = [d for i, d in enumerate(perm) if d != i and x.shape[d] > 1]
  if not moved:  # only size-1 dims move: the transpose is a plain reshape
    return jnp.transpose(x, perm)
  d = moved[0]
  return jnp.flip(jnp.transpose(jnp.flip(x, d), perm), perm.index(d))


def _subscripts(spec: str, a_ndim: int, b_ndim: int) -> tuple[str, str, str]:
  """`(a, b, out)` letters of a two-operand einsum with `...` spelled out.

  Every letter of an operand must be in the other operand or the output (a
  letter summed within one operand has no matmul gradient).
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


def _copied(spec: str, order: list[str], size: dict[str, int]) -> int:
  """Elements `row_major_transpose` copies to bring an operand from `spec` to `order` (0: none)."""
  moved = [c for i, c in enumerate(order) if spec.index(c) != i and size[c] > 1]
  return math.prod(size[c] for c in spec) if moved else 0


def _transposed_elements(lhs_spec: str, rhs_spec: str, out_spec: str,
                         size: dict[str, int]) -> int:
  """Elements copied by `_matmul` with `lhs_spec` as the dot's lhs (operands and result)."""
  batch = [c for c in lhs_spec if c in rhs_spec and c in out_spec]
  contract = [c for c in lhs_spec if c in rhs_spec and c not in out_spec]
  l_free = [c for c in lhs_spec if c not in rhs_spec]
  r_free = [c for c in rhs_spec if c not in lhs_spec]
  rhs = min(_copied(rhs_spec, batch + contract + r_free, size),
            _copied(rhs_spec, batch + r_free + contract, size))
  return (_copied(lhs_spec, batch + l_free + contract, size) + rhs
          + _copied("".join(batch + l_free + r_free), list(out_spec), size))


def _matmul(a_spec: str, b_spec: str, out_spec: str, a: Array, b: Array) -> Array:
  """`einsum(a_spec,b_spec->out_spec)` of two bf16 arrays as one row-major dot into float32.

  Either operand can be the dot's lhs; the one that copies fewer elements into
  row-major order is (ties: `a`). That matters for weight gradients: `xᵀ·dy` of a
  layer narrowing d_ff -> d_model transposes the [tokens, d_model] cotangent and the
  small [d_model, d_ff] result rather than the 4x larger [tokens, d_ff] activations.
  The result is always brought to `out_spec` by `row_major_transpose`: XLA folds a
  plain transpose of a dot's result into the dot by swapping its operands, which
  turns an `mk,kn` dot into a `km,nk` one after the bf16 decision (the DotThunk
  failure).
  """
  size = dict(zip(a_spec, a.shape)) | dict(zip(b_spec, b.shape))
  if (_transposed_elements(b_spec, a_spec, out_spec, size)
      < _transposed_elements(a_spec, b_spec, out_spec, size)):
    a_spec, b_spec, a, b = b_spec, a_spec, b, a
  contract = [c for c in a_spec if c in b_spec and c not in out_spec]
  a_free = [c for c in a_spec if c not in b_spec]
  b_free = [c for c in b_spec if c not in a_spec]
  batch = [c for c in a_spec if c in b_spec and c in out_spec]
  prod = lambda letters: math.prod(size[c] for c in letters)
  lead = (prod(batch),) if batch else ()  # never a size-1 dim of our own (module docstring)
  perm = lambda spec, order: tuple(spec.index(c) for c in order)
  a_3d = row_major_transpose(a, perm(a_spec, batch + a_free + contract)).reshape(
      lead + (prod(a_free), prod(contract)))
  # The rhs as [Z, K, N] or, where that needs no transpose and the other does, [Z, N, K].
  kn, nk = batch + contract + b_free, batch + b_free + contract
  b_nk = perm(b_spec, nk) == tuple(range(b.ndim)) != perm(b_spec, kn)
  order = nk if b_nk else kn
  b_3d = row_major_transpose(b, perm(b_spec, order)).reshape(
      lead + ((prod(b_free), prod(contract)) if b_nk else (prod(contract), prod(b_free))))
  n = len(lead)
  out = jax.lax.dot_general(a_3d, b_3d, (((n + 1,), (n + 1 if b_nk else n,)),
                                         (tuple(range(n)), tuple(range(n)))),
                            preferred_element_type=jnp.float32)
  out_order = batch + a_free + b_free
  out = out.reshape([size[c] for c in out_order])
  # A plain transpose here could be folded into the dot (see above).
  return row_major_transpose(out, perm("".join(out_order), out_spec))


@functools.partial(jax.custom_vjp, nondiff_argnums=(0,))
def bf16_einsum(spec: str, a: Array, b: Array) -> Array:
  """`einsum(spec, a, b)` of bf16 copies of `a` and `b`, accumulated and returned in float32.

  Args:
    spec: a two-operand einsum (`...` allowed), every index in two of its three terms.
    a, b: operands of any float dtype.

  Returns:
    float32. Its gradients (bf16 matmuls, see the module docstring) have the dtypes
    of `a` and `b`.
  """
  a_spec, b_spec, out_spec = _subscripts(spec, a.ndim, b.ndim)
  return _matmul(a_spec, b_spec, out_spec, a.astype(jnp.bfloat16), b.astype(jnp.bfloat16))


def _bf16_einsum_fwd(spec, a, b):
  """Forward pass; keeps the operands as given (activations are bf16, weights small)."""
  return bf16_einsum(spec, a, b), (a, b)


def _bf16_einsum_bwd(spec, residuals, g):
  """`da = g·bᵀ`, `db = aᵀ·g`, both bf16 x bf16 -> f32 in the row-major forms."""
  a, b = residuals
  a_spec, b_spec, out_spec = _subscripts(spec, a.ndim, b.ndim)
  a16, b16, g16 = (x.astype(jnp.bfloat16) for x in (a, b, g))
  da = _matmul(out_spec, b_spec, a_spec, g16, b16)
  db = _matmul(a_spec, out_spec, b_spec, a16, g16)
  return da.astype(a.dtype), db.astype(b.dtype)


bf16_einsum.defvjp(_bf16_einsum_fwd, _bf16_einsum_bwd)


def is_bf16(dtype: Any) -> bool:
  """Whether `dtype` is the bf16 compute dtype (the one that takes this module's path)."""
  return jnp.dtype(dtype) == jnp.bfloat16


def einsum(spec: str, a: Array, b: Array, dtype: Any) -> Array:
  """A float32 `einsum` of two operands read in the compute dtype `dtype`.

  Args:
    spec: two-operand einsum subscripts.
    a, b: operands (any float dtype; read in `dtype`).
    dtype: float32 or bfloat16.

  Returns:
    float32: `bf16_einsum` in bfloat16; in float32 `jnp.einsum` with float32
    accumulation, exactly the model's computation before this module.
  """
  if is_bf16(dtype):
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
  """`lax.dot_general` as `bf16_einsum`, cast to `preferred_element_type` (default bf16).

  The signature of `lax.dot_general`, so Flax's `Dense` / `DenseGeneral` take it as
  `dot_general`; `precision` is ignored (a bf16 dot has one precision).
  """
  del precision
  spec = _dot_general_spec(lhs.ndim, rhs.ndim, dimension_numbers)
  return bf16_einsum(spec, lhs, rhs).astype(preferred_element_type or jnp.bfloat16)


def _promote_all_but_kernel(inputs, kernel, bias, *, dtype=None, inexact=True):
  """Flax's `promote_dtype` for Dense layers, leaving the float32 kernel for `bf16_einsum`."""
  del inexact
  cast = lambda x: None if x is None else jnp.asarray(x, dtype)
  return cast(inputs), kernel, cast(bias)


def dense_kwargs(dtype: Any, out_dtype: Any = None) -> dict[str, Any]:
  """Extra `nn.Dense` / `nn.DenseGeneral` arguments for the compute dtype `dtype`.

  Args:
    dtype: float32 or bfloat16.
    out_dtype: the layer's output dtype in bfloat16 (default bfloat16; float32
      for the output logits).

  Returns:
    bfloat16: `bf16_dot_general` and a promotion that leaves the kernel float32
    (its gradient stays float32). float32: `{}`, Flax's defaults, unchanged.
  """
  if is_bf16(dtype):
    return {"dot_general": functools.partial(bf16_dot_general, preferred_element_type=out_dtype),
            "promote_dtype": _promote_all_but_kernel}
  return {}
