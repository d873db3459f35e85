"""Where training and eval metrics go: `workdir/metrics.jsonl` and TensorBoard.

`metrics.jsonl` holds one JSON object per (step, kind, replica seed) and is the
file tests and tables read. TensorBoard event files (tensorboardX: no TensorFlow
needed) go to `workdir/tensorboard`, one tag per metric (`<kind>/<name>`, with a
`seed<s>/` prefix when several replicas train together).
"""

from __future__ import annotations

import json
import os
from typing import Any, Mapping

from tensorboardX import SummaryWriter

METRICS_FILE = "metrics.jsonl"


def truncate_after(workdir: str, step: int) -> None:
  """Drops metrics logged after `step` (a resumed run re-logs them identically)."""
  path = os.path.join(workdir, METRICS_FILE)
  if not os.path.exists(path):
    return
  with open(path) as f:
    kept = [line for line in f if line.strip() and json.loads(line)["step"] <= step]
  with open(path, "w") as f:
    f.writelines(kept)


def read_metrics(workdir: str) -> list[dict[str, Any]]:
  """Every record of `workdir/metrics.jsonl`, in order."""
  with open(os.path.join(workdir, METRICS_FILE)) as f:
    return [json.loads(line) for line in f if line.strip()]


class MetricWriter:
  """Appends records to metrics.jsonl and scalars to TensorBoard."""

  def __init__(self, workdir: str, multi_replica: bool):
    self._path = os.path.join(workdir, METRICS_FILE)
    self._tb = SummaryWriter(os.path.join(workdir, "tensorboard"))
    self._multi_replica = multi_replica

  def write(self, step: int, kind: str, seed: int, scalars: Mapping[str, float]) -> None:
    """One record `{"step", "kind", "seed", **scalars}`."""
    record = {"step": int(step), "kind": kind, "seed": int(seed),
              **{k: float(v) for k, v in scalars.items()}}
    with open(self._path, "a") as f:
      f.write(json.dumps(record) + "\n")
    prefix = f"seed{seed}/" if self._multi_replica else ""
    for name, value in scalars.items():
      self._tb.add_scalar(f"{prefix}{kind}/{name}", float(value), int(step))

  def close(self) -> None:
    """Flushes TensorBoard."""
    self._tb.close()
