"""The training loss and teacher-forced accuracy, shared by training and evaluation."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import optax

from relpos_jax.data import vocab as vocab_lib


def cross_entropy(logits_BxTxV: jax.Array, targets_BxT: jax.Array,
                  label_smoothing: float = 0.0) -> tuple[jax.Array, jax.Array]:
  """Token cross-entropy over non-PAD targets.

  Args:
    logits_BxTxV: the model's logits at the target slots.
    targets_BxT: target ids (PAD = 0 is not scored).
    label_smoothing: mass spread uniformly over the vocabulary (0: none).

  Returns:
    (mean loss over target tokens, per-token loss `[B, T]` (0 at PAD)).
  """
  V = logits_BxTxV.shape[-1]
  labels_BxTxV = optax.smooth_labels(jax.nn.one_hot(targets_BxT, V), label_smoothing) \
      if label_smoothing else jax.nn.one_hot(targets_BxT, V)
  weights_BxT = (targets_BxT != vocab_lib.PAD_ID).astype(jnp.float32)
  loss_BxT = optax.softmax_cross_entropy(logits_BxTxV, labels_BxTxV) * weights_BxT
  return loss_BxT.sum() / jnp.maximum(weights_BxT.sum(), 1.0), loss_BxT


def accuracy_metrics(logits_BxTxV: jax.Array, targets_BxT: jax.Array) -> dict[str, jax.Array]:
  """Teacher-forced token accuracy and exact match (every target token right)."""
  weights_BxT = targets_BxT != vocab_lib.PAD_ID
  correct_BxT = (jnp.argmax(logits_BxTxV, -1) == targets_BxT) | ~weights_BxT
  return {
      "token_accuracy": ((correct_BxT & weights_BxT).sum() / jnp.maximum(weights_BxT.sum(), 1)),
      "exact_match": correct_BxT.all(axis=1).mean(),
  }
