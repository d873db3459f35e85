"""benchmarks/RESULTS.md from the records of a run (`benchmarks.run.measure`).

Only the figures and the settings they were measured with are rendered here;
what each column means and what bounds each figure is in docs/performance.md.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from benchmarks import mixed_precision
from benchmarks import schemes

DOCS = "../docs/performance.md"  # relative to benchmarks/RESULTS.md
TRAIN_COLUMNS = ("L", "batch", "scheme", "step ms", "× none", "model GFLOP", "XLA GFLOP",
                 "GFLOP/s", "% of matmul", "temp MiB", "mem × none", "compile s")
DECODE_COLUMNS = ("L", "batch", "new tokens", "scheme", "cached tok/s", "uncached tok/s",
                  "cached ÷ uncached", "matmul-bound tok/s", "% of bound", "compile s")
SEEDS_COLUMNS = ("seeds", "step ms", "× 1 seed", "ms per seed-step")
PEERS_TITLE = "This project vs HF T5 (PyTorch eager)"
PEERS_COLUMNS = ("", "this project (JAX)", "HF T5 (PyTorch eager)", "this project's speed-up")
RPE_TITLE = "This project vs DeepMind's randomized_positional_encodings"
RPE_COLUMNS = ("this project", "theirs", "ours 1 seed ms", "ours N seeds ms",
               "ours per seed ms", "theirs ms", "1 seed ÷ theirs", "per seed ÷ theirs")

# Why a target can miss on this machine (shown beside a missed target).
BOUNDS = {
    "train": f"bounded by XLA:CPU code generation, not by the model code: see [docs]({DOCS})",
    "decode": f"memory- and single-core-bound steps: see [docs]({DOCS})",
    "seeds": f"one replica already uses both cores as fully as several do: see [docs]({DOCS})",
    "rpe": f"the step is compute-bound on 2 cores, so N seeds cost nearly N× one: see "
           f"[docs]({DOCS}#this-project-vs-deepminds-randomized_positional_encodings)",
    "bf16": f"the dots XLA:CPU runs natively in bf16 and what is left in float32: see "
            f"[docs]({DOCS}#native-bf16-dots)",
}
# Same-run ratios against HF T5 in PyTorch (float32, eager): the most our step may take
# relative to HF's, per compute dtype of ours, and the least our decoding rate may reach.
PEER_STEP_LIMIT = {"float32": 1.2, "bfloat16": 0.8}
PEER_DECODE_LIMIT = {"float32": 2.0, "bfloat16": 1.5}
# Issues #14 and #52: our train step per seed (N seeds in one vmapped step, / N) at most
# this fraction of the update of DeepMind's randomized_positional_encodings, same size.
RPE_PER_SEED_LIMIT = 0.6
# Issue #52: a bfloat16 train step at most this fraction of the float32 one (same run).
BF16_STEP_LIMIT = 0.5
PRECISION_TITLE = "bfloat16 vs float32 (same programs, same run)"
PRECISION_COLUMNS = ("program", "batch", "float32", "bfloat16", "bf16 time ÷ f32 time",
                     "dots in bf16 (bf16 run)", "bf16 dots converted to f32")


def fmt(x, spec=".1f", none="—"):
  """A number, or a dash for None."""
  return none if x is None else format(x, spec)


def markdown_table(columns: Sequence[str], rows: Sequence[Sequence]) -> str:
  """A GitHub markdown table."""
  lines = ["| " + " | ".join(columns) + " |", "|" + "|".join("---" for _ in columns) + "|"]
  lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
  return "\n".join(lines) + "\n"


def relative_time(row: dict, base: dict | None) -> float | None:
  """`row`'s time over `base`'s, each in units of its interleaved reference matmul.

  Both are measured against matmuls run between their own timed runs, so a
  neighbour's load that slows one row more than another cancels to first order.
  """
  if not base or not row["seconds"] or not base["seconds"]:
    return None
  if not row.get("matmul_rate") or not base.get("matmul_rate"):
    return row["seconds"] / base["seconds"]
  return (row["seconds"] * row["matmul_rate"]) / (base["seconds"] * base["matmul_rate"])


def cached_speedup(row: dict) -> float | None:
  """Cached over uncached tokens/s, each in units of its interleaved reference matmul."""
  if not row["uncached_tok_s"]:
    return None
  ratio = row["cached_tok_s"] / row["uncached_tok_s"]
  if row.get("uncached_matmul_rate") and row.get("matmul_rate"):
    ratio *= row["uncached_matmul_rate"] / row["matmul_rate"]
  return ratio


def train_table(rows: list[dict]) -> str:
  """The train-step table; ratios against `none` at the same length."""
  none = {r["L"]: r for r in rows if r["scheme"] == "none"}
  out = []
  for r in rows:
    base = none.get(r["L"])
    ratio = relative_time(r, base)
    mem_ratio = (r["temp_bytes"] / base["temp_bytes"]
                 if base and base["temp_bytes"] and r["temp_bytes"] is not None else None)
    rate = r["model_flops"] / r["seconds"] if r["seconds"] else None
    frac = 100 * rate / r["matmul_rate"] if rate else None
    out.append([r["L"], r["batch"], r["scheme"], fmt(r["seconds"] and 1e3 * r["seconds"]),
                fmt(ratio, ".2f"), fmt(r["model_flops"] / 1e9),
                fmt(r["xla_flops"] and r["xla_flops"] / 1e9), fmt(rate and rate / 1e9, ".0f"),
                fmt(frac, ".0f"), fmt(r["temp_bytes"] and r["temp_bytes"] / 2 ** 20),
                fmt(mem_ratio, ".2f"), fmt(r["compile_s"])])
  return markdown_table(TRAIN_COLUMNS, out)


def decode_table(rows: list[dict]) -> str:
  """The decoding table."""
  out = []
  for r in rows:
    compile_s = fmt(r["compile_s"]) + (f" / {r['uncached_compile_s']:.1f}"
                                        if r["uncached_compile_s"] else "")
    out.append([r["L"], r["batch"], r["steps"], r["scheme"], fmt(r["cached_tok_s"], ".0f"),
                fmt(r["uncached_tok_s"], ".0f"), fmt(cached_speedup(r), ".1f"),
                fmt(r["bound_tok_s"], ".0f"),
                fmt(100 * r["cached_tok_s"] / r["bound_tok_s"], ".0f"), compile_s])
  return markdown_table(DECODE_COLUMNS, out)


def seeds_table(rows: list[dict]) -> str:
  """The multi-seed table."""
  return markdown_table(SEEDS_COLUMNS, [
      [r["seeds"], fmt(1e3 * r["seconds"], ".2f"), fmt(relative_time(r, rows[0]), ".2f"),
       fmt(1e3 * r["seconds"] / r["seeds"], ".2f")] for r in rows])


def by_dtype(value, dtype: str = "float32") -> dict[str, list]:
  """Timings as `{dtype: [s, ...]}`; a record older than #52 (one list, one dtype) is wrapped."""
  return value if isinstance(value, dict) else {dtype: value}


def peer_figures(record: dict) -> dict:
  """Medians of a peers record: train step seconds and decoding tokens/s of the peer, and
  `ours`: `{dtype: {"train_s", "tok_s"}}`."""
  tokens = record["batch"] * record["new_tokens"]
  dtype = record.get("ours_dtype", "float32")
  train, dec = by_dtype(record["ours_train_s"], dtype), by_dtype(record["ours_decode_s"], dtype)
  return {"theirs_train_s": float(np.median(record["theirs_train_s"])),
          "theirs_tok_s": tokens / float(np.median(record["theirs_decode_s"])),
          "ours": {d: {"train_s": float(np.median(train[d])),
                       "tok_s": tokens / float(np.median(dec[d]))} for d in train}}


def peers_section(record: dict, machine: dict) -> list[str]:
  """The comparison with HF T5, or the note saying why it was skipped."""
  lines = [f"## {PEERS_TITLE}", ""]
  if "skipped" in record:
    return lines + [
        f"Skipped: torch and transformers are not importable here ({record['skipped']}). "
        "They are an optional extra: `pip install -r benchmarks/requirements-peers.txt` "
        "(or `make install-peers`), then rerun `make bench`.", ""]
  f = peer_figures(record)
  dtypes = list(f["ours"])
  lines += [
      f"HuggingFace transformers {record['transformers']} `T5ForConditionalGeneration` "
      f"(random init from a `T5Config` at the Setup's shape), torch {record['torch']}, "
      f"eager, float32, {record['torch_threads']} threads; this project with the "
      f"`{record['scheme']}` scheme in {' and '.join(dtypes)} (compute dtype; float32 "
      f"parameters); all on the same tokens, L = {record['L']} "
      f"(source = target), batch {record['batch']}, on {machine['cores']} cores. "
      f"Same run, alternating: each round times ours in every dtype, then HF's "
      f"({record['train_runs']} train steps and {record['decode_runs']} decodings each, "
      f"after warm-ups); medians. Train step: forward + backward + clipping + AdamW. "
      f"Decoding: cached greedy, exactly {record['new_tokens']} new tokens per row "
      "(`generate(use_cache=True, min_new_tokens=L, max_new_tokens=L, do_sample=False)`; "
      "ours with EOS forbidden before the end). How the peer is built: "
      f"[docs]({DOCS}#this-project-vs-hf-t5).", ""]
  rows = [[f"train step ms ({d})", fmt(1e3 * f["ours"][d]["train_s"]),
           fmt(1e3 * f["theirs_train_s"]),
           fmt(f["theirs_train_s"] / f["ours"][d]["train_s"], ".2f") + "×"] for d in dtypes]
  rows += [[f"cached decode tok/s ({d})", fmt(f["ours"][d]["tok_s"], ".0f"),
            fmt(f["theirs_tok_s"], ".0f"),
            fmt(f["ours"][d]["tok_s"] / f["theirs_tok_s"], ".2f") + "×"] for d in dtypes]
  return lines + [markdown_table(PEERS_COLUMNS, rows)]


def rpe_figures(row: dict, num_seeds: int, dtype: str = "float32") -> dict[str, float]:
  """Medians of one pair of an rpe record (seconds), ours in `dtype`, and both ratios to theirs."""
  f = {k: float(np.median(by_dtype(row[k], row.get("ours_dtype", "float32"))[dtype]))
       for k in ("ours_1_s", "ours_n_s")}
  f["theirs_s"] = float(np.median(row["theirs_s"]))
  f["ours_per_seed_s"] = f["ours_n_s"] / num_seeds
  f["one_ratio"] = f["ours_1_s"] / f["theirs_s"]
  f["per_seed_ratio"] = f["ours_per_seed_s"] / f["theirs_s"]
  return f


def rpe_dtypes(row: dict) -> list[str]:
  """Our compute dtypes in one pair of an rpe record (float32 in records older than #52)."""
  return row.get("ours_dtypes") or [row.get("ours_dtype", "float32")]


def rpe_section(record: dict, machine: dict) -> list[str]:
  """The comparison with DeepMind's randomized_positional_encodings, or why it was skipped."""
  lines = [f"## {RPE_TITLE}", ""]
  if "skipped" in record:
    return lines + [
        f"Skipped: {record['skipped']}. It is optional: install dm-haiku and the other "
        "dependencies of their code (`pip install -r benchmarks/requirements-peers.txt`, or "
        "`make install-peers`), check out "
        "https://github.com/google-deepmind/randomized_positional_encodings, then run "
        "`python -m benchmarks.run --parts=rpe --rpe_repo PATH` (or set `RPE_REPO=PATH`).", ""]
  n, rows = record["num_seeds"], record["pairs"]
  commit = record.get("commit") or (f"the checkout is not a git work tree; this benchmark "
                                    f"follows commit {record['commit_read'][:12]}")
  text = (
      f"Their code: {record['url']} ({commit}), imported from a local checkout, dm-haiku "
      f"{record['haiku']}. Timed: their jitted `experiments/training.py:_update_parameters` "
      "(forward + backward + `clip_by_global_norm(1.0)` + `adam(1e-3)`) of their "
      "`transformer_encoder` wrapped by `make_model_with_empty_targets` (bidirectional; the "
      f"input tape, then L empty output cells), on `{record['task']}` batches sampled before "
      "timing and cycled through (sampling is not timed); ours, `jit(vmap(train_step))` as "
      f"`train_and_evaluate` runs it, for 1 seed and for {n} seeds, of the decoder-only "
      f"model (`{record['config']}`: causal, `input SEP target`) on its step-0 copy batch. ")
  if rows:
    size, first = rows[0]["size"], rows[0]
    layers = f"{size['num_layers']} layer" + "s" * (size["num_layers"] != 1)
    text += (
        f"Both: {layers}, d_model {size['d_model']}, {size['num_heads']} heads of "
        f"{size['head_dim']}, d_ff {size['d_ff']}, dropout {size['dropout']:g}, batch "
        f"{size['batch']}, L = {size['L']} ({first['theirs_tokens']} tokens per row theirs, "
        f"{first['ours_tokens']} ours); randomized positions (ours) and noisy encodings "
        f"(theirs) drawn from a range of {size['max_random_position']}. ")
  text += (
      f"Same run, on {machine['cores']} cores: each of {record['runs']} rounds (after "
      f"{record['warmup']} warm-up rounds) runs our 1-seed step and our {n}-seed step (in "
      "each of our compute dtypes) and their float32 update once each; medians. Per seed = the N-seed step ÷ N. What else differs between "
      f"the two: [docs]({DOCS}#this-project-vs-deepminds-randomized_positional_encodings).")
  table = []
  for row, dtype in ((r, d) for r in rows for d in rpe_dtypes(r)):
    f = rpe_figures(row, n, dtype)
    table.append([f"`{row['ours']}` ({dtype})", f"`{row['theirs']}`", fmt(1e3 * f["ours_1_s"]),
                  fmt(1e3 * f["ours_n_s"]), fmt(1e3 * f["ours_per_seed_s"]),
                  fmt(1e3 * f["theirs_s"]), fmt(f["one_ratio"], ".2f") + "×",
                  fmt(f["per_seed_ratio"], ".2f") + "×"])
  columns = tuple(c.replace("N seeds", f"{n} seeds") for c in RPE_COLUMNS)
  return lines + [text, "", markdown_table(columns, table)]


def _program_label(record: dict, name: str) -> str:
  """What one program of a precision record is, in words."""
  if name == "default":
    return (f"encoder-decoder train step at the Setup's shape, `{record['scheme']}`, "
            f"L={record['L']}, batch {record['batch']}")
  if name == "seeds":
    return f"`{record['seeds_config']}`, {record['num_seeds']} seeds vmapped"
  return (f"cached greedy decoding at the Setup's shape, `{record['scheme']}`, "
          f"{record['L']} new tokens")


def _dots_cell(counts: dict) -> str:
  """`n of m` dots bf16 × bf16 in one compiled program (— where not counted)."""
  total = sum(v for k, v in counts.items() if k != "converted")
  return f"{counts.get('bf16 x bf16', 0)} of {total}" if total else "—"


def precision_section(record: dict) -> list[str]:
  """The bfloat16-vs-float32 comparison of the `precision` part."""
  auto = record["auto"]
  lines = [f"## {PRECISION_TITLE}", "",
           "Each program compiled twice, identical but the compute dtype (`model.dtype`; "
           "parameters, optimizer state, softmax, norms, loss and positional terms float32 "
           "either way), and timed alternately: each round one float32 run, one bfloat16 "
           "run; medians. Dots counted in the compiled HLO (`benchmarks/dots.py`): "
           "`converted` are dots the program asked for in bf16 that XLA:CPU runs in float32. "
           f"`model.dtype=auto` here: {auto['auto']} ({auto['reason']}). "
           f"[docs]({DOCS}#native-bf16-dots).", ""]
  rows = []
  for row in record["programs"]:
    med = {d: float(np.median(row["seconds"][d])) for d in mixed_precision.DTYPES}
    if row["program"] == "decode":
      cell = lambda d: f"{row['tokens'] / med[d]:.0f} tok/s"
      batch = f"{record['batch']}"
    else:
      cell = lambda d: f"{1e3 * med[d]:.1f} ms"
      batch = row.get("batch", f"{record['batch']}x{record['L']}+{record['L']}")
    rows.append([_program_label(record, row["program"]), batch, cell("float32"),
                 cell("bfloat16"), f"{med['bfloat16'] / med['float32']:.2f}×",
                 _dots_cell(row["dots"]["bfloat16"]),
                 str(row["dots"]["bfloat16"].get("converted", 0)) if row["dots"]["bfloat16"]
                 else "—"])
  return lines + [markdown_table(PRECISION_COLUMNS, rows)]


def targets(results: dict) -> list[tuple[str, str, bool, str]]:
  """(target, measured, holds, why it can miss) for each of the issue's targets covered."""
  train, dec, seeds = results["train"], results["decode"], results["seeds"]
  settings = results["settings"]
  if not settings["lengths"]:
    return []
  first, longest = settings["lengths"][0], settings["lengths"][-1]
  get = lambda rows, scheme, L: next((r for r in rows if r["scheme"] == scheme and r["L"] == L),
                                     None)
  out = []
  t5 = get(train, "t5", first)
  if t5 and t5["seconds"]:
    frac = t5["model_flops"] / t5["seconds"] / t5["matmul_rate"]
    out.append((f"train step, t5, L={first}: ≥ 70% of the matmul FLOP/s", f"{100 * frac:.0f}%",
                frac >= 0.70, BOUNDS["train"]))
  none = get(train, "none", first)
  for scheme, limit in (("t5", 1.15), ("alibi", 1.15), ("rope", 1.15), ("shaw", 1.5),
                        ("xl", 1.5)):
    r = get(train, scheme, first)
    ratio = relative_time(r, none) if r else None
    if ratio is not None:
      out.append((f"train step, {scheme}, L={first}: ≤ {limit}× none", f"{ratio:.2f}×",
                  ratio <= limit, ""))
  sh, nv, no = (get(train, "shaw", longest), get(train, schemes.NAIVE_SHAW, longest),
                get(train, "none", longest))
  if sh and no and sh["temp_bytes"] and no["temp_bytes"]:
    ratio = sh["temp_bytes"] / no["temp_bytes"]
    naive = (f"; the naive gather form: {nv['temp_bytes'] / no['temp_bytes']:.2f}×"
             if nv and nv["temp_bytes"] else "")
    out.append((f"Shaw peak temporary memory, L={longest}: ≤ 2× none",
                f"{ratio:.2f}×{naive}", ratio <= 2.0, ""))
  for r in dec:
    if r["L"] == first:
      frac = r["cached_tok_s"] / r["bound_tok_s"]
      out.append((f"cached decoding, {r['scheme']}, L={first}: ≥ 40% of matmul-bound",
                  f"{100 * frac:.0f}%", frac >= 0.40, BOUNDS["decode"]))
      if r["uncached_tok_s"]:
        ratio = cached_speedup(r)
        out.append((f"cached decoding, {r['scheme']}, {r['steps']} new tokens: ≥ 5× "
                    "recomputation", f"{ratio:.1f}×", ratio >= 5.0, ""))
  prec = results.get("precision")
  if prec:
    figs = mixed_precision.figures(prec)
    for name in ("default", "seeds"):
      if name in figs:
        ratio = figs[name]["ratio"]
        out.append((f"bfloat16 train step ≤ {BF16_STEP_LIMIT:g}× the float32 one, "
                    f"{_program_label(prec, name)}", f"{ratio:.2f}×",
                    ratio <= BF16_STEP_LIMIT, BOUNDS["bf16"]))
  peer = results.get("peers")
  if peer and "skipped" not in peer:
    f = peer_figures(peer)
    for dtype, mine in f["ours"].items():
      ratio = mine["train_s"] / f["theirs_train_s"]
      limit = PEER_STEP_LIMIT.get(dtype)
      if limit is not None:
        out.append((f"train step ({dtype}), L={peer['L']}: ≤ {limit}× HF T5's float32 step "
                    "time", f"{ratio:.2f}×", ratio <= limit, BOUNDS["train"]))
    for dtype, mine in f["ours"].items():
      speedup = mine["tok_s"] / f["theirs_tok_s"]
      limit = PEER_DECODE_LIMIT.get(dtype)
      if limit is not None:
        out.append((f"cached decoding ({dtype}), {peer['new_tokens']} new tokens: ≥ "
                    f"{limit:g}× HF T5's generate", f"{speedup:.2f}×", speedup >= limit,
                    BOUNDS["decode"]))
  rpe = results.get("rpe")
  if rpe and "skipped" not in rpe:
    for row, dtype in ((r, d) for r in rpe["pairs"] for d in rpe_dtypes(r)):
      f = rpe_figures(row, rpe["num_seeds"], dtype)
      out.append((f"train step per seed ({rpe['num_seeds']} seeds vmapped, {dtype}), "
                  f"{row['ours']}, {row['ours_tokens']} tokens: ≤ {RPE_PER_SEED_LIMIT:g}× the "
                  f"update of DeepMind's RPE code ({row['theirs']}, {row['theirs_tokens']} "
                  "tokens)", f"{f['per_seed_ratio']:.2f}×",
                  f["per_seed_ratio"] <= RPE_PER_SEED_LIMIT, BOUNDS["rpe"]))
  if len(seeds) > 1:
    ratio = relative_time(seeds[-1], seeds[0])
    out.append((f"{settings['num_seeds']} seeds in one vmapped step: ≤ 2× one seed",
                f"{ratio:.2f}×", ratio <= 2.0, BOUNDS["seeds"]))
  return out


def _machine(results: dict) -> list[str]:
  """The Machine section."""
  info, rates, size = results["info"], results["matmul_rates"], results["settings"]["matmul_size"]
  lines = [
      "## Machine", "",
      f"* CPU: {info['cpu']}, {info['cores']} cores available to the process; "
      f"{info['platform']}, Python {info['python']}",
      f"* JAX {info['jax']}, jaxlib {info['jaxlib']}; backend {info['backend']}; default "
      "matmul precision, no XLA flags",
  ]
  prec = results.get("precision")
  if prec:
    lines.append(f"* AMX / `model.dtype=auto` here: {prec['auto']['auto']} "
                 f"({prec['auto']['reason']})")
  peers = results.get("peers")
  if peers and "skipped" not in peers:
    lines.append(f"* Peer: torch {peers['torch']} ({peers['torch_threads']} intra-op, "
                 f"{peers['torch_interop_threads']} inter-op threads), transformers "
                 f"{peers['transformers']}")
  rpe = results.get("rpe")
  if rpe and "skipped" not in rpe:
    lines.append(f"* RPE peer: dm-haiku {rpe['haiku']}, their code from {rpe['url']} at "
                 f"{rpe.get('commit') or 'a commit unknown here (not a git work tree)'}")
  lines.append(f"* Load average (1, 5, 15 min) at start: {info['load_start']}; at end: "
               f"{info['load_end']}")
  if rates:
    rate = float(np.median(rates))
    lines.append(f"* Reference matmul: `{size}×{size} @ {size}×{size}` float32, jitted, "
                 f"measured {len(rates)} times in this process: median {rate / 1e9:.0f} "
                 f"GFLOP/s (min {min(rates) / 1e9:.0f}, max {max(rates) / 1e9:.0f}).")
  return lines + [""]


def _setup(results: dict) -> list[str]:
  """The Setup section: the settings the figures were measured with."""
  s = results["settings"]
  shape = schemes.Shape(**s["shape"])
  lines = ["## Setup", ""]
  if {"schemes", "precision", "peers"} & set(s["parts"]):  # seeds, rpe: their own models
    lines.append(
        f"* Model: encoder-decoder, d_model {shape.d_model}, {shape.num_heads} heads of "
        f"{shape.head_dim}, {shape.num_encoder_layers} encoder + {shape.num_decoder_layers} "
        f"decoder layers, d_ff {shape.d_ff}, vocab {shape.vocab_size}, {shape.dtype} compute "
        "(float32 parameters), RMSNorm, tied "
        "embeddings; each scheme with its default config (a `learned` table grown to L rows); "
        "AdamW (`optim.make_optimizer`: warmup + cosine, global-norm clipping).")
    if s["lengths"]:
      batches = ", ".join(f"L={L}: {schemes.batch_at(s['batch'], s['tokens_per_batch'], L)}"
                          for L in s["lengths"])
      lines.append(f"* Lengths L (source = target): {', '.join(map(str, s['lengths']))}. "
                   f"Batch: {batches} (`--batch={s['batch']}`, cut to about "
                   f"`--tokens_per_batch={s['tokens_per_batch']}` tokens at longer lengths).")
  if "schemes" in s["parts"]:
    lines += [
        f"* Train step: median of {s['runs']} timed runs after a warm-up; "
        f"`{schemes.NAIVE_SHAW}` timed up to L = {s['naive_time_max_length']} (beyond, "
        "compiled for its memory only).",
        f"* Decoding: greedy, L new tokens from a length-L source, median of "
        f"{s['decode_runs']} runs; without the cache up to L = {s['uncached_max_length']}.",
    ]
  return lines + [
      f"* What each column means and what bounds each figure: [docs/performance.md]({DOCS}).",
      ""]


def render(results: dict) -> str:
  """The whole RESULTS.md."""
  s = results["settings"]
  command = " ".join(["python -m benchmarks.run"] + results["argv"])
  lines = [
      "# Benchmark: positional schemes" + (" (--quick smoke run)" if s["quick"] else ""), "",
      f"Written by `{command}`" + (" (`make bench`)" if not results["argv"] else "")
      + f" on {results['date']}, {results['seconds'] / 60:.1f} min.", "",
  ]
  lines += _machine(results) + _setup(results)
  found = targets(results)
  if found:
    lines += ["## Targets", ""]
    lines += [f"* {'✅ holds' if ok else '❌ missed'}: {name}: **{value}**"
              + (f" ({why})" if why and not ok else "") for name, value, ok, why in found]
    lines.append("")
  if results["train"]:
    lines += ["## Train step", "", train_table(results["train"])]
  if results["decode"]:
    lines += ["## Greedy decoding", "", decode_table(results["decode"])]
  seeds = results["seeds"]
  if seeds:
    path, arg = schemes.config_spec(s["seeds_config"])
    config = path + (f":{arg}" if arg else "")
    lines += [f"## Several seeds in one program ({s['num_seeds']} vs 1)", "",
              f"{config} (its model, and its step-0 batch: {seeds[0]['shape']} per replica), "
              "`jit(vmap(train_step), donate_argnums=0)` as `train_and_evaluate` runs it; "
              f"median of {s['seeds_runs']} steps.", "", seeds_table(seeds)]
  if results.get("precision"):
    lines += precision_section(results["precision"])
  if results.get("peers"):
    lines += peers_section(results["peers"], results["info"])
  if results.get("rpe"):
    lines += rpe_section(results["rpe"], results["info"])
  return "\n".join(lines).rstrip("\n") + "\n"
