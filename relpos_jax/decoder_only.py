"""The decoder-only Transformer (causal LM or prefix-LM) over `input SEP target EOS`.

Kazemnejad et al. 2023 ("The Impact of Positional Encoding on Length
Generalization in Transformers", NeurIPS) compare schemes in decoder-only models;
NoPE only makes sense there (a causal mask lets a model infer positions; an
encoder without positions is a bag of words). This module is the same `Stack`
of pre-norm `Block`s as the encoder-decoder's decoder, without cross-attention,
over one sequence per example:

    tokens     x_0 .. x_{n-1}  PAD..PAD  SEP  t_0 .. t_{m-1}  EOS   (S input slots, then T)
    positions  0   .. n-1      (masked)  n    n+1 .. n+m       n+m+1

Inputs keep their padded width S (so batches of the encoder-decoder data work
unchanged); positions run on from the last real input token into the target, so
the PAD gap is invisible to every scheme (all are functions of explicit
positions, and PAD keys are masked). SEP is the vocabulary's BOS token. The loss
is on the target tokens only: `__call__` returns the logits at the T target
slots, exactly as `EncoderDecoder.__call__` does.

Attention is causal; with `prefix_lm` it is bidirectional among the input tokens
(Raffel et al. 2020, §3.2.1; Wang et al. 2022), and the scheme is built
bidirectional (T5: the encoder's two-sided buckets), since queries in the prefix
see keys after them.
"""

from __future__ import annotations

from typing import Any, ClassVar, Mapping

import flax.linen as nn
import jax
import jax.numpy as jnp

from relpos_jax import model as model_lib
from relpos_jax.data import vocab

Array = jax.Array
SEP_ID = vocab.BOS_ID


def run_on_positions(inputs_BxS: Array, num_targets: int, inputs_pos_BxS: Array | None = None,
                     targets_pos_BxT: Array | None = None) -> tuple[Array, Array]:
  """Positions of the input slots and of the T slots after them (SEP, then the target).

  Args:
    inputs_BxS: input tokens, PAD on the right.
    num_targets: T.
    inputs_pos_BxS: input positions (default 0..S-1).
    targets_pos_BxT: the target slots' positions (default: one past the last real
      input token's position, counting up).

  Returns:
    `(inputs_pos_BxS, targets_pos_BxT)`, int32.
  """
  B, S = inputs_BxS.shape
  if inputs_pos_BxS is None:
    inputs_pos_BxS = model_lib.default_positions(inputs_BxS)
  if targets_pos_BxT is None:
    valid_BxS = inputs_BxS != vocab.PAD_ID
    start_B = jnp.max(jnp.where(valid_BxS, inputs_pos_BxS + 1, 0), axis=1)
    targets_pos_BxT = start_B[:, None] + jnp.arange(num_targets, dtype=jnp.int32)[None]
  return inputs_pos_BxS.astype(jnp.int32), targets_pos_BxT.astype(jnp.int32)


def sequence_mask(tokens_BxN: Array, prefix_length: int, prefix_lm: bool) -> Array:
  """Which keys each query sees `[B, N, N]`: causal (+ the whole input for prefix-LM), no PAD.

  Args:
    tokens_BxN: the sequence; its first `prefix_length` slots are the input.
    prefix_length: S.
    prefix_lm: input queries also see later input keys.
  """
  N = tokens_BxN.shape[1]
  allowed_NxN = jnp.tril(jnp.ones((N, N), bool))
  if prefix_lm:
    in_prefix_N = jnp.arange(N) < prefix_length
    allowed_NxN = allowed_NxN | (in_prefix_N[:, None] & in_prefix_N[None, :])
  return allowed_NxN[None] & (tokens_BxN != vocab.PAD_ID)[:, None, :]


class DecoderOnly(nn.Module):
  """A decoder-only Transformer over `input SEP target EOS` (see the module docstring).

  Attributes:
    vocab_size: vocabulary size (inputs and targets share it).
    d_model, num_heads, head_dim, d_ff: widths.
    num_layers: depth.
    dropout_rate: residual, MLP, embedding and attention-weight dropout.
    norm: "rms" (RMSNorm) or "layer" (LayerNorm).
    share_embeddings: tie the output projection to the token embeddings.
    prefix_lm: bidirectional attention among the input tokens.
    position: `{"name": scheme, **scheme keys}` (see `positions.default_config`).
    length_scaled_attention: multiply the attention logits by log(n) / log(n_train),
      n the keys a query sees (`attention.length_scale`; Chiang & Cholak 2022).
    length_scale_train_keys: n_train (>= 2 when `length_scaled_attention`).
    dtype: compute dtype, "float32", "bfloat16" or "auto" (see `model`'s module docstring).
  """

  vocab_size: int
  d_model: int = 64
  num_heads: int = 4
  head_dim: int = 16
  num_layers: int = 4
  d_ff: int = 256
  dropout_rate: float = 0.0
  norm: str = "rms"
  share_embeddings: bool = True
  prefix_lm: bool = False
  position: Mapping[str, Any] | None = None  # None: T5's defaults
  length_scaled_attention: bool = False
  length_scale_train_keys: int = 0
  dtype: str = "float32"  # "bfloat16": bf16 matmul operands, all else f32 (model docstring);
  # "auto": bfloat16 where bf16 matmuls are fast (AMX CPU, GPU, TPU), else float32

  # Input and target positions are one running sequence: randomized positions
  # must be drawn jointly over both (train_lib).
  joint_positions: ClassVar[bool] = True

  def __post_init__(self):
    model_lib.freeze_position(self)
    model_lib.compute_dtype(self.dtype)  # an unknown dtype fails here, naming the config key
    super().__post_init__()

  def setup(self):
    model_lib.check_norm(self.norm)
    self.embedding = model_lib.token_embedding(self)
    self.decoder = model_lib.Stack(
        self.num_layers, self.d_model, self.num_heads, self.head_dim, self.d_ff,
        self.dropout_rate, self.norm, self.position, causal=not self.prefix_lm, has_cross=False,
        length_scale_train_keys=model_lib.attention_train_keys(self),
        dtype=model_lib.compute_dtype(self.dtype), name="decoder")
    if not self.share_embeddings:
      self.logits_dense = model_lib.logits_dense(self)

  def check_lengths(self, max_input_length: int, max_target_length: int) -> None:
    """Raises ValueError (naming the config key) if the run-on positions cannot be encoded.

    Works on an unbound module: call it before `jit`. Targets continue after the
    inputs, so positions reach `max_input_length + max_target_length - 1`.
    """
    model_lib.check_positions(self, max_input_length + max_target_length)

  def _run(self, tokens_BxN: Array, pos_BxN: Array, prefix_length: int, *, decode: bool,
           deterministic: bool) -> Array:
    """The stack over a sequence whose first `prefix_length` slots are input; `[B, N, D]`."""
    mask_BxNxN = sequence_mask(tokens_BxN, prefix_length, self.prefix_lm)
    return self.decoder(self.embedding(tokens_BxN), pos_BxN, mask_BxNxN, decode=decode,
                        deterministic=deterministic)

  def __call__(self, inputs_BxS: Array, targets_BxT: Array, inputs_pos_BxS: Array | None = None,
               targets_pos_BxT: Array | None = None, deterministic: bool = True) -> Array:
    """Teacher-forced logits `[B, T, V]` predicting `targets` (which end with EOS).

    Args:
      inputs_BxS: input tokens, PAD on the right.
      targets_BxT: target tokens, EOS, PAD.
      inputs_pos_BxS: input positions (default 0..S-1).
      targets_pos_BxT: positions of `[SEP, t_0, ..., t_{T-2}]` (default: running on
        from the inputs, see `run_on_positions`).
      deterministic: disables dropout.
    """
    S, T = inputs_BxS.shape[1], targets_BxT.shape[1]
    inputs_pos_BxS, targets_pos_BxT = run_on_positions(inputs_BxS, T, inputs_pos_BxS,
                                                       targets_pos_BxT)
    tokens_BxN = jnp.concatenate([inputs_BxS, model_lib.shift_right(targets_BxT, SEP_ID)], 1)
    pos_BxN = jnp.concatenate([inputs_pos_BxS, targets_pos_BxT], axis=1)
    x_BxNxD = self._run(tokens_BxN, pos_BxN, S, decode=False, deterministic=deterministic)
    return model_lib.output_logits(self, x_BxNxD[:, S:])

  # The decoding protocol `decode.py` drives (shared with `EncoderDecoder`).

  def cache_sizing(self, inputs_BxS: Array, max_len: int) -> None:
    """Creates the cache for the prompt (S + SEP) and `max_len - 1` fed-back tokens."""
    B, S = inputs_BxS.shape
    zeros_BxN = jnp.zeros((B, S + max_len), jnp.int32)
    self.decoder(self.embedding(zeros_BxN), zeros_BxN, None, decode=True)

  def prime(self, inputs_BxS: Array, inputs_pos_BxS: Array | None = None,
            start_pos_B: Array | None = None) -> tuple[Array, Any, Array]:
    """Runs the prompt `inputs SEP` in one pass, filling the cache.

    Args:
      inputs_BxS: input tokens.
      inputs_pos_BxS: input positions (default 0..S-1).
      start_pos_B: SEP's position (default: after the last real input token).

    Returns:
      `(logits_BxV, None, start_pos_B)`: logits for the first target token, no
      extra context, and SEP's position; target token k sits at `start_pos_B + 1 + k`.
    """
    B, S = inputs_BxS.shape
    start_pos_Bx1 = None if start_pos_B is None else start_pos_B[:, None]
    inputs_pos_BxS, start_pos_Bx1 = run_on_positions(inputs_BxS, 1, inputs_pos_BxS,
                                                     start_pos_Bx1)
    tokens_BxP = jnp.concatenate([inputs_BxS, jnp.full((B, 1), SEP_ID, jnp.int32)], axis=1)
    pos_BxP = jnp.concatenate([inputs_pos_BxS, start_pos_Bx1], axis=1)
    x_BxPxD = self._run(tokens_BxP, pos_BxP, S, decode=True, deterministic=True)
    return model_lib.output_logits(self, x_BxPxD[:, -1]), None, start_pos_Bx1[:, 0]

  def step(self, token_B: Array, pos_B: Array, context: Any, inputs_BxS: Array) -> Array:
    """Feeds one token at `pos_B` through the cache; logits `[B, V]` for the next."""
    del context, inputs_BxS  # everything before is in the cache
    tokens_Bx1 = token_B[:, None]
    mask_Bx1x1 = (tokens_Bx1 != vocab.PAD_ID)[:, :, None]
    x_Bx1xD = self.decoder(self.embedding(tokens_Bx1), pos_B[:, None], mask_Bx1x1, decode=True)
    return model_lib.output_logits(self, x_Bx1xD[:, 0])
