"""The main table: one pooled definition, intervals, convergence per row, provenance marks."""

import numpy as np
import pytest

from relpos_jax.experiments import main_table
from relpos_jax.experiments import stats


def _record(run, seed, length, em, *, L=20, n=10, **extra):
  return {"run": run, "seed": seed, "length": length, "exact_match": em, "num_examples": n,
          "max_train_length": L, "task": "copy", "converged": True, "valid_exact_match": 1.0,
          "converged_at": 0.95, "error": None, **extra}


def test_pooled_ranges_are_the_same_for_every_grid():
  # The same run on two grids (schemes' 5-step grid, t5_buckets' sparse one): (L, 2L]
  # holds only lengths in it, (L, 4L] only where the grid reaches 4L.
  assert main_table.pooled_ranges(range(5, 81, 5), 20) == {
      main_table.POOLED_2X: [25, 30, 35, 40], main_table.POOLED_4X: list(range(25, 81, 5))}
  assert main_table.pooled_ranges([10, 20, 30, 40, 60], 20)[main_table.POOLED_4X] == []
  scan = main_table.pooled_ranges([24, 30, 48], 22, scan=True)
  assert scan[main_table.POOLED_TEST] == [24, 30, 48] and scan[main_table.POOLED_2X] == [24, 30]


def test_a_cell_pools_examples_within_seeds_then_bootstraps():
  records = [_record("r", s, n, em) for s, ems in enumerate([(1.0, 0.5), (0.8, 0.3), (0.9, 0.4)])
             for n, em in zip((30, 40), ems)]
  got = main_table.cell(records, [30, 40])
  per_seed = [np.mean([1.0, 0.5]), np.mean([0.8, 0.3]), np.mean([0.9, 0.4])]  # equal n
  assert got.mean == np.mean(per_seed)
  samples = main_table.seed_samples(records, [30, 40])
  assert got == stats.mean_interval(samples)
  assert [s.size for s in samples] == [20, 20, 20]
  # Per-example draw counts where stored: 3 examples, 8 draws.
  values = main_table.example_values(_record("r", 0, 30, 0.5, n=3, exact_counts=[8, 4, 0],
                                             position_draws=8))
  np.testing.assert_array_equal(values, [1.0, 0.5, 0.0])
  assert main_table.example_values(_record("r", 0, 30, float("nan"), error="too long")) is None


def test_an_old_randomized_0_to_L_row_is_judged_at_its_training_lengths():
  old = [_record("r", 0, 10, 0.0, valid_positions="random", eval_positions="0..L-1"),
         _record("r", 0, 30, 0.0, valid_positions="random", eval_positions="0..L-1")]
  assert main_table.row_convergence(old) == (0, 1, True, [0.0])
  new = [_record("r", 0, 10, 0.0, valid_positions="0..L-1", eval_positions="0..L-1",
                 checkpoint_valid_positions="random", converged=False, valid_exact_match=0.1)]
  assert main_table.row_convergence(new) == (0, 1, False, [0.1])
  text = main_table.table(old)
  assert "r † |" in text and "*" in text and "(L, 2L] = 30–30" in text


def test_provenance_marks():
  clean = [_record("r", 0, 30, 1.0, provenance={"git": {"dirty": False}})]
  dirty = [_record("r", 0, 30, 1.0, provenance={"git": {"dirty": True}})]
  assert main_table.provenance_problems(clean, None) == []
  assert main_table.provenance_problems(dirty, None) == [
      "evaluated from a tree with uncommitted changes"]
  assert main_table.provenance_problems(clean, {"config": {}}) == [
      "no training provenance recorded"]
  assert "r §" in main_table.table(clean, run_infos={"r": {"config": {}}})


def test_rows_decoded_under_the_old_random_protocol_are_marked():
  old = [_record("r@random_positions", 0, 30, 0.5, eval_positions="random")]
  new = [_record("r@random_positions", 0, 30, 0.5, eval_positions="random", position_draws=8)]
  assert main_table.old_random_protocol(old) and not main_table.old_random_protocol(new)
  assert "◊" in main_table.table(old) and "◊" not in main_table.table(new)


def test_the_draw_spread_is_shown_for_rows_scored_over_several_draws():
  rand = [_record("r@random_positions", s, 30, 0.5, eval_positions="random", position_draws=3,
                  exact_match_draws=[0.4, 0.5, 0.6]) for s in range(2)]
  assert main_table.draw_spread(rand, [30]) == pytest.approx(0.1)
  assert main_table.draw_spread([_record("r", 0, 30, 0.5)], [30]) is None
  text = main_table.table(rand + [_record("r", 0, 30, 0.5)])
  assert main_table.DRAW_SD in text and "| 0.10 |" in text and "| — |" in text
