# relaxlib: `make demo` and `make test` install what is missing (Open MPI from apt, a .venv with the
# pinned requirements, the package itself) and are fast when everything is already in place.
SHELL := /bin/bash
.DEFAULT_GOAL := help

VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip --disable-pip-version-check
DEPS_STAMP := $(VENV)/.deps-stamp
BUILD_STAMP := $(VENV)/.build-stamp
BUILD_SOURCES := $(shell find cuda_ops relaxlib_torch/csrc relaxlib_tf/csrc -name '*.cc' -o -name '*.h' -o -name '*.cu') setup.py pyproject.toml
CORE_LIB := relaxlib/lib/librelax_core.so
CPP_TEST := build/cpp_tests

# Open MPI refuses root without these; tests also start more ranks than there are cores.
export OMPI_ALLOW_RUN_AS_ROOT := 1
export OMPI_ALLOW_RUN_AS_ROOT_CONFIRM := 1
export PATH := $(CURDIR)/$(VENV)/bin:$(PATH)

.PHONY: help demo test build deps lint cpp-test cuda-check pytest bench clean FORCE

help:
	@echo "make demo   - install what is missing, then train on 4 ranks with each relaxation"
	@echo "make test   - install what is missing, then run the whole test suite"
	@echo "make build  - (re)build the core library and framework extensions"
	@echo "make bench  - collective micro-benchmarks (JSON in benchmarks/results/)"

deps: $(DEPS_STAMP)

$(DEPS_STAMP): requirements.txt
	@if ! command -v mpicxx >/dev/null || ! command -v mpirun >/dev/null; then \
		echo "Installing Open MPI (apt)"; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
			openmpi-bin libopenmpi-dev >/dev/null; \
	fi
	@test -x $(PY) || python3 -m venv $(VENV)
	$(PIP) install -q -r requirements.txt
	@touch $@

build: $(BUILD_STAMP)

# Rebuild when a source changed or an artifact is missing (e.g. after `git clean`).
$(BUILD_STAMP): $(DEPS_STAMP) $(BUILD_SOURCES) $(if $(wildcard $(CORE_LIB)),,FORCE)
	$(PIP) install -q --no-build-isolation --no-deps -e .
	@touch $@

$(CPP_TEST): $(BUILD_STAMP) $(wildcard cuda_ops/tests/*.cc cuda_ops/tests/*.h)
	g++ -std=c++17 -O1 -Wall -Wextra -Icuda_ops/include -Icuda_ops/src -DOMPI_SKIP_MPICXX=1 \
		$$(mpicc --showme:compile) cuda_ops/tests/*.cc build/core/*.o $$(mpicc --showme:link) -pthread -ldl -o $@

cpp-test: $(CPP_TEST)
	./$(CPP_TEST)

# No GPU here: the CUDA kernels are compiled (with the host math they share) but not run; the
# registry check links them with the core and reads which codecs have kernels (no GPU needed).
cuda-check: $(BUILD_STAMP)
	@if command -v nvcc >/dev/null; then \
		rm -rf build/cuda && mkdir -p build/cuda && for f in cuda_ops/src/codecs/*.cu cuda_ops/tests/*.cu; do \
			nvcc -std=c++17 -O2 -Xcompiler -Wall,-Wextra -Werror all-warnings -Icuda_ops/include -Icuda_ops/src \
				-DOMPI_SKIP_MPICXX=1 $$(mpicc --showme:compile) -c $$f -o build/cuda/$$(basename $$f .cu).o || exit 1; \
		done && nvcc -o build/cuda/codec_kernels_check build/cuda/*.o build/core/*.o \
			$$(mpicc --showme:link) -lpthread -ldl \
		&& ./build/cuda/codec_kernels_check && echo "nvcc compiled cuda_ops/src/codecs/*.cu"; \
	else echo "cuda-check skipped: nvcc not found"; fi

lint: $(DEPS_STAMP)
	$(PY) -m ruff check relaxlib relaxlib_torch relaxlib_tf launch tests benchmarks examples cuda_ops setup.py
	$(PY) cuda_ops/check_layers.py

pytest: build
	$(PY) -m pytest tests

test: build cpp-test cuda-check lint pytest

demo: build
	$(PY) examples/demo_relaxations.py --np 4

bench: build
	$(PY) benchmarks/collectives.py --np 2

clean:
	rm -rf build relaxlib/lib relaxlib_torch/*.so relaxlib/_build_info.py $(BUILD_STAMP)

FORCE:
