"""Intervals and paired tests against cases with a known answer."""

import numpy as np
import pytest
from scipy import stats as scipy_stats
from scipy.special import expit

from relpos_jax.experiments import stats


def _seeds(means, n_examples=1):
  """Seeds whose examples all score the seed's mean (no eval-set noise)."""
  return [np.full(n_examples, m) for m in means]


def test_without_example_noise_the_interval_is_the_t_interval_over_seeds():
  means = [0.52, 0.61, 0.70]
  got = stats.mean_interval(_seeds(means, 50))
  sem = scipy_stats.sem(means)
  half = scipy_stats.t.ppf(0.975, 2) * sem  # by hand: 4.303 × s/√3
  assert got.mean == pytest.approx(0.61)
  # The bootstrap's standard error has Monte-Carlo noise of ~1/√(2·2000) ≈ 1.6%.
  np.testing.assert_allclose([got.lo, got.hi], [0.61 - half, 0.61 + half], rtol=0.05)
  assert got.n_seeds == 3 and got.p is None


def test_the_paired_p_is_the_paired_t_test_when_examples_add_no_noise():
  a = [0.80, 0.72, 0.90, 0.85]
  b = [0.60, 0.65, 0.70, 0.62]
  got = stats.paired_difference(_seeds(a, 20), _seeds(b, 20), paired_examples=True)
  expected = scipy_stats.ttest_rel(a, b)
  assert got.mean == pytest.approx(np.mean(np.subtract(a, b)))
  np.testing.assert_allclose(got.p, expected.pvalue, rtol=0.25)  # bootstrap SE: ±1.6%
  assert got.excludes_zero() == (got.p < 0.05)


@pytest.mark.parametrize("seed_sd, example_sd", [(0.3, 1.5), (0.8, 0.3)])
def test_interval_coverage_on_simulated_seeds_and_eval_sets(seed_sd, example_sd):
  """3 seeds × one shared set of 128 examples of varying difficulty (as our tables are):
  P(exact) = sigmoid(seed effect + example effect). ~95% of the intervals cover the
  mean over infinitely many seeds and examples."""
  rng = np.random.default_rng(1)
  truth = expit(rng.normal(0, seed_sd, 3000)[:, None]
                + rng.normal(0.4, example_sd, 3000)[None]).mean()
  covered, runs = 0, 300
  for i in range(runs):
    p_SxN = expit(rng.normal(0, seed_sd, 3)[:, None] + rng.normal(0.4, example_sd, 128)[None])
    got = stats.mean_interval(list(rng.random(p_SxN.shape) < p_SxN), n_resamples=500, seed=i)
    covered += got.lo <= truth <= got.hi
  assert 0.90 <= covered / runs <= 0.985  # 300 runs: the estimate's own sd is ~1.3%


def test_a_difference_of_zero_is_not_distinguishable():
  rng = np.random.default_rng(3)
  a = [rng.random(128) < 0.5 for _ in range(3)]
  got = stats.paired_difference(a, a, paired_examples=True)
  assert got.mean == 0 and got.lo == got.hi == 0 and got.p == 1.0


def test_paired_examples_give_a_narrower_interval_than_unpaired():
  """Two runs that fail on the same hard examples: pairing removes the shared noise."""
  rng = np.random.default_rng(4)
  hard = [rng.random(200) < 0.5 for _ in range(3)]
  a = [h | (rng.random(200) < 0.2) for h in hard]
  b = [h.copy() for h in hard]
  paired = stats.paired_difference(a, b, paired_examples=True)
  unpaired = stats.paired_difference(a, b, paired_examples=False)
  assert paired.mean == pytest.approx(unpaired.mean)
  assert paired.hi - paired.lo < unpaired.hi - unpaired.lo


def test_one_seed_holds_only_the_eval_set_noise():
  values = np.array([1.0] * 60 + [0.0] * 40)
  got = stats.mean_interval([values])
  se = np.sqrt(0.6 * 0.4 / 100)  # binomial, by hand
  assert got.p is None and got.n_seeds == 1
  np.testing.assert_allclose([got.lo, got.hi], [0.6 - 1.96 * se, 0.6 + 1.96 * se], atol=0.02)


def test_fixed_resampling_seed_reproduces_and_bad_input_is_refused():
  samples = [np.array([1, 0, 1, 1.0]), np.array([0, 0, 1, 0.0]), np.array([1, 1, 1, 0.0])]
  assert stats.mean_interval(samples) == stats.mean_interval(samples)
  with pytest.raises(ValueError, match="at least one seed"):
    stats.mean_interval([])
  with pytest.raises(ValueError, match="same seeds"):
    stats.paired_difference(samples, samples[:2], paired_examples=False)


def test_formatting():
  assert stats.format_interval(stats.Interval(0.714, 0.62, 0.801, 3)) == "0.71 [0.62, 0.80]"
  assert stats.format_interval(None) == "—"
  assert stats.format_difference(stats.Interval(0.12, 0.03, 0.21, 3, 0.0213)) == (
      "+0.12 [0.03, 0.21], p = 0.021")
  assert stats.format_p(0.0002) == "< 0.001"
  assert stats.format_difference(stats.Interval(0.5, 0.4, 0.6, 3, 0.0002)) == (
      "+0.50 [0.40, 0.60], p < 0.001")


def test_a_contrast_of_one_minus_one_is_the_paired_difference():
  rng = np.random.default_rng(3)
  a_S = [rng.integers(0, 2, 40).astype(float) for _ in range(3)]
  b_S = [rng.integers(0, 2, 40).astype(float) for _ in range(3)]
  for paired in (True, False):
    assert (stats.contrast([a_S, b_S], (1.0, -1.0), paired_examples=paired)
            == stats.paired_difference(a_S, b_S, paired_examples=paired))
  # (A − B) − (C − D) with C = B and D = A is 2 (A − B), interval and all.
  double = stats.contrast([a_S, b_S, b_S, a_S], (1.0, -1.0, -1.0, 1.0), paired_examples=True,
                          bounds=(-2.0, 2.0))
  once = stats.paired_difference(a_S, b_S, paired_examples=True, bounds=(-2.0, 2.0))
  np.testing.assert_allclose([double.mean, double.lo, double.hi],
                             [2 * once.mean, 2 * once.lo, 2 * once.hi])
  np.testing.assert_allclose(double.p, once.p)
  with pytest.raises(ValueError, match="weights"):
    stats.contrast([a_S, b_S], (1.0,), paired_examples=True)
