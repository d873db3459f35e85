"""This project's train step against DeepMind's randomized_positional_encodings, same run.

Optional: needs `dm-haiku` (and their other dependencies, pinned in
benchmarks/requirements-peers.txt) and a local checkout of
https://github.com/google-deepmind/randomized_positional_encodings (read at
commit e8c64749d8cad7772dc7ade75b32ef9b2b29b466, 2023-06-21). Their code is
imported from that checkout, never copied here. Without haiku or a checkout
`measure` returns a record that says why the comparison was skipped, and
nothing else in the project imports haiku or their code.

What is compared (issue #14: "per seed-step ≤ 0.6× the RPE codebase's update
time" at the Kazemnejad size). Theirs is the update their training loop runs,
`experiments/training.py:_update_parameters` (jitted: forward, backward,
`optax.chain(clip_by_global_norm(1.0), adam(1e-3))`), called through its own
`jax.jit` wrapper as `TrainingWorker.run` calls it, with their model built as
`experiments/example.py` builds it:
`constants.MODEL_BUILDERS['transformer_encoder'](output_size=,
return_all_outputs=True, num_layers=, embedding_dim=, num_heads=,
num_hiddens_per_head=, widening_factor=, dropout_prob=, positional_encodings=,
positional_encodings_params=)` wrapped by `utils.make_model_with_empty_targets`
(non-autoregressive: the length-L input tape is followed by L empty output
cells, so their encoder sees 2L tokens) and `hk.transform`, example.py's loss
and accuracy, on `reverse_string` (vocabulary 2) batches of length L. Every
size comes from our config (benchmarks/rpe_size.py), so both sides have the
same layers, widths, heads, dropout, batch and L. Ours is the train step as
`train_and_evaluate` runs it, `jit(vmap(train_step))` with donated state
(`schemes.compile_seeds_steps`), for 1 seed and for N seeds, on its step-0
batch: the decoder-only model over `input SEP target`, 2L + 1 tokens.

Pairs (`PAIRS`): our `xl` with randomized positions (Transformer-XL relative
attention, positions drawn from [0, 2048)) against their `NOISY_RELATIVE`
(their Transformer-XL attention with relative distances drawn from
[0, noise_max_length = 2048)), and our `sinusoidal` against their `SIN_COS`.

Timing: a few of their batches (and dropout/noise keys) are sampled before
timing and cycled through, so their batch sampling is not timed (ours reuses
its step-0 batch). Each timed round runs our 1-seed step, our N-seed step and
their update once each, blocking on every output; after warm-up rounds each
reports its median, so load from other processes falls on all three alike.
"""

from __future__ import annotations

import atexit
import dataclasses
import importlib
import os
import shutil
import subprocess
import sys
import tempfile
import time
import types
from typing import Any, Callable

import jax
import jax.numpy as jnp
import numpy as np
import optax

from benchmarks import peers
from benchmarks import schemes

try:
  import haiku as hk
  IMPORT_ERROR: str | None = None
except ImportError as e:  # the optional extra is not installed
  hk = None
  IMPORT_ERROR = f"{type(e).__name__}: {e}"

URL = "https://github.com/google-deepmind/randomized_positional_encodings"
COMMIT_READ = "e8c64749d8cad7772dc7ade75b32ef9b2b29b466"  # their commit this module follows
PACKAGE = "randomized_positional_encodings"  # their modules import themselves by this name
CONFIG = "benchmarks/rpe_size.py"
TASK = "reverse_string"
NUM_BATCHES = 4  # their batches sampled before timing, cycled through
WARMUP = 2  # untimed rounds after their first call (which compiles)


@dataclasses.dataclass(frozen=True)
class Pair:
  """One of our schemes (randomized or not) against one of their positional encodings."""

  scheme: str
  randomized: bool
  theirs: str  # a key of their `positional_encodings.POS_ENC_TABLE`

  @property
  def ours(self) -> str:
    """Our side's name in the report, e.g. `xl+randomized`."""
    return self.scheme + ("+randomized" if self.randomized else "")

  def spec(self, size_arg: str = "") -> str:
    """Our config, `benchmarks/rpe_size.py:scheme=...` (`size_arg` appended, e.g. `smoke`)."""
    args = [f"scheme={self.scheme}", "randomized" if self.randomized else "", size_arg]
    return f"{CONFIG}:{','.join(a for a in args if a)}"


PAIRS = (Pair("xl", True, "NOISY_RELATIVE"), Pair("sinusoidal", False, "SIN_COS"))


def package_parent(repo: str) -> str:
  """A new temp directory that holds only a link to `repo` named `PACKAGE` (removed at exit).

  Their modules import `randomized_positional_encodings.<...>`, so a directory
  holding the checkout under that name goes on sys.path. A link serves a checkout
  of any name, and unlike the checkout's own parent it puts nothing else on
  sys.path (a `configs` or `benchmarks` beside the checkout would shadow ours).

  Args:
    repo: the checkout.

  Returns:
    The temp directory.
  """
  repo = os.path.abspath(repo)
  parent = tempfile.mkdtemp(prefix="rpe_src_")
  atexit.register(shutil.rmtree, parent, ignore_errors=True)  # removes the link, not the checkout
  os.symlink(repo, os.path.join(parent, PACKAGE))
  return parent


def import_theirs(repo: str) -> types.SimpleNamespace:
  """Their `constants`, `training`, `utils` and `positional_encodings` modules from `repo`.

  Args:
    repo: a checkout (work tree) of their repository, under any name.

  Returns:
    The modules, as attributes of those names.

  Raises:
    ImportError: `repo` is not a checkout, or their code fails to import (any
      other error of their modules' import propagates too). A process imports
      one checkout: a second `repo` gets the first one's modules.
  """
  if not os.path.isfile(os.path.join(repo, "experiments", "training.py")):
    raise ImportError(f"{repo!r} is not a checkout of {URL} (no experiments/training.py)")
  if PACKAGE not in sys.modules:
    sys.path.insert(0, package_parent(repo))
  names = ("experiments.constants", "experiments.training", "experiments.utils",
           "models.positional_encodings")
  modules = {n.split(".")[-1]: importlib.import_module(f"{PACKAGE}.{n}") for n in names}
  return types.SimpleNamespace(**modules)


def _commit_of(repo: str) -> str | None:
  """The checkout's git commit, None if it is not a git work tree (e.g. a `git archive`)."""
  if not os.path.exists(os.path.join(repo, ".git")):  # not an enclosing repository's HEAD
    return None
  try:
    out = subprocess.run(["git", "-C", repo, "rev-parse", "HEAD"], capture_output=True,
                         text=True, timeout=30, check=True)
  except (OSError, subprocess.SubprocessError):
    return None
  return out.stdout.strip() or None


def _encoding_params(theirs: types.SimpleNamespace, encoding: str,
                     noise_max_length: int) -> dict[str, Any]:
  """Keyword arguments of the params class their table assigns to `encoding`."""
  cls = theirs.positional_encodings.POS_ENC_PARAMS_TABLE[encoding]
  fields = {f.name for f in dataclasses.fields(cls)}
  # Their defaults otherwise (max_time 10,000 = our sinusoids' base; one-sided noise).
  return {"noise_max_length": noise_max_length} if "noise_max_length" in fields else {}


def their_update(theirs: types.SimpleNamespace, config, encoding: str, *,
                 seed: int = 0) -> tuple[Callable[[], Any], dict[str, Any]]:
  """Their jitted update at our config's size, as a blocking callable that carries its state.

  Args:
    theirs: `import_theirs`'s modules.
    config: our config (benchmarks/rpe_size.py): layers, widths, heads, dropout,
      batch, L = `data.max_train_length`, and `randomized.max_random_position`
      as their `noise_max_length`.
    encoding: a key of their `POS_ENC_TABLE`, e.g. "NOISY_RELATIVE".
    seed: seeds their init, batches and keys.

  Returns:
    `(step, facts)`: `step()` runs one update (a fresh batch and key of the
    `NUM_BATCHES` sampled up front) and waits for all of its outputs; `facts`
    says what was built (their params, batch shape, tokens per row).
  """
  m = config.model
  if m.d_ff % m.d_model:
    raise ValueError(f"their MLP is widening_factor × d_model: d_ff {m.d_ff} is not a "
                     f"multiple of d_model {m.d_model}")
  constants, training, utils = theirs.constants, theirs.training, theirs.utils
  task = constants.TASK_BUILDERS[TASK]()
  params_kw = _encoding_params(theirs, encoding, config.randomized.max_random_position)
  model = constants.MODEL_BUILDERS["transformer_encoder"](
      output_size=task.output_size, return_all_outputs=True, num_layers=m.num_layers,
      embedding_dim=m.d_model, num_heads=m.num_heads, num_hiddens_per_head=m.head_dim,
      widening_factor=m.d_ff // m.d_model, dropout_prob=m.dropout_rate,
      positional_encodings=encoding, positional_encodings_params=params_kw)
  model = hk.transform(utils.make_model_with_empty_targets(model, task))

  def loss_fn(output, target):  # experiments/example.py's
    return jnp.mean(jnp.sum(task.pointwise_loss_fn(output, target), axis=-1)), {}

  def accuracy_fn(output, target):  # experiments/example.py's
    mask = task.accuracy_mask(target)
    return jnp.sum(mask * task.accuracy_fn(output, target)) / jnp.sum(mask)

  L, B = config.data.max_train_length, config.batch_size
  keys = list(jax.random.split(jax.random.PRNGKey(seed), 2 * NUM_BATCHES + 1))
  batches = [task.sample_batch(k, length=L, batch_size=B) for k in keys[:NUM_BATCHES]]
  step_keys = keys[NUM_BATCHES:-1]
  jax.block_until_ready((batches, step_keys))
  optimizer = optax.chain(optax.clip_by_global_norm(1.0), optax.adam(1e-3))  # their loop's
  state = {"params": model.init(keys[-1], batches[0]["input"]), "i": 0}
  state["opt_state"] = optimizer.init(state["params"])

  def step():
    i = state["i"] % NUM_BATCHES
    out = training._update_parameters(  # pylint: disable=protected-access
        params=state["params"], rng_key=step_keys[i], batch=batches[i],
        model_apply_fn=model.apply, loss_fn=loss_fn, accuracy_fn=accuracy_fn,
        optimizer=optimizer, opt_state=state["opt_state"], is_autoregressive=False)
    jax.block_until_ready(out)  # every output: the new parameters, not only the loss
    state["params"], state["opt_state"], _ = out
    state["i"] += 1
    return out[2]

  facts = {"theirs_params": params_kw,
           "theirs_batch": "x".join(str(d) for d in batches[0]["input"].shape),
           "theirs_tokens": 2 * L}  # the input tape, then L empty output cells
  return step, facts


def _size(config) -> dict[str, Any]:
  """The sizes both sides share, from our config."""
  m = config.model
  return {"num_layers": m.num_layers, "d_model": m.d_model, "num_heads": m.num_heads,
          "head_dim": m.head_dim, "d_ff": m.d_ff, "dropout": m.dropout_rate,
          "batch": config.batch_size, "L": config.data.max_train_length,
          "max_random_position": config.randomized.max_random_position}


def measure_pair(theirs: types.SimpleNamespace, pair: Pair, *, num_seeds: int, runs: int,
                 size_arg: str = "", dtypes: tuple[str, ...] = ("float32",),
                 log: Callable[[str], None] = print) -> dict[str, Any]:
  """Our 1-seed and N-seed steps (in each of `dtypes`) and their update, interleaved; a row.

  Args:
    theirs: `import_theirs`'s modules.
    pair: what to compare.
    num_seeds: N of our N-seed step.
    runs: timed rounds (each: our 1-seed and N-seed steps in every dtype, their update).
    size_arg: appended to our config's argument (`smoke`: tiny).
    dtypes: our compute dtypes (`model.dtype`); theirs is float32.
    log: progress lines.

  Returns:
    The pair, both sides' sizes and tokens per row, compile times and the
    seconds of every timed run: `ours_1_s` and `ours_n_s` as `{dtype: [s, ...]}`,
    `theirs_s` a list.

  Raises:
    ValueError: our step-0 batch is not the full 2L + 1 tokens wide (the config
      would then time a narrower batch than theirs, see benchmarks/rpe_size.py).
  """
  spec = pair.spec(size_arg)
  config = schemes.load_config(spec)
  L = config.data.max_train_length
  ours = {d: schemes.compile_seeds_steps(spec, num_seeds, dtype=d) for d in dtypes}
  width = sum(ours[dtypes[0]][num_seeds].batch[k].shape[-1] for k in ("inputs", "targets"))
  if width != 2 * L + 1:
    raise ValueError(f"{spec}: the step-0 batch is {width} tokens wide, not L + 1 + L = "
                     f"{2 * L + 1}; its lengths are padded to the longest row's bucket")
  theirs_step, facts = their_update(theirs, config, pair.theirs)
  start = time.perf_counter()
  theirs_step()  # compiles
  seeds_rows = ours[dtypes[0]][num_seeds].batch["inputs"].shape[:-1]  # [N, B]
  row = {"ours": pair.ours, "scheme": pair.scheme, "randomized": pair.randomized,
         "theirs": pair.theirs, "spec": spec, "size": _size(config), "ours_tokens": width,
         "ours_batch": "x".join(str(d) for d in (*seeds_rows, width)),
         "ours_dtypes": list(dtypes),
         "ours_compile_s": {d: {str(n): s.compile_s for n, s in o.items()}
                            for d, o in ours.items()},
         "theirs_first_call_s": time.perf_counter() - start, **facts}
  # One program where N = 1: its runs are both the 1-seed and the N-seed figures.
  fns = [f for d in dtypes for f in dict.fromkeys((ours[d][1].run, ours[d][num_seeds].run))]
  *mine, row["theirs_s"] = peers.interleave(*fns, theirs_step, runs=runs, warmup=WARMUP)
  per = len(mine) // len(dtypes)
  row["ours_1_s"] = {d: mine[i * per] for i, d in enumerate(dtypes)}
  row["ours_n_s"] = {d: mine[i * per + per - 1] for i, d in enumerate(dtypes)}
  theirs_ms = 1e3 * float(np.median(row["theirs_s"]))
  for d in dtypes:
    one, n = (1e3 * float(np.median(row[k][d])) for k in ("ours_1_s", "ours_n_s"))
    log(f"rpe    {pair.ours:18s} vs {pair.theirs:14s} ours ({d}) 1 seed {one:.1f} ms, "
        f"{num_seeds} seeds {n:.1f} ms ({n / num_seeds:.1f} per seed); theirs {theirs_ms:.1f} ms")
  return row


def measure(repo: str | None, *, num_seeds: int, runs: int, size_arg: str = "",
            pairs: tuple[Pair, ...] = PAIRS, dtypes: tuple[str, ...] = ("float32",),
            log: Callable[[str], None] = print) -> dict[str, Any]:
  """Every pair of `pairs`, timed interleaved; a record.

  Args:
    repo: a checkout of their repository (any directory name); None or "": skip.
    num_seeds: N of our vmapped N-seed step (the tables train 3).
    runs: timed rounds per pair (each: our 1-seed step, our N-seed step, their update).
    size_arg: appended to every pair's benchmarks/rpe_size.py argument (`smoke`: tiny).
    pairs: what to compare.
    dtypes: our compute dtypes (theirs is float32).
    log: progress lines.

  Returns:
    `{"skipped": why}` without haiku, a checkout, or code of theirs that imports
    (nothing compiled); else the settings, versions and one row per pair (`measure_pair`).
  """
  if IMPORT_ERROR:
    return {"skipped": f"dm-haiku is not importable here ({IMPORT_ERROR})"}
  if not repo:
    return {"skipped": "no checkout of their repository was given (--rpe_repo PATH, or the "
                       "RPE_REPO environment variable)"}
  try:
    theirs = import_theirs(repo)
  except Exception as e:  # pylint: disable=broad-except  (a skip note, not a crash of make bench)
    return {"skipped": f"their code does not import from {repo} ({type(e).__name__}: {e})"}
  record = {"url": URL, "repo": os.path.abspath(repo), "commit": _commit_of(repo),
            "commit_read": COMMIT_READ, "haiku": hk.__version__, "task": TASK,
            "config": CONFIG, "size_arg": size_arg, "num_seeds": num_seeds, "runs": runs,
            "warmup": WARMUP, "batches": NUM_BATCHES, "pairs": []}
  for pair in pairs:
    record["pairs"].append(measure_pair(theirs, pair, num_seeds=num_seeds, runs=runs,
                                        size_arg=size_arg, dtypes=tuple(dtypes), log=log))
  return record
