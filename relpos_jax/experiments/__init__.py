"""The experiment layer: sweeps, the runner, records, statistics, results storage, tables, plots.

It imports the library (`relpos_jax.*` outside this package); the library never
imports it (tests/imports_test.py). See docs/design.md.
"""
