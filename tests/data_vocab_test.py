"""Tests of the word-level vocabulary."""

import json

import numpy as np
import pytest

from relpos_jax.data import vocab as vocab_lib
from relpos_jax.data.vocab import BOS_ID, EOS_ID, PAD_ID, UNK_ID, Vocab


def test_special_ids():
  assert (PAD_ID, BOS_ID, EOS_ID, UNK_ID) == (0, 1, 2, 3)
  v = Vocab(["a", "b"])
  assert v.tokens[:4] == ["<pad>", "<bos>", "<eos>", "<unk>"]
  assert v.size == len(v) == 6
  assert v.encode(["a", "b"]) == [4, 5]


def test_built_from_data_is_sorted_and_order_independent():
  a = Vocab.from_sequences([["walk", "twice"], ["I_WALK", "I_WALK"]])
  b = Vocab.from_sequences([["I_WALK"], ["twice", "walk", "walk"]])
  assert a == b
  assert a.tokens[4:] == ["I_WALK", "twice", "walk"]


def test_encode_decode_round_trip_and_unknown_tokens():
  v = Vocab(["x", "y", "z"])
  ids = v.encode(["z", "x", "q"], append_eos=True)
  assert ids == [6, 4, UNK_ID, EOS_ID]
  assert v.decode(ids) == ["z", "x", "<unk>"]


def test_decode_stops_at_eos_and_drops_pad():
  v = Vocab(["x", "y"])
  assert v.decode([4, PAD_ID, 5, EOS_ID, 4, 5]) == ["x", "y"]
  assert v.decode(np.array([[5, 5, PAD_ID, PAD_ID]], np.int32)) == ["y", "y"]
  assert v.decode([EOS_ID, 4]) == []
  assert v.decode([4, 99]) == ["x", "<unk>"]  # out of range, e.g. a padded output layer


def test_save_load(tmp_path):
  v = Vocab.from_sequences([["jump", "left"], ["I_JUMP"]])
  path = tmp_path / "vocab.json"
  v.save(path)
  assert json.loads(path.read_text())["tokens"][4:] == ["I_JUMP", "jump", "left"]
  loaded = Vocab.load(str(path))
  assert loaded == v
  assert loaded.encode(["left", "I_JUMP"]) == v.encode(["left", "I_JUMP"]) == [6, 4]


def test_load_errors(tmp_path):
  with pytest.raises(FileNotFoundError, match="no vocabulary at"):
    Vocab.load(tmp_path / "missing.json")
  bad = tmp_path / "bad.json"
  bad.write_text(json.dumps({"tokens": ["a", "b"]}))
  with pytest.raises(ValueError, match="special tokens"):
    Vocab.load(bad)


def test_constructor_errors():
  with pytest.raises(ValueError, match="reserved"):
    Vocab(["<eos>", "a"])
  with pytest.raises(ValueError, match="duplicate"):
    Vocab(["a", "a"])
  assert vocab_lib.NUM_SPECIAL == 4
