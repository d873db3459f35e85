"""Does it hold at scale? Kazemnejad's decoder-only comparison at d_model 64, 128 and 256.

The question (issue #47): which conclusions of the Kazemnejad table (kazemnejad.py,
d_model 128, 6,000 steps) survive a larger model or a longer budget? Where our ranking
differs from Kazemnejad et al.'s (t5-base size, 40k steps), the likely cause is that
the schemes that must learn their positions (T5's far buckets, NoPE's implicit
counting) are undertrained at our size; this table measures that.

The recipe is kazemnejad.py's (tasks, eval protocol, validation split, AdamW with 500
warmup steps and cosine decay, batch 64, every checkpoint kept and the best by
validation evaluated, 3 seeds), with:

- d_model in {64, 128, 256}, 4 layers, head dim 32 (so 2, 4, 8 heads), d_ff = 4·d_model;
- schemes NoPE, T5 (32 buckets, max distance 128, one causal table shared by the
  layers), ALiBi, RoPE (rotating 25% of each head, as Kazemnejad et al.) and FIRE
  (positions.default_config("fire"): an MLP of width 32 per layer, as in
  extrapolation_methods.py);
- tasks copy (lengths 1-20, evaluated at 21-40 and 5-20) and SCAN length_cutoff_25
  (its whole test split);
- a budget axis: d_model 128 at 4× the steps (24,000; checkpoints every 4,000 so the
  best-by-validation choice is over the same six points of the schedule) for NoPE, T5
  and ALiBi on SCAN;
- a heads control: ALiBi on copy at d_model 64 with 4 heads (of 16) and at d_model 128
  with 2 heads (of 64). ALiBi's slopes follow the head count (2 heads: 1/16 and 1/256;
  4 heads: 1/4, 1/16, 1/64, 1/256; positions.alibi.alibi_slopes), and head dim 32 ties
  the head count to the width, so ALiBi's main runs cannot tell a width effect from a
  slopes effect; with these two the four corners of width {64, 128} × heads {2, 4}
  are trained (the other two are main runs). Same parameters as the main run of each
  width (the attention stays d_model wide); the head dim changes with the heads. (The
  issue asks for head dim 32; these two runs are an addition.)

35 runs: 5 schemes × 2 tasks × 3 sizes, plus 3 budget runs and 2 heads-control runs,
named `<scheme>+<task>+d_model=<d>+num_heads=<h>+d_ff=<f>[+num_steps=24000+checkpoint_every=4000]`
(the heads control adds `+head_dim=<d/h>` after the heads).
The d_model 128 / 6,000-step runs of NoPE, T5, ALiBi and RoPE have configs identical
to kazemnejad.py's (tests/configs_scale_test.py checks it), so `--results_dir` copies
their records from results/kazemnejad/ instead of training them again, and FIRE on
copy at that size is extrapolation_methods.py's run (9 runs copied in all).

Learning rate: kazemnejad.py's 1e-3 at every size (not scaled with width), chosen on
validation only, by this rule: a size keeps 1e-3 when every seed of its runs converges
on validation (best validation exact match ≥ 0.95, the tables' † threshold); a size
where some seed does not is trained again at 5e-4 and 2e-3 and takes the rate under
which every seed converges (the larger validation exact match, then the lower
validation loss, breaking ties), its runs renamed by `optimizer.learning_rate` in
`_size_overrides` so records of two rates never mix. Validation cannot rank rates more
finely than that: in-distribution validation exact match saturates in this recipe (the
kazemnejad runs at d_model 128 reach 0.996-1.000 on every seed of all 15 runs, FIRE's
copy run 1.000; results/kazemnejad/records, `best_valid_exact_match`), and choosing a
rate by how a model extrapolates would select on the test lengths. So the check costs
no run of its own: the table's runs at each size are it, and RESULTS.md's validation
column shows it per run. Over a 4× range of width the usual corrections are small
(∝ 1/sqrt(d_model): 1.4e-3 at 64, 7.1e-4 at 256; muP's ∝ 1/d_model: 2e-3 and 5e-4),
inside the stable range found at d_model 128 (1e-2 was unstable there, kazemnejad.py),
and one rate keeps the model size the only thing that differs between the cells of a
column.

Parameters (one replica, measured: `scale_figures.non_embedding_parameters`, Kaplan et
al. 2020's N, i.e. without the token embedding, which is tied with the output layer;
the totals add 14 · d_model on copy and 23 · d_model on SCAN, their vocabularies):

  d_model   NoPE / ALiBi / RoPE     T5          FIRE
  64        198,464                 198,528     198,992
  128       790,144                 790,272     790,936
  256       3,153,152               3,153,408   3,154,472

Expected runtime (an estimate, not a measurement): the stored d_model 128 runs took
43-65 min of training steps per 3-seed run (results/kazemnejad/runs/*.json
`train_seconds`, 2 AMD EPYC cores; FIRE on copy 108 min, results/extrapolation_methods/),
scaled by the training FLOPs per token, 6·N + 6·layers·T·d_model (Kaplan et al.;
T = 64, the padded training length): 0.26× at d_model 64, 3.9× at 256. FIRE's extra
time over NoPE (51 min on copy, ×1.2 on SCAN as the other schemes' SCAN/copy ratio),
spent in its MLP over query-key pairs, is held constant across widths. Minutes of
training per 3-seed run (reused: copied, 0 min):

  task, d_model              NoPE   T5    ALiBi  RoPE   FIRE
  copy 64                    15     14    11     11     66
  copy 128                   reused reused reused reused reused (extrapolation_methods)
  copy 256                   225    206   172    170    276
  SCAN 64                    14     14    14     17     75
  SCAN 128                   reused reused reused reused 115
  SCAN 256                   211    217   217    254    272
  SCAN 128, 24,000 steps     215    222   222
  heads control (ALiBi, copy): about 29 at d_model 64 with 4 heads, 44 at d_model 128
  with 2 (the measured times of the main ALiBi runs of the same width, below)

About 55 h in all on 2 cores, plus evaluation (about 1 min per run at d_model 128). At
d_model 64 the FLOP scaling is a lower bound: small matmuls on a CPU are overhead-bound.
Measured (results/scale/runs/*.json `train_seconds`, 2 AMD EPYC cores): ALiBi on copy
took 29 min at d_model 64 (2.6× its estimate) against 44 min at d_model 128, on two
different VMs (the d_model 64 one ran other runs 1.2–1.8× slower than the VM of the
stored d_model 128 runs), so read the d_model 64 row as 1.5–3× low.
Runs over an hour (every d_model 256 run, the budget runs, FIRE) are best trained one
seed at a time, storing each seed's records as it finishes (docs/evaluation.md; it costs
about the time of training the seeds together in the stored runs, so the whole table
can be trained so; `--seeds_per_part 2` trains two seeds per part):

  python train.py --config configs/ablations/scale.py --workdir runs/scale \
      --results_dir results/scale --split_seeds

and `--sweep_shard i/n` shares the sweep between processes. The whole table:

  python train.py --config configs/ablations/scale.py --workdir runs/scale \
      --results_dir results/scale
  python train.py --config configs/ablations/scale.py:smoke --workdir /tmp/scale \
      --runs none+copy+d_model=8+num_heads=1+d_ff=32       # seconds

`make results` draws the table's figures (relpos_jax/scale_figures.py): pooled exact
match against parameters, one line per scheme and panel per task, and SCAN's per-length
curves at each size. Arguments: those of configs/default.py (`num_seeds`, `steps`,
`smoke`, ...); with `smoke` the sizes shrink in proportion (d_model 8, 16, 32, head dim 8).
"""

import ml_collections

from configs.ablations import kazemnejad as _KAZEMNEJAD

SCHEMES = ("none", "t5", "alibi", "rope", "fire")
TASKS = ("copy", "scan")
D_MODELS = (64, 128, 256)  # at kazemnejad.py's size; `smoke` scales them with its d_model
BUDGET_SCHEMES = ("none", "t5", "alibi")
BUDGET_TASK = "scan"
BUDGET_MULTIPLE = 4  # the budget runs train 4× the base config's steps (24,000)
# ALiBi's slopes follow the head count, which head dim 32 ties to the width: a 2 × 2 of
# width × heads on copy (the two other corners are the main runs) separates the two.
HEADS_CONTROL_SCHEME, HEADS_CONTROL_TASK = "alibi", "copy"
HEADS_CONTROL = ((64, 4), (128, 2))  # (d_model, num_heads), head dim d_model / num_heads
_REFERENCE_D_MODEL = 128  # kazemnejad.py's d_model, to which D_MODELS are relative


def get_config(arg=None) -> ml_collections.ConfigDict:
  """kazemnejad.py's decoder-only recipe (module doc); the sweep sets scheme, task and size."""
  return _KAZEMNEJAD.get_config(arg)


def get_sweep(arg=None) -> list[dict]:
  """Task-major, then size, then scheme; then the budget runs and the heads control."""
  base = get_config(arg)
  scan_data = _KAZEMNEJAD.get_config().data  # replaces the data section whole, as there
  scan_data.update(task="scan", scan_split=_KAZEMNEJAD.SCAN_SPLIT)
  tasks = {"copy": {"data.task": "copy"}, "scan": {"data": scan_data}}
  sizes = [_scaled(base, d) for d in D_MODELS]
  runs = [{"model.position": _KAZEMNEJAD.position_config(scheme), **tasks[task],
           **_size_overrides(base, d_model)}
          for task in TASKS for d_model in sizes for scheme in SCHEMES]
  budget = {"num_steps": BUDGET_MULTIPLE * base.num_steps,
            "checkpoint_every": BUDGET_MULTIPLE * base.checkpoint_every}
  runs += [{"model.position": _KAZEMNEJAD.position_config(scheme), **tasks[BUDGET_TASK],
            **_size_overrides(base, base.model.d_model), **budget}
           for scheme in BUDGET_SCHEMES]
  runs += [{"model.position": _KAZEMNEJAD.position_config(HEADS_CONTROL_SCHEME),
            **tasks[HEADS_CONTROL_TASK], **_size_overrides(base, _scaled(base, d), heads)}
           for d, heads in HEADS_CONTROL]
  return runs


def _scaled(base: ml_collections.ConfigDict, d_model: int) -> int:
  """A d_model of D_MODELS / HEADS_CONTROL at the base's size (`smoke` shrinks it)."""
  return d_model * base.model.d_model // _REFERENCE_D_MODEL


def _size_overrides(base: ml_collections.ConfigDict, d_model: int,
                    num_heads: int | None = None) -> dict:
  """One size: heads of the base head dim (32), d_ff = 4·d_model; layers and lr as the base.

  With `num_heads` (the heads control): that many heads of d_model / num_heads each,
  so the attention stays as wide as the model; the head dim becomes a key of the run.
  """
  if num_heads is None:
    return {"model.d_model": d_model, "model.num_heads": d_model // base.model.head_dim,
            "model.d_ff": 4 * d_model}
  if d_model % num_heads:
    raise ValueError(f"HEADS_CONTROL: d_model {d_model} does not split into {num_heads} heads")
  return {"model.d_model": d_model, "model.num_heads": num_heads,
          "model.head_dim": d_model // num_heads, "model.d_ff": 4 * d_model}
