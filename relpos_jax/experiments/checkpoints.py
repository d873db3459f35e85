"""Which checkpoint of a run is evaluated: chosen by validation only (docs/evaluation.md).

Every kept checkpoint is scored on the held-out validation set; the evaluated
one is the best by validation exact match (`"best"`; ties go to the later step)
or the last (`"last"`).
"""

from __future__ import annotations

import dataclasses
from typing import Any, Sequence

from absl import logging
import jax
import ml_collections

from relpos_jax import evaluate
from relpos_jax import workdir as workdir_lib
from relpos_jax.data import pipeline
from relpos_jax.positions import randomized as randomized_lib

Record = evaluate.Record
CHECKPOINT_RULES = ("best", "last")


@dataclasses.dataclass
class Checkpoint:
  """The checkpoint chosen for one replica, and the validation scores it was chosen by.

  Attributes:
    step: the evaluated checkpoint's step.
    params: that replica's parameters there.
    valid: `validation_record` at `step`.
    best_step: the step of the best validation exact match among the kept checkpoints.
    best_exact_match: that score.
    final_step: the last checkpoint's step.
  """

  step: int
  params: Any
  valid: Record
  best_step: int
  best_exact_match: float
  final_step: int


def choose_checkpoints(workdir: str, config: ml_collections.ConfigDict, model,
                       dataset: pipeline.Dataset, *, rule: str, batch_size: int,
                       steps: Sequence[int] | None = None) -> list[Checkpoint]:
  """Scores every kept checkpoint of a run on validation and picks one per replica.

  A run that trained at random positions is validated at random positions
  (`randomized_lib.validation_sampler`), every checkpoint on the same samples.

  Args:
    workdir: the run's workdir.
    config: its config.
    model: its model.
    dataset: its data (for the validation set).
    rule: "best" (highest validation exact match; ties: the later step) or "last".
    batch_size: decoding batch size.
    steps: the checkpoint steps to consider (default: all kept).

  Returns:
    One `Checkpoint` per replica.

  Raises:
    FileNotFoundError: no checkpoint.
  """
  steps = sorted(steps if steps is not None else workdir_lib.checkpoint_steps(workdir))
  if not steps:
    raise FileNotFoundError(f"no checkpoint in {workdir_lib.checkpoint_dir(workdir)}; "
                            "train first")
  scored: list[list[tuple[int, Any, Record]]] = [[] for _ in range(config.num_seeds)]
  valid_sampler = randomized_lib.validation_sampler(config.get("randomized"))
  readable = []
  for step in steps:
    try:  # read-only: safe while the run still trains
      _, params_N = workdir_lib.load_params(workdir, config, model, step=step)
    except workdir_lib.UnreadableCheckpoints as e:
      logging.warning("skipping an unreadable checkpoint: %s", e)
      continue
    readable.append(step)
    for replica in range(config.num_seeds):
      params = jax.tree_util.tree_map(lambda x, i=replica: x[i], params_N)
      scored[replica].append((step, params, evaluate.validation_record(
          model, params, dataset, batch_size=batch_size, random=valid_sampler,
          seed=config.seed + replica)))
    logging.info("%s: checkpoint %d: validation exact match %s", workdir, step,
                 " ".join(f"{s[-1][2]['exact_match']:.3f}" for s in scored))
  chosen = []
  if not readable:
    raise workdir_lib.UnreadableCheckpoints(f"no checkpoint of {workdir} can be read "
                                            f"(tried steps {steps})")
  for replica_scores in scored:
    by_step = {step: record["exact_match"] for step, _, record in replica_scores}
    step, best_step = pick_checkpoint(by_step, rule)
    _, params, valid = next(s for s in replica_scores if s[0] == step)
    chosen.append(Checkpoint(step=step, params=params, valid=valid, best_step=best_step,
                             best_exact_match=by_step[best_step], final_step=readable[-1]))
  return chosen


def pick_checkpoint(valid_by_step: dict[int, float], rule: str) -> tuple[int, int]:
  """The step to evaluate under `rule`, and the step of the best validation score.

  Args:
    valid_by_step: validation exact match of each checkpoint step.
    rule: "best" (the highest score; ties go to the later, more trained step) or
      "last".

  Returns:
    `(evaluated step, best step)`.

  Raises:
    ValueError: an unknown rule or no checkpoint.
  """
  if rule not in CHECKPOINT_RULES:
    raise ValueError(f"unknown checkpoint rule {rule!r} (config key eval_checkpoint); "
                     f"choose one of: {', '.join(CHECKPOINT_RULES)}")
  if not valid_by_step:
    raise ValueError("no checkpoint to choose from")
  best = max(valid_by_step, key=lambda step: (valid_by_step[step], step))
  return (best if rule == "best" else max(valid_by_step)), best
