"""Scoring and failure anatomy; evaluating whole workdirs: replicas, oracle mode, n/a lengths."""

import json
import logging
import math
import os
import pathlib
import shutil

import jax
import numpy as np
import pytest

from relpos_jax import architectures
from relpos_jax import config_args
from relpos_jax import evaluate
from relpos_jax import scoring
from relpos_jax import train_lib
from relpos_jax import workdir as workdir_lib
from relpos_jax.data import pipeline
from relpos_jax.data import vocab
from relpos_jax.experiments import checkpoints
from relpos_jax.experiments import records as records_lib
from relpos_jax.experiments import report
from relpos_jax.experiments import runner
from relpos_jax.experiments import sweep_spec
from relpos_jax.positions import randomized as randomized_lib

import model_harness  # the tests' shared eager init (pytest puts tests/ on the path)

DEFAULT = sweep_spec.load_module(
    str(pathlib.Path(__file__).resolve().parents[1] / "configs" / "default.py"))
E, P = vocab.EOS_ID, vocab.PAD_ID
LEARNED_ROWS = 16  # smoke eval lengths 4 and 8 pad to <= 16; length 16 pads to 32
NAN = float("nan")


# ------------------------------------------------------------------ scoring

def test_score_batch_separates_content_and_stop_errors():
  targets = np.array([[5, 6, 7, E, P]] * 5)
  tokens = np.array([[5, 6, 7, E, P],    # exact
                     [5, 9, 7, E, P],    # a wrong token, right length: content
                     [5, 6, E, P, P],    # stops early, shared tokens right: stop
                     [5, 6, 7, 8, E],    # stops late: stop
                     [9, E, P, P, P]])   # wrong token and too short: content
  lengths = np.array([3, 3, 2, 4, 1])
  s = scoring.score_batch(tokens, lengths, targets)
  np.testing.assert_array_equal(s["exact"], [True, False, False, False, False])
  np.testing.assert_array_equal(s["content_error"], [False, True, False, False, True])
  np.testing.assert_array_equal(s["stop_error"], [False, False, True, True, False])
  np.testing.assert_array_equal(s["too_short"], [False, False, True, False, True])
  np.testing.assert_array_equal(s["too_long"], [False, False, False, True, False])
  np.testing.assert_array_equal(s["first_error"], [4, 1, 2, 3, 0])
  np.testing.assert_array_equal(s["length_correct"], [True, True, False, False, False])
  np.testing.assert_allclose(s["token_correct"], [1.0, 0.75, 0.5, 0.75, 0.0])


def _hand_scores():
  """Ten examples of a length-4 target: 2 exact, 8 failures of known kinds; 2 padding rows."""
  T = 6
  targets = np.tile([5, 6, 7, 8, E, P], (12, 1))
  rows = [[5, 6, 7, 8, E, P],  # exact
          [5, 6, 7, 8, E, P],  # exact
          [5, 6, E, P, P, P],  # too short, pure stop (first wrong 2)
          [5, E, P, P, P, P],  # too short, pure stop (first wrong 1)
          [9, 6, E, P, P, P],  # too short, content (first wrong 0)
          [5, 6, 7, 8, 8, E],  # too long, pure stop (first wrong 4)
          [5, 6, 9, 8, 8, 8],  # too long (no EOS), content (first wrong 2)
          [5, 9, 7, 8, E, P],  # right length, content (first wrong 1)
          [5, 6, 7, 9, E, P],  # right length, content (first wrong 3)
          [9, 9, 9, 9, E, P],  # right length, content (first wrong 0)
          [9, 9, 9, 9, 9, 9],  # padding row (weight 0): ignored
          [9, E, P, P, P, P]]  # padding row
  tokens = np.array(rows)
  eos = tokens == E
  lengths = np.where(eos.any(1), eos.argmax(1), T)
  weights = np.array([1.0] * 10 + [0.0] * 2)
  return scoring.score_batch(tokens, lengths, targets), weights


def test_failure_anatomy_of_hand_made_tokens():
  scores, weights = _hand_scores()
  r = scoring.summarize_scores(scores, weights)
  assert r["num_examples"] == 10
  assert r["exact_match"] == pytest.approx(0.2)
  assert r["length_accuracy"] == pytest.approx(0.5)
  assert (r["fail_too_short"], r["fail_too_long"], r["fail_right_length"]) == (
      pytest.approx(3 / 8), pytest.approx(2 / 8), pytest.approx(3 / 8))
  assert r["fail_pure_stop"] == pytest.approx(3 / 8)
  assert r["stop_errors"] == pytest.approx(0.3) and r["content_errors"] == pytest.approx(0.5)
  assert r["first_wrong_median"] == np.median([2, 1, 0, 4, 2, 1, 3, 0]) == 1.5
  assert "loss" not in r and "oracle_exact_match" not in r


def test_summarize_loss_oracle_and_no_failures():
  scores, _ = _hand_scores()
  scores = {k: v[:2] for k, v in scores.items()}  # the two exact rows only
  scores.update(loss_sum=np.array([1.0, 3.0]), loss_tokens=np.array([5, 5]),
                oracle_exact=np.array([True, False]),
                oracle_token_correct=np.array([1.0, 0.6]))
  r = scoring.summarize_scores(scores, np.ones(2))
  assert r["exact_match"] == 1.0 and r["loss"] == pytest.approx(0.4)
  assert (r["oracle_exact_match"], r["oracle_token_accuracy"]) == (0.5, pytest.approx(0.8))
  for key in ("fail_too_short", "fail_too_long", "fail_right_length", "fail_pure_stop",
              "first_wrong_median"):
    assert math.isnan(r[key])  # nothing failed: no share to take
  with pytest.raises(ValueError, match="no eval example"):
    scoring.summarize_scores(scores, np.zeros(2))


def test_progress_logs_done_total_and_eta(caplog):
  progress = runner.Progress(total=3)
  with caplog.at_level(logging.INFO):
    progress.step("run a seed 0 length 8: exact 1.000")
    progress.step("run a seed 0 length 16: n/a")
  assert "eval 1/3 | run a seed 0 length 8: exact 1.000 | elapsed 0:00:00 | ETA" in caplog.text
  assert "eval 2/3 | run a seed 0 length 16: n/a" in caplog.text


# ------------------------------------------------------------------ records

def test_records_round_trip_nan_as_null(tmp_path):
  records = [{"run": "a", "length": 4, "exact_match": 0.5, "error": None},
             {"run": "a", "length": 40, "exact_match": NAN, "oracle_exact_match": NAN,
              "error": "too long"}]
  path = str(tmp_path / "x" / "extrapolation.jsonl")
  records_lib.write_jsonl(records, path)
  text = pathlib.Path(path).read_text()
  assert "NaN" not in text and json.loads(text.splitlines()[1])["exact_match"] is None
  back = records_lib.read_jsonl(path)
  assert back[0] == records[0]
  assert math.isnan(back[1]["exact_match"]) and math.isnan(back[1]["oracle_exact_match"])


def test_run_names_disambiguate_equal_basenames():
  assert workdir_lib.run_names(["runs/a", "runs/b/"]) == ["a", "b"]
  assert workdir_lib.run_names(["x/run", "y/run", "z"]) == ["x/run", "y/run", "z"]


def test_train_length_range_of_scan_is_measured():
  dataset = pipeline.make_dataset(task="scan", seed=0)
  assert runner.train_length_range(None, dataset) == (1, 22)  # Lake & Baroni: <= 22 actions


def test_bad_options_are_refused():
  with pytest.raises(ValueError, match="num_examples"):
    runner.EvalOptions(num_examples=0)
  with pytest.raises(ValueError, match="eval lengths"):
    runner.EvalOptions(lengths=[0, 4])


def _smoke_model(arch):
  """The smoke config's data and an untrained model of `arch` with its params."""
  config = DEFAULT.get_config("smoke,scheme=t5")
  if arch == "decoder_only":
    model_config = architectures.default_config(arch)
    model_config.update(d_model=16, num_heads=2, head_dim=8, d_ff=32, num_layers=2)
    config.model = model_config
  dataset = pipeline.make_dataset(seed=0, **config.data)
  model = architectures.make_model(config.model, vocab_size=dataset.vocab.size)
  sample = dataset.train_batch(0, 2)
  return dataset, model, model_harness.init(model, sample["inputs"], sample["targets"])


@pytest.mark.parametrize("arch, distance", [("encoder_decoder", 6), ("decoder_only", 12)])
def test_train_distance(arch, distance):
  dataset, model, _ = _smoke_model(arch)
  # copy of <= 6 tokens: inputs reach position 5, targets (EOS included) 6; decoder-only
  # runs both in one sequence: 6 inputs, then SEP and 6 target tokens at positions 6..12.
  assert report.train_distance(model, dataset) == distance


@pytest.mark.parametrize("arch", ["encoder_decoder", "decoder_only"])
def test_evaluate_length_of_any_architecture(arch):
  dataset, model, params = _smoke_model(arch)
  record = evaluate.evaluate_length(model, params, dataset, 8, batch_size=4, num_examples=6,
                                    oracle_length=True)
  assert record["length"] == 8 and record["num_examples"] == 6
  assert set(records_lib.KEYS) <= set(record)
  assert record["loss"] > 0 and 0 <= record["oracle_token_accuracy"] <= 1
  batch = next(dataset.eval_batches(8, 4))
  oracle = evaluate.decode_and_score(model, params, batch, oracle_length=True)
  assert oracle["length_correct"].all()


# ------------------------------------------------------------- whole workdirs

@pytest.fixture(scope="module")
def learned_workdir(learned_smoke_run, tmp_path_factory):
  """A copy of conftest's 2-replica learned-positions smoke run (a 16-row table)."""
  assert workdir_lib.load_config(learned_smoke_run).model.position.max_len == LEARNED_ROWS
  workdir = str(tmp_path_factory.mktemp("runs") / "learned16")
  shutil.copytree(learned_smoke_run, workdir)
  return workdir


@pytest.mark.slow  # on a trained run (the fixture trains)
def test_evaluate_workdir_every_replica_and_not_representable(learned_workdir):
  records = runner.evaluate_workdir(learned_workdir, lengths=[4, 8, 16], num_examples=5)
  assert [(r["seed"], r["length"]) for r in records] == [
      (s, n) for s in (0, 1) for n in (4, 8, 16)]
  for r in records:
    assert (r["run"], r["scheme"], r["task"], r["step"]) == ("learned16", "learned", "copy", 3)
    assert (r["min_train_length"], r["max_train_length"]) == (1, 6)
    if r["length"] == 16:  # beyond the 16-row table: not representable, not a crash
      assert math.isnan(r["exact_match"]) and math.isnan(r["loss"]) and r["num_examples"] == 0
      assert "model.position.max_len" in r["error"]
    else:
      assert 0.0 <= r["exact_match"] <= 1.0 and r["error"] is None and r["num_examples"] == 5
      assert r["content_errors"] + r["stop_errors"] == pytest.approx(1.0 - r["exact_match"])
      assert r["loss"] > 0 and "oracle_exact_match" not in r
  out = os.path.join(learned_workdir, "eval")
  saved = records_lib.read_jsonl(os.path.join(out, "extrapolation.jsonl"))
  assert len(saved) == 6 and math.isnan(saved[2]["exact_match"])
  assert [r["exact_match"] for r in saved[:2]] == [r["exact_match"] for r in records[:2]]
  table = pathlib.Path(out, "extrapolation.md").read_text()
  main = table.split("### ")[1]  # the exact-match table: 4× is length 16 here -> n/a
  assert "| learned | 2 | 1–6 |" in main and main.count("| n/a |") == 1
  assert all(r["checkpoint_rule"] == "best" and r["valid_num_examples"] > 0 for r in records)
  assert "n/a: not representable" in main
  assert "| learned16 | 16 | 2.7 | n/a | n/a | n/a | n/a | n/a | n/a |" in table  # anatomy row
  assert "n/a" in pathlib.Path(out, "extrapolation.csv").read_text()
  with open(os.path.join(out, "accuracy_vs_length.png"), "rb") as f:
    assert f.read(8) == b"\x89PNG\r\n\x1a\n"


@pytest.mark.slow  # on a trained run (the fixture trains)
def test_evaluate_runs_skips_untrained_and_writes_the_comparison(learned_workdir, tmp_path):
  untrained = tmp_path / "untrained"
  untrained.mkdir()
  (untrained / "config.json").write_text(
      pathlib.Path(learned_workdir, "config.json").read_text())
  out = str(tmp_path / "report")
  records = runner.evaluate_runs([learned_workdir, str(untrained)], out)
  assert {r["run"] for r in records} == {"learned16"}
  assert sorted(r["length"] for r in records) == [4, 4, 8, 8]  # the config's eval lengths
  assert all(r["num_examples"] == 8 for r in records)  # the config's eval set size
  assert sorted(os.listdir(out)) == sorted(report.REPORT_FILES.values())
  for name in report.REPORT_FILES.values():
    assert os.path.getsize(os.path.join(out, name)) > 0
  with pytest.raises(ValueError, match="nothing to evaluate"):
    runner.evaluate_runs([str(untrained)], out)


@pytest.fixture(scope="module")
def copy_workdir(tmp_path_factory):
  """Copy of 1-3 symbols (3-symbol alphabet), trained until it is right at those lengths."""
  config = DEFAULT.get_config("smoke,scheme=sinusoidal,steps=300")
  config.data.update(max_train_length=3, eval_lengths=(1, 2, 3, 6), vocab_size=3)
  config.model.update(d_model=32, num_heads=2, head_dim=16, d_ff=64)
  config.optimizer.update(learning_rate=3e-3, warmup_steps=20)
  config.update(batch_size=32, log_every=300, eval_every=300, checkpoint_every=300)
  workdir = str(tmp_path_factory.mktemp("runs") / "copy")
  train_lib.train_and_evaluate(config, workdir)
  return workdir


@pytest.mark.slow  # trains 300 steps (the fixture)
def test_a_trained_run_is_exact_at_its_training_lengths(copy_workdir):
  records = runner.evaluate_workdir(copy_workdir, num_examples=32, oracle_length=True)
  by_length = {r["length"]: r for r in records}
  for n in (1, 2, 3):
    r = by_length[n]
    assert (r["exact_match"], r["token_accuracy"], r["num_examples"]) == (1.0, 1.0, 32)
    assert r["oracle_exact_match"] == 1.0 and math.isnan(r["fail_pure_stop"])
  longest = by_length[6]
  assert longest["exact_match"] < 1.0 and longest["loss"] > by_length[3]["loss"]
  assert 0.0 <= longest["oracle_exact_match"] <= 1.0
  assert longest["fail_too_short"] + longest["fail_too_long"] + longest[
      "fail_right_length"] == pytest.approx(1.0)
  assert os.path.exists(os.path.join(copy_workdir, "eval", "sinusoid.png"))


@pytest.mark.slow  # trains 300 steps (the fixture)
def test_oracle_decoding_has_exactly_the_true_lengths(copy_workdir):
  config = workdir_lib.load_config(copy_workdir)
  dataset = pipeline.make_dataset(seed=config.seed, **config.data)
  model = architectures.make_model(config.model, vocab_size=dataset.vocab.size)
  params = jax.tree_util.tree_map(lambda x: x[0],
                                  workdir_lib.load_params(copy_workdir, config, model)[1])
  batch = next(dataset.eval_batches(6, 64))  # beyond training: free decoding misjudges lengths
  free = evaluate.decode_and_score(model, params, batch)
  oracle = evaluate.decode_and_score(model, params, batch, oracle_length=True)
  assert not free["length_correct"].all()
  assert oracle["length_correct"].all() and not oracle["too_short"].any()
  assert not oracle["stop_error"].any()  # only content can be wrong


def test_pick_checkpoint_best_by_validation_ties_to_the_later_step():
  scores = {100: 0.5, 200: 0.9, 300: 0.9, 400: 0.7}
  assert checkpoints.pick_checkpoint(scores, "best") == (300, 300)
  assert checkpoints.pick_checkpoint(scores, "last") == (400, 300)
  with pytest.raises(ValueError, match="eval_checkpoint"):
    checkpoints.pick_checkpoint(scores, "first")


def test_overrides_change_existing_keys_only():
  import ml_collections
  config = ml_collections.ConfigDict({"model": {"position": {"name": "rope", "base": 10000.0}}})
  changed = config_args.apply_overrides(config, ["model.position.base=500.0"])
  assert changed.model.position.base == 500.0 and config.model.position.base == 10000.0
  with pytest.raises(ValueError, match="no key 'model.position.bse'"):
    config_args.apply_overrides(config, ["model.position.bse=1"])
  with pytest.raises(ValueError, match="key=value"):
    runner.EvalOptions(overrides=["model.position.base"])
  assert config_args.parse_overrides(["a=yarn", "b=4", "c=[1, 2]"]) == {"a": "yarn", "b": 4,
                                                                      "c": [1, 2]}


@pytest.mark.slow  # on a trained run (the fixture trains)
def test_random_position_eval_is_seeded_and_named(learned_workdir):
  # The learned table has 16 rows; the smoke config's randomized range is 2048, so
  # decoding at random positions is refused per length (n/a), never clamped.
  kwargs = dict(lengths=[4], num_examples=4, random_positions=True)
  records = runner.evaluate_workdir(learned_workdir, **kwargs)
  assert {r["run"] for r in records} == {"learned16@random_positions"}
  assert all(r["eval_positions"] == "random" for r in records)
  assert all(r["error"] and "max_len" in r["error"] for r in records)


@pytest.mark.parametrize("arch", ["encoder_decoder", "decoder_only"])
def test_random_position_eval_scores_the_batch_at_its_sample(arch):
  dataset, model, params = _smoke_model(arch)
  batch = next(dataset.eval_batches(8, 4))
  sampler = randomized_lib.RandomizedPositions(enabled=True, max_random_position=64)
  rand = evaluate.RandomEval(sampler, randomized_lib.eval_key(0, 1, 8))
  positions = rand.positions(model, batch, 0, 2)
  expected = sampler.sample(jax.random.fold_in(jax.random.fold_in(rand.key, 0), 2),
                            batch["inputs"], batch["targets"], joint=model.joint_positions)
  np.testing.assert_array_equal(positions[1], expected[1])  # the training sampler, per example
  scores, _ = evaluate.evaluate_batch(model, params, batch, positions=positions)
  again, _ = evaluate.evaluate_batch(model, params, batch, positions=rand.positions(model, batch,
                                                                                    0, 2))
  np.testing.assert_array_equal(scores["exact"], again["exact"])  # one sample per key
  np.testing.assert_allclose(scores["loss_sum"], again["loss_sum"], rtol=1e-6)
  plain, _ = evaluate.evaluate_batch(model, params, batch)
  assert not np.allclose(scores["loss_sum"], plain["loss_sum"])  # other positions, other loss
  assert int(np.max(positions[0])) < 64 and int(np.max(positions[1])) < 64


def test_validation_at_random_positions_averages_each_example_over_its_draws():
  _, model, params = _smoke_model("encoder_decoder")
  config = DEFAULT.get_config("smoke,scheme=t5")
  dataset = pipeline.make_dataset(seed=0, **{**config.data, "num_validation_examples": 48})
  sampler = randomized_lib.RandomizedPositions(enabled=True, max_random_position=64,
                                               eval_draws=3)
  record = evaluate.validation_record(model, params, dataset, batch_size=16, random=sampler,
                                      seed=5)
  rand = evaluate.RandomEval(sampler, randomized_lib.eval_key(0, 5, evaluate.VALIDATION_LENGTH))
  batches = list(dataset.validation_batches(16))
  weights = np.concatenate([b["weights"] for b in batches])
  exact_DxN = np.array([np.concatenate([
      evaluate.evaluate_batch(model, params, b, positions=rand.positions(model, b, i, k))[0][
          "exact"][b["weights"] > 0] for i, b in enumerate(batches)]) for k in range(3)])
  assert record["position_draws"] == 3
  assert record["num_examples"] == int(weights.sum()) == exact_DxN.shape[1]
  np.testing.assert_allclose(record["exact_match"], exact_DxN.mean(), rtol=1e-9)
  np.testing.assert_allclose(record["exact_match_draws"], exact_DxN.mean(axis=1), rtol=1e-9)
  np.testing.assert_array_equal(record["exact_counts"], exact_DxN.sum(axis=0))
  plain = evaluate.validation_record(model, params, dataset, batch_size=16)
  assert plain["position_draws"] == 1 and "exact_match_draws" not in plain
  assert plain["num_examples"] == record["num_examples"]
  assert not np.isclose(plain["loss"], record["loss"])  # 0..L-1 is another decoding


def test_eval_variants_report_into_their_own_folder():
  assert workdir_lib.eval_dir("w") == os.path.join("w", "eval")
  assert workdir_lib.eval_dir("w", "@random_positions") == os.path.join("w", "eval",
                                                                        "random_positions")
  assert workdir_lib.eval_dir("w", "@a=b c") == os.path.join("w", "eval", "a=b_c")


@pytest.mark.slow  # on a trained run (the fixture trains)
def test_each_row_is_marked_by_validation_at_its_own_positions(copy_workdir, monkeypatch):
  """A run validated at random positions (as a randomized run is) that fails at 0..L-1:
  its 0..L-1 row is unconverged by validation there, its @random_positions row converged."""
  sampler = randomized_lib.RandomizedPositions(enabled=True, max_random_position=64,
                                               eval_draws=1)
  monkeypatch.setattr(randomized_lib, "validation_sampler", lambda config: sampler)
  real = evaluate.validation_record

  def validation(model, params, dataset, *, batch_size, random=None, seed=0):
    record = real(model, params, dataset, batch_size=batch_size, random=random, seed=seed)
    return {**record, "exact_match": 1.0 if random is not None else 0.25}

  monkeypatch.setattr(evaluate, "validation_record", validation)
  plain = runner.evaluate_workdir(copy_workdir, lengths=[2], num_examples=4)
  assert all(r["valid_positions"] == r["eval_positions"] == "0..L-1" for r in plain)
  assert all(r["checkpoint_valid_positions"] == "random" for r in plain)
  assert all(r["valid_exact_match"] == 0.25 and r["checkpoint_valid_exact_match"] == 1.0
             and r["converged"] is False for r in plain)
  rand = runner.evaluate_workdir(copy_workdir, lengths=[2], num_examples=4,
                                   random_positions=True)
  assert all(r["valid_positions"] == "random" and r["valid_exact_match"] == 1.0
             and r["converged"] is True for r in rand)
  assert all(not os.path.isabs(r["workdir"]) for r in plain + rand)
