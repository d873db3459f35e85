"""A byte-level language model on real text (the CPython standard library), decoder-only.

  python train.py --config configs/lm.py:scheme=alibi --workdir runs/lm
  python eval.py --workdir runs/lm            # bits per byte at 1x..16x the training context
  python train.py --config configs/lm.py:scheme=rope,smoke --workdir /tmp/lm   # seconds

Trains on random windows of L = 128 bytes of `lm:cpython`'s training split
(relpos_jax/data/corpus.py; nothing to download or prepare), 4 layers, d_model 128,
4 heads x 32, d_ff 512, 1,500 steps of 32 windows, AdamW lr 1e-3. A quick trial
of this size (issue #48) took about 7 minutes per scheme on 2 CPU cores and
separated the schemes by 2x the training context. Every kept checkpoint is scored
on the validation split's first 16,384 bytes at context L; eval.py evaluates the
one with the lowest validation loss.

Arguments (comma list): scheme, seed, num_seeds, steps, train_length, corpus
(`cpython` or `tfds:<name>`, read from $TFDS_DATA_DIR or ~/tensorflow_datasets),
objective (`lm`, or `passkey`: passkey retrieval, relpos_jax/data/passkey.py, trained
at L with the key at any depth; eval.py then writes the accuracy table and heatmap
over contexts L..16L x depths 0, 0.25, 0.5, 0.75, 1), smoke.

  python train.py --config configs/lm.py:scheme=alibi,objective=passkey --workdir runs/pk
  python eval.py --workdir runs/pk            # passkey.{md,csv,jsonl}, passkey_heatmap.png

The corpus manifest (Python version, documents, bytes and sha256 of each
split) is computed here and stored in the run's config (`data.manifest`): eval
refuses a corpus that differs from it.
"""

import ml_collections

from relpos_jax import architectures
from relpos_jax import config_args
from relpos_jax import optim
from relpos_jax import positions
from relpos_jax.data import corpus as corpus_lib
from relpos_jax.data import lm
from relpos_jax.positions import randomized

ARGS = {"scheme": "alibi", "seed": 0, "num_seeds": 1, "steps": 0, "train_length": 128,
        "corpus": "cpython", "objective": "lm", "smoke": False}
PASSKEY_SMOKE_LENGTH = 96  # a passkey example needs more than 85 bytes (data/passkey.py)


def get_config(arg=None) -> ml_collections.ConfigDict:
  """The LM config; `arg` picks scheme/seed/corpus and `smoke` shrinks everything."""
  args = config_args.parse(arg, ARGS)
  config = ml_collections.ConfigDict()
  config.seed = args["seed"]
  config.num_seeds = args["num_seeds"]
  L = args["train_length"]

  config.data = lm.default_config()
  config.data.task = corpus_lib.PREFIX + args["corpus"]
  config.data.train_length = L
  config.data.objective = args["objective"]

  config.model = architectures.default_config("decoder_only")
  config.model.update(d_model=128, num_heads=4, head_dim=32, d_ff=512, num_layers=4,
                      dropout_rate=0.0, dtype="float32")
  config.model.position = position_config(args["scheme"], L)

  config.randomized = randomized.default_config()
  config.optimizer = optim.optimizer_config()
  config.optimizer.update(learning_rate=1e-3, warmup_steps=150)
  config.label_smoothing = 0.0
  config.num_steps = args["steps"] or 1500
  config.batch_size = 32
  config.eval_batch_size = 32  # unused by LM eval (its batches follow an attention budget)
  config.log_every = 50
  config.eval_every = 500
  config.checkpoint_every = 500
  config.keep_checkpoints = config.num_steps // config.checkpoint_every + 1  # all: pick by valid
  if args["smoke"]:
    config.model.update(d_model=16, num_heads=2, head_dim=8, d_ff=32, num_layers=1)
    L = PASSKEY_SMOKE_LENGTH if args["objective"] == "passkey" else 16
    config.data.train_length = L
    config.model.position = position_config(args["scheme"], L)
    config.data.eval_multiples = (1, 2, 4)
    config.data.eval_bytes = 256
    config.data.valid_bytes = 128
    config.data.passkey_examples = 4
    config.num_steps = args["steps"] or 6
    config.batch_size = 4
    config.log_every = config.eval_every = config.checkpoint_every = 3
    config.keep_checkpoints = 3
    config.optimizer.warmup_steps = 2
  config.data.manifest = corpus_lib.load_corpus(config.data.task).manifest
  return config


def position_config(scheme: str, train_length: int) -> ml_collections.ConfigDict:
  """The scheme's default config; a learned table exactly covers training (L + 1 slots).

  The +1 is the empty prompt's PAD slot, which the length check counts; beyond L
  positions a learned table has no trained row, so its eval cells read n/a.
  """
  position = positions.default_config(scheme)
  if "max_len" in position:
    position.max_len = train_length + 1
  return position
