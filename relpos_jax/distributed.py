"""Multi-host (multi-process) JAX: when to call `jax.distributed.initialize`, and who writes.

`--multihost=auto|on|off` (train.py, `python -m relpos_jax.sweep`):

* `off`: one process, whatever the environment says.
* `on`: must find a multi-process environment below; an error if none is set.
* `auto` (default): multi-process when one is set, else one process. A sweep
  started with `--sweep_shard` is `off` under `auto`: shards are independent
  processes (e.g. `srun -n 4 ... --sweep_shard $SLURM_PROCID/4`).

Environments, in order:

1. Explicit: `JAX_COORDINATOR_ADDRESS=host:port`, `JAX_NUM_PROCESSES=n`,
   `JAX_PROCESS_ID=i` (all three; `JAX_LOCAL_DEVICE_IDS=0,1` optional), the same
   address and count on every process, ids 0..n-1.
2. A SLURM job step with more than one task (`SLURM_JOB_ID`, `SLURM_STEP_NUM_TASKS`
   or `SLURM_NTASKS` > 1): JAX reads the coordinator, count and id from SLURM, and
   gives each task the one GPU numbered `SLURM_LOCALID` (one task per GPU); for one
   task per host over several GPUs set `JAX_LOCAL_DEVICE_IDS=0,1,2,3`.

CPU collectives use gloo, so the same code runs on a laptop (several processes
on one machine), a CPU cluster or GPUs (where NCCL is used as usual).

Process 0 alone writes files (`is_writer()`); every process computes, and takes
part in checkpoint saves and restores.
"""

from __future__ import annotations

import os

from absl import flags
from absl import logging
import jax
from jax.experimental import multihost_utils

MODES = ("auto", "on", "off")
EXPLICIT_VARS = ("JAX_COORDINATOR_ADDRESS", "JAX_NUM_PROCESSES", "JAX_PROCESS_ID")


class MultihostConfigError(ValueError):
  """The multi-process environment is incomplete or contradicts --multihost."""


def slurm_tasks(environ=None) -> int:
  """The number of tasks of the current SLURM job step (1 outside SLURM)."""
  environ = os.environ if environ is None else environ
  if "SLURM_JOB_ID" not in environ:
    return 1
  return int(environ.get("SLURM_STEP_NUM_TASKS") or environ.get("SLURM_NTASKS") or 1)


def explicit_args(environ=None) -> dict | None:
  """`jax.distributed.initialize` keywords from the `JAX_*` variables; None if none is set.

  Raises:
    MultihostConfigError: some but not all of `EXPLICIT_VARS` are set, or a bad value.
  """
  environ = os.environ if environ is None else environ
  present = [v for v in EXPLICIT_VARS if environ.get(v)]
  if not present:
    return None
  missing = [v for v in EXPLICIT_VARS if v not in present]
  if missing:
    raise MultihostConfigError(
        f"{', '.join(present)} set but {', '.join(missing)} not: a multi-process run needs "
        f"all of {', '.join(EXPLICIT_VARS)} (the same address and count on every process, "
        "ids 0..n-1), or --multihost=off for one process")
  try:
    num, index = int(environ["JAX_NUM_PROCESSES"]), int(environ["JAX_PROCESS_ID"])
  except ValueError as e:
    raise MultihostConfigError(f"JAX_NUM_PROCESSES and JAX_PROCESS_ID must be integers "
                               f"({e})") from e
  if num < 1 or not 0 <= index < num:
    raise MultihostConfigError(f"need JAX_NUM_PROCESSES >= 1 and 0 <= JAX_PROCESS_ID < "
                               f"JAX_NUM_PROCESSES, got {num} and {index}")
  args = {"coordinator_address": environ["JAX_COORDINATOR_ADDRESS"], "num_processes": num,
          "process_id": index}
  if environ.get("JAX_LOCAL_DEVICE_IDS"):
    args["local_device_ids"] = [int(i) for i in environ["JAX_LOCAL_DEVICE_IDS"].split(",")]
  return args


def plan(mode: str = "auto", *, sweep_shard: bool = False, environ=None) -> dict | None:
  """What `initialize` would do: `jax.distributed.initialize` keywords, or None for one process.

  Raises:
    MultihostConfigError: a bad mode, incomplete variables, or `on` without an environment.
  """
  if mode not in MODES:
    raise MultihostConfigError(f"--multihost={mode!r}: choose one of {', '.join(MODES)}")
  environ = os.environ if environ is None else environ
  if mode == "off" or (mode == "auto" and sweep_shard):
    return None
  args = explicit_args(environ)
  if args is not None:
    return args
  if slurm_tasks(environ) > 1:  # jax.distributed reads SLURM's variables itself
    ids = environ.get("JAX_LOCAL_DEVICE_IDS")  # else JAX gives each task one: SLURM_LOCALID
    return {"local_device_ids": [int(i) for i in ids.split(",")]} if ids else {}
  if mode == "on":
    raise MultihostConfigError(
        f"--multihost=on but no multi-process environment: set {', '.join(EXPLICIT_VARS)} "
        "or run as a SLURM job step with more than one task")
  return None


def initialize(mode: str = "auto", *, sweep_shard: bool = False) -> bool:
  """Joins the multi-process job the environment describes (see the module doc).

  Returns:
    Whether this process is part of a multi-process job.
  """
  args = plan(mode, sweep_shard=sweep_shard)
  if args is None:
    if mode == "auto" and sweep_shard and (explicit_args() or slurm_tasks() > 1):
      logging.info("--sweep_shard: training as an independent process (--multihost=auto)")
    return False
  if jax.distributed.is_initialized():
    return True
  jax.config.update("jax_cpu_collectives_implementation", "gloo")
  jax.distributed.initialize(**args)
  logging.info("process %d of %d, %d local of %d devices", jax.process_index(),
               jax.process_count(), jax.local_device_count(), jax.device_count())
  return True


def define_flag() -> flags.FlagHolder:
  """Defines `--multihost=auto|on|off` for an entry point."""
  return flags.DEFINE_enum(
      "multihost", "auto", MODES, "Join a multi-process JAX job: auto (when "
      "JAX_COORDINATOR_ADDRESS/JAX_NUM_PROCESSES/JAX_PROCESS_ID are set, or in a SLURM job "
      "step of several tasks; never with --sweep_shard), on (required), off (one process).")


def is_writer() -> bool:
  """Whether this process writes files (process 0)."""
  return jax.process_index() == 0


def barrier(name: str) -> None:
  """Waits for every process (a no-op in a one-process run)."""
  if jax.process_count() > 1:
    multihost_utils.sync_global_devices(name)
