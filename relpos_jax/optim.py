"""The optimizer and its config: AdamW with warmup, cosine or rsqrt decay, clipping.

Light on purpose: config files import it (for `optimizer_config()`) without
pulling in the trainer, orbax or plotting.
"""

from __future__ import annotations

import inspect

import jax.numpy as jnp
import ml_collections
import optax


def make_optimizer(*, num_steps: int, learning_rate: float = 1e-3, warmup_steps: int = 100,
                   decay: str = "cosine", weight_decay: float = 0.01,
                   grad_clip_norm: float = 1.0, b1: float = 0.9, b2: float = 0.98,
                   eps: float = 1e-9) -> tuple[optax.GradientTransformation, optax.Schedule]:
  """AdamW with linear warmup then cosine or rsqrt decay, after global-norm clipping.

  These defaults are the single declaration of the `optimizer` config.

  Args:
    num_steps: total training steps (the cosine decays to 0 at the end).
    learning_rate: peak learning rate, reached after `warmup_steps`.
    warmup_steps: linear warmup from 0.
    decay: "cosine" (to 0 at num_steps) or "rsqrt" (lr * sqrt(warmup / step)).
    weight_decay: AdamW's decoupled weight decay.
    grad_clip_norm: clip gradients to this global norm (<= 0: no clipping).
    b1, b2, eps: Adam's moments.

  Returns:
    (the optax transformation, the learning-rate schedule).
  """
  warmup = optax.linear_schedule(0.0, learning_rate, max(warmup_steps, 1))
  if decay == "cosine":
    after = optax.cosine_decay_schedule(learning_rate, max(num_steps - warmup_steps, 1))
  elif decay == "rsqrt":
    after = lambda s: learning_rate * jnp.sqrt(max(warmup_steps, 1) / (s + max(warmup_steps, 1)))
  else:
    raise ValueError(f"unknown decay {decay!r} (config key optimizer.decay); "
                     "choose one of: cosine, rsqrt")
  schedule = optax.join_schedules([warmup, after], [warmup_steps])
  clip = [optax.clip_by_global_norm(grad_clip_norm)] if grad_clip_norm > 0 else []
  tx = optax.chain(*clip, optax.adamw(schedule, b1=b1, b2=b2, eps=eps,
                                      weight_decay=weight_decay))
  return tx, schedule


def optimizer_config() -> ml_collections.ConfigDict:
  """The `optimizer` config: `make_optimizer`'s keywords but `num_steps`, with defaults."""
  params = inspect.signature(make_optimizer).parameters
  return ml_collections.ConfigDict(
      {k: p.default for k, p in params.items() if k != "num_steps"})
