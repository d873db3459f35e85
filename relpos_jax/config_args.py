"""The `arg` of a config file's `get_config(arg)`: `key=value,key=value,flag`.

`python train.py --config configs/default.py:scheme=shaw,task=reverse,smoke` passes
`"scheme=shaw,task=reverse,smoke"`; a bare word is a flag set to True.
"""

from __future__ import annotations

from typing import Any, Mapping

import ml_collections


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
