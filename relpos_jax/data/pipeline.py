"""Batches for every data source: a synthetic task, SCAN, or a local TFDS dataset.

`make_dataset(seed=config.seed, **config.data)` returns a `Dataset` with

* `train_batch(step, batch_size)`: a pure function of (seed, step, batch_size),
  so a resumed run sees exactly the batches it would have seen;
* `eval_batches(length, batch_size, num_examples=None, sample_seed=0)`: the
  fixed, finite eval set at one length (`eval_size(length)` examples), or a
  seeded uniform random sample of it (never a prefix in generation order);
* `validation_batches(batch_size)`: the held-out in-distribution validation set,
  disjoint from training (`validation_info()` says what it is);
* `vocab`: ids PAD=0, BOS=1, EOS=2, UNK=3, then the data's tokens.

Batches are dicts of numpy arrays: `inputs` int32 [B, S] and `targets` int32
[B, T] (target ids, one EOS, then PAD; no BOS: the model adds it), plus `weights`
float32 [B] in eval and validation batches (0.0 marks padding rows). S and T are each the
smallest of `length_buckets` that holds the batch's longest sequence (EOS
included), so only a few shapes are ever compiled.

"Length" is the number of input tokens for synthetic tasks and the number of
target tokens (EOS excluded) for SCAN and TFDS sources.

Validation ("in distribution"). Synthetic tasks draw it from its own random
stream (seeded by `[_VALIDATION_STREAM, length]`, never by the training seed) at
the training lengths whose input space is large enough that training is
unlikely to have seen its examples (`validation_lengths`). SCAN and TFDS sources
hold out `validation_fraction` of the training split's distinct inputs, chosen
by a fixed seed independent of the run seed: every run trains on the same rest.
"""

from __future__ import annotations

import functools
import inspect
from typing import Any, Callable, Iterator, Mapping, Sequence

import ml_collections
import numpy as np

from relpos_jax.data import batching
from relpos_jax.data import corpus as corpus_lib
from relpos_jax.data import finite
from relpos_jax.data import lm
from relpos_jax.data import scan
from relpos_jax.data import tasks
from relpos_jax.data import vocab as vocab_lib

Example = batching.Example
Batch = batching.Batch
TFDS_PREFIX = "tfds:"
# First words of the numpy seeds this module draws from (tasks.py uses 0 and 1), so
# no two of these streams, nor a training or eval stream, ever coincide.
_SHUFFLE_STREAM = 2  # the epoch permutations of a finite training set
_EVAL_SAMPLE_STREAM = 3  # `eval_batches(num_examples=...)`'s random samples
_VALIDATION_STREAM = 4  # synthetic validation examples
# 5: which training inputs of a finite source are held out (finite.py)
# A synthetic training length gets validation examples only if it has at least this
# many distinct inputs (see `validation_lengths`).
MIN_VALIDATION_INPUTS = 10**6


class Dataset:
  """Training, eval and validation batches of one source, with its vocabulary.

  Build it with `make_dataset`; the constructor is the sources' common form.
  """

  def __init__(self, *, vocab: vocab_lib.Vocab, length_buckets: Sequence[int],
               train_examples: Callable[[int, int], list[Example]],
               eval_examples: Callable[[int], list[Example]], eval_lengths: Sequence[int],
               max_lengths: tuple[int, int], validation_examples: Callable[[], list[Example]],
               validation_info: Mapping[str, Any], num_train_examples: int | None = None):
    """Wraps one source.

    Args:
      vocab: the vocabulary.
      length_buckets: sorted padded lengths.
      train_examples: (step, batch_size) -> that step's examples; pure.
      eval_examples: length -> the fixed eval examples at that length.
      eval_lengths: the lengths `eval_examples` accepts.
      max_lengths: (inputs, targets with EOS): the longest any batch can hold.
      validation_examples: () -> the fixed validation examples, disjoint from training.
      validation_info: what `validation_info()` returns (JSON-serialisable).
      num_train_examples: size of a finite training set (None: generated afresh).
    """
    self.vocab = vocab
    self.length_buckets = tuple(length_buckets)
    self.eval_lengths = list(eval_lengths)
    self.num_train_examples = num_train_examples
    self._train_examples = train_examples
    self._eval_examples = functools.lru_cache(maxsize=None)(eval_examples)
    self._validation_examples = functools.lru_cache(maxsize=1)(validation_examples)
    self._validation_info = dict(validation_info)
    self._max_lengths = max_lengths

  def train_batch(self, step: int, batch_size: int) -> Batch:
    """The training batch of one step.

    Args:
      step: training step (>= 0).
      batch_size: number of examples.

    Returns:
      {"inputs": int32 [B, S], "targets": int32 [B, T]}, a pure function of
      (seed, step, batch_size).
    """
    if step < 0 or batch_size < 1:
      raise ValueError(f"need step >= 0 and batch_size >= 1, got step={step}, "
                       f"batch_size={batch_size}")
    return batching.make_batch(self._train_examples(step, batch_size), self.length_buckets)

  def train_rows(self, step: int, batch_size: int, rows: slice) -> Batch:
    """Rows `rows` of `train_batch(step, batch_size)`, building only those rows.

    Equal to `train_batch(step, batch_size)[key][rows]` for each key: the same
    examples, padded to the whole batch's lengths. A process of a multi-process
    run builds only its own rows. (Synthetic tasks still draw the step's examples
    from one rng stream, which is cheap; encoding and padding are per row.)

    Args:
      step: training step (>= 0).
      batch_size: rows of the whole batch.
      rows: a slice of range(batch_size).

    Returns:
      {"inputs": int32 [b, S], "targets": int32 [b, T]}, S and T those of the whole batch.
    """
    if step < 0 or batch_size < 1:
      raise ValueError(f"need step >= 0 and batch_size >= 1, got step={step}, "
                       f"batch_size={batch_size}")
    examples = self._train_examples(step, batch_size)
    mine = examples[rows]
    if not mine:
      raise ValueError(f"rows {rows} of a batch of {batch_size} select no example")
    lengths = (batching.bucket_length(max(len(x) for x, _ in examples), self.length_buckets),
               batching.bucket_length(max(len(y) for _, y in examples) + 1, self.length_buckets))
    batch = batching.make_batch(mine, self.length_buckets)
    return {key: np.pad(batch[key], ((0, 0), (0, n - batch[key].shape[1])),
                        constant_values=vocab_lib.PAD_ID)
            for key, n in zip(("inputs", "targets"), lengths)}

  def eval_size(self, length: int) -> int:
    """How many eval examples exist at `length` (synthetic: `eval_examples_per_length`).

    Args:
      length: one of `eval_lengths`.

    Returns:
      The size of the whole eval set at that length.
    """
    self._check_eval_length(length)
    return len(self._eval_examples(length))

  def eval_batches(self, length: int, batch_size: int, *, num_examples: int | None = None,
                   sample_seed: int = 0) -> Iterator[Batch]:
    """The eval set at `length`, or a seeded random sample of it, in batches of `batch_size` rows.

    Each length is sampled on its own, so a sample over several lengths is
    stratified by length. The sample is uniform without replacement, a pure
    function of (length, sample_seed): never a prefix in generation order (for
    SCAN that would be commands of one shape, e.g. all starting with "walk").

    Args:
      length: one of `eval_lengths`.
      batch_size: rows per batch.
      num_examples: how many examples to score; None or >= `eval_size(length)`:
        the whole set.
      sample_seed: picks the sample (>= 0); the same seed gives the same
        examples on every call and for every training seed.

    Returns:
      A finite iterator over the chosen examples, in the set's own order, same
      examples and order on every call. Each batch also has `weights` float32
      [B]: 1.0 for real rows, 0.0 for the rows that pad the last batch (copies
      of real rows, so no row is all PAD).

    Raises:
      ValueError: unknown length, batch_size < 1, num_examples < 1 or
        sample_seed < 0 (raised at the call, not at the first batch).
    """
    self._check_eval_length(length)
    if batch_size < 1:
      raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    if num_examples is not None and num_examples < 1:
      raise ValueError(f"num_examples must be >= 1 (or None: all), got {num_examples}")
    if not isinstance(sample_seed, (int, np.integer)) or sample_seed < 0:
      raise ValueError(f"sample_seed must be a non-negative int, got {sample_seed!r}")
    examples = self._eval_examples(length)
    if num_examples is not None and num_examples < len(examples):
      rng = np.random.default_rng([_EVAL_SAMPLE_STREAM, int(sample_seed), int(length)])
      keep = np.sort(rng.choice(len(examples), size=num_examples, replace=False))
      examples = [examples[i] for i in keep]
    return batching.padded_batches(examples, batch_size, self.length_buckets)

  def validation_batches(self, batch_size: int) -> Iterator[Batch]:
    """The held-out in-distribution validation set, in batches of exactly `batch_size` rows.

    Args:
      batch_size: rows per batch.

    Returns:
      A finite iterator over every validation example (`validation_info()`
      describes them), grouped by length, same examples and order on every call
      and for every training seed; `weights` as in `eval_batches`.
    """
    if batch_size < 1:
      raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    return batching.padded_batches(self._validation_examples(), batch_size, self.length_buckets)

  def validation_info(self) -> dict[str, Any]:
    """What the validation set is, for records.

    Returns:
      {"num_examples": int, "lengths": sorted list of the lengths it holds,
      "length_unit": "input tokens" (synthetic) or "target tokens",
      "source": "held_out_stream" (synthetic) or "held_out_split" (SCAN, TFDS),
      "rule": one sentence saying how it was chosen and why it is disjoint from
      training}, plus source-specific keys (synthetic: "min_distinct_inputs";
      finite: "fraction", "holdout_seed").
    """
    return dict(self._validation_info)

  def max_padded_lengths(self) -> tuple[int, int]:
    """(S, T): the largest padded input and target lengths any train or eval batch can have."""
    return tuple(batching.bucket_length(n, self.length_buckets) for n in self._max_lengths)

  def _check_eval_length(self, length: int) -> None:
    """ValueError listing the eval lengths if `length` is not one of them."""
    if length not in self.eval_lengths:
      raise ValueError(f"no eval set at length {length}; eval lengths are {self.eval_lengths}")


def make_dataset(*, task: str = "copy", seed: int, vocab_size: int = 10,
                 min_train_length: int = 1, max_train_length: int = 20,
                 eval_lengths: Sequence[int] = tuple(range(5, 81, 5)),
                 eval_examples_per_length: int = 128, num_validation_examples: int = 512,
                 validation_fraction: float = 0.1,
                 length_buckets: Sequence[int] = (8, 16, 32, 64, 128, 256, 512, 1024),
                 scan_split: str = "length", tfds_data_dir: str | None = "",
                 tfds_input_key: str = "inputs", tfds_target_key: str = "targets",
                 tfds_train_split: str = "train", tfds_eval_split: str = "test",
                 **lm_options: Any) -> Dataset | lm.LMDataset:
  """The dataset of `task`; config errors are raised before any data is made.

  These defaults are the single declaration of the `data` config (see
  `default_config`).

  Args:
    task: a synthetic task (`tasks.TASKS`: copy, reverse, sort, duplicate,
      odds_first, add), "scan", or "tfds:<name>" (e.g. "tfds:relpos_scan/length",
      any `name[/config][:version]` that `tfds.data_source` accepts).
    seed: training seed (>= 0): fixes the synthetic training stream, or the
      epoch-wise shuffling of a finite training set. Eval sets do not depend on it.
    vocab_size: number of task symbols (the base for `add`). Synthetic only.
    min_train_length, max_train_length: each training example's input length is
      uniform in this range. Synthetic only.
    eval_lengths: input lengths of the synthetic eval sets. Inside the training
      range they are in-distribution checks; outside it they can never repeat a
      training example. Ignored for SCAN and tfds sources, whose eval lengths are
      all the target lengths present in the eval split.
    eval_examples_per_length: eval set size at each length. Synthetic only.
    num_validation_examples: size of the validation set, spread evenly over
      `validation_lengths(...)` (a few hundred: enough to pick a checkpoint,
      cheap to decode). Synthetic only.
    validation_fraction: the share of the training split's distinct inputs held
      out as the validation set (0.1, as Kazemnejad et al. 2023 did for SCAN),
      chosen by the fixed HOLDOUT_SEED. SCAN and tfds only.
    length_buckets: the padded lengths (inputs and targets, EOS included, are
      each padded up to the smallest bucket that fits the batch). Synthetic
      tasks add their longest training input and target as buckets.
    scan_split: for task="scan": a `scan.load_split` name.
    tfds_data_dir: the TFDS data_dir of a "tfds:" task ("" or None: $TFDS_DATA_DIR,
      else ~/tensorflow_datasets).
    tfds_input_key, tfds_target_key: the example features holding the input and
      target text (space-separated tokens) or integer token sequences.
    tfds_train_split, tfds_eval_split: the TFDS splits to train and evaluate on.
    **lm_options: for an "lm:" task (a byte-level language model, relpos_jax/data/lm.py),
      the keys of `lm.default_config()`; of the keyword arguments above only
      `tfds_data_dir` is then used.

  Returns:
    The `Dataset`; its vocabulary is built from the whole training split,
    held-out validation inputs included (synthetic: the task's symbols).

  Raises:
    ValueError: unknown task or SCAN split, min > max, lengths a task cannot
      produce or that exceed the largest bucket, missing TFDS keys or splits,
      num_validation_examples < 1, validation_fraction outside (0, 1).
    FileNotFoundError: a "tfds:" dataset that is not in tfds_data_dir.
  """
  if task.startswith(corpus_lib.PREFIX):
    return lm.make_dataset(task=task, seed=seed, tfds_data_dir=tfds_data_dir, **lm_options)
  if lm_options:
    raise ValueError(f"unknown data config keys {sorted(lm_options)} for task {task!r}")
  buckets = _check_common(task, seed, length_buckets)
  if num_validation_examples < 1:
    raise ValueError(f"num_validation_examples={num_validation_examples}; set it >= 1")
  if not 0.0 < validation_fraction < 1.0:
    raise ValueError(f"validation_fraction={validation_fraction}; set it in (0, 1), e.g. 0.1")
  if task == "scan":
    scan.check_split(scan_split)
    return _finite_dataset(finite.encoded_scan(scan_split, validation_fraction), seed=seed,
                           buckets=buckets)
  if task.startswith(TFDS_PREFIX):
    train, test = finite.read_tfds(task.removeprefix(TFDS_PREFIX), data_dir=tfds_data_dir,
                             input_key=tfds_input_key, target_key=tfds_target_key,
                             splits=(tfds_train_split, tfds_eval_split))
    return _finite_dataset(finite.encode_pairs(train, test, validation_fraction), seed=seed,
                           buckets=buckets)
  return _synthetic_dataset(task, seed=seed, vocab_size=vocab_size, min_length=min_train_length,
                            max_length=max_train_length, eval_lengths=eval_lengths,
                            eval_examples_per_length=eval_examples_per_length,
                            num_validation_examples=num_validation_examples, buckets=buckets)


def default_config() -> ml_collections.ConfigDict:
  """The `data` config: every `make_dataset` keyword but `seed`, with its default."""
  params = inspect.signature(make_dataset).parameters
  return ml_collections.ConfigDict(
      {name: p.default for name, p in params.items()
       if name != "seed" and p.kind != inspect.Parameter.VAR_KEYWORD})


def _check_common(task: str, seed: int, length_buckets: Sequence[int]) -> tuple[int, ...]:
  """Validates what every source shares; returns the buckets as a sorted tuple."""
  lm_prefix = corpus_lib.PREFIX
  valid = list(tasks.TASKS) + ["scan", f"{TFDS_PREFIX}<name>", f"{lm_prefix}{corpus_lib.CPYTHON}",
                               f"{lm_prefix}{corpus_lib.TFDS_PREFIX}<name>"]
  if task not in tasks.TASKS and task != "scan" and not (
      task.startswith(TFDS_PREFIX) and len(task) > len(TFDS_PREFIX)):
    raise ValueError(f"unknown task {task!r}; choose one of: {', '.join(valid)}")
  if not isinstance(seed, (int, np.integer)) or seed < 0:
    raise ValueError(f"seed must be a non-negative int, got {seed!r}")
  buckets = tuple(sorted(set(int(b) for b in length_buckets)))
  if not buckets or buckets[0] < 1:
    raise ValueError(f"length_buckets must be positive lengths, got {tuple(length_buckets)}; "
                     "e.g. (8, 16, 32, 64, 128)")
  return buckets


def validation_lengths(task: str, *, vocab_size: int, min_length: int,
                       max_length: int) -> list[int]:
  """The training lengths at which a synthetic task draws validation examples.

  The rule: a training length n qualifies if the task has at least
  MIN_VALIDATION_INPUTS (10**6) distinct inputs of n tokens, counted by the
  task's `num_inputs` (vocab_size ** n; for add the n - 1 digits around "+"; for
  add_index_hints its (n - 1) / 2 digits, the hints being determined by them up
  to an offset: lower bounds). Training
  draws its inputs uniformly from the same space, so a run of 6,000 steps x 64
  examples over 20 lengths (19,200 per length) can have seen at most ~2% of a
  qualifying length's validation examples: the set measures generalisation
  within the training distribution, not memory. With vocab_size 10: copy,
  reverse, sort, duplicate and odds_first qualify from length 6, add from 7,
  add_index_hints from 13 (6 digits).
  If no training length qualifies (a tiny vocabulary or short training
  lengths), the longest training length alone, whose examples training may
  well have seen (`validation_info()["rule"]` says so).

  Args:
    task: a synthetic task in `tasks.TASKS`.
    vocab_size: number of data symbols.
    min_length, max_length: the training input lengths (inclusive).

  Returns:
    The qualifying lengths, ascending (never empty).
  """
  spec = tasks.get_task(task)
  made = [n for n in range(min_length, max_length + 1) if spec.makes(n)]
  lengths = [n for n in made if spec.num_inputs(n, vocab_size) >= MIN_VALIDATION_INPUTS]
  return lengths or made[-1:]


def _synthetic_validation(name: str, *, vocab_size: int, min_length: int, max_length: int,
                          num_examples: int) -> tuple[Callable[[], list[tasks.Example]],
                                                      dict[str, Any]]:
  """(() -> the validation examples in symbols, grouped by length; validation_info)."""
  lengths = validation_lengths(name, vocab_size=vocab_size, min_length=min_length,
                               max_length=max_length)
  counts = {n: num_examples // len(lengths) + (i < num_examples % len(lengths))
            for i, n in enumerate(lengths)}
  counts = {n: c for n, c in counts.items() if c}
  extra = len(tasks.symbols(name, vocab_size)) - vocab_size
  large = vocab_size ** (max_length - extra) >= MIN_VALIDATION_INPUTS
  rule = (f"{name} examples from a random stream no training seed uses, at the training "
          f"lengths with >= {MIN_VALIDATION_INPUTS:.0e} distinct inputs "
          f"({vocab_size}**(length - {extra}))" if large else
          f"{name} examples from a random stream no training seed uses, at the longest "
          f"training length only: no training length has >= {MIN_VALIDATION_INPUTS:.0e} "
          "distinct inputs, so training has likely seen many of them")

  def examples() -> list[tasks.Example]:
    """Each length's examples from its own rng, shorter lengths first."""
    task = tasks.get_task(name)
    out = []
    for n, count in counts.items():
      rng = np.random.default_rng([_VALIDATION_STREAM, n])
      out += [task.fn(rng, n, vocab_size) for _ in range(count)]
    return out

  info = {"num_examples": sum(counts.values()), "lengths": list(counts),
          "length_unit": "input tokens", "source": "held_out_stream", "rule": rule,
          "min_distinct_inputs": MIN_VALIDATION_INPUTS}
  return examples, info


def _synthetic_dataset(name: str, *, seed: int, vocab_size: int, min_length: int,
                       max_length: int, eval_lengths: Sequence[int],
                       eval_examples_per_length: int, num_validation_examples: int,
                       buckets: tuple[int, ...]) -> Dataset:
  """A synthetic task's Dataset; symbol s has id NUM_SPECIAL + s."""
  eval_lengths = sorted(set(int(n) for n in eval_lengths))
  tasks.check_config(name, vocab_size, min_length, max_length, eval_lengths)
  if eval_examples_per_length < 1:
    raise ValueError(f"eval_examples_per_length={eval_examples_per_length}; set it >= 1")
  target_bound = tasks.get_task(name).max_target_length
  # Nearly every training batch holds a sequence of the maximum length: make that
  # length a bucket, so training pads nothing (one extra compiled shape).
  buckets = tuple(sorted(set(buckets) | {max_length, target_bound(max_length) + 1}))
  longest = max([max_length] + eval_lengths)
  max_lengths = (longest, max(target_bound(n) for n in [max_length] + eval_lengths) + 1)
  for n in max_lengths:
    batching.bucket_length(n, buckets)  # raises before any data is made

  def encode(examples: list[tasks.Example]) -> list[Example]:
    """Symbols -> ids."""
    offset = vocab_lib.NUM_SPECIAL
    return [(x + offset, y + offset) for x, y in examples]

  def train_examples(step: int, batch_size: int) -> list[Example]:
    """The examples of one training step."""
    return encode(tasks.train_examples(name, seed=seed, step=step, batch_size=batch_size,
                                       vocab_size=vocab_size, min_length=min_length,
                                       max_length=max_length))

  def eval_examples(length: int) -> list[Example]:
    """The fixed eval set at one length."""
    return encode(tasks.eval_examples(name, length=length, num_examples=eval_examples_per_length,
                                      vocab_size=vocab_size))

  validation, validation_info = _synthetic_validation(
      name, vocab_size=vocab_size, min_length=min_length, max_length=max_length,
      num_examples=num_validation_examples)
  return Dataset(vocab=vocab_lib.Vocab(tasks.symbols(name, vocab_size)), length_buckets=buckets,
                 train_examples=train_examples, eval_examples=eval_examples,
                 eval_lengths=eval_lengths, max_lengths=max_lengths,
                 validation_examples=lambda: encode(validation()),
                 validation_info=validation_info)


def _finite_dataset(encoded: finite.Encoded, *, seed: int, buckets: tuple[int, ...]) -> Dataset:
  """A Dataset over fixed, encoded (input, target) pairs.

  Training shuffles by epoch: example i of the stream is
  train[permutation(seed, i // N)[i % N]]. Eval lengths are the distinct target
  lengths of the eval split.
  """
  train_ids, by_length = encoded.train, encoded.test_by_length
  everything = (train_ids + encoded.validation
                + tuple(e for group in by_length.values() for e in group))
  max_lengths = (max(len(x) for x, _ in everything), max(len(y) for _, y in everything) + 1)
  for n in max_lengths:
    batching.bucket_length(n, buckets)

  @functools.lru_cache(maxsize=4)
  def permutation(epoch: int) -> np.ndarray:
    """The order of the training set in one epoch."""
    return np.random.default_rng([_SHUFFLE_STREAM, seed, epoch]).permutation(len(train_ids))

  def train_examples(step: int, batch_size: int) -> list[Example]:
    """Examples step * batch_size ... of the endless shuffled stream."""
    stream = range(step * batch_size, (step + 1) * batch_size)
    return [train_ids[permutation(i // len(train_ids))[i % len(train_ids)]] for i in stream]

  return Dataset(vocab=encoded.vocab, length_buckets=buckets, train_examples=train_examples,
                 eval_examples=lambda n: list(by_length[n]), eval_lengths=list(by_length),
                 max_lengths=max_lengths, num_train_examples=len(train_ids),
                 validation_examples=lambda: list(encoded.validation),
                 validation_info=encoded.validation_info)
