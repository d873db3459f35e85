"""Evaluation compiles one decoding program per length bucket, not one per length.

Compilations are counted, not timed: a `jax.monitoring` listener on XLA backend
compilations (each event names its program), cross-checked with the jit cache of
`decode._greedy_decode`.

Eval batches pad inputs and targets (EOS included, so a copy target of n tokens
needs n + 1) each to the smallest length bucket, and `pipeline._synthetic_dataset`
adds the longest training input and target (here 6 and 7) as buckets. With
buckets {6, 7, 8, 16, 32, 64}, the 8 copy lengths below pad to 4 (input,
target) shapes: 3, 5 -> (6, 6); 10, 13 -> (16, 16); 20, 26, 31 -> (32, 32);
40 -> (64, 64). A length n whose target n + 1 crosses a bucket (n = 16: (16, 32))
would be a shape of its own, so these lengths keep clear of that edge.

Besides the decoding programs, JAX (>= 0.9) compiles a trivial identity program
(`jit(stage)`) the first time `jnp.asarray` lifts a numpy array of a new shape,
which `evaluate.evaluate_length` does with each batch. Those are counted and
bounded separately (at most one per bucket too); passing the numpy batch to
`greedy_decode` directly, or `jax.device_put`, would remove them.
"""

import contextlib

import jax
import jax.numpy as jnp
import pytest

from configs import default
from relpos_jax import architectures
from relpos_jax import decode
from relpos_jax import evaluate
from relpos_jax.data import pipeline

import model_harness  # the tests' shared eager init (pytest puts tests/ on the path)

LENGTHS = (3, 5, 10, 13, 20, 26, 31, 40)
BUCKETS = (8, 16, 32, 64)
MAX_TRAIN_LENGTH = 6
COMPILE_EVENT = "/jax/core/compile/backend_compile_duration"


DECODE_PROGRAM = "jit(_greedy_decode)"
LOSS_PROGRAM = "jit(_teacher_forced_loss)"  # evaluate's teacher-forced loss, one per shape too
STAGING_PROGRAM = "jit(stage)"


@contextlib.contextmanager
def count_compilations():
  """Yields a list of the program names of every XLA backend compilation inside the block."""
  compiled = []

  def listener(event, duration_secs, **kwargs):
    del duration_secs
    if event == COMPILE_EVENT:
      compiled.append(kwargs.get("fun_name", "?"))

  jax.monitoring.register_event_duration_secs_listener(listener)
  try:
    yield compiled
  finally:
    jax.monitoring.unregister_event_duration_listener(listener)


def _setup(scheme):
  config = default.get_config(f"smoke,scheme={scheme}")
  config.data.update(task="copy", max_train_length=MAX_TRAIN_LENGTH, length_buckets=BUCKETS,
                     eval_lengths=LENGTHS, eval_examples_per_length=6)
  dataset = pipeline.make_dataset(seed=0, **config.data)
  model = architectures.make_model(config.model, vocab_size=dataset.vocab.size)
  sample = dataset.train_batch(0, 2)
  params = model_harness.init(model, jnp.asarray(sample["inputs"]),
                              jnp.asarray(sample["targets"]))
  return model, params, dataset


def _padded_shapes(dataset, batch_size):
  """The distinct (batch, input length, target length) shapes of every eval batch."""
  return {(b["inputs"].shape, b["targets"].shape[1])
          for n in LENGTHS for b in dataset.eval_batches(n, batch_size)}


@pytest.mark.slow  # compiles every eval program of a model
def test_eight_eval_lengths_compile_at_most_four_programs():
  model, params, dataset = _setup("t5")
  batch_size = 4  # 6 examples per length: two batches each, the second padded with copies
  shapes = _padded_shapes(dataset, batch_size)
  assert len(shapes) == 4, shapes  # the four buckets the docstring names
  cache_before = decode._greedy_decode._cache_size()  # pylint: disable=protected-access
  with count_compilations() as compiled:
    records = [evaluate.evaluate_length(model, params, dataset, n, batch_size=batch_size)
               for n in LENGTHS]
  assert [r["length"] for r in records] == list(LENGTHS)
  assert all(r["num_examples"] == 6 for r in records)
  decoding = [name for name in compiled if name == DECODE_PROGRAM]
  loss = [name for name in compiled if name == LOSS_PROGRAM]
  staging = [name for name in compiled if name == STAGING_PROGRAM]
  assert len(decoding) + len(loss) + len(staging) == len(compiled), compiled  # nothing else
  assert len(decoding) <= 4
  assert len(decoding) == len(shapes)  # one program per bucket, not per length or batch
  assert len(loss) == len(shapes)
  assert decode._greedy_decode._cache_size() - cache_before == len(shapes)  # pylint: disable=protected-access
  assert len(staging) <= len(shapes)  # numpy -> jax lifting: at most once per shape as well

  with count_compilations() as again:  # a second pass (another replica) compiles nothing
    for n in LENGTHS:
      evaluate.evaluate_length(model, params, dataset, n, batch_size=batch_size)
  assert not again


@pytest.mark.slow  # compiles every eval program of a model
def test_another_replica_reuses_the_programs():
  """Replicas of a multi-seed run share shapes: new parameters compile nothing."""
  model, params, dataset = _setup("shaw")
  evaluate.evaluate_length(model, params, dataset, 10, batch_size=4)
  other = jax.tree_util.tree_map(lambda x: x + 1.0, params)
  with count_compilations() as compiled:
    evaluate.evaluate_length(model, other, dataset, 13, batch_size=4)  # same bucket as 10
  assert not compiled
