"""Config arguments and overrides: `get_config(arg)`'s `arg`, and dotted-key overrides.

`python train.py --config configs/default.py:scheme=shaw,task=reverse,smoke` passes
`"scheme=shaw,task=reverse,smoke"`; a bare word is a flag set to True.
`apply_overrides` is the one way a config is changed by key: a sweep's runs
(`{"a.b": value}`), the command line inside a sweep, and eval-time overrides
(`["a.b=value"]`).
"""

from __future__ import annotations

import ast
import copy
from typing import Any, Mapping, Sequence

import ml_collections

_MAPPINGS = (Mapping, ml_collections.ConfigDict)  # a ConfigDict is not a `Mapping`


def parse(arg: str | None, allowed: Mapping[str, Any]) -> dict[str, Any]:
  """Parses `arg` into a dict, each value converted to the type of its default.

  Args:
    arg: the comma list (None or "" gives the defaults).
    allowed: every accepted key and its default (bool defaults are flags).

  Returns:
    `allowed` updated with the parsed values.

  Raises:
    ValueError: an unknown key (lists the valid ones) or a value of the wrong type.
  """
  out = dict(allowed)
  for item in filter(None, (s.strip() for s in (arg or "").split(","))):
    key, _, value = item.partition("=")
    if key not in allowed:
      raise ValueError(f"unknown config argument {key!r}; valid ones: {', '.join(allowed)}")
    default = allowed[key]
    if isinstance(default, bool):
      out[key] = value.lower() not in ("0", "false", "no") if value else True
    elif default is None:
      out[key] = value
    else:
      try:
        out[key] = type(default)(value)
      except ValueError as e:
        raise ValueError(f"config argument {key}={value!r}: expected {type(default).__name__}") from e
  return out


def parent_of(config: ml_collections.ConfigDict, key: str,
              what: str) -> tuple[ml_collections.ConfigDict, str]:
  """The sub-config holding a dotted key, and the key's last part; the key must exist.

  Args:
    config: the config.
    key: `a.b.c`.
    what: how the caller names the key in errors (e.g. "sweep override").

  Returns:
    `(node, leaf)` with `leaf in node`.

  Raises:
    ValueError: a part of the key the config does not have (the message names it).
  """
  *parents, leaf = key.split(".")
  node = config
  for i, part in enumerate(parents + [leaf]):
    if not isinstance(node, ml_collections.ConfigDict) or part not in node:
      raise ValueError(f"{what} {key!r}: the config has no key "
                       f"{'.'.join((parents + [leaf])[:i + 1])!r}")
    if i < len(parents):
      node = node[part]
  return node, leaf


def plain(value: Mapping[str, Any] | ml_collections.ConfigDict) -> dict[str, Any]:
  """A deep, plain-dict copy of a mapping or ConfigDict."""
  if isinstance(value, ml_collections.ConfigDict):
    return value.to_dict()
  return {k: plain(v) if isinstance(v, _MAPPINGS) else copy.deepcopy(v)
          for k, v in value.items()}


def parse_overrides(overrides: Sequence[str]) -> dict[str, Any]:
  """`["a.b=1", "c=yarn"]` -> `{"a.b": 1, "c": "yarn"}`: Python literals, else strings.

  Args:
    overrides: `key=value` strings.

  Returns:
    The parsed mapping.

  Raises:
    ValueError: an item without `=` or without a key.
  """
  out = {}
  for item in overrides:
    key, sep, text = item.partition("=")
    if not sep or not key.strip():
      raise ValueError(f"override {item!r}: expected key=value, e.g. "
                       "model.position.scaling.type=yarn")
    try:
      value = ast.literal_eval(text)
    except (ValueError, SyntaxError):
      value = text
    out[key.strip()] = value
  return out


def apply_overrides(config: ml_collections.ConfigDict,
                    overrides: Mapping[str, Any] | Sequence[str], *,
                    what: str = "override") -> ml_collections.ConfigDict:
  """A copy of `config` with dotted-key overrides set (existing keys only).

  Args:
    config: the base config (not modified).
    overrides: `{"a.b.c": value}`, or `["a.b.c=value"]` strings (`parse_overrides`);
      a mapping value replaces the sub-config at that key whole, any other value
      sets an existing key.
    what: how errors name an override ("sweep override", "eval override").

  Returns:
    The new config.

  Raises:
    ValueError: a key the config does not have (a typo would otherwise run the
      unchanged config under a new name).
    TypeError: a value of the wrong type for its key.
  """
  if not isinstance(overrides, _MAPPINGS):
    overrides = parse_overrides(overrides)
  config = copy.deepcopy(config)
  config.unlock()
  for key, value in overrides.items():
    node, leaf = parent_of(config, key, what)
    if isinstance(value, _MAPPINGS):
      node[leaf] = ml_collections.ConfigDict(plain(value))
    else:
      node[leaf] = copy.deepcopy(value)
  return config
