"""The registry of positional schemes.

Adding a scheme = one new file in this folder (a `base.PositionScheme` subclass
with its pure math), one line in `SCHEMES`, and its tests. Nothing else in the
codebase branches on scheme names.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Mapping

import ml_collections

from relpos_jax.positions import alibi
from relpos_jax.positions import base
from relpos_jax.positions import fire
from relpos_jax.positions import kerple
from relpos_jax.positions import learned
from relpos_jax.positions import nope
from relpos_jax.positions import rope
from relpos_jax.positions import shaw
from relpos_jax.positions import sinusoidal
from relpos_jax.positions import t5
from relpos_jax.positions import xl

PositionScheme = base.PositionScheme

SCHEMES: dict[str, type[base.PositionScheme]] = {
    "none": nope.NoPE,
    "sinusoidal": sinusoidal.Sinusoidal,
    "learned": learned.Learned,
    "shaw": shaw.Shaw,
    "t5": t5.T5Bias,
    "rope": rope.RoPE,
    "alibi": alibi.ALiBi,
    "xl": xl.TransformerXL,
    "kerple": kerple.KerpleLog,
    "fire": fire.FIRE,
}


def scheme_class(name: str) -> type[base.PositionScheme]:
  """The registered class for `name`; ValueError listing valid names otherwise."""
  if name not in SCHEMES:
    raise ValueError(f"unknown scheme {name!r}; choose one of: {', '.join(sorted(SCHEMES))}")
  return SCHEMES[name]


def config_fields(name: str) -> dict[str, Any]:
  """The user config keys of scheme `name` and their defaults (context fields excluded)."""
  cls = scheme_class(name)
  return {f.name: plain(f.default) for f in dataclasses.fields(cls)
          if f.init and f.name not in base.CONTEXT_FIELDS + ("parent", "name")
          and f.default is not dataclasses.MISSING}


def plain(value: Any) -> Any:
  """`value` with every nested mapping (FrozenDict, ConfigDict) turned into a plain dict.

  A scheme's nested config section (RoPE's `scaling`) is a FrozenDict default in
  the class and a nested ConfigDict in the config; the model stores it as plain
  dicts inside its FrozenDict, which keeps the module hashable.
  """
  if hasattr(value, "items"):
    return {k: plain(v) for k, v in value.items()}
  return value


def default_config(name: str) -> ml_collections.ConfigDict:
  """`{"name": name, **defaults}`: the `model.position` config for scheme `name`."""
  return ml_collections.ConfigDict({"name": name, **config_fields(name)})


def make_scheme(config: Mapping[str, Any], *, num_heads: int, head_dim: int, d_model: int,
                causal: bool, **module_kwargs) -> base.PositionScheme:
  """Builds the scheme module `config["name"]` with the remaining keys as fields.

  Args:
    config: `{"name": ..., **scheme fields}` (e.g. `model.position`).
    num_heads, head_dim, d_model, causal: context supplied by the model.
    **module_kwargs: Flax module arguments (`name`, `parent`).

  Returns:
    An unbound `PositionScheme` module.

  Raises:
    ValueError: unknown scheme name, or a key the scheme does not have.
  """
  config = dict(config)
  scheme = config.pop("name", None)
  if scheme is None:
    raise ValueError(f"position config needs a 'name'; choose one of: {', '.join(sorted(SCHEMES))}")
  valid = config_fields(scheme)
  unknown = sorted(set(config) - set(valid))
  if unknown:
    raise ValueError(
        f"scheme {scheme!r} has no config key(s) {unknown}; its keys are {sorted(valid)}. "
        f"To switch schemes, use the config's `scheme=` argument (e.g. configs/default.py:"
        f"scheme={scheme}) so the position config is rebuilt with that scheme's keys.")
  return scheme_class(scheme)(num_heads=num_heads, head_dim=head_dim, d_model=d_model,
                              causal=causal, **module_kwargs, **config)
