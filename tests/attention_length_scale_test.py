"""Length-scaled attention (attention.length_scale; model.length_scaled_attention)."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import model_harness  # the model suite's helpers (pytest puts tests/ on the path)
from relpos_jax import attention

B, Q, H, K = 2, 5, 2, 4


def test_length_scale_hand_worked():
  got = attention.length_scale(jnp.array([[0, 1, 4, 16, 64]]), 16)
  np.testing.assert_allclose(got, [[0.0, 0.0, 0.5, 1.0, 1.5]], rtol=1e-6)


def _qkv(seed=0, q=Q, k=Q):
  keys = jax.random.split(jax.random.PRNGKey(seed), 3)
  return (jax.random.normal(keys[0], (B, q, H, K)), jax.random.normal(keys[1], (B, k, H, K)),
          jax.random.normal(keys[2], (B, k, H, K)))


def test_causal_queries_scale_by_their_own_key_count():
  """numpy: softmax over visible keys of (q·k / sqrt(K)) * log(t + 1) / log(n_train)."""
  q, k, v = _qkv()
  mask = jnp.broadcast_to(jnp.tril(jnp.ones((Q, Q), bool)), (B, Q, Q))
  got = attention.dot_product_attention(q, k, v, None, None, mask, None,
                                        length_scale_train_keys=3)
  qn, kn, vn = (np.asarray(a, np.float64) for a in (q, k, v))
  want = np.zeros((B, Q, H, K))
  for b in range(B):
    for h in range(H):
      for t in range(Q):
        logits = kn[b, :t + 1, h] @ qn[b, t, h] / math.sqrt(K) * math.log(t + 1) / math.log(3)
        w = np.exp(logits - logits.max())
        want[b, t, h] = (w / w.sum()) @ vn[b, :t + 1, h]
  np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_at_the_training_key_count_nothing_changes():
  q, k, v = _qkv(1, q=3, k=6)
  off = attention.dot_product_attention(q, k, v, None, None, None, None)
  on = attention.dot_product_attention(q, k, v, None, None, None, None, length_scale_train_keys=6)
  np.testing.assert_allclose(on, off, rtol=1e-6, atol=1e-6)
  on_8 = attention.dot_product_attention(q, k, v, None, None, None, None, length_scale_train_keys=8)
  assert not np.allclose(on_8, off, atol=1e-4)


def _scaled(name, arch, train_keys=5):
  return model_harness.tiny_model(name, arch).clone(length_scaled_attention=True,
                                                    length_scale_train_keys=train_keys)


@pytest.mark.parametrize("arch", model_harness.ARCHS)
@pytest.mark.parametrize("name", model_harness.quick_params(["none", "alibi", "rope"]))
def test_cached_decoding_matches_full_forward(name, arch):
  model = _scaled(name, arch)
  inputs, targets = model_harness.batch()
  params = model_harness.init(model, inputs, targets)
  full = model.apply({"params": params}, inputs, targets)
  np.testing.assert_allclose(model_harness.cached_logits(model, params, inputs, targets), full,
                             atol=1e-5)
  plain = model_harness.tiny_model(name, arch)
  assert not np.allclose(full, plain.apply({"params": params}, inputs, targets), atol=1e-4)


@pytest.mark.parametrize("arch", ["encoder_decoder", "decoder_only"])
def test_off_by_default_and_needs_train_keys(arch):
  model = model_harness.tiny_model("t5", arch)
  assert model.length_scaled_attention is False
  inputs, targets = model_harness.batch()
  with pytest.raises(ValueError, match="model.length_scale_train_keys"):
    model_harness.init(_scaled("t5", arch, train_keys=0), inputs, targets)
