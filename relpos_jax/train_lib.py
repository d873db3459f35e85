"""Training: `train_and_evaluate(config, workdir)`, readable top to bottom.

One run trains `config.num_seeds` independently initialised replicas (seeds
`config.seed + i`, each with its own init, dropout and data order) in one jitted,
`vmap`ped step; with `num_seeds = 1` that is an ordinary single run. The batch is
sharded over every device on a `data` mesh axis and parameters are replicated.

The workdir (relpos_jax/workdir.py) holds `config.json`, `vocab.json`,
`checkpoints/<step>/` (orbax, the last `keep_checkpoints`), `metrics.jsonl` and
`tensorboard/`. A run started on a workdir with checkpoints resumes from the
newest readable one (an unreadable one is moved aside with a warning): batches,
dropout and randomized positions are pure functions of (seed, step), so it
reaches the same final state and metrics as an uninterrupted run.

Multi-process (relpos_jax/distributed.py): every process builds only its own
rows of each global batch and takes part in every step and checkpoint save and
restore; process 0 alone writes config.json, vocab.json, metrics.jsonl and
TensorBoard.

Faults a cluster run meets (docs/training.md, "Preemption, locks, exit codes"):
the run holds the workdir's lock (relpos_jax/workdir_lock.py: a second run on it
is refused); SIGTERM or SIGINT finish the step in flight, save a checkpoint at
it and raise `errors.Preempted` (relpos_jax/preemption.py), every process at the
same step; a checkpoint or metrics write that fails (full disk, read-only)
raises `errors.WriteFailed` naming the path and cause, the previous checkpoint
intact; the next start removes the save it left half-written.
"""

from __future__ import annotations

import contextlib
import time
from typing import Any

from absl import logging
import flax
import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import optax
import orbax.checkpoint as ocp

from relpos_jax import architectures
from relpos_jax import distributed
from relpos_jax import errors
from relpos_jax import evaluate
from relpos_jax import lm_eval
from relpos_jax import losses
from relpos_jax import metric_writers
from relpos_jax import model as model_lib
from relpos_jax import optim
from relpos_jax import preemption
from relpos_jax import run_identity
from relpos_jax import workdir as workdir_lib
from relpos_jax import workdir_lock
from relpos_jax.data import pipeline
from relpos_jax.data import vocab as vocab_lib
from relpos_jax.positions import randomized as randomized_lib


# ---------------------------------------------------------------- train state

@flax.struct.dataclass
class TrainState:
  """One replica's step, parameters and optimizer state (leading seed axis in a run)."""

  step: jax.Array
  params: Any
  opt_state: Any


def init_state(model, tx, seed, batch: dict[str, np.ndarray]) -> TrainState:
  """Initial state of the replica with `seed` (pure: jit or vmap it)."""
  params = model.init(jax.random.PRNGKey(seed), jnp.asarray(batch["inputs"][:1]),
                      jnp.asarray(batch["targets"][:1]))["params"]
  return TrainState(step=jnp.array(0, jnp.int32), params=params, opt_state=tx.init(params))


def init_replicas(model, tx, seeds) -> TrainState:
  """Every replica's initial state, stacked on a leading seed axis: one compiled program.

  Parameter shapes do not depend on sequence length, so a 1-token sample suffices.
  """
  sample = {"inputs": np.ones((1, 1), np.int32), "targets": np.ones((1, 1), np.int32)}
  init = jax.jit(jax.vmap(lambda seed: init_state(model, tx, seed, sample)))
  return init(jnp.asarray(seeds, jnp.int32))


def make_train_step(model, tx, schedule, *, label_smoothing: float,
                    randomized: randomized_lib.RandomizedPositions):
  """The per-replica train step `(state, batch, seed) -> (state, metrics)` (not jitted)."""

  def train_step(state: TrainState, batch: dict[str, jax.Array], seed: jax.Array):
    inputs_BxS, targets_BxT = batch["inputs"], batch["targets"]
    step_rng = jax.random.fold_in(jax.random.PRNGKey(seed), state.step)
    dropout_rng, pos_rng, _ = jax.random.split(step_rng, 3)  # 3: dropout as before
    inputs_pos, targets_pos = (randomized.sample(pos_rng, inputs_BxS, targets_BxT,
                                                 joint=model.joint_positions)
                               if randomized.enabled else (None, None))

    def loss_fn(params):
      logits = model.apply({"params": params}, inputs_BxS, targets_BxT, inputs_pos, targets_pos,
                           deterministic=False, rngs={"dropout": dropout_rng})
      loss, _ = losses.cross_entropy(logits, targets_BxT, label_smoothing)
      return loss, logits

    (loss, logits), grads = jax.value_and_grad(loss_fn, has_aux=True)(state.params)
    updates, opt_state = tx.update(grads, state.opt_state, state.params)
    new_state = TrainState(step=state.step + 1, params=optax.apply_updates(state.params, updates),
                           opt_state=opt_state)
    metrics = {"loss": loss, "grad_norm": optax.tree.norm(grads),
               "learning_rate": schedule(state.step), **losses.accuracy_metrics(logits, targets_BxT)}
    return new_state, metrics

  return train_step


# ------------------------------------------------------------ devices & data

def make_mesh() -> jax.sharding.Mesh:
  """A 1-D mesh over every device (of every process), axis `data`."""
  return jax.sharding.Mesh(np.array(jax.devices()), ("data",))


def process_rows(batch_size: int) -> slice:
  """This process's rows of a global batch: process i of n holds rows [i*B/n, (i+1)*B/n)."""
  rows = batch_size // jax.process_count()
  return slice(jax.process_index() * rows, (jax.process_index() + 1) * rows)


def stacked_batch(datasets: list[pipeline.Dataset], step: int, batch_size: int,
                  rows: slice | None = None) -> dict:
  """Each replica's batch of `step` (only `rows` of it), padded to common lengths, `[N, b, L]`.

  The rows are exactly those of the whole batch (same content and padded length):
  each process builds only its own and the global batch is the same for any
  number of processes.
  """
  if rows is None:
    batches = [d.train_batch(step, batch_size) for d in datasets]
  else:
    batches = [d.train_rows(step, batch_size, rows) for d in datasets]
  out = {}
  for key in ("inputs", "targets"):
    length = max(b[key].shape[1] for b in batches)
    out[key] = np.stack([np.pad(b[key], ((0, 0), (0, length - b[key].shape[1])))
                         for b in batches])
  return out


def shard_batch(local: dict[str, np.ndarray], sharding, batch_size: int) -> dict[str, jax.Array]:
  """This process's rows (`process_rows`) of an `[N, B, L]` batch, as global arrays sharded on B."""
  return {key: jax.make_array_from_process_local_data(
              sharding, value, (value.shape[0], batch_size, value.shape[2]))
          for key, value in local.items()}


# ----------------------------------------------------------------- checkpoints
# The workdir and its checkpoints belong to relpos_jax/workdir.py; these names stay
# for callers of the earlier API.

def prepare_workdir(config: ml_collections.ConfigDict, workdir: str,
                    vocab: vocab_lib.Vocab) -> None:
  """Refuses a workdir that holds a different run; process 0 writes config.json and vocab.json."""
  run_identity.check_identity(config, workdir)
  if distributed.is_writer():
    workdir_lib.save_run_files(config, workdir, vocab)


def restore_or_keep(manager: ocp.CheckpointManager, state: Any, workdir: str | None = None) -> Any:
  """The newest readable checkpoint restored into `state`'s structure and shardings, or `state`.

  `state` is whatever pytree the loop saves (a `TrainState`, or a dict holding one).

  Unreadable newer checkpoints are moved aside (with `workdir`; by process 0)
  with a warning naming the step and the error.
  """
  def set_aside(step: int) -> None:
    distributed.barrier(f"read checkpoint {step}")  # every process has tried it
    if workdir is not None and distributed.is_writer():
      workdir_lib.set_aside(workdir, step)
    distributed.barrier(f"moved checkpoint {step}")

  step, restored = workdir_lib.restore_newest_readable(manager, state, on_unreadable=set_aside)
  if step is not None and step != manager.latest_step():
    manager.reload()
  return restored


def check_config(config: ml_collections.ConfigDict, model, dataset: pipeline.Dataset) -> None:
  """Fails fast, before any work, on configs that cannot run as asked."""
  for key in ("num_steps", "batch_size", "eval_batch_size", "log_every", "eval_every",
              "checkpoint_every", "keep_checkpoints"):
    if key in config and config[key] < 1:
      raise ValueError(f"{key} must be >= 1, got {config[key]}; change config key {key}.")
  n_dev = jax.device_count()
  if config.batch_size % n_dev:
    raise ValueError(f"batch_size {config.batch_size} is not divisible by the {n_dev} devices; "
                     "change config key batch_size.")
  if config.num_seeds < 1:
    raise ValueError(f"num_seeds must be >= 1, got {config.num_seeds}")
  if config.checkpoint_every % config.log_every:
    raise ValueError(f"checkpoint_every ({config.checkpoint_every}) must be a multiple of "
                     f"log_every ({config.log_every}) so a resumed run logs the same metrics.")
  max_s, max_t = dataset.max_padded_lengths()
  rand = randomized_lib.RandomizedPositions(**config.randomized)
  if not rand.enabled:
    model.check_lengths(max_s, max_t)
    return
  longest = max_s + max_t if model.joint_positions else max(max_s, max_t)
  if rand.max_random_position < longest:
    raise ValueError(
        f"randomized.max_random_position={rand.max_random_position} is below the longest "
        f"padded sequence ({longest}); raise it.")
  model_lib.check_positions(model, rand.max_random_position)


# ------------------------------------------------------------------ the loop

def evaluate_replica(model, params, dataset, config, seed: int = 0) -> dict[str, float]:
  """Periodic eval of one replica: the held-out validation set and the longest eval length.

  Both decode at the positions the run is validated at (random ones, drawn as in
  training, if it trained at random positions: `randomized_lib.validation_sampler`).
  A language model (an `lm:` task) reports its validation loss and bits per byte
  (passkey: its accuracy) instead.
  """
  if lm_eval.is_lm_config(config):
    return lm_eval.validation_scalars(model, params, dataset)
  sampler = randomized_lib.validation_sampler(config.randomized)
  valid = evaluate.validation_record(model, params, dataset, batch_size=config.eval_batch_size,
                                     random=sampler, seed=seed)
  longest = max(dataset.eval_lengths)
  record = evaluate.evaluate_length(model, params, dataset, longest,
                                    batch_size=config.eval_batch_size, random=sampler, seed=seed)
  return {"valid_exact_match": valid["exact_match"],
          "valid_token_accuracy": valid["token_accuracy"],
          "longest_length": float(longest),
          "longest_exact_match": record["exact_match"],
          "longest_token_accuracy": record["token_accuracy"],
          "longest_stop_errors": record["stop_errors"]}


def _replica(tree, i: int):
  """Replica i of a stacked, replicated pytree, on this process's first device.

  A local copy: each process can evaluate it on its own (in a multi-process run
  the global arrays cannot be used outside a program every process runs).
  """
  return jax.tree_util.tree_map(lambda x: x.addressable_data(0)[i], tree)


def train_and_evaluate(config: ml_collections.ConfigDict, workdir: str) -> TrainState:
  """Trains `config.num_seeds` replicas, logging, evaluating and checkpointing into `workdir`.

  Args:
    config: an experiment config (see configs/default.py).
    workdir: where checkpoints, metrics and TensorBoard logs go; resumed if it
      holds checkpoints of the same run.

  Returns:
    The final stacked `TrainState` (leading axis: replicas).

  Raises:
    ValueError: a config that cannot run, or a workdir holding a different run.
    FloatingPointError: a non-finite loss or gradient (names the step; that
      state is never saved).
    workdir_lock.WorkdirLocked: another live run trains in `workdir`.
    errors.Preempted: SIGTERM/SIGINT; a checkpoint of the step it stopped at
      was saved (rerun to resume).
    errors.WriteFailed: a checkpoint or metrics write failed (the path and the
      cause; the previous checkpoint is intact).
  """
  with contextlib.ExitStack() as stack:  # releases the lock, closes the manager and the writer
    stack.enter_context(preemption.handling_signals())
    return _train(config, workdir, stack)


def _train(config: ml_collections.ConfigDict, workdir: str,
           stack: contextlib.ExitStack) -> TrainState:
  """The body of `train_and_evaluate`; what needs closing goes on `stack`."""
  stop = preemption.stop_signal()  # a sweep's signal that came between two runs
  if stop:
    raise errors.Preempted(None, stop)
  seeds = [config.seed + i for i in range(config.num_seeds)]
  with errors.user_errors():  # what was asked cannot run: one line from the entry points
    datasets = [pipeline.make_dataset(seed=s, **config.data) for s in seeds]
    model = architectures.make_model(config.model, vocab_size=datasets[0].vocab.size)
    check_config(config, model, datasets[0])
    stack.enter_context(workdir_lock.hold_run(workdir))  # before anything is written
    with _write_failures("config.json and vocab.json", workdir):
      prepare_workdir(config, workdir, datasets[0].vocab)
  if distributed.is_writer():
    workdir_lib.remove_partial_checkpoints(workdir)  # ours: we hold the lock
  distributed.barrier("workdir ready")

  tx, schedule = optim.make_optimizer(num_steps=config.num_steps, **config.optimizer)
  mesh = make_mesh()
  replicated = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec())
  batch_sharding = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec(None, "data"))

  manager = stack.enter_context(contextlib.closing(
      workdir_lib.checkpoint_manager(workdir, config.keep_checkpoints)))
  state = jax.device_put(init_replicas(model, tx, seeds), replicated)
  state = restore_or_keep(manager, state, workdir)
  start = int(state.step[0])
  if distributed.is_writer():
    with _write_failures("metrics", workdir_lib.metrics_path(workdir)):
      metric_writers.truncate_after(workdir, start)
  if start:
    logging.info("resuming %s from step %d", workdir, start)

  train_step = make_train_step(model, tx, schedule, label_smoothing=config.label_smoothing,
                               randomized=randomized_lib.RandomizedPositions(**config.randomized))
  step_fn = jax.jit(jax.vmap(train_step), donate_argnums=0,
                    out_shardings=(replicated, replicated))
  seeds_N = jax.device_put(jnp.asarray(seeds, jnp.int32), replicated)
  writer = stack.enter_context(contextlib.closing(metric_writers.MetricWriter(
      workdir, multi_replica=config.num_seeds > 1, enabled=distributed.is_writer())))
  rows = process_rows(config.batch_size)
  # A preempted run's steps since its last log line: the next record averages them too.
  window: list[dict[str, np.ndarray]] = metric_writers.load_pending(workdir, start)
  resumed_window = len(window)  # not timed in this session
  t_window, t_start = time.perf_counter(), time.perf_counter()

  def save(step: int) -> None:
    previous = manager.latest_step()
    try:
      manager.save(step, args=ocp.args.StandardSave(flax.serialization.to_state_dict(state)))
      manager.wait_until_finished()
    except Exception as e:  # pylint: disable=broad-except  # orbax wraps OS errors in many kinds
      failure = errors.write_failure(
          e, f"checkpoint {step}", workdir_lib.checkpoint_dir(workdir),
          f"checkpoint {previous} is intact: make room and rerun the same command to resume"
          if previous is not None else "no earlier checkpoint")
      if failure is None:
        raise
      if distributed.is_writer():
        workdir_lib.remove_partial_checkpoints(workdir)  # give the space back now
      raise failure from None

  def batch_of(step: int) -> dict[str, jax.Array]:
    return shard_batch(stacked_batch(datasets, step, config.batch_size, rows), batch_sharding,
                       config.batch_size)

  batch = batch_of(start) if start < config.num_steps else None
  for step in range(start, config.num_steps):
    state, metrics = step_fn(state, batch, seeds_N)
    # The step runs asynchronously: assemble the next batch (numpy, a pure function of
    # the step) before waiting for it, so host and device work overlap.
    if step + 1 < config.num_steps:
      batch = batch_of(step + 1)
    metrics = jax.device_get(metrics)  # waits for the step: needed on multi-device CPU
    _check_finite(metrics, step, seeds)
    window.append(metrics)
    done = step + 1
    stop = preemption.stop_signal()  # every process, every step: they stop at the same one
    log_now = done % config.log_every == 0 or done == config.num_steps
    if stop:  # first: the scheduler's grace period may end during the eval below
      if distributed.is_writer():  # before the checkpoint: one never exists without it
        metric_writers.save_pending(workdir, done, [] if log_now else window)
      save(done)
    if log_now:
      now = time.perf_counter()
      steps_per_sec = (len(window) - resumed_window) / (now - t_window)
      resumed_window = 0
      for i, seed in enumerate(seeds):
        mean = {k: float(np.mean([m[k][i] for m in window])) for k in window[0]}
        writer.write(done, "train", seed, {**mean, "steps_per_sec": steps_per_sec})
      eta = (config.num_steps - done) / max((done - start) / (now - t_start), 1e-9)
      logging.info("step %d/%d | loss %.4f | token acc %.3f | exact %.3f | %.1f steps/s | ETA %s",
                   done, config.num_steps, np.mean(window[-1]["loss"]),
                   np.mean([m["token_accuracy"] for m in window]),
                   np.mean([m["exact_match"] for m in window]), steps_per_sec,
                   evaluate.format_seconds(eta))
      window, t_window = [], time.perf_counter()
    if done % config.eval_every == 0 or done == config.num_steps:
      for i, seed in enumerate(seeds):
        scalars = evaluate_replica(model, _replica(state.params, i), datasets[i], config,
                                   seed=int(seed))
        writer.write(done, "eval", seed, scalars)
        logging.info("eval step %d seed %d: %s", done, seed,
                     " | ".join(f"{k} {v:.3f}" for k, v in scalars.items()))
      t_window = time.perf_counter()  # eval time is not training time
    if (done % config.checkpoint_every == 0 or done == config.num_steps) and not stop:
      save(done)
    if stop and done < config.num_steps:
      writer.close()  # flushes TensorBoard now (closing twice is harmless)
      raise errors.Preempted(done, stop)

  manager.wait_until_finished()
  return state


@contextlib.contextmanager
def _write_failures(what: str, path: str):
  """Re-raises a failed write (OSError) inside as `errors.WriteFailed` naming `what` and `path`."""
  try:
    yield
  except OSError as e:
    raise errors.write_failure(e, what, path) or e


def _check_finite(metrics: dict[str, np.ndarray], step: int, seeds: list[int]) -> None:
  """Raises FloatingPointError naming the step if a loss or gradient is not finite."""
  for key in ("loss", "grad_norm"):
    bad = ~np.isfinite(metrics[key])
    if bad.any():
      seed = seeds[int(np.argmax(bad))]
      raise FloatingPointError(
          f"non-finite {key} ({metrics[key][bad][0]}) at step {step} (replica seed {seed}); "
          "training stopped and this state was not saved. Lower optimizer.learning_rate or "
          "set optimizer.grad_clip_norm.")

