"""Speed and memory benchmarks -> benchmarks/RESULTS.md.

  make bench                                    # everything (~15 min on 2 cores)
  make bench BENCH_ARGS="--schemes=none,t5 --lengths=64"
  python -m benchmarks.run --parts=peers        # only this project vs HF T5 (PyTorch)
  python -m benchmarks.run --parts=rpe --rpe_repo=PATH  # vs DeepMind's RPE code (Haiku)
  python -m benchmarks.run --quick --out=/tmp/results.md     # tiny shapes, a smoke test
  python -m benchmarks.run --json=/tmp/r.json   # also keep the raw records
  python -m benchmarks.run --render_from=/tmp/r.json         # re-render them, no measuring

Parts (`--parts`): `schemes`, the train step and greedy decoding of every
positional scheme at every length (benchmarks/schemes.py); `seeds`, several seeds
in one vmapped step; `precision`, bfloat16 against float32: the default-shape
train step, a config's vmapped seeds (the kazemnejad size) and decoding, timed
alternately (benchmarks/mixed_precision.py); `peers`, HuggingFace's T5 in
PyTorch at the same shape, timed alternately with ours (benchmarks/peers.py;
skipped with a note when torch and transformers are not installed); `rpe`, the update of DeepMind's
randomized_positional_encodings (Haiku, imported from a checkout: `--rpe_repo`
or $RPE_REPO) against our 1-seed and N-seed train steps at the Kazemnejad size
(ours in float32 and bfloat16 there and in `peers`: `--peer_dtypes`)
(benchmarks/peers_rpe.py; skipped with a note without haiku or a checkout).
One process measures everything, then
benchmarks/report.py renders the records. What each figure is: docs/performance.md.
"""

from __future__ import annotations

import dataclasses
import datetime
import json
import os
import platform
import sys
import time
from typing import Any, Callable

from absl import app
from absl import flags
import jax

from benchmarks import mixed_precision
from benchmarks import peers
from benchmarks import peers_rpe
from benchmarks import report
from benchmarks import schemes as schemes_lib
from relpos_jax import positions

DEFAULT_OUT = os.path.join(schemes_lib.REPO, "benchmarks", "RESULTS.md")
PARTS = ("schemes", "seeds", "precision", "peers", "rpe")
OUTPUT_FLAGS = ("out", "json", "render_from")  # where a run goes, not what it measures


@dataclasses.dataclass(frozen=True)
class Settings:
  """What a run measures (the flags of the same names; `shape` holds the model's)."""

  parts: tuple[str, ...] = PARTS
  schemes: tuple[str, ...] = tuple(positions.SCHEMES)
  naive_shaw: bool = True
  decode_schemes: tuple[str, ...] = tuple(positions.SCHEMES)
  lengths: tuple[int, ...] = (64, 256, 1024)
  batch: int = 64
  tokens_per_batch: int = 4096
  shape: schemes_lib.Shape = schemes_lib.Shape()
  runs: int = 5
  decode_runs: int = 3
  uncached_max_length: int = 64
  naive_time_max_length: int = 256
  seeds_config: str = ""
  num_seeds: int = 4
  seeds_runs: int = 20
  matmul_size: int = 2048
  peer_runs: int = 7
  peer_decode_runs: int = 5
  peer_threads: int = 0
  rpe_repo: str = dataclasses.field(default_factory=lambda: os.environ.get("RPE_REPO", ""))
  rpe_runs: int = 20
  rpe_seeds: int = 3
  rpe_size_arg: str = ""
  precision_config: str = mixed_precision.SEEDS_CONFIG
  precision_seeds: int = 3
  peer_dtypes: tuple[str, ...] = mixed_precision.DTYPES
  quick: bool = False

  def batch_at(self, length: int) -> int:
    return schemes_lib.batch_at(self.batch, self.tokens_per_batch, length)


# What --quick changes (a flag given on the command line keeps its value).
QUICK = dict(schemes="none,shaw", decode_schemes="none", lengths="8", batch=4,
             tokens_per_batch=32, d_model=16, num_heads=2, head_dim=8, d_ff=32,
             num_encoder_layers=1, num_decoder_layers=1, vocab_size=16, runs=1, decode_runs=1,
             uncached_max_length=8, naive_time_max_length=0, seeds_config="smoke", num_seeds=2,
             seeds_runs=2, matmul_size=256, peer_runs=1, peer_decode_runs=1, rpe_runs=1,
             rpe_seeds=2, rpe_size_arg="smoke",
             precision_config="configs/ablations/kazemnejad.py:scheme=t5,smoke",
             precision_seeds=2)

HELP = {
    "parts": f"what to measure, a comma list of: {', '.join(PARTS)}",
    "schemes": "comma list of registered schemes (default: all)",
    "naive_shaw": f"also benchmark Shaw's naive L x L x E gather form "
                  f"(`{schemes_lib.NAIVE_SHAW}`)",
    "decode_schemes": "schemes whose decoding is measured (default: every benchmarked one)",
    "lengths": "source = target length L of the train step and of decoding (peers: the first)",
    "batch": "batch size at the first length",
    "tokens_per_batch": "longer lengths use batch = min(batch, tokens_per_batch // L)",
    "runs": "timed runs per train step (median)",
    "decode_runs": "timed runs per decoding (median)",
    "uncached_max_length": "decode without the cache only up to this L (it costs L passes)",
    "naive_time_max_length": f"time {schemes_lib.NAIVE_SHAW} up to this L; beyond, memory only",
    "seeds_config": "config of the multi-seed benchmark: an argument of configs/default.py "
                    "(`ablation`), or a config file `path.py[:arg]`",
    "num_seeds": "seeds of the vmapped step (vs 1)",
    "seeds_runs": "timed steps per seed count (median)",
    "matmul_size": "side of the reference float32 matmul run after every timed run",
    "peer_runs": "timed train steps of each side in the HF T5 comparison (alternating)",
    "peer_decode_runs": "timed decodings of each side in the HF T5 comparison (alternating)",
    "peer_threads": "torch.set_num_threads for the peer (0: the cores XLA uses)",
    "rpe_repo": "a checkout of github.com/google-deepmind/randomized_positional_encodings, "
                "any directory name (default: $RPE_REPO; none: the rpe part is skipped)",
    "rpe_runs": "timed rounds per pair in the RPE comparison (each: our 1-seed step, our "
                "N-seed step, their update)",
    "rpe_seeds": "N of our vmapped N-seed step in the RPE comparison",
    "rpe_size_arg": f"appended to every pair's {peers_rpe.CONFIG} argument (`smoke`: 1 "
                    "layer, d_model 16)",
    "precision_config": "config of the vmapped program of the precision part (bfloat16 vs "
                        "float32), as --seeds_config",
    "precision_seeds": "seeds of that program",
    "peer_dtypes": "our compute dtypes in the peers and rpe comparisons (each timed beside "
                   "the float32 peer)",
    "quick": "tiny shapes, two schemes, one timed run: a smoke test",
}


def define_flags(fv: flags.FlagValues = flags.FLAGS) -> None:
  """The command line: one flag per `Settings` field (and model dimension), and the outputs.

  Only a run as a program defines them (importers get none).
  """
  defaults = Settings()
  for field in dataclasses.fields(Settings):
    name, default = field.name, getattr(defaults, field.name)
    if name == "shape":
      for dim in dataclasses.fields(schemes_lib.Shape):
        define = flags.DEFINE_string if dim.name == "dtype" else flags.DEFINE_integer
        define(dim.name, getattr(default, dim.name), f"model {dim.name}", flag_values=fv)
    elif name == "decode_schemes":
      flags.DEFINE_list(name, None, HELP[name], flag_values=fv)
    elif isinstance(default, tuple):
      flags.DEFINE_list(name, [str(x) for x in default], HELP[name], flag_values=fv)
    elif isinstance(default, bool):
      flags.DEFINE_bool(name, default, HELP[name], flag_values=fv)
    elif isinstance(default, int):
      flags.DEFINE_integer(name, default, HELP[name], flag_values=fv)
    else:
      flags.DEFINE_string(name, default, HELP[name], flag_values=fv)
  flags.DEFINE_string("out", DEFAULT_OUT, "the markdown file written", flag_values=fv)
  flags.DEFINE_string("json", None, "also save the raw records to this JSON file",
                      flag_values=fv)
  flags.DEFINE_string("render_from", None, "re-render the report from a --json file instead "
                      "of measuring", flag_values=fv)


def settings_from_flags(fv: flags.FlagValues = flags.FLAGS) -> Settings:
  """The parsed flags as `Settings`, --quick's values filled in where a flag was not given."""
  quick = fv["quick"].value

  def value(name):
    if quick and name in QUICK and not fv[name].present:
      return fv[name].parser.parse(QUICK[name])
    return fv[name].value

  dims = dataclasses.fields(schemes_lib.Shape)
  shape = schemes_lib.Shape(**{d.name: value(d.name) for d in dims})
  kwargs: dict[str, Any] = {}
  for field in dataclasses.fields(Settings):
    if field.name != "shape":
      kwargs[field.name] = value(field.name)
  try:
    kwargs["lengths"] = tuple(int(x) for x in kwargs["lengths"])
  except ValueError as e:
    raise app.UsageError(f"--lengths must be integers: {e}") from e
  if not kwargs["lengths"]:
    raise app.UsageError("--lengths needs at least one length")
  kwargs["parts"] = tuple(kwargs["parts"])
  kwargs["peer_dtypes"] = tuple(kwargs["peer_dtypes"])
  unknown = [d for d in kwargs["peer_dtypes"] if d not in mixed_precision.DTYPES]
  if unknown or not kwargs["peer_dtypes"]:
    raise app.UsageError(f"--peer_dtypes must name some of {', '.join(mixed_precision.DTYPES)}"
                         f" (got {unknown or 'none'})")
  kwargs["schemes"] = tuple(kwargs["schemes"])
  if kwargs["decode_schemes"] is None:
    kwargs["decode_schemes"] = kwargs["schemes"]
  kwargs["decode_schemes"] = tuple(kwargs["decode_schemes"])
  unknown = [p for p in kwargs["parts"] if p not in PARTS]
  if unknown:
    raise app.UsageError(f"unknown part(s) {unknown} in --parts; choose from: "
                         f"{', '.join(PARTS)}")
  unknown = [s for s in dict.fromkeys(kwargs["schemes"] + kwargs["decode_schemes"])
             if s not in positions.SCHEMES]
  if unknown:
    raise app.UsageError(f"unknown scheme(s) {unknown}; choose from: "
                         f"{', '.join(positions.SCHEMES)}")
  return Settings(shape=shape, **kwargs)


def machine() -> dict[str, str]:
  """What ran the benchmark."""
  cpu = platform.processor() or platform.machine()
  try:
    with open("/proc/cpuinfo") as f:
      names = [l.split(":", 1)[1].strip() for l in f if l.startswith("model name")]
    cpu = names[0] if names else cpu
  except OSError:
    pass
  cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
  device = jax.devices()[0]
  return {"cpu": cpu, "cores": str(cores),
          "platform": f"{platform.system()} {platform.release()}",
          "python": platform.python_version(), "jax": jax.__version__,
          "jaxlib": getattr(jax.lib, "__version__", "?"),
          "backend": f"{jax.default_backend()} ({device.device_kind}, "
                     f"{jax.device_count()} device(s))",
          "load_start": "%.2f %.2f %.2f" % os.getloadavg()}


def measure_schemes(settings: Settings, clock: schemes_lib.Clock,
                    log: Callable[[str], None]) -> tuple[list[dict], list[dict]]:
  """Train-step and decoding records of every scheme at every length."""
  train, dec = [], []
  names = list(settings.schemes)
  with schemes_lib.naive_shaw_registered():
    if settings.naive_shaw and "shaw" in names:
      names.insert(names.index("shaw") + 1, schemes_lib.NAIVE_SHAW)
    for L in settings.lengths:
      B = settings.batch_at(L)
      for scheme in names:
        naive = scheme == schemes_lib.NAIVE_SHAW
        timed = not naive or L <= settings.naive_time_max_length
        row = schemes_lib.bench_train(clock, settings.shape, scheme, B, L, settings.runs,
                                  timed=timed)
        train.append(row)
        log(f"train  L={L:5d} B={B:3d} {scheme:12s} "
            f"{report.fmt(row['seconds'] and row['seconds'] * 1e3)} ms  "
            f"temp {report.fmt(row['temp_bytes'] and row['temp_bytes'] / 2 ** 20)} MiB  "
            f"compile {row['compile_s']:.1f}s")
        if naive or scheme not in settings.decode_schemes:
          continue
        row = schemes_lib.bench_decode(clock, settings.shape, scheme, B, L, settings.decode_runs,
                                   uncached=L <= settings.uncached_max_length)
        dec.append(row)
        log(f"decode L={L:5d} B={B:3d} {scheme:12s} cached {row['cached_tok_s']:.0f} tok/s "
            f"uncached {report.fmt(row['uncached_tok_s'], '.0f')} tok/s")
  return train, dec


def measure(settings: Settings, argv: list[str] | None = None,
            log: Callable[[str], None] | None = None) -> dict:
  """Runs every part of `settings`; returns the records (JSON-serialisable)."""
  log = log or (lambda msg: print(msg, file=sys.stderr, flush=True))
  start = time.perf_counter()
  info = machine()
  train, dec, seeds, rates, prec, peer, rpe = [], [], [], [], None, None, None
  if {"schemes", "seeds"} & set(settings.parts):
    clock = schemes_lib.Clock(settings.matmul_size)
    if "schemes" in settings.parts:
      train, dec = measure_schemes(settings, clock, log)
    if "seeds" in settings.parts:
      seeds = schemes_lib.bench_seeds(clock, settings.seeds_config, settings.num_seeds,
                                  settings.seeds_runs)
      log("seeds  " + ", ".join(f"{r['seeds']}: {r['seconds'] * 1e3:.2f} ms" for r in seeds))
    rates = clock.all_rates
  if "precision" in settings.parts:
    L = settings.lengths[0]
    prec = mixed_precision.measure(settings.shape, settings.batch_at(L), L, runs=settings.runs,
                                   decode_runs=settings.decode_runs,
                                   seeds_config=settings.precision_config,
                                   num_seeds=settings.precision_seeds, log=log)
  if "peers" in settings.parts:
    L = settings.lengths[0]
    peer = peers.measure(settings.shape, settings.batch_at(L), L, runs=settings.peer_runs,
                         decode_runs=settings.peer_decode_runs,
                         threads=settings.peer_threads or None, dtypes=settings.peer_dtypes,
                         log=log)
    if "skipped" in peer:
      log(f"peers  skipped: {peer['skipped']}")
  if "rpe" in settings.parts:
    rpe = peers_rpe.measure(settings.rpe_repo, num_seeds=settings.rpe_seeds,
                            runs=settings.rpe_runs, size_arg=settings.rpe_size_arg,
                            dtypes=settings.peer_dtypes, log=log)
    if "skipped" in rpe:
      log(f"rpe    skipped: {rpe['skipped']}")
  info["load_end"] = "%.2f %.2f %.2f" % os.getloadavg()
  return {"argv": list(argv or []), "settings": dataclasses.asdict(settings),
          "date": f"{datetime.datetime.now():%Y-%m-%d %H:%M}", "info": info,
          "train": train, "decode": dec, "seeds": seeds, "precision": prec, "peers": peer,
          "rpe": rpe,
          "matmul_rates": rates, "seconds": time.perf_counter() - start}


def measuring_argv(argv: list[str]) -> list[str]:
  """The command-line flags that chose what a run measured (where it was written left out)."""
  out, skip = [], False
  for a in argv:
    if skip:
      skip = False
    elif a.lstrip("-").split("=")[0] in OUTPUT_FLAGS:
      skip = "=" not in a
    else:
      out.append(a)
  return out


def write(results: dict, out: str, json_path: str | None = None) -> str:
  """Renders `results` to `out` (and the records to `json_path`); returns the markdown."""
  for path in filter(None, (out, json_path)):
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
  if json_path:
    with open(json_path, "w") as f:
      json.dump(results, f, indent=1, default=str)
  text = report.render(results)
  with open(out, "w") as f:
    f.write(text)
  return text


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f"unexpected arguments: {argv[1:]}")
  fv = flags.FLAGS
  if fv.render_from:
    with open(fv.render_from) as f:
      results = json.load(f)
  else:
    results = measure(settings_from_flags(fv), measuring_argv(sys.argv[1:]))
  print(write(results, fv.out, fv.json))


if __name__ == "__main__":
  define_flags()
  app.run(main)
