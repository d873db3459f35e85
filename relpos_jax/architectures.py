"""The model registry: `config.model.arch` names the architecture class.

    model = architectures.make_model(config.model, vocab_size=vocab.size)

`ARCHS` maps each name to its Flax module; its config section is the class's
dataclass fields (declared once, there) plus `arch`. Both architectures share one
call signature: `model.apply(variables, inputs_BxS, targets_BxT)` gives the
teacher-forced logits `[B, T, V]` predicting `targets`, and `decode.greedy_decode`
generates from either through the decoding protocol `Seq2SeqModel` declares.
"""

from __future__ import annotations

import dataclasses
from typing import Any, ClassVar, Mapping, Protocol, runtime_checkable

import flax.linen as nn
import jax
import ml_collections

from relpos_jax import decoder_only
from relpos_jax import model as model_lib
from relpos_jax import positions

Array = jax.Array


@runtime_checkable
class Seq2SeqModel(Protocol):
  """What every registered architecture offers the trainer, the evaluator and `decode.py`.

  Called with `model.apply(variables, ...)` (or `method=`), never directly.
  """

  joint_positions: ClassVar[bool]  # one running sequence: randomized positions drawn jointly

  def __call__(self, inputs_BxS: Array, targets_BxT: Array, inputs_pos_BxS: Array | None = None,
               targets_pos_BxT: Array | None = None, deterministic: bool = True) -> Array:
    """Teacher-forced logits `[B, T, V]` predicting `targets` (which end with EOS)."""

  def check_lengths(self, max_input_length: int, max_target_length: int) -> None:
    """Raises ValueError if the scheme cannot encode these lengths (before any tracing)."""

  def cache_sizing(self, inputs_BxS: Array, max_len: int) -> None:
    """Creates the decoding cache for `max_len` generated tokens (inside `init`)."""

  def prime(self, inputs_BxS: Array, inputs_pos_BxS: Array | None = None,
            start_pos_B: Array | None = None) -> tuple[Array, Any, Array]:
    """Feeds everything before the first target token: `(logits_BxV, context, start_pos_B)`."""

  def step(self, token_B: Array, pos_B: Array, context: Any, inputs_BxS: Array) -> Array:
    """Feeds one token at `pos_B` through the cache: logits `[B, V]` for the next."""


ARCHS: dict[str, type[nn.Module]] = {
    "encoder_decoder": model_lib.EncoderDecoder,
    "decoder_only": decoder_only.DecoderOnly,
}
DEFAULT_ARCH = "encoder_decoder"


def arch_class(name: str) -> type[nn.Module]:
  """The module class registered as `name`; ValueError listing the valid names."""
  if name not in ARCHS:
    raise ValueError(f"unknown architecture {name!r} (config key model.arch); "
                     f"choose one of: {', '.join(ARCHS)}")
  return ARCHS[name]


def make_model(config: Mapping[str, Any], *, vocab_size: int) -> nn.Module:
  """The model of a `model` config section.

  Args:
    config: `{"arch": name, **the class's fields}` (`arch` defaults to
      encoder_decoder, so configs saved before it existed still load).
    vocab_size: the data's vocabulary size.

  Returns:
    The unbound module.
  """
  fields = dict(config)
  return arch_class(fields.pop("arch", DEFAULT_ARCH))(vocab_size=vocab_size, **fields)


def default_config(arch: str = DEFAULT_ARCH) -> ml_collections.ConfigDict:
  """The `model` config of `arch`: its class's fields with their defaults, plus `arch`.

  `vocab_size` is left out (it comes from the data's vocabulary) and `position`
  is the T5 scheme's config; set it with `positions.default_config(name)`.
  """
  fields = {f.name: f.default for f in dataclasses.fields(arch_class(arch))
            if f.init and f.name not in ("vocab_size", "parent", "name", "position")}
  return ml_collections.ConfigDict(
      {"arch": arch, **fields, "position": positions.default_config("t5")})
