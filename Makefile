# The two entry points:
#   make run   - set up, build, and run dspark's main job on the bundled default model
#   make test  - set up, build, and run the CPU test suite (plus the sanitizer build of it)
# Pass arguments to `make run` with ARGS="...", e.g. make run ARGS="--device cuda".

BUILD      ?= build
ASAN_BUILD ?= build-asan
JOBS       ?= $(shell nproc)
CMAKE_ARGS ?=
# Unity builds (cmake/unity.cmake): a third less compile time for a fresh build; UNITY=OFF
# compiles file by file, for quicker rebuilds while editing one file.
UNITY      ?= ON

.PHONY: run test setup build asan-test

setup:
	@bash scripts/setup.sh

build: setup
	cmake -S . -B $(BUILD) -G Ninja -DCMAKE_BUILD_TYPE=Release -DDSPARK_UNITY=$(UNITY) $(CMAKE_ARGS)
	cmake --build $(BUILD) -j $(JOBS)

run: build
	@bash scripts/run_default.sh $(BUILD)/bin/dspark $(ARGS)

# The tests' Python references (safetensors, numpy, tokenizers) live in a virtual environment.
PYENV      ?= $(BUILD)/pyenv
TEST_PATH   = $(abspath $(PYENV))/bin:$(PATH)

test: build
	@bash scripts/setup_python.sh $(PYENV)
	PATH="$(TEST_PATH)" ctest --test-dir $(BUILD) -L cpu --output-on-failure -j $(JOBS) --timeout 900
	$(MAKE) --no-print-directory asan-test

# The unit tests again under AddressSanitizer + UndefinedBehaviorSanitizer (CPU only), less
# the tests labelled python-only (they run no dspark code; tests/CMakeLists.txt).
# Compiled at -Og -g1 (not RelWithDebInfo's -O2 -g) and with precompiled headers (DSPARK_PCH):
# a third of the compile time. The sanitizers check every access at any optimisation level
# (fewer are optimised away at -Og), and -g1 keeps the file:line (inlined frames included) of their
# stack traces; only local-variable debug info is left out. The f32 and attention tiles compile at
# -O2 even there (dspark_optimise_sanitized_kernels, cmake/warnings.cmake): at -Og they took a
# quarter of the sanitizer suite's CPU time. docs/build.md has the measurements.
ASAN_CXX_FLAGS ?= -Og -g1 -DNDEBUG
asan-test: setup
	cmake -S . -B $(ASAN_BUILD) -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DDSPARK_SANITIZE=ON \
	  -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="$(ASAN_CXX_FLAGS)" -DDSPARK_PCH=ON -DDSPARK_UNITY=$(UNITY) \
	  -DDSPARK_CUDA=OFF -DDSPARK_BUILD_BENCH=OFF
	cmake --build $(ASAN_BUILD) -j $(JOBS) --target dspark_unit_tests dspark
	@bash scripts/setup_python.sh $(PYENV)
	PATH="$(TEST_PATH)" ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
	  DSPARK_STAT_SAMPLES=20000 ctest --test-dir $(ASAN_BUILD) -L cpu -LE python-only \
	  --output-on-failure -j $(JOBS) --timeout 1800
