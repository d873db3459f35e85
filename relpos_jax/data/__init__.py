"""Data: synthetic tasks, SCAN (grammar + TFDS builder), the vocabulary, and batching.

Start at `pipeline.make_dataset`; `scan_tfds` imports tensorflow_datasets, the rest does not.
"""
