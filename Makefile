# Every target creates .venv and installs the stack if needed (offline data; PyPI only).
# `make install` installs the exact versions of requirements.txt (the environment that
# produced the tables; pyproject.toml has the ranges for other environments).
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: install install-peers test demo bench table more-seeds results lock clean

install: $(STAMP)

# uv installs the lock in ~15 s where pip takes ~60 s (2 cores); pip is the fallback.
$(STAMP): requirements.txt pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q uv && $(VENV)/bin/uv pip install -q --python $(PY) -r requirements.txt \
	    || $(PY) -m pip install -q -r requirements.txt
	$(PY) -m pip install -q --no-deps -e .
	touch $(STAMP)

# Re-resolve requirements.txt from pyproject.toml, keeping its versions (after a change
# of dependencies); `make lock UPGRADE=1` moves them to the newest that pyproject.toml allows.
LOCK_ARGS = $(if $(UPGRADE),--upgrade,--constraint $(VENV)/lock-constraints.txt)
lock: $(STAMP)
	$(PY) -m pip install -q uv
	cp requirements.txt $(VENV)/lock-constraints.txt
	$(VENV)/bin/uv pip compile pyproject.toml --extra dev --extra tfds --python-version 3.11 \
	    --no-emit-package relpos-jax \
	    --annotation-style line --no-header -q $(LOCK_ARGS) -o $(VENV)/lock-new.txt
	sed -n '/^# Exact/,/^# `make lock`/p' requirements.txt > $(VENV)/lock-header.txt
	cat $(VENV)/lock-header.txt $(VENV)/lock-new.txt \
	    | sed -e 's|-c $(VENV)/lock-constraints.txt, ||; s|, -c $(VENV)/lock-constraints.txt||; s|  # via -c $(VENV)/lock-constraints.txt$$||' \
	    > requirements.txt

# Tests run on every core (pytest-xdist) and list the 15 slowest; pytest exits 5 when a selection holds no
# test: that is not a failure.
PYTEST_ARGS ?= -n auto --durations=15
test: $(STAMP)
	$(PY) -m pytest -q $(PYTEST_ARGS); rc=$$?; if [ $$rc -eq 5 ]; then echo "no tests selected"; exit 0; fi; exit $$rc

# The README's first command: train the default config (copy task, T5 bias) into
# runs/demo (resumed if interrupted), then evaluate it at every length.
demo: $(STAMP)
	$(PY) -m relpos_jax.positions
	$(PY) train.py --config configs/default.py --workdir runs/demo
	$(PY) eval.py --workdir runs/demo

# One ablation table, trained and evaluated run by run into results/$(TABLE)/ (runs whose
# records are stored there are skipped), e.g. make table TABLE=shaw_terms.
TABLE ?= shaw_terms
table: $(STAMP)
	$(PY) train.py --config configs/ablations/$(TABLE).py --workdir runs/$(TABLE) \
		--results_dir results/$(TABLE) $(ARGS)
	$(PY) -m relpos_jax.results

# Seeds 3 and 4 for every stored run whose claims need more seeds (docs/evaluation.md, "More
# seeds for a stored run"; about 12 h on 2 cores), one run at a time, then RESULTS.md.
more-seeds: $(STAMP)
	$(PY) -m relpos_jax.experiments.more_seeds --check
	$(PY) -m relpos_jax.experiments.more_seeds --train
	$(PY) -m relpos_jax.results

# RESULTS.md (and each table's report) rendered from the committed records in results/.
results: $(STAMP)
	$(PY) -m relpos_jax.results

# Speed and memory of every positional scheme -> benchmarks/RESULTS.md (~25 min on 2 cores),
# and the peers when the optional extra is installed (make install-peers): HF T5 in PyTorch
# at the same shape, and DeepMind's randomized_positional_encodings (also needs RPE_REPO=
# a checkout of their code). Pass flags with BENCH_ARGS, e.g. make bench
# BENCH_ARGS="--schemes=none,t5 --lengths=64" or BENCH_ARGS=--parts=peers
# (see docs/performance.md).
bench: $(STAMP)
	$(PY) -m benchmarks.run $(BENCH_ARGS)

# The optional extra of `make bench`: torch and transformers (benchmarks/peers.py), dm-haiku
# and the other dependencies of DeepMind's RPE code (benchmarks/peers_rpe.py).
install-peers: $(STAMP)
	$(PY) -m pip install -q -r benchmarks/requirements-peers.txt

clean:
	rm -rf $(VENV) runs
