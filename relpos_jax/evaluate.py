"""Length-extrapolation evaluation: greedy-decode each eval length, score it.

Every failure is classified, because a model that extrapolates badly can fail in
two different ways (DESIGN.md, "What to expect"):

* a *content* error: some token before the end of the shorter of (prediction,
  target) is wrong;
* a *stopping* error: every token the two share is right, but the prediction
  stops too early or too late (EOS in the wrong place).

One record per (length, replica), a flat dict of floats that `tables.py` and
`plots.py` consume.

`evaluate_workdir` evaluates a trained run (every replica, every length) from
its workdir alone; `evaluate_runs` compares several runs and writes the report
(`records.jsonl`, `exact_match.md`, `errors.md`, `results.csv`,
`accuracy_vs_length.png`). A length a scheme cannot encode (a learned table too
short) is recorded as n/a (NaN) instead of stopping the comparison.
"""

from __future__ import annotations

import json
import math
import os
import time
from typing import Any, Iterable, Sequence

from absl import logging
import jax
import ml_collections
import numpy as np

from relpos_jax import architectures
from relpos_jax import decode
from relpos_jax import plots
from relpos_jax import tables
from relpos_jax.data import pipeline
from relpos_jax.data import vocab

Record = dict[str, Any]


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
    positions, EOS included, predicted right), `length_correct` (bool),
    `content_error`, `stop_error` (bool; exclusive, both False when exact) and
    `first_error` (index of the first wrong token; target length + 1 if exact).
  """
  B, T = targets_BxT.shape
  tgt_len_B = target_lengths(targets_BxT)
  pos_T = np.arange(T)
  in_target_BxT = pos_T[None] <= tgt_len_B[:, None]  # target tokens and its EOS
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
      "content_error": content_B,
      "stop_error": ~exact_B & ~content_B,
      "first_error": first_error_B,
  }


def decode_and_score(model, params, batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
  """Greedy-decodes a batch up to its padded target length; `score_batch` of the result."""
  tokens, lengths = decode.greedy_decode(model, params, batch["inputs"],
                                         max_len=batch["targets"].shape[1])
  return score_batch(np.asarray(tokens), np.asarray(lengths), batch["targets"])


def evaluate_length(model, params, dataset: pipeline.Dataset, length: int, *,
                    batch_size: int) -> Record:
  """Greedy-decodes the eval set at `length` and aggregates the scores.

  Args:
    model: the `EncoderDecoder`.
    params: one replica's parameters.
    dataset: the data source.
    length: one of `dataset.eval_lengths`.
    batch_size: decoding batch size.

  Returns:
    `{"length", "num_examples", "exact_match", "token_accuracy",
    "length_accuracy", "content_errors", "stop_errors", "mean_first_error"}`:
    rates over examples (errors as fractions of all examples).
  """
  scores: dict[str, list[np.ndarray]] = {}
  weights: list[np.ndarray] = []
  for batch in dataset.eval_batches(length, batch_size):
    for key, value in decode_and_score(model, params, batch).items():
      scores.setdefault(key, []).append(value)
    weights.append(batch["weights"])
  w = np.concatenate(weights)
  mean = lambda key: float(np.sum(np.concatenate(scores[key]) * w) / w.sum())
  return {
      "length": int(length),
      "num_examples": int(w.sum()),
      "exact_match": mean("exact"),
      "token_accuracy": mean("token_correct"),
      "length_accuracy": mean("length_correct"),
      "content_errors": mean("content_error"),
      "stop_errors": mean("stop_error"),
      "mean_first_error": mean("first_error"),
  }


def evaluate_lengths(model, params, dataset: pipeline.Dataset, lengths: Iterable[int], *,
                     batch_size: int) -> list[Record]:
  """`evaluate_length` at each length, in order."""
  return [evaluate_length(model, params, dataset, n, batch_size=batch_size) for n in lengths]


# ------------------------------------------------------- whole workdirs and runs

RECORDS_FILE = "records.jsonl"
METRIC_KEYS = ("exact_match", "token_accuracy", "length_accuracy", "content_errors",
               "stop_errors", "mean_first_error")
REPORT_FILES = {"records": RECORDS_FILE, "exact_match": "exact_match.md",
                "errors": "errors.md", "csv": "results.csv",
                "plot": "accuracy_vs_length.png"}


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


def evaluate_workdir(workdir: str, lengths: Iterable[int] | None = None,
                     batch_size: int | None = None, *, run: str | None = None,
                     step: int | None = None) -> list[Record]:
  """Evaluates every replica of a trained run at every eval length.

  Writes the records to `workdir/eval/records.jsonl`, and for T5 runs the
  learned bias curves (`t5_bias.png`, first replica), for sinusoidal runs the
  encoding heatmap (`sinusoid.png`), beside them.

  A length the scheme cannot encode (a learned table shorter than the padded
  sequence) does not stop the evaluation: its record has NaN metrics and the
  reason in `error`, and a warning is logged.

  Args:
    workdir: a training workdir (config.json, vocab.json, checkpoints/).
    lengths: eval lengths (default: the config's). Synthetic tasks accept any
      length (its eval set is rebuilt, fixed by the length); SCAN/TFDS only
      lengths present in the eval split (others are skipped with a warning).
    batch_size: decoding batch size (default: config.eval_batch_size).
    run: the run's name in tables (default: the workdir's basename).
    step: the checkpoint step (default: the latest).

  Returns:
    One record per (replica, length): `evaluate_length`'s keys plus `run`,
    `scheme`, `task`, `seed`, `replica`, `step`, `workdir`, `min_train_length`,
    `max_train_length` and `error` (None, or why the length is n/a).

  Raises:
    FileNotFoundError: no config.json or no checkpoint.
    ValueError: the data no longer match the saved vocabulary.
  """
  from relpos_jax import train_lib  # local: train_lib imports this module
  config = load_config(workdir)
  run = run or os.path.basename(os.path.normpath(workdir))
  dataset = _eval_dataset(config, lengths)
  _check_vocab(workdir, dataset)
  model = architectures.make_model(config.model, vocab_size=dataset.vocab.size)
  params_N = train_lib.load_params(workdir, config, model, step=step)
  step = checkpoint_steps(workdir)[-1] if step is None else step
  min_train, max_train = train_length_range(config, dataset)
  batch_size = batch_size or config.eval_batch_size
  base = {"run": run, "scheme": config.model.position.name, "task": config.data.task,
          "step": int(step), "workdir": os.path.abspath(workdir),
          "min_train_length": min_train, "max_train_length": max_train}
  records = []
  for replica in range(config.num_seeds):
    params = jax.tree_util.tree_map(lambda x, i=replica: x[i], params_N)
    seed = config.seed + replica
    for length in dataset.eval_lengths:
      record = _evaluate_or_na(model, params, dataset, length, batch_size, run, seed)
      records.append({**base, "seed": seed, "replica": replica, **record})
  write_records(records, os.path.join(workdir, "eval", RECORDS_FILE))
  _scheme_plots(params_N, config, os.path.join(workdir, "eval"), max_train)
  return records


def _eval_dataset(config: ml_collections.ConfigDict,
                  lengths: Iterable[int] | None) -> pipeline.Dataset:
  """The run's dataset, with the requested eval lengths where the source allows them."""
  dataset = pipeline.make_dataset(seed=config.seed, **config.data)
  if lengths is None:
    return dataset
  lengths = sorted(set(int(n) for n in lengths))
  if dataset.num_train_examples is None:  # synthetic: any length has a fixed eval set
    return pipeline.make_dataset(seed=config.seed, **{**config.data, "eval_lengths": lengths})
  missing = [n for n in lengths if n not in dataset.eval_lengths]
  if missing:
    logging.warning("task %s has no eval examples at lengths %s (it has %s); skipping them",
                    config.data.task, missing, dataset.eval_lengths)
  dataset.eval_lengths = [n for n in lengths if n in dataset.eval_lengths]
  return dataset


def _check_vocab(workdir: str, dataset: pipeline.Dataset) -> None:
  """Raises ValueError if the rebuilt vocabulary differs from the run's vocab.json."""
  path = os.path.join(workdir, "vocab.json")
  if os.path.exists(path) and vocab.Vocab.load(path) != dataset.vocab:
    raise ValueError(f"the data of {workdir} now build a different vocabulary than the "
                     f"saved {path}; its checkpoints cannot be evaluated on them.")


def _evaluate_or_na(model, params, dataset, length, batch_size, run, seed) -> Record:
  """`evaluate_length`, timed and logged; NaN metrics and the reason if it cannot run."""
  start = time.perf_counter()
  try:
    record = evaluate_length(model, params, dataset, length, batch_size=batch_size)
  except ValueError as e:  # decode refuses lengths the scheme cannot encode
    logging.warning("run %s seed %d length %d: n/a (%s)", run, seed, length, e)
    return {"length": int(length), "num_examples": 0,
            **{k: float("nan") for k in METRIC_KEYS}, "error": str(e)}
  logging.info("run %s seed %d length %d: exact %.3f | content errors %.3f | "
               "stop errors %.3f (%.1fs)", run, seed, length, record["exact_match"],
               record["content_errors"], record["stop_errors"], time.perf_counter() - start)
  return {**record, "error": None}


def _scheme_plots(params_N, config: ml_collections.ConfigDict, out_dir: str,
                  max_train_length: int) -> None:
  """The scheme's own figure, if it has one: T5 bias curves or the sinusoid heatmap."""
  name = config.model.position.name
  if name == "t5":
    params = jax.tree_util.tree_map(lambda x: x[0], params_N)
    plots.learned_bias_curves(params, config, os.path.join(out_dir, "t5_bias.png"),
                              max_train_length=max_train_length, seed=config.seed)
  elif name == "sinusoidal":
    plots.encoding_heatmap(os.path.join(out_dir, "sinusoid.png"),
                           num_positions=max(config.data.length_buckets[0],
                                             4 * max_train_length),
                           dim=config.model.d_model,
                           base=config.model.position.get("base", 10000.0),
                           max_train_length=max_train_length)


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
    path: a records.jsonl.

  Returns:
    The records, in file order.
  """
  with open(path) as f:
    records = [json.loads(line) for line in f if line.strip()]
  for record in records:
    for key in METRIC_KEYS:
      if key in record and record[key] is None:
        record[key] = float("nan")
  return records


def evaluate_runs(workdirs: Sequence[str], out_dir: str, *,
                  lengths: Iterable[int] | None = None, batch_size: int | None = None,
                  names: Sequence[str] | None = None) -> list[Record]:
  """Evaluates several runs and writes the comparison (records, tables, plot) to `out_dir`.

  Runs without a checkpoint are skipped with a warning.

  Args:
    workdirs: training workdirs.
    out_dir: where `records.jsonl`, `exact_match.md`, `errors.md`, `results.csv`
      and `accuracy_vs_length.png` go.
    lengths: eval lengths (default: each run's config).
    batch_size: decoding batch size (default: each run's eval_batch_size).
    names: run names for the tables (default: workdir basenames, or the paths
      where basenames collide).

  Returns:
    Every run's records.

  Raises:
    ValueError: no workdir holds a checkpoint.
  """
  names = list(names) if names is not None else run_names(workdirs)
  lengths = None if lengths is None else list(lengths)
  records: list[Record] = []
  for workdir, name in zip(workdirs, names):
    if not has_checkpoint(workdir):
      logging.warning("skipping %s: no checkpoint in %s/checkpoints (not trained yet?)",
                      name, workdir)
      continue
    start = time.perf_counter()
    logging.info("evaluating run %s (%s)", name, workdir)
    records += evaluate_workdir(workdir, lengths, batch_size=batch_size, run=name)
    logging.info("run %s evaluated in %.1fs", name, time.perf_counter() - start)
  if not records:
    raise ValueError(f"nothing to evaluate: none of {list(workdirs)} holds a checkpoint")
  write_report(records, out_dir)
  return records


def run_names(workdirs: Sequence[str]) -> list[str]:
  """Basenames of the workdirs, or their paths as given where two basenames collide."""
  base = [os.path.basename(os.path.normpath(w)) for w in workdirs]
  return [b if base.count(b) == 1 else os.path.normpath(w) for b, w in zip(base, workdirs)]


def write_report(records: Sequence[Record], out_dir: str) -> dict[str, str]:
  """Writes records.jsonl, both markdown tables, the CSV and the accuracy plot.

  Args:
    records: records of one or more runs.
    out_dir: the folder (created).

  Returns:
    `REPORT_FILES`' keys -> the written paths.
  """
  os.makedirs(out_dir, exist_ok=True)
  paths = {k: os.path.join(out_dir, v) for k, v in REPORT_FILES.items()}
  write_records(records, paths["records"])
  with open(paths["exact_match"], "w") as f:
    f.write(tables.exact_match_table(records))
  with open(paths["errors"], "w") as f:
    f.write(tables.error_table(records))
  tables.write_csv(records, paths["csv"])
  plots.accuracy_vs_length(records, paths["plot"])
  return paths
