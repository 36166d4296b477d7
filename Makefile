# The two set-up commands: `make demo` runs the main job end to end on the
# embedded broker; `make test` runs the whole test suite. Each creates the
# virtualenv and installs what it needs (Java 17 for PySpark too).

PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV   ?= .venv
BIN     = $(VENV)/bin
STAMP   = $(VENV)/.installed

.PHONY: demo demo-commands chaos bench bench-core test lint typecheck java clean

$(STAMP): pyproject.toml
	@command -v $(PYTHON) >/dev/null || { echo "need Python 3.11+ (python3.11 or python3)"; exit 1; }
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[test]'
	touch $(STAMP)

# PySpark 4 needs Java 17+; install it from the system package manager when missing.
java:
	@command -v java >/dev/null || { \
	  echo "installing openjdk-17-jre-headless (PySpark needs Java 17)"; \
	  SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
	  $$SUDO apt-get update -qq && $$SUDO apt-get install -y -qq openjdk-17-jre-headless; }

demo: $(STAMP) java
	$(BIN)/seqkeeper demo

demo-commands: $(STAMP) java
	$(BIN)/seqkeeper demo --topology commands

# Faults injected into real workers, verified; writes docs/reliability.md
# (and its runs, docs/reliability.json) with a column per broker: a run
# replaces its broker's column and keeps the others. Without KAFKA_HOME it
# runs on the embedded broker; run it again with KAFKA_HOME set (make chaos
# KAFKA_HOME=/path/to/kafka_2.13-4.1.0) to add the Apache Kafka column.
chaos: $(STAMP)
	$(BIN)/seqkeeper chaos --report docs/reliability.md

# seqkeeper against its baselines; JSON and PNG under bench/results/.
bench: $(STAMP) java
	$(BIN)/seqkeeper bench

# The worker's per-record work without a broker (µs per record; see README).
bench-core: $(STAMP)
	$(BIN)/python -m seqkeeper.bench.core

# Test processes (pytest-xdist; 0: one process). The tests wait on brokers
# and timers part of the time, so three keep two cores busy; more only
# contend for them (CI runs two passes at once).
PYTEST_WORKERS ?= 3

# The class-data-sharing archive the tests' Spark JVMs start from (rebuilt
# with the virtualenv: it belongs to these jars and this JDK).
JVM_ARCHIVE = $(VENV)/jvm/spark.jsa
$(JVM_ARCHIVE): $(STAMP) tests/jvm_archive.py | java
	$(BIN)/python -m tests.jvm_archive

test: $(STAMP) java $(JVM_ARCHIVE)
	@[ -z "$$KAFKA_HOME" ] || $(BIN)/python -m tests.jvm_archive --kafka "$$KAFKA_HOME"
	$(BIN)/python -m pytest -q -p no:cacheprovider --durations=40 -n $(PYTEST_WORKERS) $(PYTEST_ARGS)

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check processors state

typecheck: $(STAMP)
	$(BIN)/mypy

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache .hypothesis seqkeeper-data
