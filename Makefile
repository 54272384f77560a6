# Thin wrapper over CMake: every target installs what it needs first (apps/scripts/install-deps.sh),
# so on a fresh Debian 12 machine `make run` and `make test` are all there is to type.
#   make run     the main job: tune and train the tiny captioning model, log to HDF5 (data made on the way)
#   make test    build and run the test suite (what CI runs)
#   make bench-torch   the benchmark next to PyTorch (installs Debian's python3-torch)
#   make compile-check the GPU build checked without a GPU (nvcc for sm_90 against Kokkos 5.x)
# Use your own Kokkos (e.g. CUDA on a GH200 node): make test Kokkos_ROOT=/path/to/kokkos
JOULE_DEPS_PREFIX ?= $(HOME)/.cache/joule/kokkos-3.4.1-openmp
BUILD ?= build
JOBS ?= $(shell nproc)
CMAKE_ARGS ?=

ifdef Kokkos_ROOT
  DEPS_ENV := Kokkos_ROOT=$(Kokkos_ROOT)
  KOKKOS := $(Kokkos_ROOT)
else
  DEPS_ENV := JOULE_DEPS_PREFIX=$(JOULE_DEPS_PREFIX)
  KOKKOS := $(JOULE_DEPS_PREFIX)
endif

.PHONY: all deps configure build test run bench bench-torch compile-check clean
all: build

deps:
	$(DEPS_ENV) bash apps/scripts/install-deps.sh

configure: deps
	cmake -S . -B $(BUILD) -DKokkos_ROOT=$(KOKKOS) $(CMAKE_ARGS)

build: configure
	cmake --build $(BUILD) -j $(JOBS)

test: build
	ctest --test-dir $(BUILD) --output-on-failure -j $(JOBS)

# The main job: tune the embedded default (tiny) configuration by measurement, train with the
# choice, and write the run log to $(BUILD)/runs/ (a new file each time; `joule inspect` reads it).
run: build
	./$(BUILD)/apps/joule tune --make-data --out $(BUILD)/runs/tune-$$(date +%Y%m%d-%H%M%S).h5

bench: build
	./$(BUILD)/apps/joule bench

bench-torch: build
	JOULE_WITH_TORCH=1 $(DEPS_ENV) bash apps/scripts/install-deps.sh
	./$(BUILD)/apps/joule bench --json $(BUILD)/bench.json
	/usr/bin/python3 apps/scripts/bench_torch.py $(BUILD)/bench.json

# Every translation unit compiled for CUDA sm_90 (nvcc) and with g++ in C++20 against Kokkos 5.x
# (and the Kokkos 4.5 / Kokkos-Kernels 4.5 pair): GPU builds checked without a GPU. CI runs it.
compile-check:
	bash cmake/compile-check/compile_check.sh

clean:
	rm -rf $(BUILD)
