"""The stored runs whose claims need more seeds, and the commands that add them.

Issue #46 (item 6): where a comparison's interval holds 0 and a run it rests on has
a seed std ≥ 0.10 on the claim's column, that claim is "not distinguishable with 3
seeds"; more seeds can decide it. `CLAIMS` lists each such claim of the notes
(results/<table>/notes.md, RESULTS.md), its column and the runs it compares. A paired
comparison uses only the seeds both runs have (`compare.shared_seeds`), so every
run of a claim that needs seeds gets them, whatever its own spread. Whether a claim
still needs them is read from the seeds stored now (`needs_seeds`): once added seeds
bring every row's std under the bar, the claim rests as "not distinguishable" and its
other runs are not extended (kazemnejad's alibi+reverse: 0.11 with 3 seeds, 0.097
with 5, so FIRE and Kerple on reverse keep 3).

  python -m relpos_jax.experiments.more_seeds           # the list: seed std, time, command
  python -m relpos_jax.experiments.more_seeds --check   # and whether each run can take them
  python -m relpos_jax.experiments.more_seeds --train   # runs the commands (hours; see --help)

Each command is the table's own, asking for `--num_seeds` (default 5) seeds of one
run: `python train.py --config <table's config> --workdir runs/<table> --results_dir
results/<table> --runs <run> --config.num_seeds=5`, which trains only the seeds the
table lacks and appends them (added_seeds.py). The time per run is an estimate, not
a measurement: a seed trained alone costs what the stored run's parts took where it
was trained one seed at a time, else the vmapped run's `train_seconds` over
`VMAP_SPEEDUP` (what 3 seeds in one step cost against one seed,
docs/performance.md "Seeds"); evaluation, its stored `eval_seconds` (every row of
the run) per seed. The stored times come from one shared 2-core VM at varying load.

Not listed, on purpose: RoPE's eval-time scalings on addition (rope+add_index_hints
@dynamic_ntk, @yarn): seed 0 fails in distribution under both, so the rows stay †
whatever seeds are added. Both randomized runs on addition (RoPE's and FIRE's) are
re-runs under the fixed protocol (results/extrapolation_methods/fixed_protocol/), so
seeds can be added to them; randomized FIRE against plain FIRE is not listed because
neither run's seed std reaches 0.10 on the columns compared (at most 0.09, the 0..L−1
row at 2×), the bar of issue #46, item 6.
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from typing import Sequence

from absl import app
from absl import flags
import numpy as np

from relpos_jax import errors
from relpos_jax import workdir as workdir_lib
from relpos_jax.experiments import added_seeds
from relpos_jax.experiments import compare
from relpos_jax.experiments import main_table
from relpos_jax.experiments import store
from relpos_jax.experiments import sweep
from relpos_jax.experiments import sweep_spec

# 3 vmapped seeds' step time ÷ one seed's, on 2 CPU cores (docs/performance.md, "Seeds"):
# at the encoder-decoder ablation size and at the decoder-only Kazemnejad size.
VMAP_SPEEDUP = {"encoder_decoder": 2.57, "decoder_only": 2.91}
SEED_STD_THRESHOLD = 0.10
ONE_FIVE, TWO, FOUR = main_table.MULTIPLE_COLUMNS


@dataclasses.dataclass(frozen=True)
class Claim:
  """A comparison of the notes that more seeds can decide.

  Attributes:
    notes: the table whose notes.md states it.
    text: the claim, short.
    column: the main-table column it is about.
    rows: `(table, record name)` of each row it compares (a `<run>@<label>` row is
      an evaluation of `<run>`, which gets the seeds).
  """

  notes: str
  text: str
  column: str
  rows: tuple[tuple[str, str], ...]


CLAIMS = (
    Claim("schemes", "FIRE vs Transformer-XL on reverse: not distinguishable on any column",
          main_table.POOLED_4X, (("schemes", "xl+reverse"), ("schemes", "fire+reverse"))),
    Claim("schemes", "XL vs FIRE on copy up to 2× (XL ahead only at 4×)", TWO,
          (("schemes", "xl+copy"), ("schemes", "fire+copy"))),
    Claim("schemes", "FIRE vs Shaw on copy at 1.5×", ONE_FIVE,
          (("schemes", "fire+copy"), ("schemes", "shaw+copy"))),
    Claim("extrapolation_methods", "FIRE on copy: decoder-only (this table) vs encoder-decoder "
          "(schemes) at 2×", TWO,
          (("extrapolation_methods", "fire+copy"), ("schemes", "fire+copy"))),
    Claim("shaw_clipping", "k = 4 and k = 2 vs k = 16 at 1.5× and on pooled (L, 2L]; k = 1 vs "
          "k = 16", ONE_FIVE,
          (("shaw_clipping", "max_relative_position=16"),
           ("shaw_clipping", "max_relative_position=4"),
           ("shaw_clipping", "max_relative_position=2"),
           ("shaw_clipping", "max_relative_position=1"))),
    Claim("t5_buckets", "8 / 16 vs 16 / 16; each vs 32 / 128 at 4×", FOUR,
          (("t5_buckets", "num_buckets=8+max_distance=16"),
           ("t5_buckets", "num_buckets=16+max_distance=16"),
           ("t5_buckets", "num_buckets=32+max_distance=128"))),
    Claim("t5_buckets", "8 / 32 vs 32 / 128 and vs 16 / 16", ONE_FIVE,
          (("t5_buckets", "num_buckets=8+max_distance=32"),
           ("t5_buckets", "num_buckets=32+max_distance=128"),
           ("t5_buckets", "num_buckets=16+max_distance=16"))),
    Claim("extrapolation_methods", "RoPE scaling on copy: YaRN's lead over dynamic NTK and "
          "plain RoPE at 1.5×", ONE_FIVE,
          (("extrapolation_methods", "rope+copy@yarn"),
           ("extrapolation_methods", "rope+copy@dynamic_ntk"),
           ("extrapolation_methods", "rope+copy"))),
    Claim("extrapolation_methods", "addition: Kerple, ALiBi and FIRE against one another", TWO,
          (("extrapolation_methods", "kerple+add_index_hints"),
           ("extrapolation_methods", "alibi+add_index_hints"),
           ("extrapolation_methods", "fire+add_index_hints"))),
    Claim("extrapolation_methods", "addition: randomized RoPE at random positions vs ALiBi "
          "at 2×", TWO,
          (("extrapolation_methods", "rope+add_index_hints+randomized@random_positions"),
           ("extrapolation_methods", "alibi+add_index_hints"))),
    Claim("extrapolation_methods", "reverse: FIRE vs ALiBi and Kerple (ALiBi's run is "
          "kazemnejad's, copied)", main_table.POOLED_2X,
          (("extrapolation_methods", "fire+reverse"), ("kazemnejad", "alibi+reverse"),
           ("extrapolation_methods", "kerple+reverse"))),
)


def run_of(row: str) -> str:
  """The trained run a row is an evaluation of (`rope+copy@yarn` -> `rope+copy`)."""
  return row.split("@")[0]


def seed_values(root: str, table: str, row: str, column: str) -> list[float]:
  """Each stored seed's value of a row on a main-table column (seeds ascending)."""
  records = compare.run_records(os.path.join(root, table), row)
  samples = main_table.samples_by_seed(records, compare.column_lengths(records, column))
  return [float(samples[s].mean()) for s in sorted(samples)]


def seed_std(values: Sequence[float]) -> float:
  """The sample std (ddof 1) of a row's seed values; 0 for one value."""
  return float(np.std(values, ddof=1)) if len(values) > 1 else 0.0


def needs_seeds(root: str, claim: Claim) -> bool:
  """Whether a row of the claim has a seed std ≥ SEED_STD_THRESHOLD with the seeds stored now."""
  return any(seed_std(seed_values(root, table, row, claim.column)) >= SEED_STD_THRESHOLD
             for table, row in claim.rows)


def runs_to_extend(root: str, claims: Sequence[Claim] = CLAIMS) -> list[tuple[str, str]]:
  """Every `(table, run)` that a claim needing seeds (`needs_seeds`) rests on, once each,
  in the order first named."""
  return list(dict.fromkeys((table, run_of(row)) for claim in claims if needs_seeds(root, claim)
                            for table, row in claim.rows))


def table_config(root: str, table: str) -> str:
  """The sweep config file a table was made with (its `table.json`)."""
  with open(os.path.join(root, table, store.TABLE_FILE)) as f:
    return json.load(f)["config"]


def command(root: str, table: str, run: str, num_seeds: int) -> list[str]:
  """The train.py command that gives a stored run `num_seeds` seeds."""
  return ["python", "train.py", "--config", table_config(root, table), "--workdir",
          f"runs/{table}", "--results_dir", os.path.join(root, table), "--runs", run,
          f"--config.num_seeds={num_seeds}"]


def estimated_seconds(root: str, table: str, run: str, num_seeds: int) -> tuple[float, float, str]:
  """(training, evaluation) seconds to add seeds up to `num_seeds`, and what that rests on."""
  infos = [i for name, i in _run_infos(root, table).items() if run_of(name) == run]
  info = next(i for i in infos if i["run"] == run)
  n = int(info["config"]["num_seeds"])
  add = max(num_seeds - n, 0)
  parts = [p for p in info.get("seed_parts") or [] if p.get("train_seconds")]
  alone = [p for p in parts if int(p.get("num_seeds", 1)) == 1]  # as `command` trains them
  if alone:
    per_seed = float(np.mean([p["train_seconds"] for p in alone]))
    basis = f"mean of its {len(alone)} seeds trained alone"
  else:
    speedup = VMAP_SPEEDUP.get(info["config"]["model"].get("arch"), float(n)) if n == 3 else n
    per_seed = float(info["train_seconds"] or 0.0) / speedup
    basis = f"its {n} vmapped seeds' time ÷ {speedup:g}"
  eval_per_seed = sum(float(i.get("eval_seconds") or 0.0) for i in infos) / n
  return add * per_seed, add * eval_per_seed, basis


def _run_infos(root: str, table: str) -> dict[str, dict]:
  """Every `runs/<name>.json` of a table, by name."""
  folder = os.path.join(root, table, "runs")
  infos = {}
  for name in sorted(os.listdir(folder)):
    with open(os.path.join(folder, name)) as f:
      info = json.load(f)
    infos[info["run"]] = info
  return infos


def check(root: str, table: str, run: str, num_seeds: int) -> str:
  """Whether the table's sweep asked for `num_seeds` adds seeds to the run: which, or why not."""
  spec = table_config(root, table)
  base, overrides = sweep_spec.load_sweep(spec)
  runs = sweep_spec.select(sweep_spec.expand(base, overrides), [run])
  (_, config), = sweep_spec.apply_command_line(runs, overrides, {"num_seeds": num_seeds})
  variants = list(sweep.eval_variants(spec, runs).get(run, {}))
  try:
    seeds = added_seeds.seeds_to_add(os.path.join(root, table), run,
                                     workdir_lib.config_json(config), variants)
  except ValueError as e:
    return f"refused: {e}"
  return f"adds seeds {seeds}" if seeds else f"holds ≥ {num_seeds} seeds already"


def markdown(root: str, num_seeds: int, *, checked: bool = False) -> str:
  """The claims with each row's seed values and std, then each run's estimate and command."""
  lines = ["| claim (notes) | column | row: seed values (std) | seeds added to its runs |",
           "|---|---|---|---|"]
  for claim in CLAIMS:
    cells = []
    for table, row in claim.rows:
      values = seed_values(root, table, row, claim.column)
      mark = " ≥" if seed_std(values) >= SEED_STD_THRESHOLD else ""
      cells.append(f"{table}/{row}: {', '.join(f'{v:.2f}' for v in values)} "
                   f"({seed_std(values):.2f}{mark})")
    verdict = "yes" if needs_seeds(root, claim) else "no: every row's std is below the bar"
    lines.append(f"| {claim.text} ({claim.notes}) | {claim.column} | {'<br>'.join(cells)} "
                 f"| {verdict} |")
  lines += ["", "| run | training | evaluation | estimate from | command |"
            + (" now |" if checked else ""), "|---|---|---|---|---|" + ("---|" if checked else "")]
  total = 0.0
  for table, run in runs_to_extend(root):
    train, evaluation, basis = estimated_seconds(root, table, run, num_seeds)
    total += train + evaluation
    cells = [f"{table}/{run}", f"{train / 60:.0f} min", f"{evaluation / 60:.0f} min", basis,
             f"`{' '.join(command(root, table, run, num_seeds))}`"]
    if checked:
      cells.append(check(root, table, run, num_seeds))
    lines.append("| " + " | ".join(cells) + " |")
  lines += ["", f"In all about {total / 3600:.1f} h on 2 CPU cores (estimated, one run at a "
            "time; seed std ≥ marks a row at or above the claim threshold "
            f"{SEED_STD_THRESHOLD:.2f})."]
  return "\n".join(lines) + "\n"


def train(root: str, num_seeds: int) -> None:
  """Runs every run's command, one at a time; stops at the first that fails (its exit status)."""
  for table, run in runs_to_extend(root):
    argv = [sys.executable, *command(root, table, run, num_seeds)[1:]]
    print(" ".join(argv[1:]), flush=True)
    status = subprocess.run(argv, check=False).returncode
    if status:
      sys.exit(status)


def main(argv: Sequence[str]) -> None:
  if len(argv) > 1:
    raise app.UsageError(f"unexpected arguments: {argv[1:]}")
  root, num_seeds = flags.FLAGS.root, flags.FLAGS.num_seeds
  if flags.FLAGS.train:
    train(root, num_seeds)
    return
  print(markdown(root, num_seeds, checked=flags.FLAGS.check), end="")


def _define_flags() -> None:
  """The flags of `main`; only a run as a program defines them (importers get none)."""
  flags.DEFINE_string("root", "results", "The results folder.")
  flags.DEFINE_integer("num_seeds", 5, "Seeds each listed run should have.")
  flags.DEFINE_bool("check", False, "Also say whether each run can take the seeds now (reads "
                    "the stored records and the sweep configs; trains nothing).")
  flags.DEFINE_bool("train", False, "Run the commands, one run at a time (hours: the list's "
                    "estimate), from the repository root.")


if __name__ == "__main__":
  _define_flags()
  errors.run(main)
