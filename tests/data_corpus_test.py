"""The byte-level corpora (data/corpus.py): byte ids, path-hash split, manifest, TFDS text."""

import numpy as np
import numpy.testing as npt
import pytest

from relpos_jax.data import corpus as corpus_lib
from relpos_jax.data import pipeline
from relpos_jax.data.vocab import NUM_SPECIAL, PAD_ID


def _fake_stdlib(root, count=200):
  """A folder shaped like a stdlib: modules, packages, and folders that must be left out."""
  for i in range(count):
    path = root / f"pkg{i % 4}" / f"mod{i}.py"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"# module {i}\nx = {i}\n" * (i % 5 + 1))
  for excluded in ("test", "tests", "site-packages", "pkg0/tests"):
    (root / excluded).mkdir(parents=True, exist_ok=True)
    (root / excluded / "excluded_mod.py").write_text("EXCLUDED = True\n")
  (root / "notes.txt").write_text("not python\n")
  (root / "_sysconfigdata__linux_x86_64-linux-gnu.py").write_text("build_time_vars = {}  # excluded\n")
  return root


def test_byte_ids_round_trip_and_vocab():
  data = bytes(range(256))
  ids = corpus_lib.encode_bytes(data)
  npt.assert_array_equal(ids, np.arange(256) + NUM_SPECIAL)
  assert corpus_lib.decode_ids(np.concatenate([[PAD_ID, corpus_lib.SEPARATOR_ID], ids])) == data
  assert corpus_lib.byte_vocab().size == NUM_SPECIAL + 256


def test_split_of_is_deterministic_and_roughly_90_5_5():
  names = [f"pkg/mod{i}.py" for i in range(4000)]
  splits = [corpus_lib.split_of(n) for n in names]
  assert splits == [corpus_lib.split_of(n) for n in names]
  counts = {s: splits.count(s) / len(names) for s in corpus_lib.SPLITS}
  assert 0.87 < counts["train"] < 0.93 and 0.03 < counts["test"] < 0.07, counts


def test_cpython_corpus_excludes_tests_and_splits_disjointly(tmp_path):
  root = _fake_stdlib(tmp_path / "lib")
  files = corpus_lib.cpython_files(root)
  rels = [rel for rel, _ in files]
  assert rels == sorted(rels) and len(rels) == 200
  assert not any("excluded" in rel or rel.endswith(".txt") for rel in rels)
  corpus = corpus_lib.cpython_corpus(str(root))
  # Every file is in exactly one split, and each split holds its files in sorted order.
  by_split = {s: [p.read_bytes() for rel, p in files if corpus_lib.split_of(rel) == s]
              for s in corpus_lib.SPLITS}
  assert sum(len(v) for v in by_split.values()) == len(files)
  for split, docs in by_split.items():
    npt.assert_array_equal(corpus.splits[split], corpus_lib.join_documents(docs))
    assert corpus.manifest["splits"][split]["documents"] == len(docs)
    assert corpus.manifest["splits"][split]["bytes"] == sum(map(len, docs))
  # Deterministic: a rebuild (cache bypassed) gives the same manifest.
  corpus_lib.cpython_corpus.cache_clear()
  assert corpus_lib.cpython_corpus(str(root)).manifest == corpus.manifest


def test_the_real_stdlib_corpus_splits_are_disjoint():
  corpus = corpus_lib.cpython_corpus()
  files = corpus_lib.cpython_files()
  splits = [corpus_lib.split_of(rel) for rel, _ in files]
  for split in corpus_lib.SPLITS:
    assert corpus.manifest["splits"][split]["documents"] == splits.count(split) > 0
    # documents + one separator each
    assert len(corpus.splits[split]) == (corpus.manifest["splits"][split]["bytes"]
                                         + corpus.manifest["splits"][split]["documents"])
  assert corpus.manifest["python_version"]


def test_manifest_mismatch_is_refused_in_one_line():
  manifest = corpus_lib.cpython_corpus().manifest
  corpus_lib.check_manifest(manifest, manifest)
  changed = {**manifest, "python_version": "2.7.18"}
  with pytest.raises(ValueError, match="differs from the one this run was trained on") as e:
    pipeline.make_dataset(task="lm:cpython", seed=0, manifest=changed)
  assert "\n" not in str(e.value) and "python_version" in str(e.value)


def _build_toy_text(data_dir):
  """A tiny TFDS text dataset with a non-default text feature and split names."""
  import tensorflow_datasets as tfds  # pylint: disable=g-import-not-at-top

  class ToyText(tfds.core.GeneratorBasedBuilder, skip_registration=True):
    VERSION = tfds.core.Version("1.0.0")
    code_path = None

    def _info(self):
      return tfds.core.DatasetInfo(builder=self, features=tfds.features.FeaturesDict(
          {"body": tfds.features.Text()}))

    def _split_generators(self, dl_manager):
      return {"train": self._generate_examples(0, 6), "dev": self._generate_examples(6, 8),
              "heldout": self._generate_examples(8, 10)}

    def _generate_examples(self, lo, hi):
      for i in range(lo, hi):
        yield i, {"body": f"document {i}: " + "é" * i + "abc" * 20}

  ToyText(data_dir=data_dir, file_format="array_record").download_and_prepare()


def test_tfds_text_source(tmp_path):
  data_dir = str(tmp_path / "tfds")
  _build_toy_text(data_dir)
  kw = dict(task="lm:tfds:toy_text", seed=0, train_length=8, eval_multiples=(1, 2),
            eval_bytes=64, tfds_data_dir=data_dir, tfds_text_key="body",
            tfds_splits=("train", "dev", "heldout"))
  ds = pipeline.make_dataset(**kw)
  test_docs = [f"document {i}: ".encode() + "é".encode() * i + b"abc" * 20 for i in (8, 9)]
  npt.assert_array_equal(ds.split("test"), corpus_lib.join_documents(test_docs))
  assert ds.manifest["splits"]["train"]["documents"] == 6
  assert ds.manifest["source"] == "lm:tfds:toy_text"
  assert ds.train_batch(0, 2)["targets"].shape == (2, 8)
  with pytest.raises(ValueError, match="no key 'text'.*tfds_text_key"):
    pipeline.make_dataset(**{**kw, "tfds_text_key": "text"})
  with pytest.raises(ValueError, match="no split 'test'"):
    pipeline.make_dataset(**{**kw, "tfds_splits": ("train", "dev", "test")})

