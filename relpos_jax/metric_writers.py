"""Where training and eval metrics go: `workdir/metrics.jsonl` and TensorBoard.

`metrics.jsonl` holds one JSON object per (step, kind, replica seed) and is the
file tests and tables read. TensorBoard event files (tensorboardX: no TensorFlow
needed) go to `workdir/tensorboard`, one tag per metric (`<kind>/<name>`, with a
`seed<s>/` prefix when several replicas train together).

Only one process writes (the trainer's process 0; `enabled=False` elsewhere). A
run killed while writing a record leaves a half-written last line: readers skip
it, and a resumed run drops it (with a warning) before appending.

A run stopped between two log steps (preemption) keeps the per-step metrics
since the last log line in `metrics_pending.json` (`save_pending`); resuming at
that step reads them back (`load_pending`), so the next record averages the
same steps as an uninterrupted run's. A write that fails (full disk, quota,
read-only) raises `errors.WriteFailed` naming the file, also when TensorBoard's
writer thread is the one that failed.
"""

from __future__ import annotations

import json
import os
import threading
from typing import Any, Mapping

from absl import logging
import numpy as np

from relpos_jax import errors
from relpos_jax import workdir as workdir_lib

METRICS_FILE = workdir_lib.METRICS_FILE


def _parse_lines(path: str) -> tuple[list[str], list[dict[str, Any]], list[int]]:
  """(raw lines, parsed records, 1-based numbers of the lines that are not JSON records)."""
  with open(path) as f:
    lines = [line for line in f if line.strip()]
  kept_lines, records, bad = [], [], []
  for number, line in enumerate(lines, 1):
    try:
      record = json.loads(line)
      if not isinstance(record, dict) or "step" not in record:
        raise ValueError("not a metrics record")
    except ValueError:
      bad.append(number)
      continue
    kept_lines.append(line if line.endswith("\n") else line + "\n")
    records.append(record)
  return kept_lines, records, bad


def truncate_after(workdir: str, step: int) -> None:
  """Drops metrics logged after `step` (a resumed run re-logs them identically).

  Lines that are not JSON records (a write cut off by a kill) are dropped too,
  with a warning.
  """
  path = workdir_lib.metrics_path(workdir)
  if not os.path.exists(path):
    return
  lines, records, bad = _parse_lines(path)
  if bad:
    logging.warning("%s: dropping %d line(s) that are not complete JSON records (line %s; "
                    "a write cut off by a kill?)", path, len(bad), ", ".join(map(str, bad)))
  kept = [line for line, record in zip(lines, records) if record["step"] <= step]
  partial = f"{path}.{os.getpid()}.tmp"
  with open(partial, "w") as f:
    f.writelines(kept)
  os.replace(partial, path)


PENDING_KEPT = 4  # windows of the last stops: a kill during a stop's save resumes an earlier one


def save_pending(workdir: str, step: int, window: list[Mapping[str, np.ndarray]]) -> None:
  """Keeps the per-step train metrics not yet in a record (`[{name: [N]}]`) of a stop at `step`.

  Written before that step's checkpoint; the windows of the previous stops are
  kept too (`PENDING_KEPT`), for a resume from their checkpoints when this
  one's save was cut off.
  """
  path = workdir_lib.pending_path(workdir)
  windows = {int(s): w for s, w in _read_pending(path).items() if int(s) < step}
  windows[int(step)] = [{k: {"dtype": str(np.asarray(v).dtype), "values": np.asarray(v).tolist()}
                         for k, v in m.items()} for m in window]
  data = {str(s): windows[s] for s in sorted(windows)[-PENDING_KEPT:]}
  partial = f"{path}.{os.getpid()}.tmp"
  try:
    with open(partial, "w") as f:
      json.dump(data, f)
    os.replace(partial, path)
  except OSError as e:
    raise errors.write_failure(e, "the metrics not yet logged", path) or e


def load_pending(workdir: str, step: int) -> list[dict[str, np.ndarray]]:
  """The window `save_pending` kept at `step` (exact dtypes, values); [] if none or another step."""
  window = _read_pending(workdir_lib.pending_path(workdir)).get(str(step), [])
  return [{k: np.asarray(v["values"], v["dtype"]) for k, v in m.items()} for m in window]


def _read_pending(path: str) -> dict[str, list]:
  """The windows of `save_pending`'s file by step (as a string); {} if there is none."""
  return workdir_lib.read_json(path) if os.path.exists(path) else {}


_TENSORBOARD_ERRORS: list[BaseException] = []


def _keep_tensorboard_errors(args) -> None:
  """`threading.excepthook` keeping a failed write of TensorBoard's thread for `write` to raise."""
  if type(args.thread).__module__.startswith("tensorboardX") and isinstance(args.exc_value,
                                                                           OSError):
    _TENSORBOARD_ERRORS.append(args.exc_value)  # its 30-line traceback would bury the cause
    return
  _PREVIOUS_EXCEPTHOOK(args)


_PREVIOUS_EXCEPTHOOK = threading.excepthook


def read_metrics(workdir: str) -> list[dict[str, Any]]:
  """Every complete record of `workdir/metrics.jsonl`, in order (a cut-off line is skipped)."""
  return _parse_lines(workdir_lib.metrics_path(workdir))[1]


class MetricWriter:
  """Appends records to metrics.jsonl and scalars to TensorBoard."""

  def __init__(self, workdir: str, multi_replica: bool, enabled: bool = True):
    """Opens the writers; with `enabled=False` (not the writing process) writes nothing."""
    self._path = workdir_lib.metrics_path(workdir)
    self._tb_dir = workdir_lib.tensorboard_dir(workdir)
    self._tb = None
    if enabled:
      # Imported here: tensorboardX imports torch when it is installed (seconds), and
      # readers of metrics.jsonl (tables, eval) never write events.
      from tensorboardX import SummaryWriter  # pylint: disable=g-import-not-at-top
      threading.excepthook = _keep_tensorboard_errors
      _TENSORBOARD_ERRORS.clear()
      try:
        self._tb = SummaryWriter(workdir_lib.tensorboard_dir(workdir))
      except OSError as e:
        raise errors.write_failure(e, "TensorBoard events", workdir_lib.tensorboard_dir(workdir)
                                   ) or e
    self._multi_replica = multi_replica

  def write(self, step: int, kind: str, seed: int, scalars: Mapping[str, float]) -> None:
    """One record `{"step", "kind", "seed", **scalars}`."""
    if self._tb is None:
      return
    record = {"step": int(step), "kind": kind, "seed": int(seed),
              **{k: float(v) for k, v in scalars.items()}}
    try:
      with open(self._path, "a") as f:
        f.write(json.dumps(record) + "\n")  # one write: a kill leaves at most one partial line
    except OSError as e:
      raise errors.write_failure(e, f"the metrics of step {step}", self._path) or e
    if _TENSORBOARD_ERRORS:
      raise errors.write_failure(_TENSORBOARD_ERRORS[0], "TensorBoard events",
                                 self._tb_dir) from None
    prefix = f"seed{seed}/" if self._multi_replica else ""
    for name, value in scalars.items():
      self._tb.add_scalar(f"{prefix}{kind}/{name}", float(value), int(step))

  def close(self) -> None:
    """Flushes TensorBoard (after its thread failed: abandons it, it would wait forever)."""
    if self._tb is not None and not _TENSORBOARD_ERRORS:
      try:
        self._tb.close()
      except OSError as e:  # keep the error that ends the run, if any, as the one line
        logging.warning("could not flush TensorBoard events: %s", e)
