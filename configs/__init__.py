"""Experiment configs: default.py, scan_length.py and ablations/ (one file per table)."""
