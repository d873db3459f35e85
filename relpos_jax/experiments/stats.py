"""95% intervals over seeds and eval examples, and paired comparisons of runs.

A table's number is a mean over seeds of each seed's mean over eval examples, so
it varies with the training seed *and* with the finite eval set. Both enter the
interval through a hierarchical bootstrap (Davison & Hinkley 1997, §3.8): resample
the seeds with replacement, then the examples within each resampled seed, and
recompute the mean; `n_resamples` (≥ 2,000) times, from a fixed resampling seed, so
a rendered table is reproducible byte for byte.

With three seeds a percentile interval of that bootstrap is far too narrow (the
bootstrap distribution of a mean of n resampled values has variance (n−1)/n of the
mean's, and its quantiles ignore that the spread itself is estimated from n
values). So the interval is the bootstrap's standard error, rescaled by
sqrt(n/(n−1)), times Student's t quantile:

    SE² = n/(n−1) · var(bootstrap means),   mean ± t_{df, 0.975} · SE,
    df  = (n−1) · (SE² / (var(seed means)/n))²     (Welch–Satterthwaite)

the part of SE² that the spread of the seed means explains has n−1 degrees of
freedom, the eval set's part (hundreds of examples) many. Without eval-set noise
this is the classical t interval over seed means; tests/stats_test.py checks that,
and ~95% coverage on simulated runs whose seeds share one eval set of examples of
varying difficulty, as ours do. A comparison of two runs does the same on the
per-seed differences over matching seeds (paired: the same seed of both runs, and
the same eval examples when both records list per-example outcomes); its p is the
two-sided p of t = difference / standard error with n−1 degrees of freedom, so the
interval excludes 0 exactly when p < 0.05. `contrast` does the same for any weighted
sum of runs over matching seeds, e.g. a difference of differences (A − B) − (C − D),
whether a change helps one scheme more than another. With one seed the interval holds only the
eval set's noise (scipy.stats.bootstrap over the examples) and no p is given.

A seed's sample is the per-example values (an example's exact-match rate over its
position draws, k/K). They take few distinct values, so an example resample is one
multinomial draw over those values, which keeps a table's thousands of cells fast.
"""

from __future__ import annotations

import dataclasses
from typing import Sequence

import numpy as np
from scipy import stats as scipy_stats

CONFIDENCE = 0.95
N_RESAMPLES = 2000
RESAMPLING_SEED = 0


@dataclasses.dataclass(frozen=True)
class Interval:
  """A mean with its interval.

  Attributes:
    mean: the mean over seeds of each seed's mean.
    lo, hi: the interval's bounds.
    n_seeds: seeds it rests on.
    p: for a difference, the two-sided p of "no difference" (None for a mean, or
      with one seed).
  """

  mean: float
  lo: float
  hi: float
  n_seeds: int
  p: float | None = None

  def excludes_zero(self) -> bool:
    """Whether 0 lies outside the interval (a distinguishable difference)."""
    return self.lo > 0 or self.hi < 0


def _histogram(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
  """(distinct values, their counts) of one seed's per-example values."""
  values_V, counts_V = np.unique(np.round(np.asarray(values, float), 12), return_counts=True)
  return values_V, counts_V


def _resampled_means(values: np.ndarray, size: int, rng: np.random.Generator) -> np.ndarray:
  """`size` means of the examples resampled with replacement (one multinomial draw each)."""
  values_V, counts_V = _histogram(values)
  m = int(counts_V.sum())
  draws_RxV = rng.multinomial(m, counts_V / m, size=size)
  return draws_RxV @ values_V / m


def _bootstrap_means(samples_S: Sequence[np.ndarray], n_resamples: int,
                     rng: np.random.Generator) -> np.ndarray:
  """Hierarchical bootstrap: [R] means over resampled seeds of resampled-example means."""
  return _bootstrap_contrast([samples_S], (1.0,), n_resamples, rng)


def _bootstrap_contrast(runs_KxS: Sequence[Sequence[np.ndarray]], weights_K: Sequence[float],
                        n_resamples: int, rng: np.random.Generator) -> np.ndarray:
  """Hierarchical bootstrap of Σ_k w_k · mean(run k's examples): [R] means over seeds.

  Each resampled seed contributes Σ_k w_k · mean(x_k*), every run's examples of that
  seed resampled independently (unpaired examples of runs on the same seeds).
  """
  n = len(runs_KxS[0])
  seeds_RxN = rng.integers(0, n, size=(n_resamples, n))
  means_RxN = np.empty((n_resamples, n))
  for s in range(n):
    chosen = seeds_RxN == s
    k = int(chosen.sum())
    if not k:
      continue
    means_RxN[chosen] = sum(w * _resampled_means(run_S[s], k, rng)
                            for w, run_S in zip(weights_K, runs_KxS))
  return means_RxN.mean(axis=1)


def _t_interval(mean: float, boot_R: np.ndarray, seed_means_S: np.ndarray, confidence: float,
                bounds: tuple[float, float]) -> Interval:
  """mean ± t_df · SE, clipped to `bounds`, with its p of mean = 0 (module docstring).

  SE² = sd(boot)² · n/(n−1); df by Welch–Satterthwaite: the part of SE² that the
  spread of the n seed means explains has n−1 degrees of freedom, the eval-set part
  many, so df = (n−1)·(SE² / seed part)², capped by the normal limit.
  """
  n = len(seed_means_S)
  total = float(np.var(boot_R, ddof=1)) * n / (n - 1)
  seed_part = float(np.var(seed_means_S, ddof=1)) / n
  df = (n - 1) * (total / seed_part) ** 2 if seed_part > 0 else np.inf
  se = np.sqrt(total)
  crit = float(scipy_stats.t.ppf(0.5 + confidence / 2, df))
  if se > 0:
    p = float(2 * scipy_stats.t.sf(abs(mean) / se, df))
  else:
    p = 1.0 if mean == 0 else 0.0
  lo, hi = max(mean - crit * se, bounds[0]), min(mean + crit * se, bounds[1])
  return Interval(mean, lo, hi, n, p)


def mean_interval(samples_S: Sequence[np.ndarray], *, confidence: float = CONFIDENCE,
                  n_resamples: int = N_RESAMPLES, seed: int = RESAMPLING_SEED,
                  bounds: tuple[float, float] = (0.0, 1.0)) -> Interval:
  """The interval of a mean over seeds and eval examples (module docstring).

  Args:
    samples_S: per seed, its per-example values (e.g. exact-match rates in [0, 1]);
      at least one seed, each with at least one example.
    confidence: the interval's level.
    n_resamples: bootstrap resamples.
    seed: the resampling seed (fixed: reproducible tables).
    bounds: the metric's range; the interval is clipped to it.

  Returns:
    The `Interval` (its `p` is None).

  Raises:
    ValueError: no seed, or a seed without examples.
  """
  samples_S = [np.asarray(v, float) for v in samples_S]
  if not samples_S or any(v.size == 0 for v in samples_S):
    raise ValueError("an interval needs at least one seed with at least one example")
  mean = float(np.mean([v.mean() for v in samples_S]))
  n = len(samples_S)
  if n == 1:
    return _examples_only(samples_S[0], confidence, n_resamples, seed, bounds)
  boot_R = _bootstrap_means(samples_S, n_resamples, np.random.default_rng(seed))
  seed_means_S = np.array([v.mean() for v in samples_S])
  return dataclasses.replace(_t_interval(mean, boot_R, seed_means_S, confidence, bounds), p=None)


def _examples_only(values: np.ndarray, confidence: float, n_resamples: int, seed: int,
                   bounds: tuple[float, float]) -> Interval:
  """One seed: scipy's percentile bootstrap over its examples (the eval set's noise only)."""
  mean = float(values.mean())
  if np.all(values == values[0]):
    return Interval(mean, mean, mean, 1)
  result = scipy_stats.bootstrap((values,), np.mean, confidence_level=confidence,
                                 n_resamples=n_resamples, method="percentile",
                                 random_state=np.random.default_rng(seed))
  low, high = result.confidence_interval
  return Interval(mean, max(float(low), bounds[0]), min(float(high), bounds[1]), 1)


def paired_difference(a_S: Sequence[np.ndarray], b_S: Sequence[np.ndarray], *,
                      paired_examples: bool, confidence: float = CONFIDENCE,
                      n_resamples: int = N_RESAMPLES, seed: int = RESAMPLING_SEED,
                      bounds: tuple[float, float] = (-1.0, 1.0)) -> Interval:
  """Run A minus run B over matching seeds: the difference, its interval and p.

  Args:
    a_S, b_S: per seed (the same seeds, in the same order), each run's per-example
      values.
    paired_examples: the two runs' values list the same eval examples in the same
      order (then examples are resampled jointly: their per-example differences);
      else each run's examples are resampled on their own (counts-only records).
    confidence, n_resamples, seed: as for `mean_interval`.
    bounds: the difference's range (the interval is clipped to it): (−1, 1) for
      rates; (−inf, inf) for an unbounded metric such as bits per byte.

  Returns:
    The difference's `Interval`, with `p` (None with one seed).

  Raises:
    ValueError: different seed counts, no seed, or (paired) different example counts.
  """
  return contrast([a_S, b_S], (1.0, -1.0), paired_examples=paired_examples,
                  confidence=confidence, n_resamples=n_resamples, seed=seed, bounds=bounds)


def contrast(runs_KxS: Sequence[Sequence[np.ndarray]], weights_K: Sequence[float], *,
             paired_examples: bool, confidence: float = CONFIDENCE,
             n_resamples: int = N_RESAMPLES, seed: int = RESAMPLING_SEED,
             bounds: tuple[float, float] = (-1.0, 1.0)) -> Interval:
  """Σ_k w_k · run k over matching seeds, e.g. (1, −1) for A − B, (1, −1, −1, 1) for
  (A − B) − (C − D): the contrast, its interval and p (as `paired_difference`).

  Args:
    runs_KxS: per run, per seed (the same seeds, in the same order), its
      per-example values.
    weights_K: each run's weight.
    paired_examples: every run lists the same eval examples in the same order (then
      examples are resampled jointly: their per-example contrast); else each run's
      examples are resampled on their own.
    confidence, n_resamples, seed, bounds: as for `paired_difference`.

  Returns:
    The contrast's `Interval`, with `p` (None with one seed).

  Raises:
    ValueError: a weight count other than the run count, different seed counts, no
      seed, or (paired) different example counts.
  """
  runs = [[np.asarray(v, float) for v in run_S] for run_S in runs_KxS]
  if len(weights_K) != len(runs):
    raise ValueError(f"{len(weights_K)} weights for {len(runs)} runs")
  counts = [len(run_S) for run_S in runs]
  if len(set(counts)) != 1 or not counts[0]:
    raise ValueError(f"a paired comparison needs the same seeds of every run, got "
                     f"{' and '.join(map(str, counts))}")
  n = counts[0]
  seed_values_S = np.array([sum(w * run_S[s].mean() for w, run_S in zip(weights_K, runs))
                            for s in range(n)])
  mean = float(np.mean(seed_values_S))
  rng = np.random.default_rng(seed)
  if paired_examples:
    if any(len({run_S[s].shape for run_S in runs}) != 1 for s in range(n)):
      raise ValueError("paired examples: each seed needs the same examples in every run")
    combined_S = [sum(w * run_S[s] for w, run_S in zip(weights_K, runs)) for s in range(n)]
    if n == 1:
      return _examples_only(combined_S[0], confidence, n_resamples, seed, bounds)
    boot_R = _bootstrap_means(combined_S, n_resamples, rng)
  else:
    if n == 1:
      boot_R = sum(w * _resampled_means(run_S[0], n_resamples, rng)
                   for w, run_S in zip(weights_K, runs))
      low, high = np.quantile(boot_R, [(1 - confidence) / 2, (1 + confidence) / 2])
      return Interval(mean, max(float(low), bounds[0]), min(float(high), bounds[1]), 1)
    boot_R = _bootstrap_contrast(runs, weights_K, n_resamples, rng)
  return _t_interval(mean, boot_R, seed_values_S, confidence, bounds)


def format_interval(interval: Interval | None, digits: int = 2) -> str:
  """`0.71 [0.62, 0.80]`; "—" for None or a NaN mean."""
  if interval is None or not np.isfinite(interval.mean):
    return "—"
  f = f"{{:.{digits}f}}"
  return f"{f.format(interval.mean)} [{f.format(interval.lo)}, {f.format(interval.hi)}]"


def format_difference(interval: Interval, digits: int = 2) -> str:
  """`+0.12 [0.03, 0.21], p = 0.02` or `..., p < 0.001` (as sentences state it)."""
  f = f"{{:+.{digits}f}}"
  g = f"{{:.{digits}f}}"
  p = "" if interval.p is None else f", p {_p_relation(interval.p)}"
  return f"{f.format(interval.mean)} [{g.format(interval.lo)}, {g.format(interval.hi)}]{p}"


def _p_relation(p: float) -> str:
  """`= 0.021` or `< 0.001`: format_p with its relation sign, never `= < 0.001`."""
  text = format_p(p)
  return text if text.startswith("<") else f"= {text}"


def format_p(p: float) -> str:
  """Two significant digits, `< 0.001` below that."""
  return "< 0.001" if p < 0.001 else f"{p:.2g}"
