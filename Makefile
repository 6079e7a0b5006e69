# The two commands that do everything on a fresh machine: `make up` and `make test`.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: up test bench lint install clean chromium vendor

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[dev]'
	touch $(STAMP)

install: $(STAMP) vendor

# The dashboard's terminal (xterm.js), from npm at pinned versions checked against their pinned sha512, into the
# controller's static files; never fetched when the dashboard runs. Quick when they are there already.
vendor:
	$(PYTHON) tools/vendor_static.py

up: install
	$(BIN)/corral up --workers 2 --data-dir .corral

test: install chromium lint
	$(BIN)/pytest -q

# The dashboard tests drive the system's chromium (Debian's package), never a downloaded browser.
chromium:
	@if command -v chromium >/dev/null 2>&1 || [ -n "$$CORRAL_CHROMIUM" ]; then :; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
		echo "installing Debian's chromium for the dashboard tests"; \
		apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium; \
	elif [ -n "$$CI" ]; then echo "chromium is missing and cannot be installed (not root)"; exit 1; \
	else echo "chromium is missing (install it, or run make test as root): the dashboard tests will be skipped"; fi

bench: $(STAMP) chromium
	$(BIN)/python bench/throughput.py
	$(BIN)/python bench/separate_jobs.py
	$(BIN)/python bench/scheduler_sim.py
	$(BIN)/python bench/estimates.py
	$(BIN)/python bench/gang_drain.py
	$(BIN)/python bench/dashboard_jobs.py
	$(BIN)/python bench/function_roundtrip.py
	$(BIN)/python bench/task_env.py
	$(BIN)/python bench/retry_delay.py
	$(BIN)/python bench/router.py
	$(BIN)/python bench/oversized.py
	$(BIN)/python bench/containment.py
	$(BIN)/python bench/workdir_upload.py
	$(BIN)/python bench/trace_replay.py
	$(BIN)/python bench/estimate_replay.py
	$(BIN)/python bench/interactive.py
	$(BIN)/python bench/authz.py
	$(BIN)/python bench/usage.py
	$(BIN)/python bench/cli_latency.py
	$(BIN)/python bench/many_workers.py
	$(BIN)/python bench/controllers.py

lint: $(STAMP)
	$(BIN)/ruff check src tests bench tools
	$(BIN)/lint-imports

clean:
	rm -rf $(VENV) .corral
