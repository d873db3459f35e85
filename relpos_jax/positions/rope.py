"""Rotary position embedding, RoPE (Su et al. 2021, "RoFormer: Enhanced Transformer
with Rotary Position Embedding", §3.4.2, eq. 34).

Queries and keys are rotated by angles proportional to their positions, pairwise
in 2-D planes with frequencies `theta_j = base**(-2j / d)`, j = 0..d/2-1:

    (x_j, x_{j+d/2}) -> (x_j cos(p theta_j) - x_{j+d/2} sin(p theta_j),
                         x_{j+d/2} cos(p theta_j) + x_j sin(p theta_j))

so `R(p_q) q · R(p_k) k = q · R(p_k - p_q) k` depends on positions only through
their difference, and attention's `q·k / sqrt(E)` becomes relative without any
logit term. Pairing follows the "rotate-half" convention of GPT-NeoX / LLaMA /
HF transformers (dim j with dim j + d/2); the paper's eq. 34 pairs adjacent dims
(2j, 2j+1), the "interleaved" convention. The two differ by a fixed permutation
of head dims, so they are equally expressive but their weights are not
interchangeable.

`fraction < 1` rotates only the first `int(head_dim * fraction)` dims of each
head and leaves the rest untouched (GPT-NeoX's `rotary_pct`); frequencies are
then computed over the rotated dims.

Eval-time scaling (`scaling`, no retraining, no parameters: a checkpoint trained
with plain RoPE loads unchanged) replaces the frequencies by those of
`rope_frequencies`, which reproduces HF transformers' `modeling_rope_utils`:

- `linear`: position interpolation (Chen et al. 2023, "Extending Context Window of
  Large Language Models via Positional Interpolation"): every frequency / factor,
  i.e. position p is rotated as p / factor.
- `dynamic_ntk`: NTK-aware scaling of the base (bloc97/emozilla; HF
  `_compute_dynamic_ntk_parameters`): base' = base * (factor * n / n_orig - (factor - 1))
  ** (d / (d - 2)) with n = max(eval_length, n_orig). HF recomputes it from the
  current sequence length n as decoding proceeds; here n is the static config key
  `eval_length`, because a base that changed with the length would rotate keys
  already in the decode cache (rotated under the old base) inconsistently with new
  queries, so cached decoding would no longer equal the full forward pass.
- `yarn` (Peng et al. 2023, "YaRN: Efficient Context Window Extension of Large
  Language Models"): frequencies with fewer than `beta_slow` rotations
  over the original length are interpolated (/ factor), those with more than
  `beta_fast` are kept, a linear ramp in between; plus the attention factor
  `0.1 ln(factor) + 1`, which HF multiplies into cos and sin, i.e. into the rotated
  queries and keys both: the logits q·k scale by factor². This module does the same
  (the rotated dims of q and k are multiplied by it; with `fraction < 1` the
  pass-through dims are not, as in HF's partial rotary).
"""

from __future__ import annotations

import math
from typing import Any, Mapping

import flax
import jax
import jax.numpy as jnp
import numpy as np

from relpos_jax.positions import base

Array = jax.Array

SCALING_TYPES = ("none", "linear", "dynamic_ntk", "yarn")
# The `model.position.scaling` section: every key, its default, and which types read it.
DEFAULT_SCALING = flax.core.FrozenDict(
    type="none", factor=1.0, original_max_position=0, eval_length=0, beta_fast=32.0,
    beta_slow=1.0)


def apply_rope(x: Array, pos: Array, base: float = 10000.0, inv_freq: Array | None = None
               ) -> Array:
  """Rotates every (j, j + d/2) pair of `x`'s last dim by angle `pos * base**(-2j/d)`.

  Rotate-half convention (GPT-NeoX / LLaMA): with `x = [x1, x2]` split in halves,
  `out = [x1 cos - x2 sin, x2 cos + x1 sin]`. Computed in float32.

  Args:
    x: `[..., L, H, d]` (e.g. `q_BxLxHxE`); d must be even.
    pos: integer positions `[..., L]` (e.g. `pos_BxL`).
    base: wavelength base (10000 in the paper).
    inv_freq: `[d/2]` frequencies replacing `base**(-2j/d)` (e.g. from
      `rope_frequencies` with scaling); None: plain RoPE.

  Returns:
    The rotated `x`, same shape and dtype.

  Raises:
    ValueError: if the last dim of `x` is odd.
  """
  d = x.shape[-1]
  if d % 2:
    raise ValueError(f"apply_rope needs an even last dim to pair up; got {d}.")
  if inv_freq is None:
    inv_freq_J = base ** (-jnp.arange(0, d, 2, dtype=jnp.float32) / d)
  else:
    inv_freq_J = jnp.asarray(inv_freq, jnp.float32)
  angle_LxJ = jnp.asarray(pos, jnp.float32)[..., None, None] * inv_freq_J  # [..., L, 1, d/2]
  cos, sin = jnp.cos(angle_LxJ), jnp.sin(angle_LxJ)
  x1, x2 = jnp.split(x.astype(jnp.float32), 2, axis=-1)
  out = jnp.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin], axis=-1)
  return out.astype(x.dtype)


def _check_scaling(scaling: Mapping[str, Any]) -> dict[str, Any]:
  """`DEFAULT_SCALING` updated by `scaling`; ValueError (naming the config key) if invalid."""
  unknown = sorted(set(scaling) - set(DEFAULT_SCALING))
  if unknown:
    raise ValueError(f"RoPE scaling has no key(s) {unknown} (config section "
                     f"model.position.scaling); its keys are {sorted(DEFAULT_SCALING)}.")
  s = {**DEFAULT_SCALING, **scaling}
  if s["type"] not in SCALING_TYPES:
    raise ValueError(f"unknown RoPE scaling type {s['type']!r} (config key "
                     f"model.position.scaling.type); choose one of: {', '.join(SCALING_TYPES)}")
  if s["type"] != "none" and not s["factor"] >= 1.0:
    raise ValueError(f"RoPE scaling factor must be >= 1 (config key "
                     f"model.position.scaling.factor); got {s['factor']}.")
  if s["type"] in ("dynamic_ntk", "yarn") and s["original_max_position"] < 1:
    raise ValueError(f"RoPE {s['type']} scaling needs the training length: set config key "
                     "model.position.scaling.original_max_position (> 0), e.g. the longest "
                     "training sequence.")
  if s["type"] == "dynamic_ntk" and s["eval_length"] < 1:
    raise ValueError("RoPE dynamic_ntk scaling needs the (static) length it scales for: set "
                     "config key model.position.scaling.eval_length (> 0), e.g. the longest "
                     "evaluated sequence.")
  return s


def _yarn_ramp(rotary_dim: int, base: float, original_max_position: int, beta_fast: float,
               beta_slow: float) -> np.ndarray:
  """YaRN's per-frequency mix `gamma_j` in [0, 1]: 1 keeps frequency j, 0 interpolates it.

  Frequency j makes `r_j = n_orig * base**(-2j/d) / (2 pi)` rotations over the
  original length. Its dim index `j(r) = d ln(n_orig / (2 pi r)) / (2 ln base)`
  (HF `find_correction_dim`) for r = beta_fast and beta_slow gives
  `low = floor(j(beta_fast))`, `high = ceil(j(beta_slow))` (clipped to [0, d - 1]);
  `gamma_j = 1 - clip((j - low) / (high - low), 0, 1)` (high += 0.001 if equal).
  """
  correction_dim = lambda rot: (rotary_dim * math.log(original_max_position / (rot * 2 * math.pi))
                                / (2 * math.log(base)))
  low = max(math.floor(correction_dim(beta_fast)), 0)
  high = min(math.ceil(correction_dim(beta_slow)), rotary_dim - 1)
  if low == high:
    high += 0.001
  ramp = np.clip((np.arange(rotary_dim // 2, dtype=np.float64) - low) / (high - low), 0.0, 1.0)
  return 1.0 - ramp


def rope_frequencies(rotary_dim: int, *, base: float = 10000.0,
                     scaling: Mapping[str, Any] | None = None) -> tuple[np.ndarray, float]:
  """RoPE's inverse frequencies and attention factor, optionally scaled for longer inputs.

  With `theta_j = base**(-2j/d)`, j = 0..d/2-1, d = rotary_dim, factor s, original
  (training) length n_orig:

  - None or type "none": `theta_j`, attention factor 1.
  - "linear" (Chen et al. 2023): `theta_j / s`, factor 1.
  - "dynamic_ntk": `base'**(-2j/d)` with `base' = base (s n / n_orig - (s - 1))**(d / (d-2))`,
    n = max(eval_length, n_orig) (so n <= n_orig is plain RoPE), factor 1.
  - "yarn" (Peng et al. 2023): `theta_j (gamma_j + (1 - gamma_j) / s)` with gamma_j
    the ramp of `_yarn_ramp` (beta_fast, beta_slow rotations), attention factor
    `0.1 ln(s) + 1` (1 if s <= 1), to be multiplied into the rotated q and k.

  These are HF transformers' `_compute_linear_scaling_rope_parameters`,
  `_compute_dynamic_ntk_parameters` (at seq_len = eval_length) and
  `_compute_yarn_parameters` (default attention factor), computed in float64.

  Args:
    rotary_dim: d, the rotated dims per head (even).
    base: wavelength base.
    scaling: `{"type", "factor", "original_max_position", "eval_length",
      "beta_fast", "beta_slow"}` (missing keys take `DEFAULT_SCALING`), or None.

  Returns:
    `(inv_freq [d/2] float64, attention_factor float)`.

  Raises:
    ValueError: odd rotary_dim, or a scaling section that is incomplete or invalid
      (the message names the config key).
  """
  if rotary_dim < 2 or rotary_dim % 2:
    raise ValueError(f"rope_frequencies needs an even rotary_dim >= 2; got {rotary_dim}.")
  s = _check_scaling(scaling or {})
  kind, factor = s["type"], float(s["factor"])
  exponent_J = np.arange(0, rotary_dim, 2, dtype=np.float64) / rotary_dim
  inv_freq_J = float(base) ** -exponent_J
  if kind == "linear":
    return inv_freq_J / factor, 1.0
  if kind == "dynamic_ntk":
    n_orig = s["original_max_position"]
    n = max(s["eval_length"], n_orig)
    ntk_base = base * (factor * n / n_orig - (factor - 1)) ** (rotary_dim / (rotary_dim - 2))
    return ntk_base ** -exponent_J, 1.0
  if kind == "yarn":
    gamma_J = _yarn_ramp(rotary_dim, base, s["original_max_position"], s["beta_fast"],
                         s["beta_slow"])
    attention_factor = 0.1 * math.log(factor) + 1.0 if factor > 1 else 1.0
    return inv_freq_J / factor * (1 - gamma_J) + inv_freq_J * gamma_J, attention_factor
  return inv_freq_J, 1.0


def rotary_dim(head_dim: int, fraction: float) -> int:
  """`int(head_dim * fraction)`, checked to be even and > 0 (ValueError otherwise)."""
  rot = int(head_dim * fraction)
  if not 0 < fraction <= 1 or rot <= 0 or rot % 2:
    raise ValueError(
        f"RoPE rotates int(head_dim * fraction) = int({head_dim} * {fraction}) = {rot} dims "
        "per head; that must be even and > 0 with 0 < fraction <= 1. Change config key "
        "model.position.fraction (or the head dim).")
  return rot


class RoPE(base.PositionScheme):
  """Rotates queries and keys by their positions (rotate-half convention).

  Attributes:
    base: wavelength base of the rotation frequencies.
    fraction: fraction of each head's dims that is rotated (the first
      `int(head_dim * fraction)`; must be even and > 0); the rest pass through.
    scaling: eval-time frequency scaling, `{"type": none|linear|dynamic_ntk|yarn,
      "factor", "original_max_position", "eval_length", "beta_fast", "beta_slow"}`
      (see `rope_frequencies`); no parameters, so it can be set on a trained model.
  """

  is_relative = True
  base: float = 10000.0
  fraction: float = 1.0
  scaling: Mapping[str, Any] = DEFAULT_SCALING

  def setup(self):
    self.rot_dim = rotary_dim(self.head_dim, self.fraction)
    scaled = dict(self.scaling).get("type", "none") != "none"
    # None keeps plain RoPE's own float32 computation (bit for bit what it was).
    self.inv_freq, self.attention_factor = (
        rope_frequencies(self.rot_dim, base=self.base, scaling=self.scaling) if scaled
        else (None, 1.0))

  def rotate(self, x_BxLxHxE: Array, pos_BxL: Array) -> Array:
    """`apply_rope` on the first `rot_dim` dims of each head (times YaRN's factor), the rest unchanged."""
    rot_BxLxHxR = apply_rope(x_BxLxHxE[..., :self.rot_dim], pos_BxL, self.base, self.inv_freq)
    if self.attention_factor != 1.0:
      rot_BxLxHxR = (rot_BxLxHxR.astype(jnp.float32) * self.attention_factor).astype(
          x_BxLxHxE.dtype)
    if self.rot_dim == x_BxLxHxE.shape[-1]:
      return rot_BxLxHxR
    return jnp.concatenate([rot_BxLxHxR, x_BxLxHxE[..., self.rot_dim:]], axis=-1)
