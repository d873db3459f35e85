"""Randomized positions: sized by real tokens, sorted, unique, in range, reproducible."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from relpos_jax import train_lib
from relpos_jax.data import vocab
from relpos_jax.positions import randomized


def _sample(seed, lengths, width, n_max, **kw):
  return np.asarray(randomized.sample_positions(jax.random.PRNGKey(seed), jnp.asarray(lengths),
                                                width, max_random_position=n_max, **kw))


def _assert_valid(pos_BxL, lengths_B, n_max):
  """First n sorted, unique, in range; the rest repeat the last real position."""
  assert pos_BxL.dtype == np.int32
  assert pos_BxL.min() >= 0 and pos_BxL.max() < n_max
  for row, n in zip(pos_BxL, lengths_B):
    assert np.all(np.diff(row[:n]) > 0)
    np.testing.assert_array_equal(row[n:], row[n - 1] if n else 0)


@pytest.mark.parametrize("per_example", [True, False])
def test_sorted_unique_in_range_and_padding_repeats_the_last(per_example):
  lengths = np.array([40, 40, 3, 17, 1, 0, 40, 25])
  pos = _sample(0, lengths, 48, 64, per_example=per_example)
  assert pos.shape == (8, 48)
  _assert_valid(pos, lengths, 64)
  assert (not np.array_equal(pos[0], pos[1])) == per_example  # equal lengths, shared draw


def test_the_largest_position_has_the_uniform_sample_mean():
  """n = 5 real tokens padded to 20, N = 256: E[max] = 5/6 (N + 1) - 1, not the 5th of 20 draws."""
  lengths = np.full(4096, 5)
  pos = _sample(1, lengths, 20, 256)
  _assert_valid(pos, lengths, 256)
  mean_max = pos[:, 4].mean()
  assert abs(mean_max - 5 / 6 * 256) < 0.03 * 5 / 6 * 256, mean_max
  assert abs(pos[:, 0].mean() - (257 / 6 - 1)) < 0.1 * 257 / 6  # and the smallest ~ 1/6


def test_a_rows_sample_does_not_depend_on_the_padded_width():
  lengths = np.array([5, 2, 9, 5])
  narrow = _sample(2, lengths, 9, 100)
  for width in (12, 20, 64, 150):
    wide = _sample(2, lengths, width, 100)
    for row_n, row_w, n in zip(narrow, wide, lengths):
      np.testing.assert_array_equal(row_w[:n], row_n[:n])
  # Distribution too: width 5 and width 40 from different keys, same marginal means.
  a, b = _sample(3, np.full(4096, 5), 5, 256), _sample(4, np.full(4096, 5), 40, 256)
  np.testing.assert_allclose(a.mean(0), b[:, :5].mean(0), rtol=0.05)


def test_reproducible_by_seed_and_covers_the_range():
  a = _sample(3, [10] * 4, 10, 2048)
  np.testing.assert_array_equal(a, _sample(3, [10] * 4, 10, 2048))
  assert not np.array_equal(a, _sample(4, [10] * 4, 10, 2048))
  many = _sample(5, [5] * 512, 5, 100)
  counts = np.bincount(many.ravel(), minlength=100)
  assert counts.min() > 0  # every position is drawn
  assert counts.max() < 3 * counts.mean()  # roughly uniform


def test_full_range_is_a_permutation_and_too_long_raises():
  np.testing.assert_array_equal(_sample(0, [8, 8], 8, 8), np.broadcast_to(np.arange(8), (2, 8)))
  np.testing.assert_array_equal(_sample(0, [8], 12, 8)[0], list(range(8)) + [7] * 4)
  with pytest.raises(ValueError, match="max_random_position"):
    _sample(0, [9, 2], 10, 8)


@pytest.mark.parametrize("joint", [True, False])
def test_input_and_target_positions(joint):
  n_in, n_tgt = np.array([2, 6, 1]), np.array([3, 1, 7])
  ipos, tpos = (np.asarray(p) for p in randomized.input_target_positions(
      jax.random.PRNGKey(0), n_in, 6, n_tgt, 8, max_random_position=30, joint=joint))
  assert ipos.shape == (3, 6) and tpos.shape == (3, 8)
  _assert_valid(ipos, n_in, 30)
  _assert_valid(tpos, n_tgt, 30)
  for b in range(3):
    real = np.concatenate([ipos[b, :n_in[b]], tpos[b, :n_tgt[b]]])
    if joint:  # one running sequence: increasing across input and target
      assert np.all(np.diff(real) > 0)
  if joint:
    together = _sample(0, n_in + n_tgt, 14, 30)
    for b in range(3):
      np.testing.assert_array_equal(
          np.concatenate([ipos[b, :n_in[b]], tpos[b, :n_tgt[b]]]), together[b, :n_in[b] + n_tgt[b]])


def test_sample_sizes_by_the_real_tokens_of_a_batch():
  P, E = vocab.PAD_ID, vocab.EOS_ID
  on = randomized.RandomizedPositions(enabled=True, max_random_position=50)
  inputs = jnp.array([[5, 6, P], [5, P, P]])
  targets = jnp.array([[7, E, P, P], [7, 7, 7, E]])
  ipos, tpos = on.sample(jax.random.PRNGKey(0), inputs, targets, joint=True)
  assert ipos.shape == (2, 3) and tpos.shape == (2, 4)
  expected = randomized.input_target_positions(jax.random.PRNGKey(0), jnp.array([2, 1]), 3,
                                               jnp.array([2, 4]), 4, max_random_position=50,
                                               joint=True)
  np.testing.assert_array_equal(ipos, expected[0])
  np.testing.assert_array_equal(tpos, expected[1])


@pytest.mark.parametrize("joint", [True, False])
def test_eval_positions_have_the_training_distribution(joint):
  """A fixed eval example decoded at random positions (padded to the decode width of a
  4x eval batch) gets positions distributed as the same example's in a training step.

  Positions are drawn per example, so `draws` copies of the example in one batch are
  `draws` independent samples (one train step, one eval sample call)."""
  P, E = vocab.PAD_ID, vocab.EOS_ID
  n_in, n_tgt_tokens, draws = 12, 12, 400
  inputs = np.array([[5] * n_in + [P] * 4] * draws, np.int32)
  targets = np.array([[6] * n_tgt_tokens + [E]] * draws, np.int32)
  sampler = randomized.RandomizedPositions(enabled=True, max_random_position=256)
  _, tpos = _train_step_positions(joint, inputs, targets, step=5, max_random_position=256)
  train_max = tpos[:, :n_tgt_tokens + 1].max(axis=1)
  # Eval: the same example, padded to a wide decode batch; positions from evaluate's sampler.
  wide_inputs = np.pad(inputs, ((0, 0), (0, 60)))
  wide_targets = np.pad(targets, ((0, 0), (0, 70)))
  _, tpos = sampler.sample(randomized.eval_key(0, 3, 80), wide_inputs, wide_targets, joint=joint)
  eval_max = np.asarray(tpos)[:, :n_tgt_tokens + 1].max(axis=1)
  assert len(set(map(int, train_max))) > 10 and len(set(map(int, eval_max))) > 10  # draws differ
  # The target's last position is the largest of the n drawn (joint: input, SEP and target
  # slots; else the target's own sample); for n uniform draws without replacement from
  # [0, 256) its mean is n/(n+1)·257 − 1.
  n = n_in + n_tgt_tokens + 1 if joint else n_tgt_tokens + 1
  expected = n / (n + 1) * 257 - 1
  np.testing.assert_allclose(np.mean(train_max), expected, rtol=0.03)
  np.testing.assert_allclose(np.mean(eval_max), np.mean(train_max), rtol=0.03)


def test_eval_keys_differ_by_seed_and_length():
  keys = {tuple(np.asarray(jax.random.key_data(randomized.eval_key(0, s, n))).tolist())
          for s in (0, 1) for n in (10, 20)}
  assert len(keys) == 4


def test_bad_sampler_config_is_refused():
  with pytest.raises(ValueError, match="eval_draws"):
    randomized.RandomizedPositions(eval_draws=0)
  with pytest.raises(ValueError, match="max_random_position"):
    randomized.from_config({"max_random_position": 0})


class _RecordingModel:
  """Stands in for a model in `make_train_step`: records the positions it is given."""

  def __init__(self, joint):
    self.joint_positions = joint
    self.seen = []

  def apply(self, variables, inputs_BxS, targets_BxT, inputs_pos, targets_pos, **kwargs):
    del kwargs
    self.seen.append((np.asarray(inputs_pos), np.asarray(targets_pos)))
    return jnp.zeros(targets_BxT.shape + (8,)) * variables["params"]["w"]


def _train_step_positions(joint, inputs, targets, step=7, max_random_position=64):
  model = _RecordingModel(joint)
  tx = optax.sgd(0.1)
  params = {"w": jnp.ones(())}
  state = train_lib.TrainState(step=jnp.array(step, jnp.int32), params=params,
                               opt_state=tx.init(params))
  step = train_lib.make_train_step(
      model, tx, lambda s: 0.1, label_smoothing=0.0,
      randomized=randomized.RandomizedPositions(enabled=True,
                                                max_random_position=max_random_position))
  step(state, {"inputs": jnp.asarray(inputs), "targets": jnp.asarray(targets)}, jnp.array(3))
  return model.seen[0]


@pytest.mark.parametrize("joint", [True, False])
def test_train_step_samples_real_slots_independently_of_padding(joint):
  """Inputs: non-PAD count; targets: tokens + EOS (= BOS/SEP + fed tokens); padding changes nothing."""
  P, E = vocab.PAD_ID, vocab.EOS_ID
  inputs = np.array([[5, 6, 7, P], [5, P, P, P]], np.int32)
  targets = np.array([[8, 9, E, P, P], [8, 8, 8, 8, E]], np.int32)
  n_in, n_tgt = np.array([3, 1]), np.array([3, 5])
  ipos, tpos = _train_step_positions(joint, inputs, targets)
  wide_ipos, wide_tpos = _train_step_positions(
      joint, np.pad(inputs, ((0, 0), (0, 9))), np.pad(targets, ((0, 0), (0, 6))))
  for b in range(2):
    real = [ipos[b, :n_in[b]], tpos[b, :n_tgt[b]]]
    np.testing.assert_array_equal(wide_ipos[b, :n_in[b]], real[0])
    np.testing.assert_array_equal(wide_tpos[b, :n_tgt[b]], real[1])
    if joint:
      assert np.all(np.diff(np.concatenate(real)) > 0)
    else:
      assert all(np.all(np.diff(r) > 0) for r in real)
  assert ipos.max() < 64 and tpos.max() < 64 and wide_tpos.max() < 64


def test_validation_sampler_follows_the_training_positions():
  assert randomized.validation_sampler(None) is None
  assert randomized.validation_sampler({"enabled": False, "max_random_position": 64}) is None
  on = randomized.validation_sampler({"enabled": True, "max_random_position": 64})
  assert on.max_random_position == 64 and on.eval_draws == 8  # an old config: the default
  config = randomized.default_config()
  config.enabled = True
  assert randomized.validation_sampler(config) == randomized.RandomizedPositions(**config)
