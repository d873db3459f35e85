"""When a process joins a multi-process job (--multihost=auto|on|off), from its environment."""

import pytest

from relpos_jax import distributed

EXPLICIT = {"JAX_COORDINATOR_ADDRESS": "10.0.0.1:1234", "JAX_NUM_PROCESSES": "4",
            "JAX_PROCESS_ID": "2"}
SLURM = {"SLURM_JOB_ID": "77", "SLURM_NTASKS": "4", "SLURM_STEP_NUM_TASKS": "4",
         "SLURM_PROCID": "1"}


def test_one_process_without_an_environment():
  assert distributed.plan("auto", environ={}) is None
  assert distributed.plan("off", environ={**EXPLICIT, **SLURM}) is None
  assert distributed.plan("auto", environ={"SLURM_JOB_ID": "1", "SLURM_NTASKS": "1"}) is None


def test_explicit_variables_are_passed_to_initialize():
  assert distributed.plan("auto", environ=EXPLICIT) == {
      "coordinator_address": "10.0.0.1:1234", "num_processes": 4, "process_id": 2}
  assert distributed.plan("on", environ={**EXPLICIT, "JAX_LOCAL_DEVICE_IDS": "0,1"})[
      "local_device_ids"] == [0, 1]


def test_slurm_job_steps_of_several_tasks_join_unless_sharding_a_sweep():
  assert distributed.plan("auto", environ=SLURM) == {}  # JAX reads SLURM's variables
  assert distributed.plan("auto", environ=SLURM, sweep_shard=True) is None
  assert distributed.plan("on", environ=SLURM, sweep_shard=True) == {}
  one_task_step = {**SLURM, "SLURM_STEP_NUM_TASKS": "1"}  # sbatch -n 4, then srun -n 1
  assert distributed.plan("auto", environ=one_task_step) is None
  per_host = {**SLURM, "JAX_LOCAL_DEVICE_IDS": "0,1,2,3"}  # one task over 4 GPUs
  assert distributed.plan("auto", environ=per_host) == {"local_device_ids": [0, 1, 2, 3]}


@pytest.mark.parametrize("environ, message", [
    ({"JAX_COORDINATOR_ADDRESS": "h:1"}, "JAX_NUM_PROCESSES, JAX_PROCESS_ID not"),
    ({**EXPLICIT, "JAX_PROCESS_ID": "4"}, "0 <= JAX_PROCESS_ID < JAX_NUM_PROCESSES"),
    ({**EXPLICIT, "JAX_NUM_PROCESSES": "two"}, "must be integers"),
])
def test_incomplete_or_bad_variables_are_one_clear_error(environ, message):
  with pytest.raises(distributed.MultihostConfigError, match=message):
    distributed.plan("auto", environ=environ)


def test_on_needs_an_environment_and_modes_are_checked():
  with pytest.raises(distributed.MultihostConfigError, match="no multi-process environment"):
    distributed.plan("on", environ={})
  with pytest.raises(distributed.MultihostConfigError, match="choose one of auto, on, off"):
    distributed.plan("yes", environ={})
