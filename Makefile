# Two entry points for a fresh machine: `make test` and `make demo`.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.PHONY: test demo docs check-java check-redis check-chromium venv clean

check-java:
	@$(PYTHON) -m zkqueue.server.check_java

$(STAMP): setup.cfg pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[all,dev,bench,docs]'
	# arq (a peer of the asyncio benchmark) pins redis-py below 6, which Celery's kombu (>= 6.4) refuses; it runs
	# fine on redis-py 7, so it is installed without its pins (pip check reports that one requirement).
	$(PY) -m pip install --quiet --no-deps 'arq>=0.26'
	touch $(STAMP)

venv: $(STAMP)

# The jobs benchmark's peers (RQ, Celery) need a local redis-server; install it on a fresh root machine with apt.
check-redis:
	@command -v redis-server >/dev/null || (command -v apt-get >/dev/null && [ "$$(id -u)" = 0 ] && \
	  (apt-get install -y -q redis-server >/dev/null || (apt-get update -q >/dev/null && apt-get install -y -q redis-server >/dev/null))) || true

# The dashboard's browser test drives Debian's chromium headless; install it on a fresh root machine with apt (the
# test skips, saying why, where it cannot be had).
check-chromium:
	@command -v chromium >/dev/null || (command -v apt-get >/dev/null && [ "$$(id -u)" = 0 ] && \
	  (apt-get install -y -q chromium >/dev/null || (apt-get update -q >/dev/null && apt-get install -y -q chromium >/dev/null))) || true

# Three xdist workers on the 2-core machine (most tests wait on ZooKeeper, processes and timers: with two the
# cores were idle 5-22% of the run, and a third worker cut the first part from 879 s to 784 s); tests/conftest.py
# keeps the Spark and fault suites on one of them, one after another. Then the tests marked 'timing' (wall-clock
# bounds) run alone; exit 5 (none selected by PYTEST_ARGS) is no failure there. PYTEST_WORKERS=0 runs the first
# part in one process.
PYTEST_WORKERS ?= 3

test: check-java check-redis check-chromium $(STAMP)
	$(PY) -m pytest -n $(PYTEST_WORKERS) --dist loadscope --timing=skip $(PYTEST_ARGS)
	$(PY) -m pytest --timing=only $(PYTEST_ARGS) || [ $$? -eq 5 ]

# The documentation site (mkdocs.yml, docs/) into site/; --strict fails on any warning (a broken link, a page left
# out of the nav). The Benchmarks page is generated from benchmarks/results/*latest.json (docs/gen_benchmarks.py).
docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict --site-dir site

demo: check-java $(STAMP)
	$(VENV)/bin/zkqueue demo

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache

# Celery's own integration tests (t/integration/test_tasks.py and test_canvas.py of the installed Celery's sdist,
# fetched with pip) on zkqueue:// and on a private redis-server, with the counts side by side
# (tests/celery/celery_suite.py; make test runs a named subset of them).
.PHONY: celery-suite
celery-suite: check-java check-redis $(STAMP)
	$(PY) -m tests.celery.celery_suite both
