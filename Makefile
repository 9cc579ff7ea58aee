# Two commands: `make demo` and `make test`. Each creates .venv when missing.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: demo test lint typecheck unit sshd tools clean bench box-env

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	# The CPU build of torch that lies on this machine's disk; any other version is a multi-GB CUDA build.
	$(PY) -m pip install -q torch==2.13.0
	$(PY) -m pip install -q -e '.[ml,dev,report]'
	# speculators' metadata pulls deepspeed (needs CUDA to build); the library Trainer does not.
	$(PY) -m pip install -q --no-deps speculators==0.3.0
	touch $(STAMP)

sshd:
	@scripts/ensure-sshd.sh

tools:
	@scripts/ensure-tools.sh

# The box environments (vLLM 0.32 CPU + speculators 0.9; the founding stack vLLM 0.16 CPU +
# speculators 0.3), built once into the test cache.
box-env:
	@$(PYTHON) scripts/box_env.py vllm032 --quiet >/dev/null
	@$(PYTHON) scripts/box_env.py vllm016 --quiet >/dev/null

# ruff, then the layer contracts of pyproject.toml [tool.importlinter] (docs/architecture.md).
lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/lint-imports --no-cache

typecheck: $(STAMP)
	$(VENV)/bin/mypy

# Two workers: most of the suite's wall time is waiting on engines, sshd and stage processes, so
# two interleave on two cores (one worker: 33 min; two: 23 min, 2026-12-06). Each worker starts its
# own session fixtures; every test keeps to its own tmp_path, ports and process group.
# --dist loadgroup: the tests sharing one running engine (tests/conftest.py ENGINE_GROUPS) go to
# one worker back to back, so that engine starts once; every other test to whichever is free.
unit: $(STAMP)
	$(VENV)/bin/pytest -q -n 2 --dist loadgroup --durations=25

test: $(STAMP) sshd tools box-env lint typecheck unit

# The pipeline in .venv (speculators 0.3), then serve + bench with vLLM from the box environment
# (built on the first run, minutes; cached): ends with "offline X vs served Y".
demo: $(STAMP) box-env
	$(VENV)/bin/console run --host local --demo --serve \
		--serve-python "$$($(PYTHON) scripts/box_env.py vllm032 --quiet)"

# Every benchmark, each figure beside its baseline from the same run, then a summary table
# (benchmarks/run_all.py). `make bench BENCH_ARGS=--quick` for smaller sizes; `--only NAME`.
bench: $(STAMP) sshd box-env
	$(PY) benchmarks/run_all.py $(BENCH_ARGS)

clean:
	rm -rf $(VENV) .cache .mypy_cache .ruff_cache .pytest_cache
