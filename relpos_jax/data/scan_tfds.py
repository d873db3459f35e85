"""SCAN as a TFDS `GeneratorBasedBuilder` that builds offline, without TensorFlow.

The examples come from `scan.load_split` (the grammar), so nothing is downloaded.
`file_format="array_record"` makes TFDS write ArrayRecord files with its own
numpy example serializer, which needs no TensorFlow; they are read back with
`tfds.data_source` (random access, also TF-free). Build from the shell:

    python -m relpos_jax.data.scan_tfds --data_dir=~/tensorflow_datasets [--splits=length,simple]

then train on it with `task="tfds:relpos_scan/length"`, `tfds_data_dir=<data_dir>`.

The dataset is named `relpos_scan`, not `scan`: TFDS's own catalog has a `scan`
builder (which downloads Lake's files) and the names must not collide.
"""

from __future__ import annotations

import argparse
import os
from typing import Sequence

import tensorflow_datasets as tfds

from relpos_jax.data import scan

NAME = "relpos_scan"
INPUT_KEY, TARGET_KEY = "inputs", "targets"
FILE_FORMAT = "array_record"
# Lake & Baroni's splits ("length" first: it is the default config), and Newman et
# al. 2020's length cutoffs (the distinct action counts between 22 and 40).
CONFIG_NAMES = ("length", "simple", "addprim_jump") + tuple(
    f"length_cutoff_{c}" for c in (22, 24, 25, 26, 27, 28, 30, 32, 33, 36, 40))


class RelposScan(tfds.core.GeneratorBasedBuilder):
  """SCAN generated from its grammar: one builder config per split, features inputs/targets."""

  name = NAME
  VERSION = tfds.core.Version("1.0.0")
  RELEASE_NOTES = {"1.0.0": "Generated from the grammar of Lake & Baroni (2018)."}
  # No code directory: there are no checksums or metadata files to look up, as
  # nothing is downloaded. (Also sidesteps tfds 4.9's lookup of a package's code
  # path, which imports the `importlib_resources` backport it does not install.)
  code_path = None
  BUILDER_CONFIGS = [
      tfds.core.BuilderConfig(name=n, description=f"SCAN split {n!r}, see scan.load_split.")
      for n in CONFIG_NAMES]

  def _info(self) -> tfds.core.DatasetInfo:
    """Two text features: the command and its actions, space-separated."""
    # DatasetInfo directly: `dataset_info_from_configs` reads metadata files
    # that only builders in their own package directory have.
    return tfds.core.DatasetInfo(
        builder=self,
        description="SCAN (Lake & Baroni 2018), generated from its grammar.",
        features=tfds.features.FeaturesDict(
            {INPUT_KEY: tfds.features.Text(), TARGET_KEY: tfds.features.Text()}),
        supervised_keys=(INPUT_KEY, TARGET_KEY),
        homepage="https://github.com/brendenlake/SCAN",
        citation="Lake, B. M. and Baroni, M. Generalization without systematicity. ICML 2018.")

  def _split_generators(self, dl_manager):
    """The train and test halves of this config's split; nothing is downloaded."""
    del dl_manager
    pairs = scan.load_split(self.builder_config.name)
    return {split: self._generate_examples(pairs[split]) for split in ("train", "test")}

  def _generate_examples(self, pairs):
    """(key, example) with the pair's index in the split as key."""
    for i, (command, actions) in enumerate(pairs):
      yield i, {INPUT_KEY: command, TARGET_KEY: actions}


def build(split: str, data_dir: str) -> str:
  """Builds one SCAN split as ArrayRecord files (idempotent: an existing build is reused).

  Args:
    split: a config name in CONFIG_NAMES.
    data_dir: the TFDS data directory to write into.

  Returns:
    The TFDS name to read it with, e.g. "relpos_scan/length" for
    `tfds.data_source(name, data_dir=data_dir)` or `task="tfds:" + name`.
  """
  if split not in CONFIG_NAMES:
    raise ValueError(f"no SCAN builder config {split!r}; choose one of: {', '.join(CONFIG_NAMES)}")
  builder = RelposScan(config=split, data_dir=os.path.expanduser(data_dir),
                       file_format=FILE_FORMAT)
  builder.download_and_prepare()
  return f"{NAME}/{split}"


def main(argv: Sequence[str] | None = None) -> None:
  """Command line: builds the requested splits into --data_dir."""
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--data_dir", required=True, help="TFDS data directory to build into")
  parser.add_argument("--splits", default=",".join(CONFIG_NAMES),
                      help=f"comma-separated configs (default: all): {', '.join(CONFIG_NAMES)}")
  args = parser.parse_args(argv)
  for split in args.splits.split(","):
    print(f"built {build(split.strip(), args.data_dir)} in {args.data_dir}")


if __name__ == "__main__":
  main()
