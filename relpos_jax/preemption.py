"""Graceful stop on SIGTERM / SIGINT: finish the step in flight, checkpoint it, exit 75.

Schedulers stop a job with SIGTERM and kill it (SIGKILL) a grace period later
(SLURM: `KillWait`, or `--signal=TERM@120` for an early warning); Ctrl-C sends
SIGINT. Inside `handling_signals()` the first such signal only sets a flag; the
trainer asks `stop_signal()` after every step and, once it answers, saves a
checkpoint at that step, flushes its metrics and raises `errors.Preempted`
(one line, exit status 75: rerun the same command to resume).

The first signal also restores the default action of both signals, so a second
one ends the process at once, even inside a long compile or save: orbax writes
a checkpoint into a temporary folder and renames it when complete, so the
previous checkpoint stays intact and the next start removes the partial one.

Several processes must stop at the same step (every one takes part in the
save). `stop_signal()` is then a collective: each process contributes the
signal it received (if any) and all stop as soon as one has. JAX's own
preemption sync point (`multihost_utils.reached_preemption_sync_point`) is not
used: it only knows SIGTERM (not Ctrl-C), only through a C++ handler that any
Python handler replaces, and never fires in a one-process run.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
from typing import Iterator

import jax
from jax.experimental import multihost_utils
import numpy as np

SIGNALS = (signal.SIGTERM, signal.SIGINT)
_received: list[int] = []  # the first signal received under the handlers
_depth = [0]  # nesting of handling_signals(): train.py around a sweep of train_and_evaluate


def _on_signal(signum: int, frame) -> None:  # pylint: disable=unused-argument
  """Sets the flag; the next signal gets the default action (the process ends at once)."""
  del frame
  if not _received:
    _received.append(signum)
  for s in SIGNALS:
    signal.signal(s, signal.SIG_DFL)
  # os.write, not logging: a handler may run while the logging lock is held.
  os.write(2, (f"received {signal.Signals(signum).name}: finishing the step in flight, then "
               "saving a checkpoint and stopping (send it again to stop at once, without "
               "saving; the previous checkpoint is kept)\n").encode())


@contextlib.contextmanager
def handling_signals() -> Iterator[None]:
  """Defers SIGTERM and SIGINT to `stop_signal()` inside; nested uses share the outer handlers.

  Outside the main thread (where Python cannot install handlers) it does nothing.
  """
  if threading.current_thread() is not threading.main_thread():
    yield
    return
  if _depth[0] == 0:
    _received.clear()
    previous = {s: signal.signal(s, _on_signal) for s in SIGNALS}
  _depth[0] += 1
  try:
    yield
  finally:
    _depth[0] -= 1
    if _depth[0] == 0:
      for s, handler in previous.items():
        signal.signal(s, handler)


def local_signal() -> int:
  """The signal number this process received under `handling_signals()` (0: none)."""
  return _received[0] if _received else 0


def stop_signal() -> str | None:
  """The name of the signal that stops the run now, the same on every process; None: go on.

  A collective in a multi-process run: every process must call it at the same step.
  """
  received = local_signal()
  if jax.process_count() > 1:  # any process's signal stops them all at this same step
    received = int(np.max(multihost_utils.process_allgather(np.int32(received))))
  return signal.Signals(received).name if received else None
