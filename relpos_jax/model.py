"""The encoder-decoder: one pre-norm `Block`, one `Stack`, pluggable positions.

Scheme placement follows the originals:
- absolute schemes (`embed` hook) add to the encoder and decoder input embeddings,
  one instance (one table) per stack;
- attention schemes act in self-attention only: bidirectional in the encoder,
  causal in the decoder; cross-attention has no position term;
- a scheme whose `shared_across_layers()` is True (T5) is one instance per stack
  used by all its layers; otherwise (Shaw, ...) each layer has its own.

Token ids follow `relpos_jax.data.vocab`: PAD = 0 (masked everywhere), BOS starts
the decoder input. Token embeddings are shared by encoder and decoder (one vocab);
`share_embeddings` also ties the output projection to them (logits = x Eᵀ/sqrt(D)).

Precision (`dtype`, config key `model.dtype`): the compute dtype of the matmuls.
Parameters are float32. In bfloat16 every matmul (dense layers, `q·k`, `w·v`,
output logits) reads bf16 operands and accumulates and returns float32, through
`dots`, which hands XLA only the dot forms it runs natively, forward and backward;
the attention's queries, keys, values and weights (and so the decode cache), which
only matmuls read, are stored in bf16. Everything else stays float32: the residual
stream, the embeddings, the norms, the MLP's activation and dropout, the attention
logits and softmax, the positional math (see `positions.base`) and the output
logits. (Casting that elementwise work to bf16 as well, as t5x does, costs more
than it saves on XLA:CPU, which emulates bf16 arithmetic: docs/performance.md.)
"auto" is bfloat16 where the backend runs bf16 dots fast, else float32 (`precision`).
"""

from __future__ import annotations

from typing import Any, ClassVar, Mapping, Sequence

import flax
import flax.linen as nn
import jax
import jax.numpy as jnp

from relpos_jax import attention
from relpos_jax import dots
from relpos_jax import dropout as dropout_lib
from relpos_jax import positions
from relpos_jax import precision
from relpos_jax.data import vocab

Array = jax.Array

NORMS = {"rms": nn.RMSNorm, "layer": nn.LayerNorm}
# `model.dtype`: the compute dtype of the matmuls' operands (parameters and activations stay
# float32);
# "auto" is one of the two, chosen by the backend (`precision.resolve`).
DTYPES = {"float32": jnp.float32, "bfloat16": jnp.bfloat16}


def compute_dtype(name: str) -> Any:
  """The jnp dtype of `model.dtype`; ValueError naming the config key for an unknown one."""
  if name not in DTYPES and name != "auto":
    raise ValueError(f"unknown dtype {name!r} (config key model.dtype); "
                     f"choose one of: {', '.join(DTYPES)}, auto")
  return DTYPES[precision.resolve(name)]


def f32_dot_general(*args, **kwargs) -> Array:
  """`lax.dot_general` accumulating and returning float32 (a Dense whose output must be f32)."""
  return jax.lax.dot_general(*args, preferred_element_type=jnp.float32, **kwargs)


def default_positions(tokens_BxL: Array) -> Array:
  """Positions 0..L-1 for every row (right padding)."""
  B, L = tokens_BxL.shape
  return jnp.broadcast_to(jnp.arange(L, dtype=jnp.int32), (B, L))


def shift_right(targets_BxT: Array, bos_id: int = vocab.BOS_ID) -> Array:
  """Teacher-forcing decoder input: `[BOS, t_0, ..., t_{T-2}]`."""
  return jnp.concatenate(
      [jnp.full_like(targets_BxT[:, :1], bos_id), targets_BxT[:, :-1]], axis=1)


class Mlp(nn.Module):
  """Position-wise feed-forward: Dense(d_ff) -> GELU -> dropout -> Dense(D)."""

  d_model: int
  d_ff: int
  dropout_rate: float
  dtype: Any = jnp.float32  # the matmuls' compute dtype (parameters, activations: float32)

  @nn.compact
  def __call__(self, x_BxLxD: Array, deterministic: bool) -> Array:
    dense = lambda n, name: nn.Dense(n, dtype=self.dtype, param_dtype=jnp.float32, name=name,
                                     **dots.dense_kwargs(self.dtype, out_dtype=jnp.float32))
    h_BxLxF = nn.gelu(dense(self.d_ff, "wi")(x_BxLxD))
    h_BxLxF = dropout_lib.Dropout(self.dropout_rate)(h_BxLxF, deterministic=deterministic)
    return dense(self.d_model, "wo")(h_BxLxF)


class Block(nn.Module):
  """Pre-norm block: self-attention, optional cross-attention, MLP; each residual."""

  d_model: int
  num_heads: int
  head_dim: int
  d_ff: int
  dropout_rate: float
  norm: str
  has_cross: bool
  scheme: positions.PositionScheme | None
  length_scale_train_keys: int = 0  # length-scaled attention's n_train (0: off)
  dtype: Any = jnp.float32  # the matmuls' compute dtype (parameters, activations: float32)

  def setup(self):
    norm = lambda: make_norm(self.norm)
    attn = lambda scheme, name: attention.Attention(
        self.num_heads, self.head_dim, self.d_model, self.dropout_rate, scheme,
        self.length_scale_train_keys, self.dtype, name=name)
    self.self_norm = norm()
    self.self_attention = attn(self.scheme, "self_attention")
    if self.has_cross:
      self.cross_norm = norm()
      self.cross_attention = attn(None, "cross_attention")
    self.mlp_norm = norm()
    self.mlp = Mlp(self.d_model, self.d_ff, self.dropout_rate, self.dtype)
    self.dropout = dropout_lib.Dropout(self.dropout_rate)

  def __call__(self, x_BxLxD, pos_BxL, mask_BxLxL, cross_kv=None, cross_mask_BxLxS=None,
               decode=False, deterministic=True):
    """One block; `cross_kv` are this layer's precomputed encoder keys/values."""
    drop = lambda h: self.dropout(h, deterministic=deterministic)
    h = self.self_attention(self.self_norm(x_BxLxD), pos_BxL, mask_BxQxK=mask_BxLxL,
                            decode=decode, deterministic=deterministic)
    x_BxLxD = x_BxLxD + drop(h)
    if self.has_cross:
      h = self.cross_attention(self.cross_norm(x_BxLxD), None, kv=cross_kv,
                               mask_BxQxK=cross_mask_BxLxS, deterministic=deterministic)
      x_BxLxD = x_BxLxD + drop(h)
    return x_BxLxD + drop(self.mlp(self.mlp_norm(x_BxLxD), deterministic))


class Stack(nn.Module):
  """Position embedding + `num_layers` blocks + final norm (encoder or decoder).

  `causal` is the scheme's direction (T5's unidirectional buckets); the attention
  mask is the caller's. `has_cross` adds cross-attention to every block.
  `length_scale_train_keys` > 0 turns on length-scaled attention in every block
  (`attention.length_scale`). `dtype` is the compute dtype of its matmuls.
  """

  num_layers: int
  d_model: int
  num_heads: int
  head_dim: int
  d_ff: int
  dropout_rate: float
  norm: str
  position: Mapping[str, Any]
  causal: bool
  has_cross: bool
  length_scale_train_keys: int = 0
  dtype: Any = jnp.float32

  def _make_scheme(self, **module_kwargs) -> positions.PositionScheme:
    """This stack's scheme module from the position config."""
    return positions.make_scheme(self.position, num_heads=self.num_heads,
                                 head_dim=self.head_dim, d_model=self.d_model,
                                 causal=self.causal, **module_kwargs)

  def setup(self):
    cls = positions.scheme_class(self.position["name"])
    self.embedder = self._make_scheme(name="position_embed") if cls.implements("embed") else None
    schemes = [None] * self.num_layers
    if cls.uses_attention():
      if self._make_scheme(parent=None).shared_across_layers():
        schemes = [self._make_scheme(name="position")] * self.num_layers
      else:
        schemes = [self._make_scheme(name=f"position_{i}") for i in range(self.num_layers)]
    self.layers = [
        Block(self.d_model, self.num_heads, self.head_dim, self.d_ff, self.dropout_rate,
              self.norm, has_cross=self.has_cross, scheme=schemes[i],
              length_scale_train_keys=self.length_scale_train_keys, dtype=self.dtype,
              name=f"layer_{i}")
        for i in range(self.num_layers)]
    self.final_norm = make_norm(self.norm)
    self.dropout = dropout_lib.Dropout(self.dropout_rate)

  def cross_kv(self, enc_BxSxD: Array) -> list[tuple[Array, Array]]:
    """Each layer's cross-attention keys and values of the encoder output (head-major)."""
    return [layer.cross_attention.cacheable_kv(enc_BxSxD) for layer in self.layers]

  def __call__(self, x_BxLxD, pos_BxL, mask_BxLxL, cross_kv=None, cross_mask_BxLxS=None,
               decode=False, deterministic=True):
    """Embedded tokens -> normalized outputs `[B, L, D]`."""
    if self.embedder is not None:
      x_BxLxD = self.embedder.embed(x_BxLxD, pos_BxL)
    x_BxLxD = self.dropout(x_BxLxD, deterministic=deterministic)
    for i, layer in enumerate(self.layers):
      x_BxLxD = layer(x_BxLxD, pos_BxL, mask_BxLxL,
                      None if cross_kv is None else cross_kv[i], cross_mask_BxLxS,
                      decode, deterministic)
    return self.final_norm(x_BxLxD)


class EncoderDecoder(nn.Module):
  """A small encoder-decoder Transformer with a configurable positional scheme.

  Attributes:
    vocab_size: shared source/target vocabulary size.
    d_model, num_heads, head_dim, d_ff: widths.
    num_encoder_layers, num_decoder_layers: depths.
    dropout_rate: residual, MLP, embedding and attention-weight dropout.
    norm: "rms" (RMSNorm) or "layer" (LayerNorm).
    share_embeddings: tie the output projection to the token embeddings.
    position: `{"name": scheme, **scheme keys}` (see `positions.default_config`).
    length_scaled_attention: multiply every attention's logits by log(n) / log(n_train),
      n the keys a query sees (`attention.length_scale`; Chiang & Cholak 2022).
    length_scale_train_keys: n_train (>= 2 when `length_scaled_attention`).
    dtype: compute dtype, "float32", "bfloat16" or "auto" (see the module docstring).
  """

  joint_positions: ClassVar[bool] = False  # inputs and targets have positions of their own
  vocab_size: int
  d_model: int = 64
  num_heads: int = 4
  head_dim: int = 16
  num_encoder_layers: int = 2
  num_decoder_layers: int = 2
  d_ff: int = 256
  dropout_rate: float = 0.0
  norm: str = "rms"
  share_embeddings: bool = True
  position: Mapping[str, Any] | None = None  # None: T5's defaults
  length_scaled_attention: bool = False
  length_scale_train_keys: int = 0
  dtype: str = "float32"  # "bfloat16": bf16 matmul operands, all else f32 (model docstring);
  # "auto": bfloat16 where bf16 matmuls are fast (AMX CPU, GPU, TPU), else float32

  def __post_init__(self):
    freeze_position(self)
    compute_dtype(self.dtype)  # an unknown dtype fails here, naming the config key
    super().__post_init__()

  def setup(self):
    check_norm(self.norm)
    stack = lambda n, causal, name: Stack(
        n, self.d_model, self.num_heads, self.head_dim, self.d_ff, self.dropout_rate,
        self.norm, self.position, causal, has_cross=causal,
        length_scale_train_keys=attention_train_keys(self), dtype=compute_dtype(self.dtype),
        name=name)
    self.embedding = token_embedding(self)
    self.encoder = stack(self.num_encoder_layers, False, "encoder")
    self.decoder = stack(self.num_decoder_layers, True, "decoder")
    if not self.share_embeddings:
      self.logits_dense = logits_dense(self)

  def check_lengths(self, max_input_length: int, max_target_length: int) -> None:
    """Raises ValueError (naming the config key) if positions this long cannot be encoded.

    Works on an unbound module: call it before `jit`, where positions are traced.
    Encoder and decoder each count positions from 0.
    """
    check_positions(self, max(max_input_length, max_target_length))

  def encode(self, inputs_BxS: Array, inputs_pos_BxS: Array | None = None,
             deterministic: bool = True) -> Array:
    """Encoder outputs `[B, S, D]` (PAD tokens are masked as keys)."""
    if inputs_pos_BxS is None:
      inputs_pos_BxS = default_positions(inputs_BxS)
    valid_BxS = inputs_BxS != vocab.PAD_ID
    mask_BxSxS = jnp.broadcast_to(valid_BxS[:, None, :], inputs_BxS.shape + inputs_BxS.shape[1:])
    return self.encoder(self.embedding(inputs_BxS), inputs_pos_BxS, mask_BxSxS,
                        deterministic=deterministic)

  def cross_kv(self, enc_BxSxD: Array) -> list[tuple[Array, Array]]:
    """Per decoder layer, the encoder keys/values: computed once per decoded batch.

    Head-major `[B, H, S, E]` pairs (`Attention.cacheable_kv`): the layout the
    attention matmuls read in place, so a decoding loop never transposes them.
    """
    return self.decoder.cross_kv(enc_BxSxD)

  def decode(self, decoder_input_BxT: Array, decoder_pos_BxT: Array | None, inputs_BxS: Array,
             *, enc_BxSxD: Array | None = None, cross_kv: Sequence | None = None,
             decode: bool = False, deterministic: bool = True) -> Array:
    """Decoder logits `[B, T, V]`.

    Args:
      decoder_input_BxT: BOS-shifted targets (teacher forcing), or the last token
        (`T = 1`) when `decode=True`.
      decoder_pos_BxT: their positions (default 0..T-1; at cached step t pass t).
      inputs_BxS: source tokens (only their PAD mask is used here).
      enc_BxSxD: encoder output; or pass `cross_kv` precomputed by `cross_kv()`.
      cross_kv: per-layer encoder keys/values.
      decode: cached single-step decoding (initialize the cache via `init`).
      deterministic: disables dropout.
    """
    if decoder_pos_BxT is None:
      decoder_pos_BxT = default_positions(decoder_input_BxT)
    if cross_kv is None:
      cross_kv = self.cross_kv(enc_BxSxD)
    B, T = decoder_input_BxT.shape
    causal_TxT = jnp.tril(jnp.ones((T, T), bool))
    valid_BxT = decoder_input_BxT != vocab.PAD_ID
    self_mask_BxTxT = causal_TxT[None] & valid_BxT[:, None, :]
    cross_mask_BxTxS = jnp.broadcast_to((inputs_BxS != vocab.PAD_ID)[:, None, :],
                                        (B, T, inputs_BxS.shape[1]))
    x_BxTxD = self.decoder(self.embedding(decoder_input_BxT), decoder_pos_BxT, self_mask_BxTxT,
                           cross_kv, cross_mask_BxTxS, decode, deterministic)
    return output_logits(self, x_BxTxD)

  def __call__(self, inputs_BxS: Array, targets_BxT: Array, inputs_pos_BxS: Array | None = None,
               targets_pos_BxT: Array | None = None, deterministic: bool = True) -> Array:
    """Teacher-forced logits `[B, T, V]` predicting `targets` (which end with EOS)."""
    enc_BxSxD = self.encode(inputs_BxS, inputs_pos_BxS, deterministic)
    return self.decode(shift_right(targets_BxT), targets_pos_BxT, inputs_BxS,
                       enc_BxSxD=enc_BxSxD, deterministic=deterministic)

  # The decoding protocol `decode.py` drives (shared with `DecoderOnly`).

  def cache_sizing(self, inputs_BxS: Array, max_len: int) -> None:
    """Creates the decoder's self-attention cache for `max_len` steps (inside `init`)."""
    B, S = inputs_BxS.shape
    self.decode(jnp.zeros((B, max_len), jnp.int32), None, inputs_BxS,
                enc_BxSxD=jnp.zeros((B, S, self.d_model)), decode=True)

  def prime(self, inputs_BxS: Array, inputs_pos_BxS: Array | None = None,
            start_pos_B: Array | None = None) -> tuple[Array, Any, Array]:
    """Encodes the source and feeds BOS: everything before the first target token.

    Args:
      inputs_BxS: source tokens.
      inputs_pos_BxS: source positions (default 0..S-1).
      start_pos_B: BOS's decoder position (default 0).

    Returns:
      `(logits_BxV, context, start_pos_B)`: logits for the first target token, what
      `step` needs (the cross-attention keys/values), and BOS's position; target
      token k then sits at `start_pos_B + 1 + k`.
    """
    B = inputs_BxS.shape[0]
    start_pos_B = jnp.zeros((B,), jnp.int32) if start_pos_B is None else start_pos_B
    cross_kv = self.cross_kv(self.encode(inputs_BxS, inputs_pos_BxS))
    logits_Bx1xV = self.decode(jnp.full((B, 1), vocab.BOS_ID, jnp.int32), start_pos_B[:, None],
                               inputs_BxS, cross_kv=cross_kv, decode=True)
    return logits_Bx1xV[:, 0], cross_kv, start_pos_B

  def step(self, token_B: Array, pos_B: Array, context: Any, inputs_BxS: Array) -> Array:
    """Feeds one token at `pos_B` through the cache; logits `[B, V]` for the next."""
    logits_Bx1xV = self.decode(token_B[:, None], pos_B[:, None], inputs_BxS, cross_kv=context,
                               decode=True)
    return logits_Bx1xV[:, 0]


# Shared by both architectures (this module's EncoderDecoder and decoder_only.DecoderOnly).

def freeze_position(module: nn.Module) -> None:
  """Stores `module.position` as a hashable FrozenDict (T5's defaults for None).

  Immutable and hashable, so the module can be a static `jit` argument; nested
  sections (RoPE's `scaling`) become plain dicts, which FrozenDict freezes too.
  """
  position = positions.default_config("t5") if module.position is None else module.position
  object.__setattr__(module, "position", flax.core.FrozenDict(positions.plain(position)))


def make_norm(norm: str) -> nn.Module:
  """The `model.norm` layer, float32 throughout (statistics, scale, output)."""
  return NORMS[norm](dtype=jnp.float32, param_dtype=jnp.float32)


def check_norm(norm: str) -> None:
  """Raises ValueError naming `model.norm` for an unknown norm."""
  if norm not in NORMS:
    raise ValueError(f"unknown norm {norm!r} (config key model.norm); "
                     f"choose one of: {', '.join(NORMS)}")


def attention_train_keys(module: nn.Module) -> int:
  """`length_scale_train_keys` if `length_scaled_attention` is on, else 0 (off).

  Raises ValueError (naming the config keys) if it is on with n_train < 2.
  """
  if not module.length_scaled_attention:
    return 0
  if module.length_scale_train_keys < 2:
    raise ValueError(
        "model.length_scaled_attention needs model.length_scale_train_keys >= 2 (the keys a "
        "query sees at the training length, where the logit scale log(n)/log(n_train) is 1); "
        f"got {module.length_scale_train_keys}.")
  return module.length_scale_train_keys


def token_embedding(module: nn.Module) -> nn.Embed:
  """The token embedding (also the tied output projection), named `embedding`.

  A float32 table; lookups are float32 in either compute dtype (the tied logits read
  the table in the compute dtype, `output_logits`).
  """
  return nn.Embed(module.vocab_size, module.d_model, embedding_init=nn.initializers.normal(1.0),
                  dtype=jnp.float32, param_dtype=jnp.float32, name="embedding")


def logits_dense(module: nn.Module) -> nn.Dense:
  """The untied output projection, named `logits`: compute-dtype inputs, float32 logits."""
  dtype = compute_dtype(module.dtype)
  kwargs = dots.dense_kwargs(dtype, out_dtype=jnp.float32) or {"dot_general": f32_dot_general}
  return nn.Dense(module.vocab_size, use_bias=False, dtype=dtype, param_dtype=jnp.float32,
                  name="logits", **kwargs)


def output_logits(module: nn.Module, x_BxLxD: Array) -> Array:
  """Float32 logits `[B, L, V]`: tied (x Eᵀ / sqrt(D)) or the untied `logits_dense`.

  The matmul reads its inputs in the compute dtype and accumulates in float32, so
  the loss and the greedy choice see float32 logits in either dtype.
  """
  if module.share_embeddings:
    logits_BxLxV = dots.einsum("...d,vd->...v", x_BxLxD, module.embedding.embedding,
                               compute_dtype(module.dtype))
    return logits_BxLxV * module.d_model ** -0.5
  return module.logits_dense(x_BxLxD)


def check_positions(module: nn.Module, num_positions: int) -> None:
  """Raises ValueError (naming the config key) if positions 0..num_positions-1 cannot be encoded.

  Works on an unbound module: call it before `jit`, where positions are traced.
  """
  scheme = positions.make_scheme(module.position, num_heads=module.num_heads,
                                 head_dim=module.head_dim, d_model=module.d_model, causal=False,
                                 parent=None)
  scheme.check_positions(num_positions)
