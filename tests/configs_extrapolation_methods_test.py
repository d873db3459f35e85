"""configs/ablations/extrapolation_methods.py: its runs and its eval-time RoPE rows."""

import pathlib

import jax
import jax.numpy as jnp

from relpos_jax import architectures
from relpos_jax import config_args
from relpos_jax.data import pipeline
from relpos_jax.experiments import sweep
from relpos_jax.experiments import sweep_spec

PATH = pathlib.Path(__file__).resolve().parents[1] / "configs/ablations/extrapolation_methods.py"
MODULE = sweep_spec.load_module(str(PATH))


def test_runs_are_six_schemes_on_three_tasks_plus_two_randomized():
  runs = dict(sweep_spec.expand(MODULE.get_config(), MODULE.get_sweep()))
  schemes = ("none", "rope", "alibi", "kerple", "fire", "t5")
  tasks = ("copy", "reverse", "add_index_hints")
  assert list(runs) == [f"{s}+{t}" for t in tasks for s in schemes] + [
      "fire+add_index_hints+randomized", "rope+add_index_hints+randomized"]
  for name, config in runs.items():
    assert config.model.arch == "decoder_only" and config.num_seeds == 3
    assert config.randomized.enabled == name.endswith("+randomized")
    assert config.data.task == name.split("+")[1]


def test_rope_eval_rows_load_the_rope_checkpoint_unchanged():
  runs = dict(sweep_spec.expand(MODULE.get_config("smoke"), MODULE.get_sweep()))
  for task in ("copy", "add_index_hints"):
    config = runs[f"rope+{task}"]
    vocab_size = pipeline.make_dataset(seed=0, **config.data).vocab.size
    tokens = jnp.full((1, 6), 5, jnp.int32)
    init = lambda c: jax.eval_shape(architectures.make_model(c.model, vocab_size=vocab_size).init,
                                    jax.random.PRNGKey(0), tokens, tokens)
    rows = MODULE.rope_eval_overrides(task)
    assert set(rows) == {"pi", "dynamic_ntk", "yarn"}
    for overrides in rows.values():
      scaled = config_args.apply_overrides(config, overrides)
      assert scaled.model.position.scaling.factor == 2.0
      assert init(scaled) == init(config)
  add_rows = MODULE.rope_eval_overrides("add_index_hints")
  assert add_rows["dynamic_ntk"]["model.position.scaling.eval_length"] == 162
  assert add_rows["yarn"]["model.position.scaling.original_max_position"] == 82


def test_the_sweep_declares_the_rope_rows_as_eval_variants_of_the_plain_rope_runs():
  runs = sweep_spec.expand(MODULE.get_config(), MODULE.get_sweep())
  variants = sweep.eval_variants(MODULE, runs)
  assert sorted(variants) == ["rope+add_index_hints", "rope+copy", "rope+reverse"]
  for name, rows in variants.items():
    expected = MODULE.rope_eval_overrides(name.split("+")[1])
    assert {label: config_args.parse_overrides(o) for label, o in rows.items()} == expected
