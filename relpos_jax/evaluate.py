"""Length-extrapolation evaluation: greedy-decode each eval length, score it.

For each eval length: exact match and token accuracy of cached greedy decoding,
the teacher-forced loss, and the *failure anatomy*, because a model that
extrapolates badly can fail in two different ways (DESIGN.md, "What to expect"):

* a *content* error: some token before the end of the shorter of (prediction,
  target) is wrong;
* a *stopping* error: every token the two share is right, but the prediction
  stops too early or too late (EOS in the wrong place).

Among the failures of a length the record gives the shares that are too short,
too long and of the right length, the share that are pure stopping errors, and
the median position of the first wrong token. With `oracle_length=True` each
batch is decoded a second time with the true target length imposed (EOS
forbidden before it, forced at it: `decode.greedy_decode(oracle_lengths_B=...)`),
which measures content apart from the stop decision (`oracle_*` metrics).

One record per (run, replica, length): a flat dict that `tables.py` and
`plots.py` consume. `evaluate_workdir` evaluates one trained run from its
workdir alone; `evaluate_runs` several runs, and writes their comparison
(`REPORT_FILES`). A length the scheme cannot encode (a learned position table
too short) is recorded as not representable (NaN metrics, the reason in
`error`) instead of stopping the evaluation.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import math
import os
import re
import time
from typing import Any, Iterable, Iterator, Sequence

from absl import logging
import jax
import ml_collections
import numpy as np

from relpos_jax import architectures
from relpos_jax import decode
from relpos_jax import plots
from relpos_jax import tables
from relpos_jax import workdir as workdir_lib
from relpos_jax.data import pipeline
from relpos_jax.data import vocab
from relpos_jax.positions import shaw
from relpos_jax.positions import sinusoidal
from relpos_jax.positions import t5

Record = dict[str, Any]

METRIC_KEYS = ("exact_match", "token_accuracy", "loss", "length_accuracy", "content_errors",
               "stop_errors", "fail_too_short", "fail_too_long", "fail_right_length",
               "fail_pure_stop", "first_wrong_median")
ORACLE_KEYS = ("oracle_exact_match", "oracle_token_accuracy")
REPORT_FILES = {"records": "extrapolation.jsonl", "tables": "extrapolation.md",
                "csv": "extrapolation.csv", "plot": "accuracy_vs_length.png"}
SCHEME_PLOTS = {"t5": "t5_bias.png", "shaw": "shaw_key_norms.png",
                "sinusoidal": "sinusoid.png"}


class UnrepresentableLength(ValueError):
  """The run's positional scheme cannot encode the sequences of an eval length."""


# ------------------------------------------------------------------ scoring

def target_lengths(targets_BxT: np.ndarray) -> np.ndarray:
  """Number of target tokens before EOS, per row."""
  return np.argmax(targets_BxT == vocab.EOS_ID, axis=1)


def score_batch(tokens_BxT: np.ndarray, lengths_B: np.ndarray,
                targets_BxT: np.ndarray) -> dict[str, np.ndarray]:
  """Per-example scores of decoded tokens against targets.

  Args:
    tokens_BxT: decoded tokens (EOS then PAD after the prediction's end).
    lengths_B: predicted lengths (tokens before EOS; T if no EOS).
    targets_BxT: targets (tokens, EOS, PAD); same T as `tokens`.

  Returns:
    dict of `[B]` arrays: `exact` (bool), `token_correct` (fraction of target
    positions, EOS included, predicted right), `length_correct`, `too_short`,
    `too_long` (bool), `content_error`, `stop_error` (bool; exclusive, both
    False when exact) and `first_error` (index of the first wrong token, EOS
    position included; target length + 1 if exact).
  """
  T = targets_BxT.shape[1]
  tgt_len_B = target_lengths(targets_BxT)
  in_target_BxT = np.arange(T)[None] <= tgt_len_B[:, None]  # target tokens and its EOS
  match_BxT = tokens_BxT == targets_BxT
  exact_B = np.all(match_BxT | ~in_target_BxT, axis=1)
  wrong_BxT = ~match_BxT & in_target_BxT
  first_error_B = np.where(wrong_BxT.any(axis=1), np.argmax(wrong_BxT, axis=1), tgt_len_B + 1)
  shared_B = np.minimum(lengths_B, tgt_len_B)  # tokens both sequences have before an EOS
  content_B = ~exact_B & (first_error_B < shared_B)
  return {
      "exact": exact_B,
      "token_correct": (match_BxT & in_target_BxT).sum(1) / (tgt_len_B + 1),
      "length_correct": lengths_B == tgt_len_B,
      "too_short": lengths_B < tgt_len_B,
      "too_long": lengths_B > tgt_len_B,
      "content_error": content_B,
      "stop_error": ~exact_B & ~content_B,
      "first_error": first_error_B,
  }


def summarize_scores(scores: dict[str, np.ndarray], weights_B: np.ndarray) -> Record:
  """Aggregates per-example scores of one eval length into its metrics.

  Args:
    scores: `[N]` arrays: `score_batch`'s keys; optionally `loss_sum` and
      `loss_tokens` (teacher-forced loss summed over an example's target
      tokens, and their count) and `oracle_exact`, `oracle_token_correct`
      (`score_batch` of the oracle-length decoding).
    weights_B: `[N]`, 1 for real examples, 0 for rows that pad a batch
      (dropped).

  Returns:
    `num_examples` and rates over examples: `exact_match`, `token_accuracy`,
    `length_accuracy`, `content_errors`, `stop_errors` (the two failure kinds
    as fractions of all examples); `loss` (mean per target token) if given;
    the failure anatomy, as shares of the failed examples (NaN when none
    failed): `fail_too_short`, `fail_too_long`, `fail_right_length` (these
    three sum to 1), `fail_pure_stop` (every emitted token right, EOS too
    early or too late), and `first_wrong_median` (median index of the first
    wrong token); `oracle_exact_match`, `oracle_token_accuracy` if given.

  Raises:
    ValueError: no example has a positive weight.
  """
  keep_N = np.asarray(weights_B) > 0
  if not keep_N.any():
    raise ValueError("no eval example to summarize (every weight is 0)")
  s = {k: np.asarray(v)[keep_N] for k, v in scores.items()}
  failed_F = ~s["exact"]
  rate = lambda key: float(np.mean(s[key]))
  share = lambda key: float(np.mean(s[key][failed_F])) if failed_F.any() else float("nan")
  record = {
      "num_examples": int(keep_N.sum()),
      "exact_match": rate("exact"),
      "token_accuracy": rate("token_correct"),
  }
  if "loss_sum" in s:
    record["loss"] = float(s["loss_sum"].sum() / max(s["loss_tokens"].sum(), 1))
  record.update({
      "length_accuracy": rate("length_correct"),
      "content_errors": rate("content_error"),
      "stop_errors": rate("stop_error"),
      "fail_too_short": share("too_short"),
      "fail_too_long": share("too_long"),
      "fail_right_length": share("length_correct"),
      "fail_pure_stop": share("stop_error"),
      "first_wrong_median": (float(np.median(s["first_error"][failed_F])) if failed_F.any()
                             else float("nan")),
  })
  if "oracle_exact" in s:
    record["oracle_exact_match"] = rate("oracle_exact")
    record["oracle_token_accuracy"] = rate("oracle_token_correct")
  return record


def decode_and_score(model, params, batch: dict[str, np.ndarray], *,
                     oracle_length: bool = False) -> dict[str, np.ndarray]:
  """Greedy-decodes a batch up to its padded target length; `score_batch` of the result.

  Args:
    model: the model (any `architectures.ARCHS` class).
    params: one replica's parameters.
    batch: `inputs`, `targets`.
    oracle_length: impose each example's true target length (see the module doc).

  Returns:
    `score_batch`'s dict.

  Raises:
    ValueError: the scheme cannot encode these lengths (raised by `decode`).
  """
  oracle_B = target_lengths(batch["targets"]) if oracle_length else None
  tokens_BxT, lengths_B = decode.greedy_decode(model, params, batch["inputs"],
                                               max_len=batch["targets"].shape[1],
                                               oracle_lengths_B=oracle_B)
  return score_batch(np.asarray(tokens_BxT), np.asarray(lengths_B), batch["targets"])


@functools.partial(jax.jit, static_argnames="model")
def _teacher_forced_loss(model, params, inputs_BxS, targets_BxT):
  """Per example: the teacher-forced cross-entropy summed over its target tokens, their count."""
  from relpos_jax import train_lib  # local: train_lib imports this module
  logits_BxTxV = model.apply({"params": params}, inputs_BxS, targets_BxT)
  _, loss_BxT = train_lib.cross_entropy(logits_BxTxV, targets_BxT)
  return loss_BxT.sum(axis=1), (targets_BxT != vocab.PAD_ID).sum(axis=1)


def evaluate_batch(model, params, batch: dict[str, np.ndarray], *,
                   oracle_length: bool = False) -> dict[str, np.ndarray]:
  """Every per-example score of one batch: decoding, loss and (optionally) oracle decoding.

  Args:
    model: the model.
    params: one replica's parameters.
    batch: `inputs`, `targets`.
    oracle_length: also decode with the true lengths imposed.

  Returns:
    `score_batch`'s dict plus `loss_sum`, `loss_tokens` and, with
    `oracle_length`, `oracle_exact` and `oracle_token_correct`.

  Raises:
    UnrepresentableLength: `decode` refused the batch's lengths.
  """
  try:
    scores = decode_and_score(model, params, batch)
  except ValueError as e:  # decode checks the lengths before tracing
    raise UnrepresentableLength(str(e)) from e
  loss_sum_B, loss_tokens_B = _teacher_forced_loss(model, params, batch["inputs"],
                                                   batch["targets"])
  scores.update(loss_sum=np.asarray(loss_sum_B), loss_tokens=np.asarray(loss_tokens_B))
  if oracle_length:
    oracle = decode_and_score(model, params, batch, oracle_length=True)
    scores.update(oracle_exact=oracle["exact"], oracle_token_correct=oracle["token_correct"])
  return scores


def first_examples(batches: Iterable[dict[str, np.ndarray]],
                   limit: int | None) -> Iterator[dict[str, np.ndarray]]:
  """The batches holding the first `limit` real examples of an eval set.

  Args:
    batches: eval batches (with `weights`, 0 on padding rows).
    limit: number of real examples (None: all).

  Returns:
    The batches up to the one holding example `limit`, whose later rows get
    weight 0 (same shapes, so no new compilation).
  """
  seen = 0
  for batch in batches:
    if limit is not None and seen >= limit:
      return
    real_B = batch["weights"] > 0
    weights_B = batch["weights"].copy()
    if limit is not None:
      weights_B[real_B & (seen + np.cumsum(real_B) > limit)] = 0.0
    seen += int(real_B.sum())
    yield {**batch, "weights": weights_B}


def evaluate_length(model, params, dataset: pipeline.Dataset, length: int, *,
                    batch_size: int, num_examples: int | None = None,
                    oracle_length: bool = False) -> Record:
  """Evaluates the eval set at `length`: decoding, loss, failure anatomy.

  Args:
    model: the model (any `architectures.ARCHS` class).
    params: one replica's parameters.
    dataset: the data source.
    length: one of `dataset.eval_lengths`.
    batch_size: decoding batch size.
    num_examples: only the first this many examples of the set (None: all).
    oracle_length: add the oracle-length metrics.

  Returns:
    `{"length": length, **summarize_scores(...)}`.

  Raises:
    UnrepresentableLength: the scheme cannot encode this length.
  """
  parts: list[dict[str, np.ndarray]] = []
  weights: list[np.ndarray] = []
  for batch in first_examples(dataset.eval_batches(length, batch_size), num_examples):
    parts.append(evaluate_batch(model, params, batch, oracle_length=oracle_length))
    weights.append(batch["weights"])
  scores = {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}
  return {"length": int(length), **summarize_scores(scores, np.concatenate(weights))}


def evaluate_lengths(model, params, dataset: pipeline.Dataset, lengths: Iterable[int], *,
                     batch_size: int, **kwargs) -> list[Record]:
  """`evaluate_length` at each length, in order.

  Args:
    model, params, dataset, batch_size: as for `evaluate_length`.
    lengths: eval lengths.
    **kwargs: `evaluate_length`'s keyword options (`num_examples`, `oracle_length`).

  Returns:
    One record per length.
  """
  return [evaluate_length(model, params, dataset, n, batch_size=batch_size, **kwargs)
          for n in lengths]


def not_representable(length: int, reason: str, *, oracle_length: bool = False) -> Record:
  """The record of a length the scheme cannot encode.

  Args:
    length: the eval length.
    reason: why (decode's message).
    oracle_length: include the oracle metrics.

  Returns:
    `{"length", "num_examples": 0, every metric: NaN, "error": reason}`.
  """
  keys = METRIC_KEYS + (ORACLE_KEYS if oracle_length else ())
  return {"length": int(length), "num_examples": 0, **{k: float("nan") for k in keys},
          "error": reason}


# ------------------------------------------------------------------ progress

class Progress:
  """Logs `done/total`, elapsed time and an ETA as evaluation items finish."""

  def __init__(self, total: int):
    """Starts the clock.

    Args:
      total: the number of items (run × replica × length) to come.
    """
    self.total, self.done, self._start = total, 0, time.perf_counter()

  def step(self, message: str) -> None:
    """Counts one finished item and logs it with the ETA of the rest.

    Args:
      message: what finished and its headline numbers.
    """
    self.done += 1
    elapsed = time.perf_counter() - self._start
    eta = elapsed / self.done * max(self.total - self.done, 0)
    logging.info("eval %d/%d | %s | elapsed %s | ETA %s", self.done, self.total, message,
                 _format_seconds(elapsed), _format_seconds(eta))


def _format_seconds(seconds: float) -> str:
  """`h:mm:ss`."""
  seconds = int(max(seconds, 0))
  return f"{seconds // 3600}:{seconds % 3600 // 60:02d}:{seconds % 60:02d}"


# ------------------------------------------------------- whole workdirs and runs

def load_config(workdir: str) -> ml_collections.ConfigDict:
  """The config a run was trained with (`workdir/config.json`; tuples came back as lists)."""
  path = os.path.join(workdir, "config.json")
  if not os.path.exists(path):
    raise FileNotFoundError(f"{path} not found: {workdir} is not a training workdir")
  with open(path) as f:
    return ml_collections.ConfigDict(json.load(f))


def checkpoint_steps(workdir: str) -> list[int]:
  """The finished checkpoint steps in `workdir/checkpoints`, ascending (orbax names them so)."""
  directory = os.path.join(workdir, "checkpoints")
  if not os.path.isdir(directory):
    return []
  return sorted(int(name) for name in os.listdir(directory) if name.isdigit())


def has_checkpoint(workdir: str) -> bool:
  """Whether `workdir/checkpoints` holds a finished checkpoint step."""
  return bool(checkpoint_steps(workdir))


def train_length_range(config: ml_collections.ConfigDict,
                       dataset: pipeline.Dataset) -> tuple[int, int]:
  """(shortest, longest) training length, in the unit of the dataset's eval lengths.

  Synthetic tasks draw training lengths from the config's range; a finite
  dataset (SCAN, TFDS) is measured: one epoch is every training example once.
  """
  if dataset.num_train_examples is None:
    return int(config.data.min_train_length), int(config.data.max_train_length)
  epoch = dataset.train_batch(0, dataset.num_train_examples)
  lengths_N = target_lengths(epoch["targets"])
  return int(lengths_N.min()), int(lengths_N.max())


@dataclasses.dataclass
class EvalOptions:
  """What every run of one evaluation shares.

  Attributes:
    lengths: eval lengths (None: each run's config). Synthetic tasks accept any
      length (its eval set is rebuilt, fixed by the length); SCAN/TFDS only
      lengths present in the eval split (others are skipped with a warning).
    num_examples: examples per length (None: the config's). Synthetic tasks
      rebuild each eval set with this many (`data.eval_examples_per_length`);
      SCAN/TFDS take the first this many of each length.
    batch_size: decoding batch size (None: each run's `eval_batch_size`).
    oracle_length: add the oracle-length metrics (decodes everything twice).
  """

  lengths: Sequence[int] | None = None
  num_examples: int | None = None
  batch_size: int | None = None
  oracle_length: bool = False

  def __post_init__(self):
    if self.num_examples is not None and self.num_examples < 1:
      raise ValueError(f"num_examples must be >= 1, got {self.num_examples}")
    if self.batch_size is not None and self.batch_size < 1:
      raise ValueError(f"batch_size must be >= 1, got {self.batch_size}")
    if self.lengths is not None:
      self.lengths = sorted({int(n) for n in self.lengths})
      if not self.lengths or self.lengths[0] < 1:
        raise ValueError(f"eval lengths must be positive, got {self.lengths}")


@dataclasses.dataclass
class _Run:
  """One run to evaluate: where it is, what it is called, its config and eval data."""

  workdir: str
  name: str
  config: ml_collections.ConfigDict
  dataset: pipeline.Dataset

  @property
  def num_items(self) -> int:
    """Replicas × lengths: the evaluation items of this run."""
    return self.config.num_seeds * len(self.dataset.eval_lengths)


def evaluate_workdir(workdir: str, lengths: Iterable[int] | None = None,
                     batch_size: int | None = None, *, run: str | None = None,
                     step: int | None = None, num_examples: int | None = None,
                     oracle_length: bool = False) -> list[Record]:
  """Evaluates every replica of a trained run at every eval length.

  Writes the run's report (`REPORT_FILES`) to `workdir/eval/`, with the
  scheme's own figures beside it (`SCHEME_PLOTS`, first replica): T5's learned
  bias per distance, the norms of Shaw's key-table rows per distance, the
  sinusoid heatmap.

  A length the scheme cannot encode (a learned table shorter than the padded
  sequence) does not stop the evaluation: its record has NaN metrics and the
  reason in `error`, and a warning is logged.

  Args:
    workdir: a training workdir (config.json, vocab.json, checkpoints/).
    lengths: eval lengths (see `EvalOptions`).
    batch_size: decoding batch size (default: config.eval_batch_size).
    run: the run's name in tables (default: the workdir's basename).
    step: the checkpoint step (default: the latest).
    num_examples: examples per length (see `EvalOptions`).
    oracle_length: add the oracle-length metrics.

  Returns:
    One record per (replica, length): `summarize_scores`' keys plus `length`,
    `run`, `scheme`, `task`, `seed`, `replica`, `step`, `workdir`,
    `min_train_length`, `max_train_length` and `error` (None, or why the length
    is not representable).

  Raises:
    FileNotFoundError: no config.json or no checkpoint.
    ValueError: the data no longer match the saved vocabulary; bad options.
  """
  options = EvalOptions(lengths=None if lengths is None else list(lengths),
                        num_examples=num_examples, batch_size=batch_size,
                        oracle_length=oracle_length)
  target = _prepare_run(workdir, run or os.path.basename(os.path.normpath(workdir)), options)
  return _evaluate_run(target, options, Progress(target.num_items), step=step)


def _prepare_run(workdir: str, name: str, options: EvalOptions) -> _Run:
  """Loads a run's config and builds its eval data (checking its vocabulary)."""
  config = load_config(workdir)
  dataset = _eval_dataset(config, options)
  _check_vocab(workdir, dataset)
  return _Run(workdir, name, config, dataset)


def _evaluate_run(target: _Run, options: EvalOptions, progress: Progress, *,
                  step: int | None = None) -> list[Record]:
  """Evaluates one prepared run and writes its report and figures to `<workdir>/eval`."""
  config, dataset = target.config, target.dataset
  model = architectures.make_model(config.model, vocab_size=dataset.vocab.size)
  # Read-only (safe while the run trains); the newest readable checkpoint by default.
  step, params_N = workdir_lib.load_params(target.workdir, config, model, step=step)
  min_train, max_train = train_length_range(config, dataset)
  batch_size = options.batch_size or config.eval_batch_size
  base = {"run": target.name, "scheme": config.model.position.name, "task": config.data.task,
          "step": int(step), "workdir": os.path.abspath(target.workdir),
          "min_train_length": min_train, "max_train_length": max_train}
  records = []
  for replica in range(config.num_seeds):
    params = jax.tree_util.tree_map(lambda x, i=replica: x[i], params_N)
    seed = config.seed + replica
    for length in dataset.eval_lengths:
      record = _evaluate_or_na(model, params, dataset, length, batch_size, options,
                               f"run {target.name} seed {seed} length {length}", progress)
      records.append({**base, "seed": seed, "replica": replica, **record})
  out_dir = os.path.join(target.workdir, "eval")
  write_report(records, out_dir)
  distance = train_distance(model, dataset)
  randomized = config.get("randomized", {})
  if randomized.get("enabled", False):  # positions were drawn from [0, max_random_position)
    distance = max(distance, int(randomized["max_random_position"]) - 1)
  _scheme_plots(model, jax.tree_util.tree_map(lambda x: x[0], params_N), config, out_dir,
                distance)
  return records


def train_distance(model, dataset: pipeline.Dataset, num_examples: int = 512) -> int:
  """The largest position (= |key − query| distance) self-attention sees in training.

  Measured on the first `num_examples` training examples: the longest real
  input and target (EOS included), positions counted from 0; a model over one
  running sequence (`joint_positions`, decoder-only) sees both in one sequence.

  Args:
    model: the model.
    dataset: its data.
    num_examples: how many training examples to measure.

  Returns:
    The distance.
  """
  batch = dataset.train_batch(0, min(num_examples, dataset.num_train_examples or num_examples))
  longest_s = int((batch["inputs"] != vocab.PAD_ID).sum(1).max())
  longest_t = int((batch["targets"] != vocab.PAD_ID).sum(1).max())
  if getattr(model, "joint_positions", False):
    return longest_s + longest_t - 1
  return max(longest_s, longest_t) - 1


def _eval_dataset(config: ml_collections.ConfigDict, options: EvalOptions) -> pipeline.Dataset:
  """The run's dataset, with the requested eval lengths and set sizes where the source allows."""
  dataset = pipeline.make_dataset(seed=config.seed, **config.data)
  if dataset.num_train_examples is None:  # synthetic: any length has a fixed eval set
    overrides = {}
    if options.lengths is not None:
      overrides["eval_lengths"] = options.lengths
    if options.num_examples is not None:
      overrides["eval_examples_per_length"] = options.num_examples
    if overrides:
      dataset = pipeline.make_dataset(seed=config.seed, **{**config.data, **overrides})
    return dataset
  if options.lengths is not None:
    missing = [n for n in options.lengths if n not in dataset.eval_lengths]
    if missing:
      logging.warning("task %s has no eval examples at lengths %s (it has %s); skipping them",
                      config.data.task, missing, dataset.eval_lengths)
    dataset.eval_lengths = [n for n in options.lengths if n in dataset.eval_lengths]
  return dataset


def _check_vocab(workdir: str, dataset: pipeline.Dataset) -> None:
  """Raises ValueError if the rebuilt vocabulary differs from the run's vocab.json."""
  path = os.path.join(workdir, "vocab.json")
  if os.path.exists(path) and vocab.Vocab.load(path) != dataset.vocab:
    raise ValueError(f"the data of {workdir} now build a different vocabulary than the "
                     f"saved {path}; its checkpoints cannot be evaluated on them.")


def _evaluate_or_na(model, params, dataset, length, batch_size, options: EvalOptions,
                    label: str, progress: Progress) -> Record:
  """`evaluate_length`, logged with progress; `not_representable` if the scheme cannot encode it."""
  try:
    record = evaluate_length(model, params, dataset, length, batch_size=batch_size,
                             num_examples=options.num_examples,
                             oracle_length=options.oracle_length)
  except UnrepresentableLength as e:
    logging.warning("%s: not representable (%s)", label, e)
    progress.step(f"{label}: n/a")
    return not_representable(length, str(e), oracle_length=options.oracle_length)
  oracle = (f" | oracle exact {record['oracle_exact_match']:.3f}"
            if options.oracle_length else "")
  progress.step(f"{label}: exact {record['exact_match']:.3f} | token acc "
                f"{record['token_accuracy']:.3f} | loss {record['loss']:.3f} | stop errors "
                f"{record['stop_errors']:.3f}{oracle}")
  return {**record, "error": None}


def _scheme_plots(model, params, config: ml_collections.ConfigDict, out_dir: str,
                  max_train_distance: int) -> None:
  """The figures of the scheme modules the model holds (T5, Shaw keys, sinusoid), if any."""
  modules = [module for _, module in plots.scheme_instances(model, params)]
  if any(isinstance(m, t5.T5Bias) for m in modules):
    plots.learned_bias_curves(model, params, os.path.join(out_dir, SCHEME_PLOTS["t5"]),
                              max_train_distance=max_train_distance, seed=config.seed)
  if any(isinstance(m, shaw.Shaw) and m.use_keys for m in modules):
    plots.shaw_key_norms(model, params, os.path.join(out_dir, SCHEME_PLOTS["shaw"]),
                         max_train_distance=max_train_distance, seed=config.seed)
  sinusoids = [m for m in modules if isinstance(m, sinusoidal.Sinusoidal)]
  if sinusoids:
    plots.encoding_heatmap(os.path.join(out_dir, SCHEME_PLOTS["sinusoidal"]),
                           num_positions=4 * (max_train_distance + 1),
                           dim=sinusoids[0].d_model, base=sinusoids[0].base,
                           max_train_position=max_train_distance)


def write_records(records: Sequence[Record], path: str) -> None:
  """Writes records as JSON lines (NaN as null, so any JSON reader can load them).

  Args:
    records: flat dicts.
    path: the .jsonl file (its folder is created).
  """
  os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
  with open(path, "w") as f:
    for record in records:
      clean = {k: None if isinstance(v, float) and math.isnan(v) else v
               for k, v in record.items()}
      f.write(json.dumps(clean, allow_nan=False) + "\n")


def read_records(path: str) -> list[Record]:
  """Reads `write_records`' file; null metrics come back as NaN.

  Args:
    path: an extrapolation.jsonl.

  Returns:
    The records, in file order.
  """
  with open(path) as f:
    records = [json.loads(line) for line in f if line.strip()]
  for record in records:
    for key in METRIC_KEYS + ORACLE_KEYS:
      if key in record and record[key] is None:
        record[key] = float("nan")
  return records


def evaluate_runs(workdirs: Sequence[str], out_dir: str, *,
                  lengths: Iterable[int] | None = None, batch_size: int | None = None,
                  names: Sequence[str] | None = None, num_examples: int | None = None,
                  oracle_length: bool = False) -> list[Record]:
  """Evaluates several runs and writes their comparison to `out_dir`.

  Each run's own report and figures also go to its `<workdir>/eval/`. Runs
  without a checkpoint are skipped with a warning. Progress (done/total over
  run × replica × length, with an ETA) is logged.

  Args:
    workdirs: training workdirs.
    out_dir: where the comparison's `REPORT_FILES` go.
    lengths: eval lengths (see `EvalOptions`).
    batch_size: decoding batch size (default: each run's eval_batch_size).
    names: run names for the tables (default: workdir basenames, or the paths
      where basenames collide).
    num_examples: examples per length (see `EvalOptions`).
    oracle_length: add the oracle-length metrics.

  Returns:
    Every run's records.

  Raises:
    ValueError: no workdir holds a checkpoint; bad options.
  """
  options = EvalOptions(lengths=None if lengths is None else list(lengths),
                        num_examples=num_examples, batch_size=batch_size,
                        oracle_length=oracle_length)
  names = list(names) if names is not None else run_names(workdirs)
  targets = []
  for workdir, name in zip(workdirs, names):
    if not has_checkpoint(workdir):
      logging.warning("skipping %s: no checkpoint in %s/checkpoints (not trained yet?)",
                      name, workdir)
      continue
    targets.append(_prepare_run(workdir, name, options))
  if not targets:
    raise ValueError(f"nothing to evaluate: none of {list(workdirs)} holds a checkpoint")
  progress = Progress(sum(t.num_items for t in targets))
  logging.info("evaluating %d runs, %d items (run × replica × length)", len(targets),
               progress.total)
  records: list[Record] = []
  for target in targets:
    records += _evaluate_run(target, options, progress)
  own_dirs = {os.path.abspath(os.path.join(t.workdir, "eval")) for t in targets}
  if own_dirs != {os.path.abspath(out_dir)}:  # else that run's own report is the comparison
    write_report(records, out_dir)
  return records


def run_names(workdirs: Sequence[str]) -> list[str]:
  """Basenames of the workdirs, or their paths as given where two basenames collide."""
  base = [os.path.basename(os.path.normpath(w)) for w in workdirs]
  return [b if base.count(b) == 1 else os.path.normpath(w) for b, w in zip(base, workdirs)]


def write_report(records: Sequence[Record], out_dir: str) -> dict[str, str]:
  """Writes the records, the markdown tables, the CSV and the accuracy figure.

  Args:
    records: records of one or more runs.
    out_dir: the folder (created).

  Returns:
    `REPORT_FILES`' keys -> the written paths; when the runs span several tasks,
    also `plot_<task>` -> that task's own figure (`accuracy_vs_length_<task>.png`),
    since curves of different tasks in one panel are hard to read.
  """
  os.makedirs(out_dir, exist_ok=True)
  paths = {k: os.path.join(out_dir, v) for k, v in REPORT_FILES.items()}
  write_records(records, paths["records"])
  with open(paths["tables"], "w") as f:
    f.write(tables.report(records))
  tables.write_csv(records, paths["csv"])
  plots.accuracy_vs_length(records, paths["plot"])
  tasks = sorted({r["task"] for r in records})
  for task in tasks if len(tasks) > 1 else []:
    stem, ext = os.path.splitext(paths["plot"])
    paths[f"plot_{task}"] = f"{stem}_{re.sub(r'[^A-Za-z0-9._-]', '_', task)}{ext}"
    plots.accuracy_vs_length([r for r in records if r["task"] == task], paths[f"plot_{task}"])
  return paths
