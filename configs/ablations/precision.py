"""bfloat16 against float32: does bf16 training give the same table? (issue #52, item 3)

The calibration that decides whether a new table may train in bfloat16
(DESIGN.md, "Precision"): the Kazemnejad recipe (kazemnejad.py: decoder-only, 4
layers, d_model 128, 6,000 steps of batch 64, 3 seeds) on copy, for NoPE, T5 and
ALiBi (scheme configs as kazemnejad.py sets them), each trained twice with configs
identical but `model.dtype`: `float32` and `bfloat16`. The dtypes are named, never
`auto`: on a CPU without AMX (some of this project's 2-core machines are AMD EPYCs)
`auto` resolves to float32, and the bf16 arm must be bf16 on every machine (bf16
matmul operands, float32 activations: relpos_jax/model.py). bf16 passes when every pooled
exact match of a bf16 run, (L, 2L] = lengths 21-40, lies inside its f32 run's 95%
interval; `python -m relpos_jax.results` renders that table (per scheme: both
values with their intervals, in or out, the paired bf16 − f32 difference with its
interval and p) and `results/precision/training_curves.png` (training loss, token
accuracy and validation exact match by step, the two dtypes overlaid, a line per
seed) from the curves stored in each run's `runs/<run>.json`
(relpos_jax/experiments/precision_calibration.py). Only after it passes may new
tables train in bf16; stored tables stay float32, and no table mixes precisions.

  python train.py --config configs/ablations/precision.py --workdir runs/precision \
      --results_dir results/precision
  python train.py --config configs/ablations/precision.py:smoke --workdir /tmp/precision \
      --runs none+copy+dtype=bfloat16                # seconds

6 runs, scheme by scheme (f32 then bf16), so each finished pair is comparable. The f32
arm re-runs results/kazemnejad's NoPE, T5 and ALiBi copy runs rather than copying them:
their stored run infos hold no training curves. One key differs from kazemnejad.py:
`eval_every` = `checkpoint_every` (1,000, not 6,000), for a validation curve at every
checkpoint. The periodic eval changes no training step (data is a function of seed and
step, dropout is off), so the f32 arm is kazemnejad's runs trained again (its records
differ from the stored ones by what the code changed since and by the machine: on another
CPU XLA's float32 reductions differ, so a re-run is equal within its intervals, not bit
for bit; results/precision/notes.md); and since a sweep
copies only runs whose configs are identical, the sweep's reuse does not copy
kazemnejad's records into this table (copies would lack the curves).

Expected runtime on 2 CPU cores: kazemnejad's f32 copy runs took 2,600-3,450 s of
training steps each (NoPE 3,447, T5 3,154, ALiBi 2,642 s; results/kazemnejad/runs/), so
about 2.6 h for the f32 arm; on the Intel machine with AMX a bf16 train step at this
size took 0.75x the f32 one (`make bench`, 2026-12-06 03:26; 0.70x since 05:44; on a
CPU without AMX it was not measured at this size), so about 2 h for the bf16 arm there;
about 4.5-5 h in all (the stored runs: 4.7 h of training steps, 2026-12-06), plus evaluation
(kazemnejad's took 42-57 s per run; the periodic eval here adds six validations of 512
examples and six evaluations at length 40 per seed, not timed). `--sweep_shard i/n` and
`--split_seeds` split it as for any table. Arguments: those of configs/default.py
(`steps`, `smoke`, ...); scheme and dtype are set per run.
"""

import ml_collections

from configs.ablations import kazemnejad as _KAZEMNEJAD

SCHEMES = ("none", "t5", "alibi")
TASK = "copy"
REFERENCE_DTYPE, CANDIDATE_DTYPE = "float32", "bfloat16"  # the f32 arm is the reference


def get_config(arg=None) -> ml_collections.ConfigDict:
  """kazemnejad.py's recipe, validated at every checkpoint (module doc); dtype set per run."""
  config = _KAZEMNEJAD.get_config(arg)
  config.eval_every = config.checkpoint_every  # a validation curve; no training step changes
  return config


def get_sweep() -> list[dict]:
  """Scheme by scheme: the f32 run, then the bf16 run with the same config but the dtype."""
  return [{"model.position": _KAZEMNEJAD.position_config(scheme), "data.task": TASK,
           "model.dtype": dtype}
          for scheme in SCHEMES for dtype in (REFERENCE_DTYPE, CANDIDATE_DTYPE)]
