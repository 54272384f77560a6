# Thin wrapper over CMake: every target installs what it needs first (apps/scripts/install-deps.sh),
# so on a fresh Debian 12 machine `make run` and `make test` are all there is to type.
#   make run     the main job: train the tiny captioning model tuned in flight, log to HDF5 (data made on the way)
#   make test    build and run the test suite (what CI runs)
#   make test-catch2-v3  the same suite against Catch2 v3
#   make test-sanitize   the suite against Catch2 v3 with AddressSanitizer + UBSan, less the mpirun,
#                        long and once tests (CI runs it too)
#   make bench-torch   operators and whole training steps next to PyTorch (installs Debian's python3-torch)
#   make compile-check the GPU build checked without a GPU (nvcc for sm_90 against Kokkos 5.x), and
#                      the GPU audit's resource gate on its kernels (ptxas: spills, occupancy)
#   make device-bundle KOKKOS_SRC=... KOKKOS_KERNELS_SRC=...   the device check's bundle: joule and the
#                      check's tests built here for CUDA sm_90 with the libraries a GPU machine may
#                      lack (<= 48 MiB, never committed), then rehearsed here up to the first GPU call
#   make vec-report    GCC's vectorisation report for the host AdamW loop, compiled by the build's own
#                      command (its compiler, JOULE_HOST_TARGET, Kokkos' flags; nvcc_wrapper on a GH200)
#                      and (with Debian's g++-aarch64-linux-gnu) for Grace (SVE instructions counted)
#                      and NEON; fails if it stays scalar
#   make test-kokkos45 the suite but its long, mpirun and once tests inside a Debian sid root (debootstrap, cached
#                      in ~/.cache/joule/sid) against trilinos 16.1's Kokkos 4.5.1 + Kokkos-Kernels 4.5
#                      with g++ 16 and cmake 4 (apps/scripts/sid_root.sh; needs root for chroot and bind mounts)
#   make test-kokkos52 the suite but its once tests (scripts', docs') in a root like it against Kokkos
#                      5.2.2 without Kokkos-Kernels (GEMMs on OpenBLAS directly)
#   make test-aarch64  joule cross-built for aarch64 (Grace's cores, Debian's g++-aarch64-linux-gnu against
#                      an arm64 sysroot of Debian packages, Kokkos 3.4.1 cross-built) and its Grace-relevant
#                      unit tests run under qemu-user (docs/testing.md#aarch64-under-emulation);
#                      make build-aarch64 stops after the build
#   make gpu-audit     the compile check with the whole GPU audit: every kernel's registers, spills
#                      and occupancy on an H200 (ptxas), one training step of medium.json's launches
#                      recorded on the CPU (threads each kernel exposes); fails on spills, occupancy
#                      < 25 % or < 1/4 of a wave, less cmake/compile-check/gpu_audit_allow.json;
#                      then the roofline MODEL of that step on a GH200 (docs/roofline.md)
# Use your own Kokkos install (e.g. CUDA on a GH200 node):
#   make test Kokkos_ROOT=/path/to/kokkos [PRESET=gh200] [HDF5_ROOT=... NCCL_ROOT=... CUDAToolkit_ROOT=...]
# A Kokkos_ROOT or another *_ROOT (or JOULE_NO_APT=1, or a system without dpkg/apt: RHEL, SLES, Cray,
# Spack's apps/spack/spack.yaml) means no apt and no sudo: install-deps.sh only checks what is there
# and names what is missing with the minimum version. Variables given to make reach CMake through the
# environment, where it reads every <Package>_ROOT (NCCL_ROOT too). The gh200 preset compiles
# with $Kokkos_ROOT/bin/nvcc_wrapper; CMAKE_ARGS=-DCMAKE_CXX_COMPILER=/path/to/nvcc_wrapper overrides.
# Or build Kokkos + Kokkos-Kernels from your source trees (e.g. the 4.6.01 release tags) first;
# each backend and version gets its own cache prefix and build folder:
#   make test KOKKOS_SRC=~/src/kokkos KOKKOS_KERNELS_SRC=~/src/kokkos-kernels [JOULE_KOKKOS_BACKEND=cuda]
BUILD_DEFAULT := build
# Parallel jobs: the CPUs this process may use, at most 16 (a shared login node); JOBS=N overrides.
JOBS ?= $(shell n=$$(nproc); [ "$$n" -gt 16 ] && n=16; echo $$n)
CMAKE_ARGS ?=
JOULE_KOKKOS_BACKEND ?= openmp

ifdef Kokkos_ROOT
  DEPS_ENV := Kokkos_ROOT=$(Kokkos_ROOT)
  KOKKOS := $(Kokkos_ROOT)
else
  DEPS_ENV := JOULE_KOKKOS_BACKEND=$(JOULE_KOKKOS_BACKEND)
  ifdef KOKKOS_SRC
    DEPS_ENV += KOKKOS_SRC=$(KOKKOS_SRC) KOKKOS_KERNELS_SRC=$(KOKKOS_KERNELS_SRC)
  endif
  # The script names the prefix for these settings (3.4.1 from Debian's trilinos source by default).
  ifndef JOULE_DEPS_PREFIX
    JOULE_DEPS_PREFIX := $(shell $(DEPS_ENV) bash apps/scripts/install-deps.sh --print-prefix)
  endif
  ifdef KOKKOS_SRC
    BUILD_DEFAULT := build-$(notdir $(JOULE_DEPS_PREFIX))
  endif
  DEPS_ENV += JOULE_DEPS_PREFIX=$(JOULE_DEPS_PREFIX)
  KOKKOS := $(JOULE_DEPS_PREFIX)
endif
BUILD ?= $(BUILD_DEFAULT)
# The host builds (the cpu and sanitize presets, and test-aarch64) compile through ccache where it is
# installed (install-deps.sh installs it on Debian): a fresh clone of a commit another clone has
# built compiles nothing again (cmake/ccache_launcher.sh: the settings that make that true).
# JOULE_CCACHE=off configures them without it. Not the gh200 preset: nvcc_wrapper is left alone.
JOULE_CCACHE ?= on
ifeq ($(filter on off,$(JOULE_CCACHE)),)
  $(error JOULE_CCACHE=$(JOULE_CCACHE): allowed are on (ccache where installed) and off)
endif
ifeq ($(JOULE_CCACHE)$(if $(shell command -v ccache 2>/dev/null),found),onfound)
  HOST_LAUNCHER := $(CURDIR)/cmake/ccache_launcher.sh
endif
HOST_LAUNCHER_ARGS := -DCMAKE_CXX_COMPILER_LAUNCHER=$(HOST_LAUNCHER) -DCMAKE_C_COMPILER_LAUNCHER=$(HOST_LAUNCHER)
# CMakePresets.json holds the build settings: cpu, or gh200 (nvcc_wrapper, Hopper, JOULE_GH200).
ifeq ($(JOULE_KOKKOS_BACKEND),cuda)
  PRESET ?= gh200
else
  PRESET ?= cpu
endif

.PHONY: all deps deps-ci deps-ci-more configure build test test-catch2-v3 build-sanitize test-sanitize build-aarch64 test-aarch64 test-kokkos45 test-kokkos52 run bench bench-torch compile-check gpu-audit vec-report device-bundle clean
all: build

deps:
	$(DEPS_ENV) bash apps/scripts/install-deps.sh

configure: deps
	Kokkos_ROOT=$(KOKKOS) cmake --preset $(PRESET) -S . -B $(BUILD) -DKokkos_ROOT=$(KOKKOS) \
	  $(if $(filter cpu,$(PRESET)),$(HOST_LAUNCHER_ARGS)) $(CMAKE_ARGS)

build: configure
	cmake --build $(BUILD) -j $(JOBS)

# --no-tests=error: a run that finds no tests fails (test cases are listed at test time).
test: build
	ctest --test-dir $(BUILD) --output-on-failure --no-tests=error -j $(JOBS)

# The whole suite built against Catch2 v3 (GH200 systems often have only v3): libcatch2-dev from
# Debian's bookworm-backports, unpacked into a cache, not installed. CI builds against v3 in
# test-sanitize instead (every test compiled, all but the mpirun and long ones run).
test-catch2-v3: deps
	catch2_dir="$$(bash tests/scripts/fetch_catch2_v3.sh)" && \
	  Kokkos_ROOT=$(KOKKOS) cmake --preset $(PRESET) -S . -B $(BUILD)-catch2-v3 -DKokkos_ROOT=$(KOKKOS) \
	    -DCatch2_DIR="$$catch2_dir" $(if $(filter cpu,$(PRESET)),$(HOST_LAUNCHER_ARGS)) $(CMAKE_ARGS)
	cmake --build $(BUILD)-catch2-v3 -j $(JOBS)
	ctest --test-dir $(BUILD)-catch2-v3 --output-on-failure --no-tests=error -j $(JOBS)

# The suite built with AddressSanitizer + UndefinedBehaviorSanitizer against Catch2 v3, in one build
# (CI's second): it finds memory and UB errors in joule's code, and proves that every test compiles,
# registers and runs under v3. It runs every test but those labelled `mpirun` (OpenMPI's start-up
# trips ASan's interceptors), `long` (the end-to-end training and tuning scenarios) and `once` (tests
# of scripts and docs, whose subject is not the build): the plain build runs those. Compiled at -Og -g1 (line tables for the reports): the sanitizers' instrumentation
# at -O2 -g made this build take four times the plain one. Leak detection is off: OpenMPI and HDF5
# keep allocations until exit by design; use-after-free, overflows and UB stop the test.
# `no-build` tests run no program of the build (scripts on the host's Python): the plain phase,
# on the same host, runs them (tests/CMakeLists.txt).
SANITIZE_EXCLUDE_LABELS ?= mpirun|long|once|no-build
# The attention cases run on Serial only here: on OpenMP they run the same host kernels (a team is
# one thread) and the naive references, so the sanitizers learn nothing new, at 11-17 s a case.
# The launch contract over the shipped configurations checks shapes the kernels state, not memory:
# under the sanitizers its gh200-350m steps took 27 s and found nothing the other tests do not.
# Coordinate descent over 200 random landscapes runs the code the fixed-landscape cases run there,
# 200 times over (24 s under the sanitizers).
SANITIZE_EXCLUDE_TESTS ?= ^attention: .* - Kokkos::OpenMP$$|^launch contract: every team launch of a training step|^scheduler: coordinate descent over 200 random landscapes
build-sanitize: deps
	catch2_dir="$$(bash tests/scripts/fetch_catch2_v3.sh)" && \
	  Kokkos_ROOT=$(KOKKOS) cmake --preset sanitize -S . -B $(BUILD)-sanitize -DKokkos_ROOT=$(KOKKOS) \
	    -DCatch2_DIR="$$catch2_dir" $(HOST_LAUNCHER_ARGS) $(CMAKE_ARGS)
	cmake --build $(BUILD)-sanitize -j $(JOBS)

test-sanitize: build-sanitize
	ASAN_OPTIONS=detect_leaks=0:abort_on_error=0 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
	  ctest --test-dir $(BUILD)-sanitize --output-on-failure --no-tests=error -j $(JOBS) -LE '$(SANITIZE_EXCLUDE_LABELS)' \
	  -E '$(SANITIZE_EXCLUDE_TESTS)'

# joule for aarch64 under emulation (docs/testing.md#aarch64-under-emulation): the sysroot, Kokkos and
# the build folder in ~/.cache/joule (each remade only when what it is made from changes); the phases
# and their settings: bash apps/scripts/aarch64_cross.sh --help.
test-aarch64:
	JOBS=$(JOBS) JOULE_AARCH64_LAUNCHER=$(HOST_LAUNCHER) bash apps/scripts/aarch64_cross.sh all

# The same up to the build (CI builds it in the background, then runs test-aarch64).
build-aarch64:
	JOBS=$(JOBS) JOULE_AARCH64_LAUNCHER=$(HOST_LAUNCHER) bash apps/scripts/aarch64_cross.sh sysroot kokkos build

# The suite against Kokkos 4.5.1 (Debian sid's trilinos 16.1) in a sid root made by debootstrap; the
# root is made once in ~/.cache/joule/sid and remade when its package list changes; the build folder
# is build-sid-kokkos45 in the checkout (bash apps/scripts/sid_root.sh --help: phases, settings).
# Every test but those labelled long, mpirun or once (KOKKOS45_CTEST_ARGS): the end-to-end scenarios
# and OpenMPI 5 run against Kokkos 5.2.2 in the same sid toolchain below (and all of them in make
# test); the tests of scripts and docs (once) in make test only.
# Those labelled no-build or one-root (scripts on sid's Python, joule's handling of shared folders
# and converter files) run in the Kokkos 5.2.2 root, whose userland is this root's: only Kokkos differs.
KOKKOS45_CTEST_ARGS ?= -LE 'long|mpirun|once|no-build|one-root'
test-kokkos45:
	JOBS=$(JOBS) JOULE_SID_VARIANT=kokkos45 JOULE_SID_CTEST_ARGS="$(KOKKOS45_CTEST_ARGS)" bash apps/scripts/sid_root.sh all

# The same against Debian sid's Kokkos 5.2.2 (OpenMP), which comes without Kokkos-Kernels: joule's
# GEMMs call OpenBLAS directly (JOULE_GEMM=auto); root and build folder named kokkos52. Every test
# but the tests of scripts and docs (label once) and the long scenarios of joule's own process and
# file handling (label plain-only: make test runs them; tests/CMakeLists.txt says which and why).
KOKKOS52_CTEST_ARGS ?= -LE 'once|plain-only'
test-kokkos52:
	JOBS=$(JOBS) JOULE_SID_VARIANT=kokkos52 JOULE_SID_CTEST_ARGS="$(KOKKOS52_CTEST_ARGS)" bash apps/scripts/sid_root.sh all

# What CI fetches besides `make deps`, so that its later phases time only building and testing:
# Catch2 v3 (for test-sanitize) and the Kokkos 4.5/5.x headers of compile-check, both unpacked
# into ~/.cache/joule, never installed; the aarch64 sysroot; the sid roots of test-kokkos45 and
# test-kokkos52.
deps-ci: deps deps-ci-more

# deps-ci less deps: what the plain build does not need (CI fetches it while that build compiles).
deps-ci-more:
	bash tests/scripts/fetch_catch2_v3.sh >/dev/null
	bash cmake/compile-check/compile_check.sh --fetch-only
	JOBS=$(JOBS) bash apps/scripts/aarch64_cross.sh sysroot kokkos
	JOULE_SID_VARIANT=kokkos45 bash apps/scripts/sid_root.sh root
	JOULE_SID_VARIANT=kokkos52 bash apps/scripts/sid_root.sh root

# The main job: train the embedded default (tiny) configuration, tuned in flight (the scheduler
# measures the candidate configurations on the run's own first steps, then the run goes on with
# the choice), and write the run log to $(BUILD)/runs/ (a new file each time; `joule inspect`
# reads it).
run: build
	./$(BUILD)/apps/joule train --tune --make-data --tune-log $(BUILD)/runs/tune-$$(date +%Y%m%d-%H%M%S).h5

bench: build
	./$(BUILD)/apps/joule bench

bench-torch: build
	JOULE_WITH_TORCH=1 $(DEPS_ENV) bash apps/scripts/install-deps.sh
	./$(BUILD)/apps/joule bench --suite all --json $(BUILD)/bench.json
	/usr/bin/python3 apps/scripts/bench_torch.py $(BUILD)/bench.json

# Every translation unit compiled for CUDA sm_90 (nvcc) and with g++ in C++20 against Kokkos 5.x
# (and the Kokkos 4.5 / Kokkos-Kernels 4.5 pair): GPU builds checked without a GPU. CI runs it.
# With a joule binary already built (CI's plain build), one training step of the embedded tiny model
# is recorded first (a second): the launch blocks of the TeamPolicy kernels, for the occupancy gate.
# The threads each kernel exposes are gated by gpu-audit, at medium.json.
GPU_AUDIT_DIR ?= $(abspath $(BUILD)/gpu-audit)
compile-check:
	@mkdir -p $(GPU_AUDIT_DIR)
	if [ -x $(BUILD)/apps/joule ]; then \
	  $(BUILD)/apps/joule bench --suite launches --json $(GPU_AUDIT_DIR)/launches-tiny.json >/dev/null && \
	  export JOULE_GPU_AUDIT_LAUNCHES=$(GPU_AUDIT_DIR)/launches-tiny.json || \
	  echo "compile-check: NOTE: $(BUILD)/apps/joule recorded no launches: TeamPolicy occupancy not gated"; fi; \
	JOULE_GPU_AUDIT_DIR=$(GPU_AUDIT_DIR) bash cmake/compile-check/compile_check.sh

vec-report: configure
	JOULE_VEC_REPORT_BUILD_DIR=$(abspath $(BUILD)) bash apps/scripts/vec_report.sh $(CURDIR) $(KOKKOS)/include $(BUILD)/core/generated

# The whole GPU audit (docs/gh200.md#the-gpu-audit): one training step of medium.json recorded on the
# CPU (~30 s on 2 cores), then the compile check with its ptxas figures and the gates.
# GPU_AUDIT_CONFIG=... audits another configuration's launches (the wave gate is medium.json's).
GPU_AUDIT_CONFIG ?= apps/configs/medium.json
gpu-audit: configure
	cmake --build $(BUILD) --target joule -j $(JOBS)
	@mkdir -p $(GPU_AUDIT_DIR)
	./$(BUILD)/apps/joule bench --suite launches --config $(GPU_AUDIT_CONFIG) --json $(GPU_AUDIT_DIR)/launches.json
	JOULE_GPU_AUDIT_DIR=$(GPU_AUDIT_DIR) JOULE_GPU_AUDIT_LAUNCHES=$(GPU_AUDIT_DIR)/launches.json \
	  JOULE_GPU_AUDIT_WAVE_GATE=1 bash cmake/compile-check/compile_check.sh
	./$(BUILD)/apps/joule bench --suite roofline --config $(GPU_AUDIT_CONFIG) --json $(GPU_AUDIT_DIR)/roofline.json

# The device check's bundle (docs/gh200.md#the-device-check-one-command-on-a-gpu-node), built on this
# machine into an ignored folder (never committed); copy it to a GPU node, where
# `device_check.sh --bundle` runs it.
DEVICE_BUNDLE ?= .device/joule-device.tar.gz
device-bundle:
	@test -n "$(KOKKOS_SRC)" -a -n "$(KOKKOS_KERNELS_SRC)" || \
	  { echo "make device-bundle: give KOKKOS_SRC and KOKKOS_KERNELS_SRC (e.g. the 4.6.01 release tags)"; exit 2; }
	@mkdir -p $(dir $(DEVICE_BUNDLE))
	@exclude="$$(git rev-parse --git-path info/exclude)"; mkdir -p "$$(dirname "$$exclude")"; \
	  grep -qx '/.device/' "$$exclude" 2>/dev/null || echo '/.device/' >> "$$exclude"
	KOKKOS_SRC=$(KOKKOS_SRC) KOKKOS_KERNELS_SRC=$(KOKKOS_KERNELS_SRC) bash apps/scripts/device_bundle.sh $(DEVICE_BUNDLE)
	bash apps/scripts/device_check.sh --rehearse --bundle $(DEVICE_BUNDLE) .device/rehearsal

clean:
	rm -rf $(BUILD) $(BUILD)-catch2-v3 $(BUILD)-sanitize
