"""Peak memory and eval time per byte of the LM evaluation at each context (issue #48).

Each eval context C runs in its own process (so the peak resident memory,
`ru_maxrss`, is that context's alone): configs/lm.py's model (4 layers, d_model
128, 4 heads; parameters freshly initialised: time and memory do not depend on
training), `lm_eval.context_record` over the first `--bytes` test bytes of
lm:cpython in non-overlapping windows, batched by `lm_eval.rows_per_pass` under
`--budget_mib`. Reported per C: windows per forward pass, the attention logits
of one layer in one pass (rows x H x (C+1)^2 x 4 bytes, the bound the chunking
keeps), peak RSS of the process and its growth over the model set-up, the first
call (compilation included) and the steady-state time per byte (a second pass
over the same bytes).

  python -m benchmarks.lm_eval_memory --contexts 128,512,2048 --bytes 8192 \
      --out benchmarks/records/lm_eval_memory.md
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time


def _measure(context: int, num_bytes: int, scheme: str, budget_mib: float) -> dict:
  """One context, in this process: set-up, then two timed passes."""
  import jax  # pylint: disable=g-import-not-at-top (after the parent chose the context)
  import jax.numpy as jnp  # pylint: disable=g-import-not-at-top
  from configs import lm as lm_config  # pylint: disable=g-import-not-at-top
  from relpos_jax import architectures  # pylint: disable=g-import-not-at-top
  from relpos_jax import lm_eval  # pylint: disable=g-import-not-at-top
  from relpos_jax.data import corpus as corpus_lib  # pylint: disable=g-import-not-at-top
  from relpos_jax.data import lm  # pylint: disable=g-import-not-at-top

  config = lm_config.get_config(f"scheme={scheme}")
  corpus = corpus_lib.cpython_corpus()
  model = architectures.make_model(config.model, vocab_size=corpus_lib.byte_vocab().size)
  params = model.init(jax.random.PRNGKey(0), jnp.zeros((1, 1), jnp.int32),
                      jnp.ones((1, 8), jnp.int32))["params"]
  ids = corpus.splits["test"]
  span = lm.eval_span(len(ids), num_bytes, context)
  rows = lm_eval.rows_per_pass(model, context, budget_mib)
  base_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
  loss_fn = lm_eval.token_loss_fn(model, params)
  start = time.perf_counter()
  first = lm_eval.context_record(loss_fn, ids, context, span, rows=rows)
  first_s = time.perf_counter() - start
  start = time.perf_counter()
  lm_eval.context_record(loss_fn, ids, context, span, rows=rows)
  steady_s = time.perf_counter() - start
  peak_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
  return {"context": context, "bytes": span, "rows_per_pass": min(rows, span // context),
          "attention_mib_per_layer": min(rows, span // context) * model.num_heads
          * (context + 1) ** 2 * 4 / 2**20,
          "peak_rss_mib": peak_kib / 1024, "rss_growth_mib": (peak_kib - base_kib) / 1024,
          "first_call_s": first_s, "steady_us_per_byte": steady_s / span * 1e6,
          "bits_per_byte_untrained": first["bits_per_byte"]}


def main(argv=None) -> None:
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--contexts", default="128,512,2048")
  parser.add_argument("--bytes", type=int, default=8192)
  parser.add_argument("--scheme", default="alibi")
  parser.add_argument("--budget_mib", type=float, default=256)
  parser.add_argument("--one", type=int, default=0, help=argparse.SUPPRESS)  # child process
  parser.add_argument("--out", default="")
  args = parser.parse_args(argv)
  if args.one:
    print(json.dumps(_measure(args.one, args.bytes, args.scheme, args.budget_mib)))
    return
  rows = []
  for context in [int(c) for c in args.contexts.split(",")]:
    out = subprocess.run([sys.executable, "-m", "benchmarks.lm_eval_memory", "--one",
                          str(context), "--bytes", str(args.bytes), "--scheme", args.scheme,
                          "--budget_mib", str(args.budget_mib)],
                         check=True, capture_output=True, text=True,
                         cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    rows.append(json.loads(out.stdout.strip().splitlines()[-1]))
    print(rows[-1], flush=True)
  table = ["| C | bytes | windows/pass | attention MiB/layer/pass | peak RSS MiB | RSS growth MiB "
           "| first call s | steady µs/byte |", "|---|---|---|---|---|---|---|---|"]
  for r in rows:
    table.append(f"| {r['context']} | {r['bytes']} | {r['rows_per_pass']} | "
                 f"{r['attention_mib_per_layer']:.1f} | {r['peak_rss_mib']:.0f} | "
                 f"{r['rss_growth_mib']:.0f} | {r['first_call_s']:.2f} | "
                 f"{r['steady_us_per_byte']:.1f} |")
  text = (f"LM eval ({args.scheme}, configs/lm.py size, untrained), attention budget "
          f"{args.budget_mib:g} MiB, {os.cpu_count()} CPUs:\n\n" + "\n".join(table) + "\n")
  print(text)
  if args.out:
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, "w") as f:
      f.write(text)


if __name__ == "__main__":
  main()
