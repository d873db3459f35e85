"""FIRE: functional interpolation for relative positions (Li, You, Guruganesh et al.
2023, "Functional Interpolation for Relative Positions Improves Long Context
Transformers", ICLR 2024; its appendix gives the reference PyTorch module).

A learned function of the distance, normalised by the query's position:

    score_ij = q_i · k_j / sqrt(E) + f_θ( ψ(i - j) / ψ(max(L, i)) )_h
    ψ(x) = log(c x + 1)

with i the query and j the key position, f_θ: R -> R^H an MLP shared by the heads
(one input, `mlp_width` = 32 ReLU units, one output per head), and c and the
threshold L learned. Normalising by ψ(i) maps every distance a query can see into
[0, 1] ("progressive interpolation"), so longer inputs interpolate f_θ instead of
extrapolating it; the threshold L keeps short contexts from being stretched to
the whole range. While every query position is below L the bias depends only on
i - j (so the scheme is relative there, and translation invariant); beyond L the
same distance maps to a smaller input as i grows.

Parameterisation, as the reference module: `c` is learned from 0.1 and enters as
|c|; L = |λ · L0| with the fixed L0 = `init_threshold` (512) and a learned
multiplier λ from 1; the normaliser gets + 1e-6. Each layer has its own FIRE (the
reference module is built per attention layer); `share_across_layers` gives one
per stack.

Causal and bidirectional forms. The paper defines FIRE for causal attention, where
every visible key has j <= i; the reference computes ψ(|i - j|), so a future key
would mirror the past one at the same distance. Causal form (a decoder): exactly
that, `x_ij = ψ(|i - j|) / ψ(max(L, i))`. Bidirectional form (an encoder, or a
prefix-LM's stack, which sees later input keys): the sign of i - j is kept,
`x_ij = sign(i - j) ψ(|i - j|) / ψ(max(L, i))`, so keys after the query give f_θ
negative inputs in [-1, 0) and f_θ can treat the two directions differently (as
T5's two-sided buckets do) with the same parameters; on keys at or before the query
both forms coincide.
"""

from __future__ import annotations

from typing import Mapping

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from relpos_jax.positions import base

Array = jax.Array

EPS = 1e-6  # the reference's guard on the normaliser


def fire_inputs(qpos_BxQ: Array, kpos_BxK: Array, *, c: Array, threshold: Array,
                bidirectional: bool) -> Array:
  """The MLP inputs `x_ij = s_ij ψ(|i - j|) / (ψ(max(L, i)) + 1e-6)`, ψ(x) = log(|c| x + 1).

  `s_ij` is 1 (causal form) or sign(i - j) (bidirectional form). E.g. c = 1,
  L = 3, query i = 3: keys j = 3, 2, 0 give 0, log 2 / log 4 = 0.5, 1.0; query
  i = 7 (> L), key j = 0: log 8 / log 8 = 1.0; bidirectional, query 0, key 3: -1.0.

  Args:
    qpos_BxQ: integer query positions i.
    kpos_BxK: integer key positions j.
    c: the log transform's scale (scalar; enters as |c|).
    threshold: L (scalar, > 0).
    bidirectional: keep the sign of i - j.

  Returns:
    float32 `[B, Q, K]`.
  """
  i_BxQ = qpos_BxQ.astype(jnp.int32)
  rel_BxQxK = (i_BxQ[:, :, None] - kpos_BxK[:, None, :].astype(jnp.int32)).astype(jnp.float32)
  c = jnp.abs(jnp.asarray(c, jnp.float32))
  psi = lambda x: jnp.log(c * x + 1.0)
  normaliser_BxQ = psi(jnp.maximum(i_BxQ.astype(jnp.float32), threshold)) + EPS
  x_BxQxK = psi(jnp.abs(rel_BxQxK)) / normaliser_BxQ[:, :, None]
  return jnp.sign(rel_BxQxK) * x_BxQxK if bidirectional else x_BxQxK


class FIRE(base.PositionScheme):
  """A learned MLP of the log-distance normalised by the query position (progressive interpolation).

  Attributes:
    mlp_width: hidden units of f_θ (32 in the paper).
    init_c: initial c of ψ(x) = log(c x + 1) (0.1 in the reference).
    init_threshold: L0; the threshold L = |λ L0| with λ learned from 1 (512 in the reference).
    share_across_layers: one FIRE per stack, or one per layer (the reference).
  """

  is_relative = True  # while positions stay below the threshold L (see the module docstring)
  mlp_width: int = 32
  init_c: float = 0.1
  init_threshold: float = 512.0
  share_across_layers: bool = False

  def setup(self):
    self.c = self.param("c", nn.initializers.constant(self.init_c), ())
    self.threshold_multiplier = self.param("threshold_multiplier", nn.initializers.ones, ())
    self.hidden = nn.Dense(self.mlp_width, dtype=jnp.float32, name="mlp_hidden")
    self.out = nn.Dense(self.num_heads, dtype=jnp.float32, name="mlp_out")

  def threshold(self) -> Array:
    """L = |λ L0|."""
    return jnp.abs(self.threshold_multiplier * self.init_threshold)

  def logit_bias(self, q_BxQxHxE, k_BxKxHxE, qpos_BxQ, kpos_BxK):
    """`f_θ(x_ij)_h` as float32 `[B, H, Q, K]`, with x from `fire_inputs`.

    The MLP runs in float32 in either compute dtype: bfloat16's 8-bit mantissa
    could not tell apart the normalised inputs of neighbouring long distances.
    """
    del q_BxQxHxE, k_BxKxHxE
    x_BxQxK = fire_inputs(qpos_BxQ, kpos_BxK, c=self.c, threshold=self.threshold(),
                          bidirectional=not self.causal)
    bias_BxQxKxH = self.out(nn.relu(self.hidden(x_BxQxK[..., None])))
    return jnp.transpose(bias_BxQxKxH, (0, 3, 1, 2))

  def shared_across_layers(self) -> bool:
    """One FIRE per layer unless `share_across_layers=True`."""
    return self.share_across_layers

  @nn.nowrap
  def figures(self, params: Mapping[str, Array], *,
              max_train_distance: int | None = None) -> list[base.FigurePanel]:
    """"fire_bias": the learned bias per head against key − query, for three query positions.

    The queries are the last positions of windows 1, 4 and 16 times the training
    span (max_train_distance + 1; 128 if not given). The bias depends on the query
    once it is past the threshold L (the same distance maps to a smaller MLP
    input as i grows), so the three panels show what progressive interpolation
    does to the bias of a long context. Computed by this module's own
    `logit_bias`; head 0's label gives the module's learned L and |c|.
    """
    if "mlp_out" not in params:
      return []
    span = max_train_distance + 1 if max_train_distance else 128
    unbound = self.clone(parent=None)
    threshold = float(unbound.apply({"params": params}, method="threshold"))
    c = abs(float(params["c"]))
    panels = []
    for factor in (1, 4, 16):
      query = factor * span - 1
      rel_R = np.arange(-query, 1 if self.causal else query + 1)
      q_1x1xHxE = jnp.zeros((1, 1, self.num_heads, self.head_dim))
      k_1xRxHxE = jnp.zeros((1, len(rel_R), self.num_heads, self.head_dim))
      bias_1xHx1xR = unbound.apply(
          {"params": params}, q_1x1xHxE, k_1xRxHxE, jnp.full((1, 1), query, jnp.int32),
          jnp.asarray(query + rel_R, jnp.int32)[None], method="logit_bias")
      bias_HxR = np.asarray(bias_1xHx1xR)[0, :, 0]
      panels.append(base.FigurePanel(
          figure="fire_bias",
          figure_title=(f"FIRE bias f(ψ(|i − j|) / ψ(max(L, i))) per head "
                        f"(init L = {self.init_threshold:g})"),
          title=f"query at position {query} ({factor}× the training span)",
          x_label="key − query position", y_label="bias", x_X=rel_R,
          curves={(f"head {h} (L = {threshold:.0f}, |c| = {c:.3g})" if h == 0 else f"head {h}"):
                  bias_HxR[h] for h in range(self.num_heads)},
          shade=base.training_span(max_train_distance, self.causal)))
    return panels
