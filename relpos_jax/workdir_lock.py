"""One run per workdir: the trainer holds an exclusive lock on it while it trains.

`workdir/train.lock` says who holds it: `{"host", "pid", "since"}`. The lock
itself is a `flock` on that file, which the kernel (or the NFS server) releases
when the holder dies, however it dies (`kill -9` included); the file is emptied,
never deleted, on release (deleting it would let two runs lock two different
files of the same name).

* A second run on a held workdir is refused: `WorkdirLocked`, one line naming
  the holder's host, PID and start time; it writes nothing.
* A file naming a holder whose lock was released (the run was killed) is taken
  over with a warning naming it.
* On a filesystem without `flock` (some Lustre and NFS mounts), liveness is
  judged from the file: a holder on this host whose PID is gone is taken over;
  a holder on another host is refused (the message says how to clear it).

In a multi-process run process 0 holds the lock and every process learns
whether it got it. Readers (eval.py, sweeps checking progress) take no lock.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import socket
import time
from typing import Iterator

from absl import logging
import jax
from jax.experimental import multihost_utils
import numpy as np

from relpos_jax import distributed
from relpos_jax import errors

LOCK_FILE = "train.lock"
_NO_FLOCK = (errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOSYS, errno.EINVAL)


class WorkdirLocked(errors.UserError):
  """Another live run holds the workdir."""


def lock_path(workdir: str) -> str:
  """`workdir/train.lock`."""
  return os.path.join(workdir, LOCK_FILE)


def _read_holder(fd: int) -> dict | None:
  """The holder recorded in the open lock file (None: empty or unreadable)."""
  try:
    data = os.pread(fd, 4096, 0)
    holder = json.loads(data) if data.strip() else None
  except (OSError, ValueError):
    return None
  return holder if isinstance(holder, dict) else None


def _describe(holder: dict | None) -> str:
  """`host h, PID p, since t` of a holder record."""
  if not holder:
    return "an unknown process (the lock file is empty)"
  return f"host {holder.get('host')}, PID {holder.get('pid')}, since {holder.get('since')}"


def _alive_here(holder: dict) -> bool | None:
  """Whether the holder's PID runs on this host; None when it ran on another host."""
  if holder.get("host") != socket.gethostname():
    return None
  try:
    os.kill(int(holder.get("pid", -1)), 0)
  except ProcessLookupError:
    return False
  except (PermissionError, ValueError, OverflowError):
    return True  # another user's process (or a record we cannot judge): assume alive
  return True


@contextlib.contextmanager
def hold(workdir: str) -> Iterator[None]:
  """Holds `workdir`'s lock for the duration (creating the workdir).

  Raises:
    WorkdirLocked: a live run holds it (the message names host, PID and since when).
    errors.WriteFailed: the workdir or its lock file cannot be created.
  """
  path = lock_path(workdir)
  try:
    os.makedirs(workdir, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
  except OSError as e:
    raise errors.write_failure(e, "the workdir lock", path) or e
  try:
    holder, kernel_lock = _read_holder(fd), True
    try:
      fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as e:
      if e.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
        raise WorkdirLocked(
            f"workdir {workdir} is in use by a run on {_describe(_read_holder(fd))} ({path}); "
            "wait for it to finish or stop it, or use another --workdir") from None
      if e.errno not in _NO_FLOCK:
        raise
      kernel_lock = False
    if holder and not kernel_lock and _alive_here(holder) is not False:
      raise WorkdirLocked(
          f"workdir {workdir} is in use by a run on {_describe(holder)} ({path}; this filesystem "
          "has no flock, so a holder on another host cannot be checked: delete that file if the "
          "run is gone)")
    if holder:
      logging.warning("taking over the lock of %s: a run on %s that is no longer running "
                      "(killed?)", workdir, _describe(holder))
    me = {"host": socket.gethostname(), "pid": os.getpid(),
          "since": time.strftime("%Y-%m-%d %H:%M:%S %Z")}
    os.ftruncate(fd, 0)
    os.pwrite(fd, json.dumps(me).encode(), 0)
    os.fsync(fd)
  except BaseException:
    os.close(fd)
    raise
  try:
    yield
  finally:
    with contextlib.suppress(OSError):  # a full disk must not hide the error that ends the run
      os.ftruncate(fd, 0)
    os.close(fd)  # releases the flock


@contextlib.contextmanager
def hold_run(workdir: str) -> Iterator[None]:
  """`hold` by process 0 of a run; every process raises if process 0 was refused."""
  with contextlib.ExitStack() as stack:
    refused = None
    if distributed.is_writer():
      try:
        stack.enter_context(hold(workdir))
      except (WorkdirLocked, errors.WriteFailed) as e:
        refused = e
    if jax.process_count() > 1:
      got = int(multihost_utils.broadcast_one_to_all(np.int32(refused is None)))
      if not got and refused is None:
        raise WorkdirLocked(f"process 0 could not lock workdir {workdir} (its error says why)")
    if refused is not None:
      raise refused
    yield
