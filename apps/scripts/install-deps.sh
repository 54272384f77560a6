#!/usr/bin/env bash
# Installs everything joule needs on a fresh Debian 12 machine, and skips whatever is already there.
#   - Debian packages (compiler, CMake, OpenMPI, HDF5, Catch2, OpenBLAS, json/CLI/fmt headers,
#     python3 with numpy, h5py, PIL and matplotlib for apps/scripts and their tests)
#   - Kokkos + Kokkos-Kernels 3.4.1 with the OpenMP backend, built from Debian's own trilinos
#     source package (Debian's binary packages only have the Serial backend), into a cache prefix.
# Environment:
#   JOULE_DEPS_PREFIX   where Kokkos goes (default: ~/.cache/joule/kokkos-3.4.1-openmp)
#   JOULE_WITH_TORCH=1  also install Debian's python3-torch (golden files, PyTorch bench)
#   Kokkos_ROOT         if set, the user's own Kokkos is used and nothing is built
set -euo pipefail

prefix="${JOULE_DEPS_PREFIX:-$HOME/.cache/joule/kokkos-3.4.1-openmp}"
jobs="$(nproc)"
log() { printf '[joule deps] %s\n' "$*" >&2; }

sudo_if_needed() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi; }

packages=(g++ cmake make pkg-config libopenmpi-dev openmpi-bin libhdf5-dev catch2
          libopenblas-dev libopenblas-openmp-dev nlohmann-json3-dev libcli11-dev libfmt-dev
          python3 python3-numpy python3-h5py python3-pil python3-matplotlib)
if [ "${JOULE_WITH_TORCH:-0}" = 1 ]; then packages+=(python3-torch); fi

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

# OpenBLAS's OpenMP build, named by full path: it then shares the OpenMP thread pool with
# Kokkos instead of spinning its own pthreads against it (which slowed small GEMMs several-fold),
# whatever the system's libblas alternative points to.
openblas_dir=/usr/lib/x86_64-linux-gnu/openblas-openmp
# Bump when the build recipe changes, so cached prefixes are rebuilt.
recipe="joule-deps v2: kokkos 3.4.1 openmp+serial, kokkos-kernels blas=$openblas_dir/libopenblas"
if [ -f "$prefix/.joule-complete" ] && [ "$(cat "$prefix/.joule-complete")" = "$recipe" ]; then
  log "Kokkos + Kokkos-Kernels already in $prefix"
  exit 0
fi
rm -rf "$prefix"

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
cd "$work"

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
src="$(echo "$work"/Trilinos-*/packages)"

log "building Kokkos (OpenMP + Serial) into $prefix"
cmake -S "$src/kokkos" -B build-kokkos -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_INSTALL_PREFIX="$prefix" -DCMAKE_CXX_STANDARD=17 -DCMAKE_CXX_EXTENSIONS=OFF \
  -DCMAKE_POSITION_INDEPENDENT_CODE=ON \
  -DKokkos_ENABLE_OPENMP=ON -DKokkos_ENABLE_SERIAL=ON -DKokkos_ENABLE_TESTS=OFF >build-kokkos.log
cmake --build build-kokkos -j "$jobs" >>build-kokkos.log || { tail -50 build-kokkos.log; exit 1; }
cmake --install build-kokkos >>build-kokkos.log

# ETI off: joule instantiates only the few kernels it calls; the BLAS TPL makes gemm call OpenBLAS.
log "building Kokkos-Kernels (BLAS TPL = OpenBLAS, no ETI) into $prefix"
cmake -S "$src/kokkos-kernels" -B build-kk -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_INSTALL_PREFIX="$prefix" -DKokkos_ROOT="$prefix" -DCMAKE_CXX_STANDARD=17 \
  -DKokkosKernels_ENABLE_TPL_BLAS=ON -DBLAS_LIBRARIES=openblas -DBLAS_LIBRARY_DIRS="$openblas_dir" \
  -DLAPACK_LIBRARIES=openblas -DLAPACK_LIBRARY_DIRS="$openblas_dir" \
  -DKokkosKernels_INST_DOUBLE=OFF -DKokkosKernels_INST_FLOAT=OFF \
  -DKokkosKernels_INST_COMPLEX_DOUBLE=OFF -DKokkosKernels_INST_COMPLEX_FLOAT=OFF \
  -DKokkosKernels_INST_ORDINAL_INT=OFF -DKokkosKernels_INST_ORDINAL_INT64_T=OFF \
  -DKokkosKernels_INST_OFFSET_INT=OFF -DKokkosKernels_INST_OFFSET_SIZE_T=OFF \
  -DKokkosKernels_INST_LAYOUTLEFT=OFF -DKokkosKernels_INST_LAYOUTRIGHT=OFF \
  -DKokkosKernels_ENABLE_TESTS=OFF -DKokkosKernels_ENABLE_EXAMPLES=OFF >build-kk.log
cmake --build build-kk -j "$jobs" >>build-kk.log || { tail -50 build-kk.log; exit 1; }
cmake --install build-kk >>build-kk.log

echo "$recipe" > "$prefix/.joule-complete"
log "done: Kokkos_ROOT=$prefix"
