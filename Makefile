# The README's two commands: `make demo` and `make test`. Both set up .venv themselves.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: console-assets demo test install lint-imports bench-pipeline schemas clean bench bench-replay bench-core bench-kueue bench-kueue-large bench-philly bench-money envtest bench-binder bench-readme fuzz bench-durability

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[test]'
	touch $(STAMP)

install: $(STAMP)

demo: $(STAMP)
	$(BIN)/gangway demo

# The FinOps FOCUS validator checks `gangway export focus` in the tests. It pins numpy<2 (gangway
# pins numpy 2), so it lives in a venv of its own, used only as a command.
FOCUS_VENV := .venv-focus
FOCUS_STAMP := $(FOCUS_VENV)/.installed

$(FOCUS_STAMP):
	$(PYTHON) -m venv $(FOCUS_VENV)
	$(FOCUS_VENV)/bin/pip install --quiet focus-validator==1.0.0 'multimethod<1.11'
	touch $(FOCUS_STAMP)

test: $(STAMP) $(FOCUS_STAMP)
	$(BIN)/ruff check gangway events services tests
	$(BIN)/python -m pytest -q

# kube-apiserver, kube-controller-manager and etcd for tests/k8s, built from the Go module proxy into .cache/envtest/ (once: about
# 8-11 minutes on two cores, 1.9 GB of memory; cached afterwards). Without them those tests skip.
envtest:
	bash infra/envtest/build.sh

# The long benchmarks (minutes each; not part of `make test`). Figures go to bench/results/.
# bench-kueue* and bench-philly read the full reference data from GANGWAY_DATA=DIR (tests/data/reference/README.md).
bench: bench-core bench-replay bench-philly bench-kueue

bench-replay: $(STAMP)
	$(BIN)/gangway bench replay --events 1000000 --out bench/results/replay-1m.json

bench-core: $(STAMP)
	$(BIN)/gangway bench core

bench-kueue: $(STAMP)
	$(BIN)/gangway bench kueue --scenario baseline

# Ledger throughput (SQLite; PostgreSQL at $$GANGWAY_PG_URL when it answers) and a month of 15,000 workloads invoiced.
bench-money: $(STAMP)
	$(BIN)/gangway bench money --out bench/results/money.json

bench-kueue-large: $(STAMP)
	$(BIN)/gangway bench kueue --scenario large-scale

bench-binder: $(STAMP) envtest
	$(BIN)/python -m pytest -q -s tests/k8s/bench_binder.py
# bench/README.md's generated blocks, from the JSON in bench/results (a test checks they agree).
bench-readme: $(STAMP)
	$(BIN)/python -c "from gangway.benchmarks.results import write_readme; write_readme()"

bench-philly: $(STAMP)
	$(BIN)/gangway simulate --trace philly
	$(BIN)/gangway simulate --trace philly --capacity 0.25

# Durability (README "Durability"): the long fuzz run, restore of a 1M-event log, the loss window, faults.
fuzz: $(STAMP)
	$(BIN)/gangway bench fuzz --examples 100000 --out bench/results/fuzz.json

bench-durability: $(STAMP)
	$(BIN)/gangway bench restore --events 1000000 --out bench/results/restore-1m.json
	$(BIN)/gangway bench loss --runs 5 --out bench/results/loss.json
	$(BIN)/gangway bench faults --broker both --shrink 0.05 --out bench/results/faults.json

# The layers contract (.importlinter), checked on the package laid out as installed.
lint-imports: $(STAMP)
	$(BIN)/python -m pytest -q tests/test_layers.py

schemas: $(STAMP)
	$(BIN)/gangway schemas --write

clean:
	rm -rf $(VENV) $(FOCUS_VENV) out .gangway

# Refresh the web console's vendored browser libraries from the npm registry (the files are committed).
console-assets:
	gangway/console/static/vendor/vendor.sh
