#!/usr/bin/env bash
# Installs everything joule needs on a fresh Debian 12 machine, and skips whatever is already there.
#   - Debian packages (compiler, CMake, OpenMPI, HDF5, Catch2, OpenBLAS, json/CLI/fmt headers,
#     python3 with numpy, h5py, PIL and matplotlib for apps/scripts and their tests)
#   - Kokkos + Kokkos-Kernels, built into a cache prefix, from one of two sources:
#       default: 3.4.1 with the OpenMP backend, from Debian's own trilinos source package
#                (Debian's binary packages only have the Serial backend);
#       KOKKOS_SRC + KOKKOS_KERNELS_SRC: the user's source trees (e.g. git checkouts of the 4.6.01
#                release tags), with the backends JOULE_KOKKOS_BACKEND asks for.
# Environment:
#   JOULE_DEPS_PREFIX    where Kokkos goes (default: ~/.cache/joule/kokkos-3.4.1-openmp, or
#                        ~/.cache/joule/kokkos-<version>-<backend> for source trees)
#   KOKKOS_SRC, KOKKOS_KERNELS_SRC   build Kokkos + Kokkos-Kernels from these trees (both or neither)
#   JOULE_KOKKOS_BACKEND openmp (default): OpenMP + Serial, Kokkos-Kernels on OpenBLAS (OpenMP build)
#                        cuda: CUDA (Hopper, sm_90) + OpenMP + Serial, Kokkos-Kernels on cuBLAS;
#                        nvcc_wrapper from KOKKOS_SRC, nvcc from PATH or CUDA_HOME; on aarch64
#                        hosts the Grace cores too (Kokkos_ARCH_ARMV9_GRACE). With CUDA 13 and a
#                        Kokkos that has a patch in cmake/patches (4.6.01), a copy of KOKKOS_SRC
#                        is patched and built; the tree itself is never changed
#   JOULE_WITH_TORCH=1   also install Debian's python3-torch (golden files, PyTorch bench)
#   Kokkos_ROOT          if set, the user's own Kokkos is used and nothing is built
#   --print-prefix       print the prefix these settings build into, and do nothing else
set -euo pipefail

log() { printf '[joule deps] %s\n' "$*" >&2; }
die() { printf '[joule deps] ERROR: %s\n' "$*" >&2; exit 1; }
sudo_if_needed() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi; }

# --- What to build, and where ---------------------------------------------------------------------
backend="${JOULE_KOKKOS_BACKEND:-openmp}"
case "$backend" in openmp|cuda) ;; *) die "JOULE_KOKKOS_BACKEND=$backend: allowed are openmp and cuda";; esac
from_source=0
if [ -n "${KOKKOS_SRC:-}" ] || [ -n "${KOKKOS_KERNELS_SRC:-}" ]; then
  [ -n "${KOKKOS_SRC:-}" ] && [ -n "${KOKKOS_KERNELS_SRC:-}" ] ||
    die "KOKKOS_SRC and KOKKOS_KERNELS_SRC go together (got KOKKOS_SRC='${KOKKOS_SRC:-}', KOKKOS_KERNELS_SRC='${KOKKOS_KERNELS_SRC:-}')"
  for d in "$KOKKOS_SRC" "$KOKKOS_KERNELS_SRC"; do
    [ -f "$d/CMakeLists.txt" ] || die "$d is not a Kokkos / Kokkos-Kernels source tree (no CMakeLists.txt)"
  done
  KOKKOS_SRC="$(cd "$KOKKOS_SRC" && pwd)"; KOKKOS_KERNELS_SRC="$(cd "$KOKKOS_KERNELS_SRC" && pwd)"
  from_source=1
elif [ "$backend" != openmp ]; then
  die "JOULE_KOKKOS_BACKEND=$backend needs KOKKOS_SRC and KOKKOS_KERNELS_SRC (Debian's Kokkos 3.4.1 is built with OpenMP only)"
fi
version_lt() { [ "$1" != "$2" ] && [ "$(printf '%s\n%s\n' "$1" "$2" | sort -V | head -1)" = "$1" ]; }
tree_version() {  # MAJOR.MINOR.PATCH from a source tree's CMakeLists.txt
  local f="$1/CMakeLists.txt" v=""
  for part in MAJOR MINOR PATCH; do
    v+="$(sed -n -E "s/^ *set\(${2}_VERSION_$part +([0-9]+)\).*/\1/Ip" "$f" | head -1)."
  done
  v="${v%.}"; [[ "$v" =~ ^[0-9]+\.[0-9]+\.[0-9]+$ ]] || die "cannot read the version from $f"
  echo "$v"
}
if [ "$from_source" = 1 ]; then
  kokkos_version="$(tree_version "$KOKKOS_SRC" Kokkos)"
  kernels_version="$(tree_version "$KOKKOS_KERNELS_SRC" KokkosKernels)"
  default_prefix="$HOME/.cache/joule/kokkos-$kokkos_version-$backend"
else
  default_prefix="$HOME/.cache/joule/kokkos-3.4.1-openmp"
fi
prefix="${JOULE_DEPS_PREFIX:-$default_prefix}"
if [ "${1:-}" = --print-prefix ]; then echo "$prefix"; exit 0; fi

# --- Debian packages --------------------------------------------------------------------------------
packages=(g++ cmake make pkg-config libopenmpi-dev openmpi-bin libhdf5-dev catch2
          libopenblas-dev libopenblas-openmp-dev nlohmann-json3-dev libcli11-dev libfmt-dev libstb-dev
          python3 python3-numpy python3-h5py python3-pil python3-matplotlib)
if [ "${JOULE_WITH_TORCH:-0}" = 1 ]; then packages+=(python3-torch); fi
# patch(1) for cmake/patches (a CUDA Kokkos from source trees; see kokkos_patch below).
if [ "$from_source" = 1 ] && [ "$backend" = cuda ]; then packages+=(patch); fi

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ "${#missing[@]}" -gt 0 ]; then
  log "installing Debian packages: ${missing[*]}"
  sudo_if_needed apt-get update -q
  DEBIAN_FRONTEND=noninteractive sudo_if_needed apt-get install -y -q --no-install-recommends "${missing[@]}"
fi

if [ -n "${Kokkos_ROOT:-}" ]; then
  log "Kokkos_ROOT=$Kokkos_ROOT given: using that Kokkos, building none"
  exit 0
fi

# --- Kokkos + Kokkos-Kernels ------------------------------------------------------------------------
jobs="${JOBS:-$(nproc)}"
# OpenBLAS's OpenMP build, named by full path: it then shares the OpenMP thread pool with
# Kokkos instead of spinning its own pthreads against it (which slowed small GEMMs several-fold),
# whatever the system's libblas alternative points to.
openblas_dir=/usr/lib/$(gcc -print-multiarch)/openblas-openmp

# What each backend means, as Kokkos / Kokkos-Kernels options (one table for both sources).
kokkos_options=(-DKokkos_ENABLE_OPENMP=ON -DKokkos_ENABLE_SERIAL=ON)
kernels_options=()
cxx_compiler=()
kokkos_patch=""
if [ "$backend" = cuda ]; then
  nvcc="$(command -v nvcc || true)"
  [ -n "$nvcc" ] || { [ -x "${CUDA_HOME:-/usr/local/cuda}/bin/nvcc" ] && nvcc="${CUDA_HOME:-/usr/local/cuda}/bin/nvcc"; } ||
    die "JOULE_KOKKOS_BACKEND=cuda: no nvcc on PATH or in \$CUDA_HOME/bin (install the CUDA toolkit)"
  cuda_version="$("$nvcc" --version | sed -n 's/.*release \([0-9.]*\).*/\1/p')"
  # nvcc_wrapper uses the nvcc it finds on PATH.
  export PATH="$(dirname "$nvcc"):$PATH"
  # nvcc_wrapper's default architecture (sm_70 up to Kokkos 4.6) is gone from CUDA 13, and CMake's
  # compiler check runs before Kokkos adds its own -arch: name Hopper's from the start.
  cxx_compiler=(-DCMAKE_CXX_COMPILER="$KOKKOS_SRC/bin/nvcc_wrapper" -DCMAKE_CXX_FLAGS=-arch=sm_90)
  kokkos_options+=(-DKokkos_ENABLE_CUDA=ON -DKokkos_ARCH_HOPPER90=ON)
  [ "$(uname -m)" = aarch64 ] && kokkos_options+=(-DKokkos_ARCH_ARMV9_GRACE=ON)
  [ "${kokkos_version%%.*}" -lt 4 ] && kokkos_options+=(-DKokkos_ENABLE_CUDA_LAMBDA=ON)
  # cuBLAS under the GEMMs; no host BLAS, so the install carries no path of this machine's
  # libraries (host-space GEMMs, only used by tests in a GPU build, run Kokkos-Kernels' own).
  kernels_options+=(-DKokkosKernels_ENABLE_TPL_CUBLAS=ON -DKokkosKernels_ENABLE_TPL_CUSPARSE=OFF
                    -DKokkosKernels_ENABLE_TPL_CUSOLVER=OFF -DKokkosKernels_ENABLE_TPL_BLAS=OFF
                    -DKokkosKernels_ENABLE_TPL_LAPACK=OFF)
  tpl_text="cublas (CUDA $cuda_version)"
  # Kokkos releases older than CUDA 13 (4.6.01 and before) call three CUDA runtime functions by
  # their pre-13 signatures. cmake/patches/kokkos-<tag>-cuda13.patch mirrors the upstream fix
  # (kokkos/kokkos #8298, in 4.7.01 as #8328; the file says what it changes and why); it is applied
  # to a copy of the tree, only when it applies cleanly. A tree that already has it (patched by
  # hand, or a release with the fix) is built as it is.
  if [ "$from_source" = 1 ] && [ "${cuda_version%%.*}" -ge 13 ]; then
    # Named by the release tag (4.6.01); the tree's CMakeLists.txt says 4.6.1.
    kokkos_tag="$(printf '%d.%d.%02d' ${kokkos_version//./ })"
    candidate="$(cd "$(dirname "$0")/../.." && pwd)/cmake/patches/kokkos-$kokkos_tag-cuda13.patch"
    if [ -f "$candidate" ]; then
      command -v patch >/dev/null || die "patch(1) is needed to apply $candidate (apt-get install patch)"
      if patch -d "$KOKKOS_SRC" -p1 -R --dry-run -s -f <"$candidate" >/dev/null 2>&1; then
        log "Kokkos $kokkos_version at $KOKKOS_SRC already has $(basename "$candidate"): built as it is"
      elif patch -d "$KOKKOS_SRC" -p1 --dry-run -s -f <"$candidate" >/dev/null 2>&1; then
        kokkos_patch="$candidate"
        # The checksum of its hunks (from the first ---): the comment above them can change freely.
        tpl_text+=", $(basename "$candidate") $(sed -n '/^--- /,$p' "$candidate" | md5sum | cut -c1-16)"
      else
        log "WARNING: $(basename "$candidate") does not apply to $KOKKOS_SRC (a changed tree?): building it unpatched"
      fi
    fi
  fi
else
  kernels_options+=(-DKokkosKernels_ENABLE_TPL_BLAS=ON -DBLAS_LIBRARIES=openblas -DBLAS_LIBRARY_DIRS="$openblas_dir"
                    -DLAPACK_LIBRARIES=openblas -DLAPACK_LIBRARY_DIRS="$openblas_dir")
  tpl_text="blas=$openblas_dir/libopenblas"
fi

# Bump v when the build recipe changes, so cached prefixes are rebuilt. A source tree enters the
# recipe by a checksum of its contents, so a changed (e.g. locally patched) tree is rebuilt too.
tree_sum() { (cd "$1" && find . -path ./.git -prune -o -type f -print0 | LC_ALL=C sort -z | xargs -0 md5sum | md5sum | cut -c1-16); }
# Kept beside the install: the sources of programs no one here wrote, built by the tests against
# this Kokkos with the energy tool loaded (tests/scripts/energy_tool_kokkos_programs.sh).
programs_text="+ Kokkos' tutorial and benchmark sources, Kokkos-Kernels' BLAS perf tests (share/joule/kokkos-programs)"
if [ "$from_source" = 1 ]; then
  recipe="joule-deps v4: kokkos $kokkos_version ($KOKKOS_SRC, $(tree_sum "$KOKKOS_SRC")) + kokkos-kernels $kernels_version ($KOKKOS_KERNELS_SRC, $(tree_sum "$KOKKOS_KERNELS_SRC")), $backend, $tpl_text $programs_text"
else
  recipe="joule-deps v3: kokkos 3.4.1 openmp+serial, kokkos-kernels blas=$openblas_dir/libopenblas $programs_text"
fi
if [ -f "$prefix/.joule-complete" ] && [ "$(cat "$prefix/.joule-complete")" = "$recipe" ]; then
  log "Kokkos + Kokkos-Kernels already in $prefix"
  exit 0
fi
rm -rf "$prefix"

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
cd "$work"

if [ "$from_source" = 1 ]; then
  kokkos_src="$KOKKOS_SRC"; kernels_src="$KOKKOS_KERNELS_SRC"
  log "Kokkos $kokkos_version from $kokkos_src, Kokkos-Kernels $kernels_version from $kernels_src ($backend)"
  if [ -n "$kokkos_patch" ]; then
    # A copy, so that the user's tree stays as it is (and its checksum, in the recipe, with it).
    log "patching a copy of $kokkos_src with $kokkos_patch"
    mkdir -p "$work/kokkos-src"
    (cd "$kokkos_src" && tar --exclude=./.git -cf - .) | tar -xf - -C "$work/kokkos-src"
    patch -d "$work/kokkos-src" -p1 -s <"$kokkos_patch" || die "applying $kokkos_patch failed"
    kokkos_src="$work/kokkos-src"
    # CMAKE_CXX_COMPILER names nvcc_wrapper: the patched copy's, whose default arch CUDA 13 has.
    cxx_compiler=(-DCMAKE_CXX_COMPILER="$kokkos_src/bin/nvcc_wrapper" -DCMAKE_CXX_FLAGS=-arch=sm_90)
  elif [ "$backend" = cuda ] && [ "${cuda_version%%.*}" -ge 13 ] && version_lt "$kokkos_version" 4.7.1; then
    log "NOTE: Kokkos $kokkos_version predates CUDA 13 (upstream supports it from 4.7.01) and cmake/patches has no patch that applies: its CUDA backend will likely not compile"
  fi
else
  # deb-src entry for Debian's trilinos source package (the only Debian source of Kokkos 3.4.1).
  if ! apt-get source --download-only trilinos >/dev/null 2>&1; then
    log "adding a deb-src entry for bookworm to fetch the trilinos source package"
    sudo_if_needed tee /etc/apt/sources.list.d/joule-debian-src.sources >/dev/null <<'SRC'
Types: deb-src
URIs: http://deb.debian.org/debian
Suites: bookworm
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
SRC
    sudo_if_needed apt-get update -q
    apt-get source --download-only trilinos
  fi
  log "unpacking packages/kokkos and packages/kokkos-kernels from $(ls trilinos_*.orig.tar.*)"
  tar -xf trilinos_*.orig.tar.* --wildcards '*/packages/kokkos/*' '*/packages/kokkos-kernels/*'
  kokkos_src="$(echo "$work"/Trilinos-*/packages/kokkos)"; kernels_src="$(echo "$work"/Trilinos-*/packages/kokkos-kernels)"
fi

build() {  # build NAME SRC OPTIONS...: configure, build and install one package, log kept on failure
  local name="$1" src="$2"; shift 2
  local t0=$SECONDS
  cmake -S "$src" -B "build-$name" -DCMAKE_BUILD_TYPE=Release -DCMAKE_INSTALL_PREFIX="$prefix" \
    -DCMAKE_CXX_STANDARD="$cxx_standard" -DCMAKE_CXX_EXTENSIONS=OFF -DCMAKE_POSITION_INDEPENDENT_CODE=ON \
    "${cxx_compiler[@]}" "$@" >"build-$name.log" 2>&1 || { tail -40 "build-$name.log"; die "configuring $name failed"; }
  cmake --build "build-$name" -j "$jobs" >>"build-$name.log" 2>&1 || {
    grep -m 20 -E 'error' "build-$name.log" >&2 || tail -40 "build-$name.log" >&2
    cp "build-$name.log" "$prefix.failed-$name.log"
    die "building $name from $src failed ($backend${cuda_version:+, CUDA $cuda_version}); full log: $prefix.failed-$name.log"
  }
  cmake --install "build-$name" >>"build-$name.log" 2>&1
  log "$name installed in $((SECONDS - t0)) s"
}
mkdir -p "$(dirname "$prefix")"
# Kokkos 5 needs C++20; joule is C++17 that is also valid C++20.
cxx_standard=17
[ "$from_source" = 1 ] && ! version_lt "$kokkos_version" 5.0.0 && cxx_standard=20

log "building Kokkos ($backend) into $prefix with $jobs jobs"
build kokkos "$kokkos_src" "${kokkos_options[@]}" -DKokkos_ENABLE_TESTS=OFF
# ETI off: joule instantiates only the few kernels it calls.
log "building Kokkos-Kernels ($tpl_text, no ETI) into $prefix"
build kokkos-kernels "$kernels_src" -DKokkos_ROOT="$prefix" "${kernels_options[@]}" \
  -DKokkosKernels_INST_DOUBLE=OFF -DKokkosKernels_INST_FLOAT=OFF \
  -DKokkosKernels_INST_COMPLEX_DOUBLE=OFF -DKokkosKernels_INST_COMPLEX_FLOAT=OFF \
  -DKokkosKernels_INST_ORDINAL_INT=OFF -DKokkosKernels_INST_ORDINAL_INT64_T=OFF \
  -DKokkosKernels_INST_OFFSET_INT=OFF -DKokkosKernels_INST_OFFSET_SIZE_T=OFF \
  -DKokkosKernels_INST_LAYOUTLEFT=OFF -DKokkosKernels_INST_LAYOUTRIGHT=OFF \
  -DKokkosKernels_ENABLE_TESTS=OFF -DKokkosKernels_ENABLE_EXAMPLES=OFF

programs="$prefix/share/joule/kokkos-programs"
mkdir -p "$programs/kokkos" "$programs/kokkos-kernels/perf_test"
for part in example benchmarks LICENSE; do
  [ -e "$kokkos_src/$part" ] && cp -r "$kokkos_src/$part" "$programs/kokkos/"
done
[ -d "$kernels_src/perf_test/blas" ] && cp -r "$kernels_src/perf_test/blas" "$programs/kokkos-kernels/perf_test/"
[ -e "$kernels_src/LICENSE" ] && cp "$kernels_src/LICENSE" "$programs/kokkos-kernels/"
log "kept the sources of Kokkos' tutorial and benchmarks and Kokkos-Kernels' BLAS perf tests in $programs"

echo "$recipe" > "$prefix/.joule-complete"
log "done: Kokkos_ROOT=$prefix"
