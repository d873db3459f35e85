"""`python -m relpos_jax.compare`: the command's documented name; the program is `relpos_jax.experiments.compare`.

A name only, no logic: RESULTS.md, the committed notes and docs name this command.
Nothing imports this module (tests/imports_test.py), so the library stays free of
the experiment layer; `python -m relpos_jax.experiments.compare` is the same command.
"""

import runpy

if __name__ == "__main__":
  runpy.run_module("relpos_jax.experiments.compare", run_name="__main__", alter_sys=True)
