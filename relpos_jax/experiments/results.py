"""The committed results of the ablation tables: `results/<table>/`, and RESULTS.md from them.

A table is completed run by run, possibly over several sessions, so each run's
eval records are stored on their own as soon as it is evaluated:

    results/<table>/table.json          the sweep: its config file and run names, in order
    results/<table>/records/<run>.jsonl that run's eval records (every replica × length)
    results/<table>/runs/<run>.json     its config (with the training's provenance), training and
                                        eval time, machine, the evaluation's provenance, and
                                        its training curve (`curves.py`; runs stored since)
    results/<table>/extrapolation.{md,csv,jsonl}, accuracy_vs_length.png
                                        the table's report over the runs stored so far
                                        (a language-model table: lm_report's files,
                                        lm_context.{md,csv,jsonl}, bpb_vs_context.png,
                                        loss_vs_position.png, passkey.{md,csv,jsonl},
                                        passkey_heatmap.png)
    results/<table>/notes.md            hand-written: what the table shows (optional)
    results/<table>/parts/{records,runs}/<run>.seed<s>...
                                        a run trained one seed at a time (`sweep
                                        --split_seeds`): each seed's records until all
                                        are stored and merged into records/<run>.jsonl;
                                        likewise seeds added to a stored run (asked
                                        with more `num_seeds`, added_seeds.py) until
                                        all are, then appended to its records

A sweep given `--results_dir results/<table>` skips every run whose records are
there, and copies (rather than trains again) a run that another table under the
same root already stored with an identical config (`find_identical_run`): the
randomized table's runs without randomization are the schemes table's, and the
decoder-only NoPE, T5 and ALiBi runs on copy and reverse are shared by the
Kazemnejad and extrapolation-methods tables. A copy says where it came from
(`reused_from` in its `runs/<run>.json`). `python -m relpos_jax.results` renders
RESULTS.md from every table folder, and README.md's headline table between its
markers (`--check` fails if either committed file differs), so every number in it
traces to a committed record, and anyone can re-render or diff it.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any, Sequence

from absl import app
from absl import flags

from relpos_jax.experiments import lm_report
from relpos_jax.experiments import main_table
from relpos_jax.experiments import precision_calibration
from relpos_jax.experiments import records as records_lib
from relpos_jax.experiments import report
from relpos_jax.experiments import scale_figures
from relpos_jax.experiments import seed_parts
from relpos_jax.experiments import store
from relpos_jax.experiments import summary
from relpos_jax.experiments import tables

Record = tables.Record
TABLE_FILE = store.TABLE_FILE
NOTES_FILE = "notes.md"
RESULTS_MD = "RESULTS.md"
README_MD = "README.md"
HEADLINE_BEGIN, HEADLINE_END = "<!-- headline:begin -->", "<!-- headline:end -->"
# Figures a table draws beyond its report, by table folder: a module with
# `write_figures(records, run_infos, table_dir)` and the `FIGURE_FILES` it writes; one
# that also has `markdown(records, run_infos, runs)` (`runs`: table.json's, stored or
# not) adds that text to the table's section of RESULTS.md, even before any run is stored.
TABLE_FIGURES = {"scale": scale_figures, "precision": precision_calibration}
HEADER = """# Results

Every table below is rendered from the eval records committed under `results/<table>/`
by `python -m relpos_jax.results` (`make results`); each run's own records, config,
training time, package versions and machine are in `results/<table>/records/` and
`results/<table>/runs/`. Protocol (docs/evaluation.md): the evaluated checkpoint of each
seed is the one with the best exact match on a held-out validation set disjoint from
training; each row is marked † when a seed's validation exact match *at the positions that
row is decoded at* is below `converged_at`: it did not learn the task there, so its
columns are not read as extrapolation. Every cell is a mean over seeds with its 95%
interval (seeds and eval examples, relpos_jax/experiments/stats.py); every table pools exact
match over the same ranges, (L, 2L] and (L, 4L] (L: the longest training length), and SCAN
also over its whole test split. Compare two runs with `python -m relpos_jax.compare`.
"""


def read_table(table_dir: str) -> list[Record]:
  """Every stored run's records, runs in sweep order (`table.json`), then any others by name.

  A run's variants (`<run>@...` records the sweep does not list, such as
  `<run>@random_positions`) follow it.

  Args:
    table_dir: `results/<table>`.

  Returns:
    The records.
  """
  directory = os.path.join(table_dir, "records")
  stored = sorted(os.listdir(directory)) if os.path.isdir(directory) else []
  order = []
  meta = os.path.join(table_dir, TABLE_FILE)
  if os.path.exists(meta):
    with open(meta) as f:
      order = [f"{store.file_name(r)}.jsonl" for r in json.load(f)["runs"]]
  variants = {n: [v for v in stored if v.startswith(n[:-len(".jsonl")] + "@") and v not in order]
              for n in order}  # `<run>@random_positions` right after `<run>`
  names = [v for n in order if n in stored for v in [n, *variants[n]]]
  names += [n for n in stored if n not in names]
  records = []
  for name in names:
    records += records_lib.read_jsonl(os.path.join(directory, name))
  return records


def table_status(table_dir: str) -> tuple[int, int]:
  """(runs stored, runs in the sweep) of a table folder.

  A run counts once, when all its `record_names` are stored (eval-time variants
  from `table.json`); stored runs the sweep does not list count in both.
  """
  meta = os.path.join(table_dir, TABLE_FILE)
  runs, variants = [], {}
  if os.path.exists(meta):
    with open(meta) as f:
      data = json.load(f)
    runs, variants = data["runs"], data.get("eval_variants", {})
  configs = {}
  directory = os.path.join(table_dir, "runs")
  for name in sorted(os.listdir(directory)) if os.path.isdir(directory) else []:
    with open(os.path.join(directory, name)) as f:
      info = json.load(f)
    if not info.get("variant_of"):
      configs[info["run"]] = info["config"]
  done = sum(run in configs and store.has_records(table_dir, run, configs[run], variants.get(run, ()))
             for run in runs)
  extra = sum(run not in runs and store.has_records(table_dir, run, configs[run]) for run in configs)
  return done + extra, len(runs) + extra


def write_table_report(table_dir: str) -> list[Record]:
  """Writes the table's report (`report.REPORT_FILES`) over the runs stored so far.

  A table of language-model records gets `lm_report`'s files instead (bits per
  byte by context and its figures, and the passkey report of its passkey runs).

  Args:
    table_dir: `results/<table>`.

  Returns:
    The records it was made from (empty: nothing written).
  """
  records = read_table(table_dir)
  if lm_report.is_lm_records(records):
    records = lm_report.from_stored(records)
    lm_report.write_reports(records, table_dir)
  elif records:
    report.write_report(records, table_dir)
    if figures := TABLE_FIGURES.get(_table_name(table_dir)):
      figures.write_figures(records, run_infos(table_dir), table_dir)
  return records


def _table_name(table_dir: str) -> str:
  """The table a folder holds: its name (`results/scale` -> `scale`)."""
  return os.path.basename(os.path.normpath(table_dir))


def _run_times(table_dir: str) -> str:
  """One sentence with the table's summed training and eval time and its machine."""
  directory = os.path.join(table_dir, "runs")
  infos = []
  for name in sorted(os.listdir(directory)) if os.path.isdir(directory) else []:
    with open(os.path.join(directory, name)) as f:
      infos.append(json.load(f))
  if not infos:
    return ""
  evaluation = sum(i.get("eval_seconds") or 0.0 for i in infos)
  infos = [i for i in infos if not i.get("variant_of")]  # a run's other evaluations
  train = sum(i.get("train_seconds") or 0.0 for i in infos)
  reused = sum(bool(i.get("reused_from")) for i in infos)
  cpus = sorted({f"{i['machine']['cpus']} × {i['machine']['processor']}" for i in infos})
  steps = sorted({int(i["config"]["num_steps"]) for i in infos})
  batch = sorted({int(i["config"]["batch_size"]) for i in infos})
  return (f"Budget: {', '.join(map(str, steps))} steps of batch {', '.join(map(str, batch))}. "
          f"Run time: {train / 60:.0f} min of training steps and {evaluation / 60:.0f} min of "
          f"evaluation in all, on {'; '.join(cpus)} CPU cores."
          + (f" {reused} of the {len(infos)} runs are another table's identical runs, reused "
             "(`reused_from` in their runs/<run>.json); their time is counted here too."
             if reused else ""))


def render(root: str) -> str:
  """RESULTS.md's text from every table folder under `root` (alphabetical).

  Args:
    root: the results folder.

  Returns:
    The markdown: the header, then per table its title, status, notes, run
    time, its own section (a `TABLE_FIGURES` module's `markdown`), exact-match
    table and a pointer to its failure anatomy and figures.
  """
  names = [t for t in sorted(os.listdir(root)) if os.path.isdir(os.path.join(root, t))] if (
      os.path.isdir(root)) else []
  folder = os.path.basename(os.path.normpath(root))  # links relative to RESULTS.md
  contents = ["## Contents", "", f"- [Summary: who extrapolates where](#summary) "
              f"(`{folder}/{summary.SUMMARY_MD}`, figure `{folder}/{summary.SUMMARY_PNG}`)"]
  for table in names:
    done, total = table_status(os.path.join(root, table))
    contents.append(f"- [{table}](#{table}): {done} of {total} runs")
  summary_md = summary.markdown(summary.summary_cells(root)).replace(
      "### Summary: who extrapolates where", "## Summary", 1)
  parts = [HEADER, "\n".join(contents) + "\n", summary_md,
           f"![summary]({folder}/{summary.SUMMARY_PNG})\n"]
  for table in names:
    table_dir = os.path.join(root, table)
    if not os.path.isdir(table_dir):
      continue
    records = read_table(table_dir)
    done, total = table_status(table_dir)
    meta_path = os.path.join(table_dir, TABLE_FILE)
    config, sweep_runs = "", []
    if os.path.exists(meta_path):
      with open(meta_path) as f:
        meta = json.load(f)
      config, sweep_runs = meta["config"], meta["runs"]
    stored_parts = seed_parts.stored_parts(table_dir)
    partly = [f"{run} (seed{'s' * (len(done_seeds) > 1)} "
              f"{', '.join(map(str, done_seeds))} of {len(seeds)})"
              for run, (done_seeds, seeds) in stored_parts.items()
              if not store.has_run(table_dir, run)]
    lines = [f"## {table}", "",
             f"`{config}`: {done} of {total} runs stored"
             + ("." if done == total else " (the table is incomplete).")
             + (f" Trained in seed parts, seeds stored so far (`{seed_parts.PARTS_DIR}/`, not in "
                f"the table until all are): {'; '.join(partly)}." if partly else "")
             + _adding_seeds(table_dir, stored_parts)]
    notes = os.path.join(table_dir, NOTES_FILE)
    if os.path.exists(notes):
      with open(notes) as f:
        lines += ["", f.read().strip()]
    times = _run_times(table_dir)
    if times:
      lines += ["", times]
    if section := getattr(TABLE_FIGURES.get(table), "markdown", None):
      lines += ["", section(records, run_infos(table_dir), sweep_runs).rstrip()]
    if lm_report.is_lm_records(records):
      lines += ["", lm_report.results_markdown(lm_report.from_stored(records), table).rstrip()]
    elif records:
      lines += ["", main_table.table(records, run_infos=run_infos(table_dir)).rstrip(),
                "", f"Per-length values, failure anatomy and the other metrics: "
                f"`results/{table}/extrapolation.md` and `.csv`; figures: "
                f"`results/{table}/{report.REPORT_FILES['plot']}`, "
                f"`results/{table}/failure_anatomy*.png`"
                + "".join(f", `results/{table}/{name}`" for name in
                          getattr(TABLE_FIGURES.get(table), "FIGURE_FILES", {}).values())
                + "."]
    lines.append("")
    parts.append("\n".join(lines))
  return "\n".join(parts)


def _adding_seeds(table_dir: str, parts: dict[str, tuple[list[int], list[int]]]) -> str:
  """A sentence naming stored runs whose added seeds (`added_seeds`) are partly stored; or ""."""
  infos, adding = run_infos(table_dir), []
  for run, (done_seeds, seeds) in parts.items():
    config = (infos.get(run) or {}).get("config")
    if config and int(config["num_seeds"]) < len(seeds):
      first = int(config["seed"]) + int(config["num_seeds"])
      added = [s for s in done_seeds if s >= first]
      adding.append(f"{run} ({config['num_seeds']} seeds; of seeds {first}–{seeds[-1]}: "
                    f"{', '.join(map(str, added)) or 'none'})")
  return (f" Seeds being added to stored runs, stored so far (`{seed_parts.PARTS_DIR}/`, appended "
          f"once all are): {'; '.join(adding)}." if adding else "")


def run_infos(table_dir: str) -> dict[str, dict[str, Any]]:
  """Every stored run's `runs/<run>.json` of a table folder, by run name."""
  folder = os.path.join(table_dir, "runs")
  infos = {}
  for name in sorted(os.listdir(folder)) if os.path.isdir(folder) else []:
    if name.endswith(".json"):
      with open(os.path.join(folder, name)) as f:
        info = json.load(f)
      infos[info.get("run", name[:-len(".json")])] = info
  return infos


def render_headline(root: str) -> str:
  """README.md's headline block: the summary table (schemes × tasks) and its figure.

  Args:
    root: the results folder.

  Returns:
    The markdown between the README's headline markers.
  """
  text = summary.markdown(summary.summary_cells(root)).replace(
      "### Summary: who extrapolates where\n\n", "", 1).rstrip()
  folder = os.path.basename(os.path.normpath(root))  # the link is relative to the README
  return f"![summary: who extrapolates where]({folder}/{summary.SUMMARY_PNG})\n\n{text}"


def with_headline(readme: str, headline: str) -> str:
  """`readme` with the text between its headline markers replaced by `headline`."""
  begin, end = readme.index(HEADLINE_BEGIN), readme.index(HEADLINE_END)
  return readme[:begin + len(HEADLINE_BEGIN)] + "\n" + headline + "\n" + readme[end:]


def main(argv: Sequence[str]) -> None:
  """`python -m relpos_jax.results [--root results] [--out RESULTS.md] [--check]`."""
  if len(argv) > 1:
    raise app.UsageError(f"unexpected arguments: {argv[1:]}")
  root, out = flags.FLAGS.root, flags.FLAGS.out
  with open(README_MD) as f:
    readme = f.read()
  readme_text = with_headline(readme, render_headline(root))
  if flags.FLAGS.check:
    with open(out) as f:
      summary_path = os.path.join(root, summary.SUMMARY_MD)
      stored_summary = open(summary_path).read() if os.path.exists(summary_path) else None
      if (f.read() != render(root) or readme != readme_text
          or stored_summary != summary.markdown(summary.summary_cells(root))):
        sys.exit(f"{out}, {README_MD} or the summary differs from the rendering of {root}/: run "
                 "`python -m relpos_jax.results`")
    return
  if flags.FLAGS.reports:
    for table in sorted(os.listdir(root)) if os.path.isdir(root) else []:
      write_table_report(os.path.join(root, table))
  with open(out, "w") as f:
    f.write(render(root))
  with open(README_MD, "w") as f:
    f.write(readme_text)
  summary.write(root)


def _define_flags() -> None:
  """The flags of `main`; only a run as a program defines them (importers get none)."""
  flags.DEFINE_string("root", "results", "The results folder (one subfolder per table).")
  flags.DEFINE_string("out", RESULTS_MD, "The markdown file to write.")
  flags.DEFINE_bool("check", False, "Only check that --out equals the rendering (exit 1 if not).")
  flags.DEFINE_bool("reports", True, "Also rewrite each table's report files.")


if __name__ == "__main__":
  _define_flags()
  app.run(main)
