"""Whether a config is the run a workdir (or a stored record) holds: the run's identity.

Resuming a run, reusing a stored one and refusing to mix two runs in one workdir
all compare `RUN_IDENTITY_KEYS`. A saved config predates keys added to the code
later; those count at their architecture's default (`architectures.default_config`),
which is why this lives here and not in `workdir` (storage knows no model).
"""

from __future__ import annotations

import os

import ml_collections

from relpos_jax import architectures
from relpos_jax import workdir as workdir_lib

# Config keys that must match to resume a workdir (they shape params or data).
RUN_IDENTITY_KEYS = ("model", "data", "seed", "num_seeds", "randomized")


def identity_changes(saved: dict, config: ml_collections.ConfigDict) -> list[str]:
  """The `RUN_IDENTITY_KEYS` on which a saved config.json and `config` differ.

  A model key the saved config lacks (added to the code after the run was saved,
  e.g. `model.dtype`) counts as its default, which computes what the run did.
  """
  new = workdir_lib.config_json(config)
  saved = with_model_defaults(saved)
  return [k for k in RUN_IDENTITY_KEYS if saved.get(k) != new.get(k)]


def with_model_defaults(saved: dict) -> dict:
  """`saved` with each model key it lacks (but `position`) at its architecture's default."""
  model = saved.get("model")
  arch = model.get("arch", architectures.DEFAULT_ARCH) if isinstance(model, dict) else None
  if arch not in architectures.ARCHS:
    return saved
  defaults = architectures.default_config(arch).to_dict()
  del defaults["position"]
  return {**saved, "model": {**defaults, **model}}


def check_identity(config: ml_collections.ConfigDict, workdir: str) -> None:
  """Refuses (ValueError) a workdir whose config.json is a different run; reads only."""
  path = os.path.join(workdir, workdir_lib.CONFIG_FILE)
  if not os.path.exists(path):
    return
  old = workdir_lib.read_json(path)
  changed = identity_changes(old, config)
  if changed:
    raise ValueError(
        f"workdir {workdir} holds a run with a different config in {changed} "
        f"(saved: { {k: old.get(k) for k in changed} }); resuming would mix two runs. "
        "Use a new --workdir, or delete that one.")
