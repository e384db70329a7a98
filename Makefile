# Two commands for a fresh machine: `make demo` and `make test` (plus `make bench`).
# Each creates .venv and installs the pinned dependencies on first use.
VENV ?= .venv
PY := $(VENV)/bin/python
export TIDEMARK_DEV ?= 1
# `make test` runs the suite in this many pytest processes (pytest-xdist, a module's tests stay in
# one process): the suite mostly waits on workers, Spark and leases, not on the CPU. Each process
# has its own test database, Celery queue, cache prefix and SparkSession (tests/conftest.py).
TEST_PROCESSES ?= 3
# `make chaos`: every scenario runs its own workers on its own queue, so they run side by side in
# this many processes, except the PostgreSQL restart, which cuts every connection to the server
# and runs alone after them
CHAOS_PROCESSES ?= 2

.PHONY: demo test chaos soak screenshots bench lint format stop clean

$(VENV)/.installed: pyproject.toml examples/tidemark-example-processors/pyproject.toml
	python3 -m venv $(VENV)
	$(VENV)/bin/pip install --quiet --upgrade pip
	$(VENV)/bin/pip install --quiet -e '.[dev]'
	$(VENV)/bin/pip install --quiet -e examples/tidemark-example-processors
	touch $@

demo: $(VENV)/.installed
	$(PY) manage.py demo

# the browser tests drive Debian's Chromium (Playwright never downloads one)
/usr/bin/chromium:
	apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium

test: $(VENV)/.installed /usr/bin/chromium /usr/bin/faketime
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(PY) manage.py makemigrations --check --dry-run
	$(VENV)/bin/pytest -n $(TEST_PROCESSES) --dist loadfile

# the soak's clock_jump fault, and the test of a worker whose clock is ahead, move a worker's
# wall clock with Debian's libfaketime
/usr/bin/faketime:
	apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq faketime

# faults through real workers, Redis and Spark (tests/chaos/, a few minutes); not part of `make test`.
# CHAOS_CPU_HOG=N runs N busy processes beside the whole suite (.ci/run uses 2: the suite waits on
# facts, not clocks, so it must pass on a busy machine)
chaos: $(VENV)/.installed
	$(VENV)/bin/pytest -m chaos -n $(CHAOS_PROCESSES) --dist load tests/chaos \
		--ignore=tests/chaos/test_postgres_restart.py
	$(VENV)/bin/pytest -m chaos tests/chaos/test_postgres_restart.py

# the large soak: 10,000 batches through real workers and sinks under faults (bench/bench_soak.py);
# 32 of each fault kind: the redelivery kind may be given up before its count (it was at 18 of 30
# in the run of 2026-11-27, 296 faults in all), and the issue asks for at least 300
soak: $(VENV)/.installed /usr/bin/faketime
	SOAK_FILES=$${SOAK_FILES:-2000} SOAK_FAULTS_PER_KIND=$${SOAK_FAULTS_PER_KIND:-32} SOAK_TIMEOUT=$${SOAK_TIMEOUT:-14400} $(VENV)/bin/pytest -m soak -s tests/soak/test_small_soak.py

# the README's screenshots: the browser tests, saving their pages under docs/screenshots/
screenshots: $(VENV)/.installed /usr/bin/chromium
	TIDEMARK_SCREENSHOTS=docs/screenshots $(VENV)/bin/pytest tests/dashboard/test_flows_browser.py \
		tests/dashboard/test_editing_browser.py tests/dashboard/test_looks_browser.py \
		tests/dashboard/test_delete_browser.py

bench: $(VENV)/.installed
	$(PY) bench/run_all.py

lint: $(VENV)/.installed
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

format: $(VENV)/.installed
	$(VENV)/bin/ruff format .
	$(VENV)/bin/ruff check --fix .

# the embedded PostgreSQL and Redis stay up between runs (web, worker and beat share them)
stop:
	@if [ -x $(PY) ]; then $(PY) -m controlplane.embedded stop; fi

clean: stop
	rm -rf $(VENV) var
