"""KERPLE, logarithmic variant (Chi, Fan, Ramadge & Rudnicky 2022, "KERPLE: Kernelized
Relative Positional Embedding for Length Extrapolation", NeurIPS; its "log" kernel).

Each head h adds a learned, conditionally positive definite kernel of the distance:

    score_ij = q_i · k_j / sqrt(E) - r1_h · log(1 + r2_h · |i - j|)      (r1_h, r2_h > 0)

Two learned scalars per head; ALiBi is the linear kernel `-m_h |i - j|` with
fixed slopes. Like ALiBi here, the bias uses `|i - j|` in both directions: the
paper's causal models only see j <= i, and the symmetric form serves
bidirectional (encoder / prefix-LM) attention; in a causal decoder future keys are
masked by attention.

Positivity. The reference code (github.com/chijames/KERPLE, `ParallelKerpleLog`)
clamps the stored parameters to >= 0.01 in place before every forward pass, with
r1 initialised uniform in (0, 2) and r2 uniform in (0, 1). In-place clamping is
not functional, so this module uses a softplus: `r = softplus(rho)`, with `rho`
initialised so that r1 ~ U(0.01, 2) and r2 ~ U(0.01, 1) (the reference's init
after its clamp). Each layer has its own pair per head (as in the reference,
which builds one module per attention layer); `share_across_layers` gives one
per stack.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from relpos_jax.positions import base

Array = jax.Array

_MIN_INIT = 0.01  # the reference code's clamp


def kerple_log_bias(qpos_BxQ: Array, kpos_BxK: Array, r1_H: Array, r2_H: Array) -> Array:
  """`-r1_h log(1 + r2_h |qpos_i - kpos_j|)`.

  E.g. r1 = 1, r2 = 1 and distances 0, 1, 3 give 0, -log 2, -log 4.

  Args:
    qpos_BxQ: integer query positions.
    kpos_BxK: integer key positions.
    r1_H, r2_H: positive per-head kernel parameters.

  Returns:
    float32 bias `[B, H, Q, K]`.
  """
  dist_BxQxK = jnp.abs(qpos_BxQ[:, :, None].astype(jnp.int32)
                       - kpos_BxK[:, None, :].astype(jnp.int32)).astype(jnp.float32)
  r1 = jnp.asarray(r1_H, jnp.float32)[None, :, None, None]
  r2 = jnp.asarray(r2_H, jnp.float32)[None, :, None, None]
  return -r1 * jnp.log1p(r2 * dist_BxQxK[:, None])


def _softplus_inverse(r: Array) -> Array:
  """`rho` with `softplus(rho) = r` (r > 0)."""
  return r + jnp.log(-jnp.expm1(-r))


def _uniform_softplus_init(high: float):
  """Initialiser of `rho` such that `softplus(rho)` is uniform in [0.01, high)."""
  def init(key, shape, dtype=jnp.float32):
    r = jax.random.uniform(key, shape, jnp.float32, _MIN_INIT, high)
    return _softplus_inverse(r).astype(dtype)
  return init


class KerpleLog(base.PositionScheme):
  """A learned per-head logarithmic distance penalty `-r1 log(1 + r2 |i - j|)`.

  Attributes:
    share_across_layers: one (r1, r2) per head for the whole stack, or per layer.
  """

  is_relative = True
  share_across_layers: bool = False

  def setup(self):
    self.rho1 = self.param("rho1", _uniform_softplus_init(2.0), (self.num_heads,))
    self.rho2 = self.param("rho2", _uniform_softplus_init(1.0), (self.num_heads,))

  def kernel_parameters(self) -> tuple[Array, Array]:
    """`(r1_H, r2_H) = softplus(rho1), softplus(rho2)`."""
    return jax.nn.softplus(self.rho1), jax.nn.softplus(self.rho2)

  def logit_bias(self, q_BxQxHxE, k_BxKxHxE, qpos_BxQ, kpos_BxK):
    """`-r1_h log(1 + r2_h |qpos_i - kpos_j|)` as float32 `[B, H, Q, K]`."""
    del q_BxQxHxE, k_BxKxHxE
    r1_H, r2_H = self.kernel_parameters()
    return kerple_log_bias(qpos_BxQ, kpos_BxK, r1_H, r2_H)

  def shared_across_layers(self) -> bool:
    """One pair per head per layer unless `share_across_layers=True`."""
    return self.share_across_layers
