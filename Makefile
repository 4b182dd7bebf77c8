# Two entry points for a fresh machine: `make test` and `make demo`.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.PHONY: test demo check-java venv clean

check-java:
	@$(PYTHON) -m zkqueue.server.check_java

$(STAMP): setup.cfg pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev,spark]'
	touch $(STAMP)

venv: $(STAMP)

test: check-java $(STAMP)
	$(PY) -m pytest $(PYTEST_ARGS)

demo: check-java $(STAMP)
	$(VENV)/bin/zkqueue demo

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache
