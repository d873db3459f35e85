"""The one owner of a run directory: its files, its identity and its checkpoints.

A workdir holds

  config.json             the run's config, plus `provenance` (versions, backend,
                          git commit; not part of the run's identity)
  vocab.json              the vocabulary (ids)
  checkpoints/<step>/     orbax, the last `keep_checkpoints`; a save in progress (or cut
                          off) is `<step>.orbax-checkpoint-tmp*`, removed on the next start
  train.lock              who trains here now (relpos_jax/workdir_lock.py)
  checkpoints_unreadable/<step>/   checkpoints found unreadable, moved aside (never deleted)
  metrics.jsonl, tensorboard/      (metric_writers.py)

The trainer writes (process 0 alone writes files; every process takes part in
checkpoint saves and restores). Readers (eval.py, sweeps checking progress) open
checkpoints read-only: they never create, clean up or delete anything in a
workdir, so they can run while a trainer saves into it.

Restores fall back: if the newest checkpoint cannot be read (a disk fault, a
partial copy), a warning names its step and the error and the previous one is
used (orbax keeps `keep_checkpoints`); only when none is readable does a restore
fail, with one error listing each step and why.
"""

from __future__ import annotations

import contextlib
import json
import logging as std_logging
import os
import re
import shutil
import sys
from typing import Any, Callable, Sequence

from absl import logging
import flax
import jax
import jax.numpy as jnp
import ml_collections
import orbax.checkpoint as ocp

from relpos_jax import errors
from relpos_jax import provenance as provenance_lib
from relpos_jax.data import vocab as vocab_lib

CONFIG_FILE = "config.json"
VOCAB_FILE = "vocab.json"
CHECKPOINTS = "checkpoints"
UNREADABLE = "checkpoints_unreadable"
PROVENANCE_KEY = "provenance"
METRICS_FILE = "metrics.jsonl"
PENDING_FILE = "metrics_pending.json"  # a preempted run's train metrics not yet logged
TENSORBOARD = "tensorboard"
EVAL = "eval"


class UnreadableCheckpoints(errors.UserError):
  """A workdir has checkpoints, but none of them can be read."""


# -------------------------------------------------------------- config, vocab

def config_json(config: ml_collections.ConfigDict) -> dict:
  """The config as plain JSON data (tuples become lists)."""
  return json.loads(config.to_json())


def read_json(path: str) -> Any:
  """The JSON data of `path`; a file that is not JSON is a ValueError naming it."""
  with open(path) as f:
    text = f.read()
  try:
    return json.loads(text)
  except ValueError as e:
    raise ValueError(f"{path} is not valid JSON ({e}); restore it from a copy, or delete it "
                     "(train.py writes config.json and vocab.json again from its flags)") from e


def load_config(workdir: str) -> ml_collections.ConfigDict:
  """The config a run was trained with (`workdir/config.json`; tuples came back as lists)."""
  path = os.path.join(workdir, CONFIG_FILE)
  if not os.path.exists(path):
    raise FileNotFoundError(f"{path} not found: {workdir} is not a training workdir")
  return ml_collections.ConfigDict(read_json(path))


def _write_atomically(path: str, text: str) -> None:
  """Writes `text` to `path` so that a reader (or a kill) never sees half a file."""
  partial = f"{path}.{os.getpid()}.tmp"
  with open(partial, "w") as f:
    f.write(text)
  os.replace(partial, path)


def save_run_files(config: ml_collections.ConfigDict, workdir: str,
                   vocab: vocab_lib.Vocab) -> None:
  """Writes config.json (with this process's provenance) and vocab.json, atomically.

  Call it from one process (the trainer's process 0). A resumed run keeps the
  provenance of earlier sessions that differ from this one under
  `provenance_earlier`, with a warning: the run then spans two stacks.
  """
  os.makedirs(workdir, exist_ok=True)
  path = os.path.join(workdir, CONFIG_FILE)
  new = config_json(config)
  new[PROVENANCE_KEY] = provenance_lib.provenance()
  if os.path.exists(path):
    old = read_json(path)
    earlier = old.get(f"{PROVENANCE_KEY}_earlier", [])
    before = old.get(PROVENANCE_KEY)
    if before and (before.get("versions"), before.get("git")) != (
        new[PROVENANCE_KEY]["versions"], new[PROVENANCE_KEY]["git"]):
      logging.warning("resuming %s with other versions or code than it was started with "
                      "(was %s, %s; now %s, %s); both are kept in config.json", workdir,
                      before.get("versions"), before.get("git"),
                      new[PROVENANCE_KEY]["versions"], new[PROVENANCE_KEY]["git"])
      earlier = earlier + [before]
    if earlier:
      new[f"{PROVENANCE_KEY}_earlier"] = earlier
  _write_atomically(path, json.dumps(new, indent=1))
  vocab_path = os.path.join(workdir, VOCAB_FILE)
  vocab.save(f"{vocab_path}.{os.getpid()}.tmp")
  os.replace(f"{vocab_path}.{os.getpid()}.tmp", vocab_path)


def config_path(workdir: str) -> str:
  """`workdir/config.json`."""
  return os.path.join(workdir, CONFIG_FILE)


def vocab_path(workdir: str) -> str:
  """`workdir/vocab.json`."""
  return os.path.join(workdir, VOCAB_FILE)


def metrics_path(workdir: str) -> str:
  """`workdir/metrics.jsonl`: one JSON record per (step, kind, replica seed)."""
  return os.path.join(workdir, METRICS_FILE)


def pending_path(workdir: str) -> str:
  """`workdir/metrics_pending.json`: a preempted run's per-step train metrics since its last log."""
  return os.path.join(workdir, PENDING_FILE)


def tensorboard_dir(workdir: str) -> str:
  """`workdir/tensorboard`."""
  return os.path.join(workdir, TENSORBOARD)


def eval_dir(workdir: str, variant: str = "") -> str:
  """`workdir/eval`: the run's own eval report and figures.

  Args:
    workdir: the run's workdir.
    variant: an evaluation that differs from the run's default (`@key=value`
      overrides, `@random_positions`): its report goes to a subfolder named
      after it, so it never overwrites the default one.

  Returns:
    The folder.
  """
  if not variant:
    return os.path.join(workdir, EVAL)
  return os.path.join(workdir, EVAL, re.sub(r"[^A-Za-z0-9._=+@,\-]", "_", variant.lstrip("@")))


# ----------------------------------------------------------------- checkpoints

def checkpoint_dir(workdir: str) -> str:
  """`workdir/checkpoints`, absolute (orbax wants absolute paths)."""
  return os.path.abspath(os.path.join(workdir, CHECKPOINTS))


def checkpoint_steps(workdir: str) -> list[int]:
  """The finished checkpoint steps in `workdir/checkpoints`, ascending (orbax names them so)."""
  directory = checkpoint_dir(workdir)
  if not os.path.isdir(directory):
    return []
  return sorted(int(name) for name in os.listdir(directory) if name.isdigit())


def has_checkpoint(workdir: str) -> bool:
  """Whether `workdir/checkpoints` holds a finished checkpoint step."""
  return bool(checkpoint_steps(workdir))


def partial_checkpoints(workdir: str) -> list[str]:
  """The folders of checkpoint saves that never finished (`<step>.orbax-checkpoint-tmp*`)."""
  directory = checkpoint_dir(workdir)
  if not os.path.isdir(directory):
    return []
  return sorted(os.path.join(directory, name) for name in os.listdir(directory)
                if ".orbax-checkpoint-tmp" in name)


def remove_partial_checkpoints(workdir: str) -> list[str]:
  """Deletes `partial_checkpoints` (the trainer, holding the lock, at start); returns them.

  Only the run that owns the workdir may do this: another one's save in
  progress looks the same.
  """
  removed = partial_checkpoints(workdir)
  for path in removed:
    logging.warning("removing %s: a checkpoint save that never finished (killed, or a full "
                    "disk)", path)
    shutil.rmtree(path, ignore_errors=True)
  return removed


def checkpoint_manager(workdir: str, keep: int | None = None, *,
                       read_only: bool = False) -> ocp.CheckpointManager:
  """Orbax manager for `workdir/checkpoints`; close it (`with contextlib.closing(...)`).

  Args:
    workdir: the run directory.
    keep: the trainer's `keep_checkpoints` (older ones are deleted after a save).
    read_only: for readers: creates nothing, cleans up nothing, deletes nothing.

  Returns:
    The manager.
  """
  if read_only:
    options = ocp.CheckpointManagerOptions(read_only=True, create=False,
                                           cleanup_tmp_directories=False,
                                           enable_async_checkpointing=False)
  else:
    options = ocp.CheckpointManagerOptions(max_to_keep=keep, create=True,
                                           cleanup_tmp_directories=True,
                                           enable_async_checkpointing=False)
  return ocp.CheckpointManager(checkpoint_dir(workdir), options=options)


def restore(manager: ocp.CheckpointManager, step: int, like: Any) -> Any:
  """Checkpoint `step` in the structure (and shardings) of `like` (arrays or abstract).

  `like` is whatever pytree the trainer saves (`flax.serialization.to_state_dict`
  of it is what is on disk).
  """
  target = flax.serialization.to_state_dict(like)
  abstract = jax.tree_util.tree_map(ocp.tree.to_shape_dtype_struct, target)
  restored = manager.restore(step, args=ocp.args.StandardRestore(abstract))
  return flax.serialization.from_state_dict(like, restored)


def _short(error: BaseException) -> str:
  """An exception as one line: its type and the first line of its message (max 300 chars)."""
  lines = [line for line in str(error).splitlines() if line.strip()]
  text = lines[0].strip() if lines else ""
  return f"{type(error).__name__}: {text[:300]}"


def _drop_closed_loop_callbacks(unraisable) -> None:
  """`sys.unraisablehook` without the noise of a failed orbax restore.

  When one array of a checkpoint cannot be read, orbax closes its event loop
  while tensorstore still completes the other reads; each of their callbacks
  then reports `RuntimeError: Event loop is closed` (hundreds of lines that
  bury the one error that matters, which the warning names).
  """
  if isinstance(unraisable.exc_value, RuntimeError) and "Event loop is closed" in str(
      unraisable.exc_value):
    return
  _PREVIOUS_UNRAISABLEHOOK(unraisable)


_PREVIOUS_UNRAISABLEHOOK = sys.unraisablehook


def _not_an_abandoned_read(record: std_logging.LogRecord) -> bool:
  """Drops asyncio's "Task exception was never retrieved" of the reads a failed restore left."""
  return not record.getMessage().startswith("Task exception was never retrieved")


def _quiet_failed_restores() -> None:
  """Keeps the noise of a failed orbax restore (see above) off stderr; the warning says it all."""
  sys.unraisablehook = _drop_closed_loop_callbacks
  asyncio_logger = std_logging.getLogger("asyncio")
  if _not_an_abandoned_read not in asyncio_logger.filters:
    asyncio_logger.addFilter(_not_an_abandoned_read)


def restore_newest_readable(manager: ocp.CheckpointManager, like: Any, *,
                            restore_fn: Callable[[ocp.CheckpointManager, int, Any], Any] = restore,
                            on_unreadable: Callable[[int], None] | None = None,
                            ) -> tuple[int | None, Any]:
  """The newest checkpoint that can be read, restored like `like`; `(None, like)` if none exist.

  Each unreadable checkpoint (newest first) gets a warning naming its step and
  the error; once a readable one is found, `on_unreadable(step)` is called for
  each newer unreadable one (the trainer moves them aside). When none is
  readable nothing is moved.

  Args:
    manager: the workdir's checkpoint manager.
    like: the pytree to restore into (see `restore`).
    restore_fn: `(manager, step, like) -> restored` (default `restore`).
    on_unreadable: called with each unreadable step.

  Returns:
    `(step, restored)`, or `(None, like)` when there is no checkpoint.

  Raises:
    UnreadableCheckpoints: there are checkpoints, but none can be read.
  """
  _quiet_failed_restores()  # stays: the callbacks come late
  failures, unreadable = [], []
  for step in sorted(manager.all_steps(), reverse=True):
    try:
      restored = restore_fn(manager, step, like)
    except Exception as e:  # pylint: disable=broad-except  # orbax/tensorstore raise many kinds
      failures.append(f"step {step}: {_short(e)}")
      unreadable.append(step)
      logging.warning("checkpoint %s/%d cannot be read (%s); trying the one before it",
                      manager.directory, step, _short(e))
      continue
    if failures:
      logging.warning("restored checkpoint %d of %s instead of the newest (unreadable: %s)",
                      step, manager.directory, "; ".join(failures))
      for bad in unreadable if on_unreadable else []:
        on_unreadable(bad)
    return step, restored
  if failures:
    raise UnreadableCheckpoints(
        f"no readable checkpoint in {manager.directory}: " + "; ".join(failures) +
        ". Restore them from a copy, or move that folder away to start the run over.")
  return None, like


def set_aside(workdir: str, step: int) -> str:
  """Moves the unreadable checkpoint `step` to `workdir/checkpoints_unreadable/` (kept, not deleted)."""
  source = os.path.join(checkpoint_dir(workdir), str(step))
  target_dir = os.path.join(os.path.abspath(workdir), UNREADABLE)
  os.makedirs(target_dir, exist_ok=True)
  target, n = os.path.join(target_dir, str(step)), 1
  while os.path.exists(target):
    target, n = os.path.join(target_dir, f"{step}.{n}"), n + 1
  shutil.move(source, target)
  logging.warning("moved the unreadable checkpoint %s to %s; it is retrained from the "
                  "previous checkpoint", source, target)
  return target


def abstract_params(model, num_replicas: int) -> Any:
  """Shapes and dtypes of `num_replicas` stacked parameter sets of `model` (nothing computed)."""
  ones = jnp.ones((1, 1), jnp.int32)
  init = lambda seed: model.init(jax.random.PRNGKey(seed), ones, ones)["params"]
  return jax.eval_shape(jax.vmap(init), jnp.arange(num_replicas))


def _restore_params(manager: ocp.CheckpointManager, step: int, like: Any) -> Any:
  """Only the `params` of checkpoint `step`, on this process's first device."""
  device = jax.sharding.SingleDeviceSharding(jax.local_devices()[0])
  item = {"params": jax.tree_util.tree_map(
      lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=device), like)}
  restored = manager.restore(step, args=ocp.args.PyTreeRestore(
      item=item, restore_args=ocp.checkpoint_utils.construct_restore_args(item),
      partial_restore=True))
  return restored["params"]


def load_params(workdir: str, config: ml_collections.ConfigDict, model,
                step: int | None = None) -> tuple[int, Any]:
  """`(step, params [N, ...])` of a run's checkpoint `step` (default: the newest readable).

  Read-only: safe while the run is still training.

  Raises:
    FileNotFoundError: no checkpoint (or not `step`).
    UnreadableCheckpoints: none (or not `step`) can be read.
  """
  like = abstract_params(model, config.num_seeds)
  with contextlib.closing(checkpoint_manager(workdir, read_only=True)) as manager:
    steps = manager.all_steps()
    if not steps or (step is not None and step not in steps):
      what = "no checkpoint" if step is None else f"no checkpoint of step {step}"
      raise FileNotFoundError(f"{what} in {checkpoint_dir(workdir)} (has: {sorted(steps)}); "
                              "train first")
    if step is None:
      return restore_newest_readable(manager, like, restore_fn=_restore_params)
    _quiet_failed_restores()
    try:
      return step, _restore_params(manager, step, like)
    except Exception as e:  # pylint: disable=broad-except
      raise UnreadableCheckpoints(f"checkpoint {step} of {workdir} cannot be read: "
                                  f"{_short(e)}") from e


def run_names(workdirs: Sequence[str]) -> list[str]:
  """Basenames of the workdirs, or their paths as given where two basenames collide."""
  base = [os.path.basename(os.path.normpath(w)) for w in workdirs]
  return [b if base.count(b) == 1 else os.path.normpath(w) for b, w in zip(base, workdirs)]
