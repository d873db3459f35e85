"""Data: synthetic tasks, SCAN (grammar + TFDS builder), byte-level text for language models
(`corpus`, then `lm` and `passkey` over it), the vocabulary, and batching.

Start at `pipeline.make_dataset`; `scan_tfds` imports tensorflow_datasets, the rest does not.
"""
