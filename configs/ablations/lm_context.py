"""Language-model extrapolation on real text: bits per byte as the eval context grows past L.

Every registered positional scheme (relpos_jax/positions: none, sinusoidal, learned,
shaw, t5, rope, alibi, xl, kerple, fire), each a byte-level decoder-only LM on
`lm:cpython` (the Python standard library of the running interpreter; see
relpos_jax/data/lm.py), trained on random windows of L = 128 bytes, then scored on
the same first 65,536 bytes of the test split at eval contexts C = L, 2L, 4L, 8L
and 16L (non-overlapping windows; relpos_jax/lm_eval.py), with the loss at each
position of a 16L window. Learned absolute positions have a table of exactly L + 1
rows, so their cells beyond L read n/a.

Eval-time rows (no training; from the trained runs' checkpoints, whose parameters
they leave unchanged; `get_eval_variants`):
- RoPE: position interpolation (`@pi`, Chen et al. 2023), dynamic NTK (`@dynamic_ntk`)
  and YaRN (`@yarn`, Peng et al. 2023), scaled from L to the longest context 16L
  (factor 16 at every C: a static scaling, as extrapolation_methods.py uses; it
  also compresses the positions at C < 16L);
- every scheme: length-scaled attention (`@length_scaled`, logits x log n / log L;
  Chiang & Cholak 2022).

Size (configs/lm.py): 4 layers, d_model 128, 4 heads x 32, d_ff 512, 1,500 steps of
32 windows of 128 bytes, AdamW lr 1e-3 (150 warmup steps, cosine), 3 seeds trained
together, every 500 steps a checkpoint scored on 16,384 validation bytes at L (eval
takes each seed's lowest validation loss).

  python train.py --config configs/ablations/lm_context.py --workdir runs/lm_context
  python eval.py --sweep_dir runs/lm_context --results_dir results/lm_context
  python train.py --config configs/ablations/lm_context.py:smoke --workdir /tmp/lmc \
      --runs alibi                                             # seconds

The first command trains the 10 runs and writes their comparison to
runs/lm_context/eval/ (each run's own report to runs/lm_context/<run>/eval/); the
second evaluates every run and every eval-time variant (`get_eval_variants`) and
stores them in results/lm_context/ (records/<run>.jsonl, runs/<run>.json, and the
table's lm_context.{jsonl,md,csv}, bpb_vs_context.png, loss_vs_position.png).
`train.py --results_dir` is not wired for language-model records yet (after each
run the sweep renders the seq2seq tables of results.py / tables.py): use the two
steps above. An eval variant by hand, e.g. YaRN on the RoPE run, or sliding windows:

  python eval.py --workdir runs/lm_context/rope \
      --override model.position.scaling.type=yarn \
      --override model.position.scaling.factor=16.0 \
      --override model.position.scaling.original_max_position=128
  python eval.py --workdir runs/lm_context/alibi --override data.sliding_stride=64

10 runs. Expected runtime on 2 CPU cores: the issue's trial of this size took about
7 minutes of training per scheme for one seed, so ~20 min per 3-seed run and ~3.5 h
of training for the 10 (not measured here at full size). Eval of one run or variant:
4 checkpoints x 3 seeds x 16 KB of validation at L, then 3 seeds x 64 KB at each of the
5 contexts; benchmarks/records/lm_eval_memory.md measured 75-200 µs per byte (C = 128
to 2048, a loaded VM), i.e. about 2-4 min per row; 23 rows (10 runs, 10 length-scaled
variants and 3 RoPE scalings), ~1-1.5 h.
`--sweep_shard i/n` splits the training over n processes.
Arguments: those of configs/lm.py (`num_seeds`, `steps`, `smoke`, ...); the scheme is
set per run.
"""

from typing import Any

import ml_collections

from configs import lm as _LM

from relpos_jax import config_args
from relpos_jax import positions

ROPE_SCALINGS = ("pi", "dynamic_ntk", "yarn")
LONGEST_MULTIPLE = 16


def get_config(arg=None) -> ml_collections.ConfigDict:
  """configs/lm.py's size with 3 seeds (smoke: its smoke size)."""
  args = config_args.parse(arg, _LM.ARGS)
  if args["num_seeds"] == _LM.ARGS["num_seeds"]:
    arg = f"num_seeds=3,{arg or ''}"
  return _LM.get_config(arg)


def rope_eval_overrides(train_length: int, longest: int) -> dict[str, dict[str, Any]]:
  """The eval-time RoPE rows: label -> `model.position.scaling.*` overrides.

  A window of C bytes spans positions 0..C-1, so training reaches L positions.
  """
  key = "model.position.scaling."
  factor = float(longest / train_length)
  return {
      "pi": {key + "type": "linear", key + "factor": factor},
      "dynamic_ntk": {key + "type": "dynamic_ntk", key + "factor": factor,
                      key + "original_max_position": train_length, key + "eval_length": longest},
      "yarn": {key + "type": "yarn", key + "factor": factor,
               key + "original_max_position": train_length},
  }


def get_eval_variants(config: ml_collections.ConfigDict) -> dict[str, dict[str, Any]]:
  """RoPE scalings for RoPE runs (the scheme's config has `scaling`); length-scaled attention for all."""
  L = int(config.data.train_length)
  longest = L * max(config.data.eval_multiples)
  variants = {"length_scaled": {"model.length_scaled_attention": True,
                                "model.length_scale_train_keys": L}}
  if "scaling" in config.model.position:
    variants.update(rope_eval_overrides(L, longest))
  return variants


def get_sweep() -> list[dict]:
  """Every registered scheme, in registry order (a learned table of L + 1 rows)."""
  L = get_config().data.train_length
  return [{"model.position": _LM.position_config(name, L)} for name in positions.SCHEMES]
