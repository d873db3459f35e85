"""Tests of SCAN: the grammar's 20,910 commands, their meanings, the splits, the TFDS builder."""

import collections
import importlib.util
import pathlib
import sys

import numpy as np
import pytest

from relpos_jax.data import scan

L, R = "I_TURN_LEFT", "I_TURN_RIGHT"

# Hand-written from the semantics in Lake & Baroni (2018), not from the generator.
HAND_WRITTEN = {
    "walk": "I_WALK",
    "turn left": L,
    "turn right": R,
    "walk left": f"{L} I_WALK",
    "run right": f"{R} I_RUN",
    "look opposite left": f"{L} {L} I_LOOK",
    "turn opposite left": f"{L} {L}",
    "turn opposite right": f"{R} {R}",
    "turn around left": f"{L} {L} {L} {L}",
    "turn around right twice": " ".join([R] * 8),
    "jump around left": " ".join([L, "I_JUMP"] * 4),
    "jump around left twice": " ".join([L, "I_JUMP"] * 8),
    "run thrice": "I_RUN I_RUN I_RUN",
    "walk and look": "I_WALK I_LOOK",
    "walk after look": "I_LOOK I_WALK",
    "walk opposite right after look thrice": f"I_LOOK I_LOOK I_LOOK {R} {R} I_WALK",
    "jump twice and turn left": f"I_JUMP I_JUMP {L}",
    "turn left after jump opposite right twice": f"{R} {R} I_JUMP {R} {R} I_JUMP {L}",
    "look right thrice after walk around left": " ".join(
        [L, "I_WALK"] * 4 + [R, "I_LOOK"] * 3),
    "jump around left thrice and walk around right thrice": " ".join(
        [L, "I_JUMP"] * 12 + [R, "I_WALK"] * 12),
}


def _length(actions):
  return len(actions.split())


def test_grammar_yields_20910_unique_commands():
  pairs = scan.all_pairs()
  assert len(pairs) == scan.NUM_COMMANDS == 20_910
  assert len({c for c, _ in pairs}) == 20_910


def test_vocabularies():
  pairs = scan.all_pairs()
  words = {w for c, _ in pairs for w in c.split()}
  actions = {a for _, acts in pairs for a in acts.split()}
  assert words == {"walk", "look", "run", "jump", "turn", "left", "right", "opposite", "around",
                   "twice", "thrice", "and", "after"}
  assert actions == {"I_WALK", "I_LOOK", "I_RUN", "I_JUMP", L, R}


@pytest.mark.parametrize("command", sorted(HAND_WRITTEN))
def test_hand_written_examples(command):
  assert scan.interpret(command) == HAND_WRITTEN[command]


def test_after_runs_the_second_clause_first_and_and_the_first():
  for c1, c2 in [("walk", "jump twice"), ("look around right", "turn left thrice")]:
    a1, a2 = scan.interpret(c1), scan.interpret(c2)
    assert scan.interpret(f"{c1} after {c2}") == f"{a2} {a1}"
    assert scan.interpret(f"{c1} and {c2}") == f"{a1} {a2}"


def test_every_command_obeys_the_compositional_rules():
  table = dict(scan.all_pairs())
  for command, actions in table.items():
    if " and " in command:
      left, right = command.split(" and ")
      assert actions == f"{table[left]} {table[right]}"
    elif " after " in command:
      left, right = command.split(" after ")
      assert actions == f"{table[right]} {table[left]}"
    elif command.endswith(" twice"):
      assert actions == " ".join([table[command.removesuffix(" twice")]] * 2)
    elif command.endswith(" thrice"):
      assert actions == " ".join([table[command.removesuffix(" thrice")]] * 3)


def test_not_a_command():
  with pytest.raises(ValueError, match="not a SCAN command"):
    scan.interpret("walk around")


def test_no_command_has_23_actions_and_lengths_range_1_to_48():
  counts = collections.Counter(_length(a) for _, a in scan.all_pairs())
  assert counts[23] == 0
  assert min(counts) == 1 and max(counts) == 48
  assert counts[48] == 128  # "<u> around <d> thrice and/after <u> around <d> thrice"


def test_length_split():
  split = scan.load_split("length")
  assert len(split["train"]) == 16_990 and len(split["test"]) == 3_920
  assert max(_length(a) for _, a in split["train"]) == 22
  assert min(_length(a) for _, a in split["test"]) == 24


def test_simple_split_is_a_fixed_80_20_partition():
  split = scan.load_split("simple")
  assert len(split["train"]) == 16_728 and len(split["test"]) == 4_182
  assert set(split["train"]) | set(split["test"]) == set(scan.all_pairs())
  assert not set(split["train"]) & set(split["test"])
  assert split == scan.load_split("simple")
  test_lengths = {_length(a) for _, a in split["test"]}
  assert min(test_lengths) <= 5 and max(test_lengths) >= 30  # random, not by length


@pytest.mark.parametrize("cutoff", [22, 26, 40])
def test_length_cutoff_split(cutoff):
  split = scan.load_split(f"length_cutoff_{cutoff}")
  assert all(_length(a) <= cutoff for _, a in split["train"])
  assert all(_length(a) > cutoff for _, a in split["test"])
  assert len(split["train"]) + len(split["test"]) == 20_910
  if cutoff == 22:
    assert split == scan.load_split("length")


def test_addprim_jump_split():
  split = scan.load_split("addprim_jump")
  train_commands = [c for c, _ in split["train"]]
  assert "jump" in train_commands
  assert [c for c in train_commands if "jump" in c.split()] == ["jump"]
  assert all("jump" in c.split() for c, _ in split["test"])
  assert "jump" not in [c for c, _ in split["test"]]
  assert len(split["train"]) == 13_204 and len(split["test"]) == 7_706


@pytest.mark.parametrize("name, match", [
    ("lenght", "unknown SCAN split 'lenght'; choose one of: simple, length"),
    ("length_cutoff_48", r"cutoff must be in \[1, 47\]"),
    ("length_cutoff_x", "unknown SCAN split"),
])
def test_split_errors(name, match):
  with pytest.raises(ValueError, match=match):
    scan.load_split(name)


def test_generation_is_cached_and_returns_fresh_lists():
  a = scan.load_split("length")
  a["train"].clear()
  assert len(scan.load_split("length")["train"]) == 16_990


@pytest.fixture(scope="module")
def built_length_split(tmp_path_factory):
  from relpos_jax.data import scan_tfds  # pylint: disable=g-import-not-at-top
  data_dir = str(tmp_path_factory.mktemp("tfds"))
  scan_tfds.main(["--data_dir", data_dir, "--splits", "length"])  # the command line
  return data_dir


def test_tfds_builder_reads_back_without_tensorflow(built_length_split):
  import tensorflow_datasets as tfds  # pylint: disable=g-import-not-at-top
  sources = tfds.data_source("relpos_scan/length", data_dir=built_length_split, download=False)
  assert (len(sources["train"]), len(sources["test"])) == (16_990, 3_920)
  for split, allowed in (("train", range(1, 23)), ("test", range(24, 49))):
    for ex in sources[split].__getitems__(list(range(0, len(sources[split]), 97))):
      command, actions = ex["inputs"].decode(), ex["targets"].decode()
      assert scan.interpret(command) == actions
      assert _length(actions) in allowed
  if importlib.util.find_spec("tensorflow") is None:
    assert "tensorflow" not in sys.modules


def test_tfds_builder_writes_array_record_and_default_config_is_length(built_length_split):
  import tensorflow_datasets as tfds  # pylint: disable=g-import-not-at-top
  from relpos_jax.data import scan_tfds  # pylint: disable=g-import-not-at-top
  version_dir = pathlib.Path(built_length_split) / "relpos_scan" / "length" / "1.0.0"
  files = {p.name for p in version_dir.iterdir()}
  assert {"relpos_scan-train.array_record-00000-of-00001",
          "relpos_scan-test.array_record-00000-of-00001", "dataset_info.json"} <= files
  assert len(tfds.data_source("relpos_scan", split="test", data_dir=built_length_split)) == 3_920
  assert scan_tfds.build("length", built_length_split) == "relpos_scan/length"  # reuses the build
  with pytest.raises(ValueError, match="no SCAN builder config 'lenght'"):
    scan_tfds.build("lenght", built_length_split)


def _sorted_rows(batch):
  """The batch's real (inputs, targets) rows as bytes, sorted: a multiset of examples."""
  rows = np.concatenate([batch["inputs"], batch["targets"]], axis=1)
  weights = batch.get("weights", np.ones(len(rows)))
  return sorted(r.tobytes() for r, w in zip(rows, weights) if w)


def test_built_split_round_trips_every_pair(built_length_split):
  """Read back through the `tfds:` source: the same vocabulary and the very same pairs."""
  from relpos_jax.data import pipeline  # pylint: disable=g-import-not-at-top
  kw = dict(seed=0, length_buckets=(16, 64))
  from_tfds = pipeline.make_dataset(task="tfds:relpos_scan/length",
                                    tfds_data_dir=built_length_split, **kw)
  from_grammar = pipeline.make_dataset(task="scan", scan_split="length", **kw)
  assert from_tfds.vocab == from_grammar.vocab
  # 10% of the training commands are held out for validation, the same ones from both.
  assert from_tfds.num_train_examples == from_grammar.num_train_examples == 16_990 - 1_699
  # One batch of a whole epoch is a permutation of the training set.
  assert (_sorted_rows(from_tfds.train_batch(0, 15_291))
          == _sorted_rows(from_grammar.train_batch(0, 15_291)))
  assert (_sorted_rows(next(from_tfds.validation_batches(1_699)))
          == _sorted_rows(next(from_grammar.validation_batches(1_699))))
  assert from_tfds.validation_info() == from_grammar.validation_info()
  assert from_tfds.eval_lengths == from_grammar.eval_lengths
  for n in from_grammar.eval_lengths:
    assert (_sorted_rows(next(from_tfds.eval_batches(n, 1_000)))
            == _sorted_rows(next(from_grammar.eval_batches(n, 1_000))))
