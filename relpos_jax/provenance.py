"""What produced a result: package versions, the JAX backend and the code's git commit.

`provenance()` goes into every run's config.json (key `provenance`, not part of
the run identity) so a number in a table can be traced to the stack and the
code that made it.
"""

from __future__ import annotations

import functools
from importlib import metadata
import os
import platform
import subprocess
from typing import Any

import jax

from relpos_jax import precision

PACKAGES = ("jax", "jaxlib", "flax", "optax", "orbax-checkpoint", "numpy")
# What the experiments write, not the code that makes a number: a stored table's records
# change while its sweep (or `make more-seeds`, which appends seeds to committed records)
# runs, and must not make the next run's records count as made by uncommitted code.
OUTPUT_PATHS = ("results", "RESULTS.md")
_REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def versions() -> dict[str, str | None]:
  """Installed version of each of `PACKAGES` (None where not installed)."""
  out = {}
  for name in PACKAGES:
    try:
      out[name] = metadata.version(name)
    except metadata.PackageNotFoundError:
      out[name] = None
  return out


@functools.lru_cache(maxsize=1)
def git_state(repo: str = _REPO) -> dict[str, Any]:
  """`{"commit": sha or None, "dirty": bool or None}` of the checkout holding this code.

  `dirty`: uncommitted changes to tracked files outside `OUTPUT_PATHS`.
  """
  def git(*args: str) -> str | None:
    try:
      return subprocess.run(["git", "-C", repo, *args], capture_output=True, text=True,
                            timeout=10, check=True).stdout.strip()
    except (OSError, subprocess.SubprocessError):
      return None

  commit = git("rev-parse", "HEAD")
  outputs = [f":(exclude){path}" for path in OUTPUT_PATHS]
  status = (git("status", "--porcelain", "--untracked-files=no", "--", ".", *outputs)
            if commit else None)
  return {"commit": commit, "dirty": None if status is None else bool(status)}


def is_dirty(repo: str = _REPO) -> bool:
  """Whether the checkout's code has uncommitted changes (`git_state`), asked now (not cached)."""
  git_state.cache_clear()
  return bool(git_state(repo)["dirty"])


def check_clean_tree(allow_dirty: bool, what: str = "store records", repo: str = _REPO) -> None:
  """Refuses (ValueError) to `what` from a checkout whose code has uncommitted changes.

  A record must name the code that made it: a commit alone does not, if the tree
  differed from it. `allow_dirty` overrides (the records then say `dirty` and
  the tables mark their rows).
  """
  if is_dirty(repo) and not allow_dirty:
    raise ValueError(f"refusing to {what} from a working tree with uncommitted changes to "
                     f"tracked files ({repo}): commit them first, or pass --allow_dirty "
                     "(the table then marks these rows)")


def portable_path(path: str, repo: str = _REPO) -> str:
  """`path` relative to the repository when inside it, else its last component.

  Records name a run's workdir this way, never by a machine's absolute path.
  """
  full, root = os.path.abspath(path), os.path.abspath(repo)
  if os.path.commonpath([full, root]) == root:
    return os.path.relpath(full, root)
  return os.path.basename(os.path.normpath(full))


def provenance() -> dict[str, Any]:
  """Versions, Python, backend, device and process counts, the git commit, and what
  `model.dtype = "auto"` resolves to here and why (`precision.record`)."""
  return {"versions": versions(), "python": platform.python_version(),
          "backend": jax.default_backend(), "device_count": jax.device_count(),
          "process_count": jax.process_count(), "git": git_state(),
          "precision": precision.record()}
