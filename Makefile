# django-resonate: `make run` serves, `make test` runs every test. Both set everything up first.
SHELL := /bin/bash
VENV ?= .venv
PY := $(VENV)/bin/python
PORT ?= 8001
PG_URL ?= postgresql://postgres@127.0.0.1:5432/resonate
# `make bench` creates (and drops) its own database on this server. BENCH_ARGS=--quick: a short run.
BENCH_PG_URL ?= postgresql://postgres@127.0.0.1:5432
BENCH_ARGS ?=
# The bytecode is written (site-packages at install, the project's modules at setup and when they
# change): compiling every module on every start cost a CLI call ~1.5 s of CPU (bench/cli_cpu.py).
PACKAGES := resonate_project promises tasks_app schedules outbox

# A Python >= 3.12: from PATH, else pyenv's versions (the SDKs and Django 6 need 3.12+).
PYTHON_BOOT := $(shell for c in python3.13 python3.12 python3.14 $$(ls -d /root/.pyenv/versions/3.1[234]*/bin/python3 2>/dev/null | sort -r) python3; do \
	p=$$(command -v $$c 2>/dev/null) || continue; \
	$$p -c 'import sys; sys.exit(0 if sys.version_info >= (3, 12) else 1)' 2>/dev/null && { echo $$p; break; }; done)

.PHONY: run test setup docs lint typecheck test-sqlite test-postgres test-system test-install services browser clean bench chaos
.PHONY: test-rounds test-slow
.PHONY: pgbouncer chaos-pooler chaos-failover chaos-hosts chaos-hosts-pg

$(VENV)/.installed: pyproject.toml
	@test -n "$(PYTHON_BOOT)" || { echo "need Python >= 3.12 (python3.12/3.13 on PATH or under pyenv)"; exit 1; }
	@test -x $(PY) || $(PYTHON_BOOT) -m venv $(VENV)
	$(PY) -m pip install -q 'uv>=0.13,<1'
	$(VENV)/bin/uv pip install -q --compile-bytecode -p $(PY) -e '.[dev,server,docs]'
	$(PY) -m compileall -q -j 0 $(PACKAGES) manage.py
	@touch $@

setup: $(VENV)/.installed

run: setup
	$(PY) manage.py migrate --noinput
	$(PY) manage.py serve --port $(PORT)

services:
	@bash .ci/services.sh

# Debian's Chromium for the admin's real-browser test (Playwright drives it; it downloads nothing).
browser:
	@command -v chromium >/dev/null 2>&1 || { command -v apt-get >/dev/null 2>&1 && \
		{ apt-get install -y -q chromium >/dev/null 2>&1 || \
		  { apt-get update -q >/dev/null 2>&1 && apt-get install -y -q chromium >/dev/null 2>&1; }; } ; } || \
		echo "Chromium unavailable: the browser test will fail under CI=true, skip otherwise"

# Debian's PgBouncer for the pooler tests (tests/system/test_pooler.py, make chaos-pooler):
# they run their own pgbouncer process on a free loopback port. The package enables a system
# service when it installs; a fresh install here disables it again (nothing else runs it).
pgbouncer:
	@command -v pgbouncer >/dev/null 2>&1 || test -x /usr/sbin/pgbouncer || { command -v apt-get >/dev/null 2>&1 && \
		{ apt-get install -y -q pgbouncer >/dev/null 2>&1 || \
		  { apt-get update -q >/dev/null 2>&1 && apt-get install -y -q pgbouncer >/dev/null 2>&1; }; } && \
		{ systemctl disable --now pgbouncer >/dev/null 2>&1 || \
		  rm -f /etc/systemd/system/multi-user.target.wants/pgbouncer.service; } ; } || \
		echo "PgBouncer unavailable: the pooler test will fail under CI=true, skip otherwise"

lint: setup
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/lint-imports --no-cache

typecheck: setup
	$(VENV)/bin/mypy .

# The documentation site (docs/, Sphinx + MyST + Furo), strict: any warning, broken link or
# missing anchor fails. Open docs/_build/html/index.html.
docs: setup
	$(VENV)/bin/sphinx-build -W --keep-going -n -q -b html docs docs/_build/html

# Every pytest run ends with its slowest tests.
SLOWEST := --durations=15 --durations-min=1.0
UNIT := tests --ignore=tests/system --ignore=tests/e2e --ignore=tests/embedding/test_install.py
# tests/embedding's host site runs on its own SQLite database, and tests/docs/test_docs_commands.py
# runs the guides' command lines on SQLite files of its own: once each, in the SQLite run.
UNIT_PG := $(UNIT) --ignore=tests/embedding/test_host_site.py \
	--ignore=tests/embedding/test_index_plans.py --ignore=tests/docs/test_docs_commands.py

test-sqlite: setup browser
	$(VENV)/bin/pytest -p no:cacheprovider -n 2 $(SLOWEST) $(UNIT)

# PostgreSQL run: skipped with a printed reason when the server is unreachable, except under
# CI=true, where that is a failure.
test-postgres: setup services browser
	@url=$${DATABASE_URL_PG:-$(PG_URL)}; \
	if $(PY) -c "import sys, psycopg; from psycopg.conninfo import conninfo_to_dict as c, make_conninfo as m; \
d = c(sys.argv[1]); d['dbname'] = 'postgres'; psycopg.connect(m(**d), connect_timeout=5).close()" "$$url" 2>/tmp/resonate-pg-check.err; then \
		DATABASE_URL=$$url $(VENV)/bin/pytest -p no:cacheprovider -n 2 $(SLOWEST) $(UNIT_PG); \
	elif [ "$${CI:-}" = "true" ]; then \
		echo "PostgreSQL unreachable at $$url under CI=true: failing"; cat /tmp/resonate-pg-check.err; exit 1; \
	else \
		echo "SKIPPED the PostgreSQL run: unreachable at $$url ($$(tail -1 /tmp/resonate-pg-check.err))"; \
	fi

# The fault rounds, each a minute or two under load: the short chaos run
# (tests/system/test_chaos_short.py: its own PostgreSQL cluster and Redis server), the short
# round on several test hosts (tests/system/test_hosts.py: network namespaces of its own, needs
# root and ip; skipped without them unless CI=true), the same through PgBouncer
# (tests/system/test_pooler.py) and a restore from a dump taken mid-run
# (tests/e2e/test_backup_restore.py). They gate landing from `make test-slow`.
ROUNDS := tests/system/test_chaos_short.py tests/system/test_hosts.py tests/system/test_pooler.py \
	tests/e2e/test_backup_restore.py

# Real processes (uvicorn, Celery worker and beat) and the official SDKs, once, against
# PostgreSQL and Redis (and the embedded server on SQLite); the fault rounds are test-rounds.
test-system: setup services
	$(VENV)/bin/pytest -p no:cacheprovider -n 2 $(SLOWEST) tests/system tests/e2e \
		$(addprefix --ignore=,$(ROUNDS))

test-rounds: setup services pgbouncer
	$(VENV)/bin/pytest -p no:cacheprovider -n 2 $(SLOWEST) $(ROUNDS)

test: lint typecheck docs test-sqlite test-postgres test-system

# What gates landing besides `make test` (.ci/run runs both): the fault rounds and the install
# matrix, slow checks kept out of `make test`'s 20 minutes.
test-slow: test-rounds test-install

# docs/how-to/embedding.md#install's pip lines in fresh virtualenvs, everywhere the page claims them: Python
# 3.12 and 3.13 with their bundled pip, Django 6.0 and 6.1, SQLite and PostgreSQL, a database
# migrated under one Django and served under the other (tests/embedding/test_install.py): seven
# fresh virtualenvs from the package index, ~2 min on 2 cores; part of `make test-slow`.
test-install: setup services
	$(VENV)/bin/pytest -p no:cacheprovider -n 2 $(SLOWEST) tests/embedding/test_install.py

# Throughput and latency against PostgreSQL on this machine (bench/run.py;
# docs/explanation/benchmark-history.md):
# pgbench's ceiling, wrk over HTTP (and the floor, bench/floor.py), the timeout sweep, outbox drains,
# dispatch latency, timers. ~12 min.
bench: setup services
	@command -v wrk >/dev/null 2>&1 || { command -v apt-get >/dev/null 2>&1 && \
		{ apt-get install -y -q wrk >/dev/null 2>&1 || \
		  { apt-get update -q >/dev/null 2>&1 && apt-get install -y -q wrk >/dev/null 2>&1; }; } ; } || \
		{ echo "wrk unavailable: install it (apt-get install wrk) to run the benchmark"; exit 1; }
	$(PY) bench/run.py --pg-url $(BENCH_PG_URL) $(BENCH_ARGS)
	$(PY) bench/cli_cpu.py

# Fault tolerance under load (bench/chaos; docs/explanation/reliability.md): the production shape
# on a private PostgreSQL cluster and Redis server (loopback only; the shared services are not
# touched), two web processes, two Celery workers, beat and SDK workers, while each part is killed
# or restarted in turn, then mixed; a checker proves nothing was lost. ~10 min, bounded.
# CHAOS_ARGS=--short: ~1.5 min.
CHAOS_ARGS ?=
chaos: setup
	$(PY) -m bench.chaos $(CHAOS_ARGS)

# The same checks through PgBouncer in transaction pooling mode (bench/chaos/pooler.py): two
# rounds of PostgreSQL restarts and process kills, ~3 min.
chaos-pooler: setup pgbouncer
	$(PY) -m bench.chaos.pooler $(CHAOS_ARGS)

# A primary with a standby, SIGKILLed under the SDK load and the standby promoted, once with a
# synchronous standby and once with an asynchronous one (bench/chaos/failover.py); writes the
# table in docs/explanation/reliability.md. ~4 min.
chaos-failover: setup
	$(PY) -m bench.chaos.failover $(CHAOS_ARGS)

# The production shape on several test hosts: network namespaces of the run's own (10.231.0.0/24,
# removed at the end, also on failure; needs root and ip), two web hosts, a worker host, two SDK
# hosts, a database host and a Redis host, while a web host is cut off, the worker host is
# partitioned mid-drain, the Redis host is partitioned and the worker host's clock is stepped
# (bench/chaos/hosts_run.py); writes its table in docs/explanation/reliability.md. ~4 min.
chaos-hosts: setup
	$(PY) -m bench.chaos.hosts_run $(CHAOS_ARGS)

# The same hosts with PostgreSQL alone: no Redis, no Celery, serve running the steps and push in
# each web host's processes; a web host cut off and a web host's clock stepped. ~3 min.
chaos-hosts-pg: setup
	$(PY) -m bench.chaos.hosts_run --pg-only $(CHAOS_ARGS)

clean:
	rm -rf $(VENV) resonate.sqlite3*
