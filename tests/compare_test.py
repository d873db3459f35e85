"""Paired comparisons of stored runs."""

import numpy as np
import pytest

from relpos_jax.experiments import compare
from relpos_jax.experiments import stats


def _run(name, ems, lengths=(10, 30, 40, 80), n=8, counts=False):
  out = []
  for seed, em in enumerate(ems):
    for length in lengths:
      k = int(round(em * n))
      extra = {"exact_counts": [1] * k + [0] * (n - k), "position_draws": 1} if counts else {}
      out.append({"run": name, "seed": seed, "length": length, "exact_match": k / n,
                  "num_examples": n, "max_train_length": 20, "task": "copy", "error": None,
                  **extra})
  return out


def test_a_minus_b_on_the_pooled_column():
  a, b = _run("a", [0.75, 0.5, 0.625]), _run("b", [0.25, 0.25, 0.5])
  got = compare.compare(a, b)
  assert got.mean == pytest.approx(np.mean([0.5, 0.25, 0.125]))
  assert got.p is not None and got.n_seeds == 3
  assert compare.compare(a, a).mean == 0
  assert "not distinguishable with 3 seeds" in compare.describe(stats.Interval(0.1, -0.1, 0.3, 3,
                                                                               0.4))


def test_examples_are_paired_only_when_both_runs_list_them():
  a = _run("a", [0.75, 0.5, 0.625], counts=True)
  b = _run("b", [0.75, 0.5, 0.5], counts=True)
  paired = compare.compare(a, b)
  unpaired = compare.compare(_run("a", [0.75, 0.5, 0.625]), _run("b", [0.75, 0.5, 0.5]))
  assert paired.mean == pytest.approx(unpaired.mean)
  assert paired.hi - paired.lo < unpaired.hi - unpaired.lo  # shared examples: shared noise


def test_different_grids_and_unknown_columns_are_refused():
  with pytest.raises(ValueError, match="not comparable"):
    compare.compare(_run("a", [1.0]), _run("b", [1.0], lengths=(10, 40)))
  with pytest.raises(ValueError, match="unknown column"):
    compare.compare(_run("a", [1.0]), _run("b", [1.0]), column="pooled")


def test_runs_with_different_seeds_are_paired_on_the_seeds_both_have():
  five = _run("a", [0.75, 0.5, 0.625, 1.0, 0.0], counts=True)  # seeds added to run A
  three = _run("b", [0.25, 0.25, 0.5], counts=True)
  assert compare.shared_seeds(five, three) == [0, 1, 2]
  got = compare.compare(five, three)
  assert got == compare.compare([r for r in five if r["seed"] < 3], three)
  assert got.n_seeds == 3 and got.mean == pytest.approx(np.mean([0.5, 0.25, 0.125]))
  assert compare.seeds_note(five, three, "pooled (L, 2L]") == (
      " (paired on seeds 0, 1, 2: run A has 5, run B 3)")
  assert compare.seeds_note(three, three, "pooled (L, 2L]") == ""
  # Seeds that do not line up: only the matching ones are paired, by seed, not by position.
  shifted = [{**r, "seed": r["seed"] + 1} for r in three]  # seeds 1, 2, 3
  pairs = compare.compare(five, shifted)
  assert compare.shared_seeds(five, shifted) == [1, 2, 3] and pairs.n_seeds == 3
  assert pairs.mean == pytest.approx(np.mean([0.5 - 0.25, 0.625 - 0.25, 1.0 - 0.5]))
  # A seed with nothing on the column in one run (not representable there) is left out.
  na = [{**r, "error": "too long", "exact_match": float("nan")} if r["seed"] == 1 else r
        for r in three]
  assert compare.shared_seeds(five, na) == [0, 2] and compare.compare(five, na).n_seeds == 2


def _lm(name, blocks_by_seed, multiple=2, manifest="cpython-3.11", mode="nonoverlapping"):
  return [{"run": name, "scheme": "alibi", "seed": seed, "mode": mode, "context": 8 * multiple,
           "multiple": float(multiple), "train_length": 8, "eval_bytes": 32 * len(blocks),
           "block_bytes": 32, "manifest": {"corpus": manifest}, "error": None,
           "bits_per_byte": float(np.mean(blocks)), "block_bits_per_byte": list(blocks)}
          for seed, blocks in enumerate(blocks_by_seed)]


def test_language_models_compare_bits_per_byte_paired_by_seed_and_block():
  # B is A plus a per-block shift shared by the seeds: paired by block, the difference
  # is exact; A's own spread across blocks and seeds does not enter it.
  a_blocks = [[1.0, 2.0, 3.0, 4.0], [1.5, 2.5, 2.0, 3.5], [0.9, 2.2, 3.1, 3.8]]
  shift = np.array([0.1, 0.2, 0.1, 0.2])
  a = _lm("a", a_blocks)
  b = _lm("b", [list(np.array(blocks) + shift) for blocks in a_blocks])
  got = compare.compare(a, b)  # default column: 2×L
  assert got.mean == pytest.approx(-0.15) and got.n_seeds == 3
  assert got.hi < 0 and got.p < 0.05
  assert got.hi - got.lo < 0.2  # the blocks' 1-3 bits of spread cancel in the pairs
  # An unbounded metric: a difference beyond 1 bit is not clipped.
  far = compare.compare(_lm("c", [[5.0, 6.0, 5.5, 6.5]] * 3), a)
  assert far.mean > 1 and far.hi > 1
  with pytest.raises(ValueError, match="unknown column '4×L'"):
    compare.compare(a, b, "4×L")
  with pytest.raises(ValueError, match="not scored on the same"):
    compare.compare(a, _lm("d", a_blocks, manifest="cpython-3.12"))
  with pytest.raises(ValueError, match="language model and the other is not"):
    compare.compare(a, _run("e", [0.5, 0.5, 0.5]))


def test_a_language_model_compares_two_of_its_own_contexts_block_by_block():
  # 1×L and 2×L score the same blocks; 2×L is each block 0.3 bits worse.
  at_1 = [[1.0, 2.0, 3.0, 4.0], [1.5, 2.5, 2.0, 3.5], [0.9, 2.2, 3.1, 3.8]]
  run = _lm("a", at_1, multiple=1) + _lm("a", [list(np.add(b, 0.3)) for b in at_1])
  got = compare.compare(run, run, "2×L", "1×L")
  assert got.mean == pytest.approx(0.3) and got.n_seeds == 3 and got.lo > 0
  assert compare.compare(run, run, "2×L").mean == pytest.approx(0.0)  # column_b defaults
  assert compare.shared_seeds(run, run, "2×L", "1×L") == [0, 1, 2]
  with pytest.raises(ValueError, match="unknown column '8×L'"):
    compare.compare(run, run, "2×L", "8×L")
  seq2seq = _run("b", [0.5, 0.6, 0.7])
  with pytest.raises(ValueError, match="only language-model runs"):
    compare.compare(seq2seq, seq2seq, "2×", "1.5×")


def test_passkey_runs_compare_their_accuracy_over_every_depth():
  def passkey(name, correct_by_seed):
    return [{"run": name, "scheme": "alibi", "seed": seed, "context": 16, "multiple": 2.0,
             "depth": depth, "train_length": 8, "accuracy": c / 4, "num_examples": 4,
             "error": None}
            for seed, per_depth in enumerate(correct_by_seed)
            for depth, c in zip((0.0, 1.0), per_depth)]
  a, b = passkey("a", [(4, 4), (4, 3), (3, 4)]), passkey("b", [(1, 0), (0, 1), (1, 1)])
  got = compare.compare(a, b, "2×L")
  assert got.mean == pytest.approx(np.mean([8 / 8 - 1 / 8, 7 / 8 - 1 / 8, 7 / 8 - 2 / 8]))
  assert got.lo > 0 and -1 <= got.lo <= got.hi <= 1


def test_difference_of_differences_pairs_each_example_across_four_runs():
  # A gains 0.5 over B on every seed, C gains 0.125 over D: the interaction is 0.375.
  a = _run("a", [1.0, 0.75, 0.875], counts=True)
  b = _run("b", [0.5, 0.25, 0.375], counts=True)
  c = _run("c", [0.625, 0.5, 0.5], counts=True)
  d = _run("d", [0.5, 0.375, 0.375], counts=True)
  got = compare.difference_of_differences(a, b, c, d)
  assert got.mean == pytest.approx(0.375) and got.n_seeds == 3
  assert got.lo <= 0.375 <= got.hi and got.p is not None
  # The same gain in both pairs is no interaction, and swapping the pairs flips its sign.
  same = compare.difference_of_differences(a, b, a, b)
  assert same.mean == 0 and same.lo == same.hi == 0
  assert compare.difference_of_differences(c, d, a, b).mean == pytest.approx(-0.375)
  # The hand computation: per seed, A − B − (C − D) averaged over examples, then seeds.
  per_seed = [np.mean(np.array(x["exact_counts"]) - y["exact_counts"]
                      - (np.array(z["exact_counts"]) - w["exact_counts"]))
              for x, y, z, w in zip(a, b, c, d) if x["length"] == 30]
  np.testing.assert_allclose(np.mean(per_seed), got.mean)


def test_difference_of_differences_resamples_unlisted_examples_and_refuses_other_grids():
  a = _run("a", [1.0, 0.75], counts=True)
  d = _run("d", [0.5, 0.5])  # counts only: its examples are resampled on their own
  unpaired = compare.difference_of_differences(a, a, a, d)
  assert unpaired.mean == pytest.approx(np.mean([0.5 - 1.0, 0.5 - 0.75]))  # (A − A) − (A − D)
  assert unpaired.n_seeds == 2
  assert unpaired.lo < unpaired.mean < unpaired.hi and unpaired.p is not None
  paired = compare.difference_of_differences(a, a, a, _run("d", [0.5, 0.5], counts=True))
  assert paired.mean == pytest.approx(unpaired.mean) and paired != unpaired
  with pytest.raises(ValueError, match="not comparable"):
    compare.difference_of_differences(a, a, a, _run("d", [0.5, 0.5], lengths=(10, 40),
                                                    counts=True))
  with pytest.raises(ValueError, match="share no seed"):
    compare.difference_of_differences(a, a, a, [{**r, "seed": r["seed"] + 5} for r in a])


def test_the_command_prints_a_difference_of_differences_from_four_stored_runs(tmp_path, capsys):
  import json
  from absl import flags
  if not flags.FLAGS.is_parsed():
    flags.FLAGS.mark_as_parsed()
  runs = {"a": [1.0, 0.75, 0.875], "b": [0.5, 0.25, 0.375], "c": [0.625, 0.5, 0.5],
          "d": [0.5, 0.375, 0.375]}
  (tmp_path / "records").mkdir()
  for name, ems in runs.items():
    lines = [json.dumps(r) for r in _run(name, ems, counts=True)]
    (tmp_path / "records" / f"{name}.jsonl").write_text("\n".join(lines) + "\n")
  table = str(tmp_path)
  compare.main(["compare", table, "a", table, "b", table, "c", table, "d"])
  out = capsys.readouterr().out
  name = tmp_path.name
  assert out.startswith(f"({name}/a − {name}/b) − ({name}/c − {name}/d), pooled (L, 2L]: +0.38 [")
