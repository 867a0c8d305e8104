# The README's two commands: `make demo` and `make test`. Both set up .venv themselves.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test install bench-pipeline schemas clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[test]'
	touch $(STAMP)

install: $(STAMP)

demo: $(STAMP)
	$(BIN)/gangway demo

test: $(STAMP)
	$(BIN)/ruff check gangway tests
	$(BIN)/python -m pytest -q

schemas: $(STAMP)
	$(BIN)/gangway schemas --write

clean:
	rm -rf $(VENV) out .gangway
