"""Passkey retrieval data (data/passkey.py): the key at the asked depth, seeded batches."""

import numpy as np
import numpy.testing as npt
import pytest

from relpos_jax.data import corpus as corpus_lib
from relpos_jax.data import passkey
from relpos_jax.data import pipeline


@pytest.mark.parametrize("depth", [0.0, 0.25, 0.5, 0.75, 1.0])
def test_passkey_puts_the_key_at_the_asked_depth(depth):
  filler = corpus_lib.encode_bytes(bytes(range(32, 127)) * 20)
  context = 300
  prompt, answer, at = passkey.make_example(filler, np.random.default_rng(1), context, depth)
  assert len(prompt) + len(answer) == context
  text = corpus_lib.decode_ids(prompt)
  key = corpus_lib.decode_ids(answer)
  assert len(key) == 5 and key.isdigit()
  sentence = passkey.KEY_SENTENCE % key
  num_filler = context - passkey.overhead()
  assert text.index(sentence) == at == round(depth * num_filler)
  assert text.endswith(passkey.QUESTION) and text.count(key) == 1
  # The filler around the sentence is one contiguous window of the filler text.
  rest = text[:at] + text[at + len(sentence):-len(passkey.QUESTION)]
  assert len(rest) == num_filler and rest in corpus_lib.decode_ids(filler)


def test_passkey_batches_are_seeded():
  ds = pipeline.make_dataset(task="lm:cpython", seed=0, objective="passkey", train_length=128,
                             eval_multiples=(1, 2), passkey_examples=3)
  batch = ds.train_batch(5, 4)
  assert batch["inputs"].shape == (4, 123) and batch["targets"].shape == (4, 6)
  npt.assert_array_equal(batch["inputs"], ds.train_batch(5, 4)["inputs"])
  assert not np.array_equal(batch["inputs"], ds.train_batch(6, 4)["inputs"])
  ev = ds.eval_batch(256, 0.5)
  assert ev["inputs"].shape == (3, 251)
  other = pipeline.make_dataset(task="lm:cpython", seed=9, objective="passkey",
                                train_length=128, eval_multiples=(1, 2), passkey_examples=3)
  npt.assert_array_equal(ev["inputs"], other.eval_batch(256, 0.5)["inputs"])  # not seed-bound
  with pytest.raises(ValueError, match="objective"):
    pipeline.make_dataset(task="lm:cpython", seed=0, objective="qa")
