"""Language-model extrapolation on real text: bits per byte as the eval context grows past L,
and passkey retrieval at the same contexts.

Every registered positional scheme (relpos_jax/positions: none, sinusoidal, learned,
shaw, t5, rope, alibi, xl, kerple, fire), each a byte-level decoder-only LM on
`lm:cpython` (the Python standard library of the running interpreter; see
relpos_jax/data/lm.py), trained on random windows of L = 128 bytes, then scored on
the same first 65,536 bytes of the test split at eval contexts C = L, 2L, 4L, 8L
and 16L (non-overlapping windows; relpos_jax/lm_eval.py), with the loss at each
position of a 16L window. Learned absolute positions have a table of exactly L + 1
rows, so their cells beyond L read n/a.

The passkey table: every scheme again, the same model and budget trained on
passkey retrieval (`<scheme>+passkey`, `data.objective=passkey`,
relpos_jax/data/passkey.py: a 5-digit key hidden at a random depth of L bytes of
training-split filler), then scored at C = L..16L x key depths 0, .25, .5, .75, 1
(32 examples per cell). They are runs of this sweep, not a table of their own, so
one command completes the issue's table (bits per byte and passkey) into one folder,
and every passkey row sits beside the LM row of its scheme with the same variants.
This budget learns retrieval at L for ALiBi (alibi+passkey: validation accuracy 1.000
at L on each seed; results/lm_context/notes.md); each passkey record carries its
seed's `valid_passkey_accuracy` at L, and a row near 0 there did not learn the task:
its longer contexts are not read as extrapolation.

Eval-time rows (no training; from the trained runs' checkpoints, whose parameters
they leave unchanged; `get_eval_variants`), for both objectives:
- RoPE: position interpolation (`@pi`, Chen et al. 2023), dynamic NTK (`@dynamic_ntk`)
  and YaRN (`@yarn`, Peng et al. 2023), scaled from L to the longest context 16L
  (factor 16 at every C: a static scaling, as extrapolation_methods.py uses; it
  also compresses the positions at C < 16L);
- every scheme: length-scaled attention (`@length_scaled`, logits x log n / log L;
  Chiang & Cholak 2022).

Precision: bfloat16 matmul operands (float32 parameters, softmax, norms and losses),
named rather than `auto` so that every run of the table is bf16 on every machine; the
bf16 calibration (results/precision, 2026-12-06) put every bf16 value inside its float32
interval. A bf16 step took about 0.70x the float32 one at this size on the Intel machine
with AMX (benchmarks/RESULTS.md), and the stored NoPE run trained its 3 seeds in 21 min
there; the other run times below were estimated in float32. On a CPU without AMX
XLA:CPU has no native bf16 dots, so a run is slower than float32 would be there: on 2
AMD EPYC (Zen 3) cores this size's 3-seed bf16 step took 1.19x the float32 one (1.47 s
against 1.23 s; benchmarks/records/zen_bf16), about 37 min of training per 3-seed LM
run; train.py warns (relpos_jax/precision.py), and the run is right, only slower.

Size (configs/lm.py): 4 layers, d_model 128, 4 heads x 32, d_ff 512, 1,500 steps of
32 windows (passkey: examples) of 128 bytes, AdamW lr 1e-3 (150 warmup steps,
cosine), 3 seeds trained together, every 500 steps a checkpoint scored on 16,384
validation bytes at L (passkey: 160 validation examples at L; eval takes each seed's
best checkpoint by that score).

  python train.py --config configs/ablations/lm_context.py --workdir runs/lm_context \
      --results_dir results/lm_context
  python train.py --config configs/ablations/lm_context.py --workdir runs/lm_context \
      --results_dir results/lm_context \
      --runs none,sinusoidal,learned,shaw,t5,rope,alibi,xl,kerple,fire
  python train.py --config configs/ablations/lm_context.py:smoke --workdir /tmp/lmc \
      --results_dir /tmp/results/lm_context --runs alibi,alibi+passkey --allow_dirty  # ~1 min

Each run is trained, then evaluated (with every one of its eval-time variants) and
stored in results/lm_context/ as soon as it finishes: records/<run>.jsonl (one record
per seed x context; passkey: per seed x context x depth), runs/<run>.json, and the
table's report over every run stored so far, re-rendered after each run: lm_context.
{jsonl,md,csv}, bpb_vs_context.png and loss_vs_position.png (bits per byte), and
passkey.{jsonl,md,csv}, passkey_heatmap.png (accuracy by context x depth); `python
-m relpos_jax.results` renders the table into RESULTS.md. A run whose records are
stored is skipped (neither trained nor evaluated), so the table can be finished
over several sessions (runs/ is not kept; commit results/lm_context/ as runs
finish); `--split_seeds` trains and stores one seed at a time, for sessions shorter
than a run; the second command above does the bits-per-byte runs first. Records
are refused from a tree with uncommitted changes (`--allow_dirty` to override).
Without --results_dir the sweep writes only runs/lm_context/eval/ (and each run's
report to runs/lm_context/<run>/eval/), and `python eval.py --sweep_dir
runs/lm_context --results_dir results/lm_context` stores finished runs afterwards.
An eval variant by hand, e.g. YaRN on the RoPE run, or sliding windows:

  python eval.py --workdir runs/lm_context/rope \
      --override model.position.scaling.type=yarn \
      --override model.position.scaling.factor=16.0 \
      --override model.position.scaling.original_max_position=128
  python eval.py --workdir runs/lm_context/alibi --override data.sliding_stride=64

20 runs (10 schemes x 2 objectives), 46 stored rows (each run, its length-scaled
variant, and the 3 RoPE scalings of both RoPE runs). Expected runtime on 2 CPU
cores (the full table not run here): the issue's trial of this size took about
7 minutes of training per scheme for one seed, so ~20 min per 3-seed LM run; a
passkey training step took 1.2-1.4x an LM step (measured here, 40 steps of one seed
each, alibi, on a loaded VM: 1.0 against 1.2-1.4 steps/s), so ~25-30 min per
passkey run: ~8 h of training for the 20. Measured since: alibi+passkey trained one
seed at a time in 12 min per seed on AMD EPYC Zen 3 in bf16 (about 36 min for 3),
and its eval (the run and its length-scaled variant) took about 3 min per seed.
Eval of one LM row: 4 checkpoints x 3 seeds x 16 KB of validation at L, then 3 seeds
x 64 KB at each of the 5 contexts; benchmarks/records/lm_eval_memory.md measured
75-200 µs per byte (C = 128 to 2048, a loaded VM), i.e. about 2-4 min per row. A
passkey row decodes 3 seeds x 5 contexts x 5 depths x 32 examples (one seed's took
86 s here), plus 160 validation examples per checkpoint and seed: about 5 min. 46
rows, ~3-3.5 h of eval.
`--sweep_shard i/n` splits the training over n processes.
Arguments: those of configs/lm.py (`num_seeds`, `steps`, `smoke`, ...) but `objective`
(the sweep sets it per run); the scheme is set per run. `smoke` is configs/lm.py's
smoke size at L = 96 for both objectives (a passkey example needs more than 85 bytes).
"""

from typing import Any

import ml_collections

from configs import lm as _LM

from relpos_jax import config_args
from relpos_jax import positions

ROPE_SCALINGS = ("pi", "dynamic_ntk", "yarn")
DTYPE = "bfloat16"  # calibrated: results/precision (bf16 in every f32 interval)
LONGEST_MULTIPLE = 16


def get_config(arg=None) -> ml_collections.ConfigDict:
  """configs/lm.py's size with 3 seeds unless `num_seeds` is given (smoke: its smoke size at
  the passkey's smoke L, so both objectives' runs share one base and differ by name only in
  scheme and objective)."""
  args = config_args.parse(arg, _LM.ARGS)
  if args["objective"] != "lm":
    raise ValueError(f"objective={args['objective']}: lm_context trains both objectives "
                     "(`<scheme>` and `<scheme>+passkey` runs); drop the argument")
  given = {item.partition("=")[0].strip() for item in (arg or "").split(",")}
  if "num_seeds" not in given:
    arg = f"num_seeds=3,{arg or ''}"
  config = _LM.get_config(arg)
  # Named, not "auto" (which resolves per machine): the table must not mix precisions.
  config.model.dtype = DTYPE
  if args["smoke"]:
    L = _LM.PASSKEY_SMOKE_LENGTH
    config.data.train_length = L
    config.model.position = _LM.position_config(args["scheme"], L)
    config.data.eval_bytes = L * max(config.data.eval_multiples)  # one window at 4L
  return config


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


def get_sweep(arg=None) -> list[dict]:
  """Every registered scheme as a byte LM (`<scheme>`), then as a passkey model
  (`<scheme>+passkey`), in registry order (a learned table of L + 1 rows)."""
  L = get_config(arg).data.train_length
  schemes = [_LM.position_config(name, L) for name in positions.SCHEMES]
  return ([{"model.position": position} for position in schemes]
          + [{"model.position": position, "data.objective": "passkey"} for position in schemes])
