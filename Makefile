# Developer shortcuts. Each target runs the same command as the matching step of ./test.sh
# (which is what CI runs: .ci/run -> ./test.sh). Run `make setup` once first.
BIN := .venv/bin
PY := $(BIN)/python
# mypy sees each top-level package from the folder that holds it (see test.sh).
MYPYPATH_ROOTS := $(subst $(eval) ,:,$(wildcard libs/* services/* deploy spark))
MYPY_PATHS := libs services deploy $(if $(shell find spark -name '*.py' -print -quit 2>/dev/null),spark)
ARGS ?=

.PHONY: help setup proto proto-check lint format typecheck imports test test-unit up demo clean

help:
	@echo "make setup        install etcd and the venvs (scripts/setup.sh)"
	@echo "make proto        regenerate the protobuf/gRPC code from proto/"
	@echo "make proto-check  fail if the committed generated code is stale"
	@echo "make lint         ruff check + ruff format --check"
	@echo "make format       ruff format + ruff check --fix"
	@echo "make typecheck    mypy libs services deploy"
	@echo "make imports      the import contract (scripts/check_imports.py)"
	@echo "make test         everything CI runs (./test.sh); ARGS=... goes to pytest"
	@echo "make test-unit    only the unit tests (pytest -m unit)"
	@echo "make up           danube-local up; ARGS='--brokers 3' for more"
	@echo "make demo         start a cluster, run the demo, stop"
	@echo "make clean        remove caches and .danube-local (not the venvs)"

setup:
	bash scripts/setup.sh

proto:
	$(PY) scripts/gen_protos.py

proto-check:
	$(PY) scripts/gen_protos.py --check

lint:
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

format:
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

typecheck:
	MYPYPATH=$(MYPYPATH_ROOTS) $(BIN)/mypy --explicit-package-bases $(MYPY_PATHS)

imports:
	$(PY) scripts/check_imports.py

test:
	./test.sh $(ARGS)

test-unit:
	$(BIN)/pytest -q -p no:cacheprovider --timeout=120 -n 2 -m unit $(ARGS)

up:
	$(BIN)/danube-local up $(ARGS)

demo:
	$(BIN)/danube-local up --demo --exit-after-demo --lookup-port 0 --admin-port 0 $(ARGS)

clean:
	rm -rf .danube-local .mypy_cache .ruff_cache .pytest_cache build dist
	find . -path ./.venv -prune -o -path ./.venv-danube-client -prune -o \
		-name __pycache__ -type d -prune -exec rm -rf {} +
