# The README's two commands: `make demo` and `make test`. Both set up .venv themselves.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test install lint-imports bench-pipeline schemas clean bench bench-replay bench-core bench-kueue bench-kueue-large bench-philly bench-readme

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

# bench/README.md's generated blocks, from the JSON in bench/results (a test checks they agree).
bench-readme: $(STAMP)
	$(BIN)/python -c "from gangway.benchmarks.results import write_readme; write_readme()"

bench-philly: $(STAMP)
	$(BIN)/gangway simulate --trace philly
	$(BIN)/gangway simulate --trace philly --capacity 0.25

# The layers contract (.importlinter), checked on the package laid out as installed.
lint-imports: $(STAMP)
	$(BIN)/python -m pytest -q tests/test_layers.py

schemas: $(STAMP)
	$(BIN)/gangway schemas --write

clean:
	rm -rf $(VENV) out .gangway
