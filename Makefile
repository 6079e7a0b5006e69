# The two commands that do everything on a fresh machine: `make up` and `make test`.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: up test bench lint install clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[dev]'
	touch $(STAMP)

install: $(STAMP)

up: $(STAMP)
	$(BIN)/corral up --workers 2 --data-dir .corral

test: $(STAMP)
	$(BIN)/pytest -q

bench: $(STAMP)
	$(BIN)/python bench/throughput.py
	$(BIN)/python bench/router.py

lint: $(STAMP)
	$(BIN)/ruff check src tests bench

clean:
	rm -rf $(VENV) .corral
