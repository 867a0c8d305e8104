# The README's two commands: `make demo` and `make test`. Both set up .venv themselves.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test install lint-imports bench-pipeline schemas clean bench bench-replay bench-core bench-kueue bench-kueue-large bench-philly fuzz bench-durability

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[test]'
	touch $(STAMP)

install: $(STAMP)

demo: $(STAMP)
	$(BIN)/gangway demo

test: $(STAMP)
	$(BIN)/ruff check gangway events services tests
	$(BIN)/python -m pytest -q

# The long benchmarks (minutes each; not part of `make test`). Figures go to bench/results/.
bench: bench-core bench-replay bench-philly bench-kueue

bench-replay: $(STAMP)
	$(BIN)/gangway bench replay --events 1000000 --out bench/results/replay-1m.json

bench-core: $(STAMP)
	$(BIN)/gangway bench core

bench-kueue: $(STAMP)
	$(BIN)/gangway bench kueue --scenario baseline

bench-kueue-large: $(STAMP)
	$(BIN)/gangway bench kueue --scenario large-scale

bench-philly: $(STAMP)
	$(BIN)/gangway simulate --trace philly
	$(BIN)/gangway simulate --trace philly --capacity 0.25

# Durability (README "Durability"): the long fuzz run, restore of a 1M-event log, the loss window, faults.
fuzz: $(STAMP)
	$(BIN)/gangway bench fuzz --examples 100000 --out bench/results/fuzz.json

bench-durability: $(STAMP)
	$(BIN)/gangway bench restore --events 1000000 --out bench/results/restore-1m.json
	$(BIN)/gangway bench loss --runs 5 --out bench/results/loss.json
	$(BIN)/gangway bench faults --shrink 0.05 --out bench/results/faults.json

# The layers contract (.importlinter), checked on the package laid out as installed.
lint-imports: $(STAMP)
	$(BIN)/python -m pytest -q tests/test_layers.py

schemas: $(STAMP)
	$(BIN)/gangway schemas --write

clean:
	rm -rf $(VENV) out .gangway
