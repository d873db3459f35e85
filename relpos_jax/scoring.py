"""Pure numpy scoring of decoded sequences: exact match, token accuracy, failure anatomy.

The scientific core of the evaluation, tested without a model. A model that
extrapolates badly can fail in two different ways:

* a *content* error: some token before the end of the shorter of (prediction,
  target) is wrong;
* a *stopping* error: every token the two share is right, but the prediction
  stops too early or too late (EOS in the wrong place).

`score_batch` scores each example; `summarize_scores` aggregates one eval
length into its record (rates over examples, and the anatomy of the failures).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from relpos_jax.data import vocab


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


def summarize_scores(scores: dict[str, np.ndarray], weights_B: np.ndarray) -> dict[str, Any]:
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
