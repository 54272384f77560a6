#!/usr/bin/env bash
# Packs, on a machine with network access and the CUDA toolkit, everything that a GPU machine
# without network (CUDA, CMake, a C++ compiler, nothing else) needs to build and check joule, as
# one archive for apps/scripts/device_check.sh:
#   kokkos/  Kokkos + Kokkos-Kernels with CUDA (sm_90) + OpenMP + Serial and cuBLAS, built by
#            apps/scripts/install-deps.sh from your source trees (KOKKOS_SRC, KOKKOS_KERNELS_SRC;
#            with CUDA 13, the 4.6.01 tags are built from a copy patched with
#            cmake/patches/kokkos-4.6.01-cuda13.patch, which MANIFEST names)
#   hdf5/    the HDF5 C library, static, no compression filters (joule uses none), built from
#            Debian's hdf5 source package
#   usr/     Catch2, nlohmann-json, CLI11, fmt and stb from Debian's binary packages (dpkg -x)
# MPI is not packed: device_check.sh builds with the machine's MPI if it has one, else without
# (JOULE_WITH_MPI=OFF: one process per job, the mpirun tests left out).
#   KOKKOS_SRC=... KOKKOS_KERNELS_SRC=... apps/scripts/device_bundle.sh OUT.tar.gz
set -euo pipefail
out="${1:?usage: KOKKOS_SRC=... KOKKOS_KERNELS_SRC=... $0 OUT.tar.gz}"
: "${KOKKOS_SRC:?set KOKKOS_SRC to a Kokkos source tree (e.g. the 4.6.01 tag; patched for CUDA 13 on the way)}"
: "${KOKKOS_KERNELS_SRC:?set KOKKOS_KERNELS_SRC to a Kokkos-Kernels source tree}"
repo="$(cd "$(dirname "$0")/../.." && pwd)"
out="$(cd "$(dirname "$out")" && pwd)/$(basename "$out")"
cache="${JOULE_BUNDLE_CACHE:-$HOME/.cache/joule/device-bundle}"
jobs="${JOBS:-$(nproc)}"
log() { printf '[device bundle] %s\n' "$*" >&2; }
die() { printf '[device bundle] ERROR: %s\n' "$*" >&2; exit 1; }
mkdir -p "$cache"
stage="$(mktemp -d)"; trap 'rm -rf "$stage"' EXIT
root="$stage/joule-deps"; mkdir -p "$root"

# --- Kokkos + Kokkos-Kernels with CUDA ---------------------------------------------------------------
export JOULE_KOKKOS_BACKEND=cuda
kokkos_prefix="$(bash "$repo/apps/scripts/install-deps.sh" --print-prefix)"
JOULE_DEPS_PREFIX="$kokkos_prefix" bash "$repo/apps/scripts/install-deps.sh"
cp -a "$kokkos_prefix" "$root/kokkos"
# Kokkos-Kernels records cuBLAS by this machine's path; CUDA::cublas (FindCUDAToolkit, which
# Kokkos' own package configuration runs) finds it wherever the GPU machine's toolkit is.
sed -i -E 's#"[^";]*/libcublas\.so"#"CUDA::cublas"#' "$root/kokkos/lib/cmake/KokkosKernels/KokkosKernelsTargets.cmake"
! grep -q "/libcublas" "$root/kokkos/lib/cmake/KokkosKernels/KokkosKernelsTargets.cmake" ||
  die "could not make the cuBLAS path in KokkosKernelsTargets.cmake relocatable"

# --- HDF5, static -------------------------------------------------------------------------------------
hdf5_prefix="$cache/hdf5-static"
hdf5_recipe="hdf5 static C library, no filters, autotools, v2"
if [ ! -f "$hdf5_prefix/.joule-complete" ] || [ "$(cat "$hdf5_prefix/.joule-complete")" != "$hdf5_recipe" ]; then
  rm -rf "$hdf5_prefix"
  work="$stage/hdf5-src"; mkdir -p "$work"
  (cd "$work" && apt-get source --download-only hdf5 >/dev/null 2>&1) ||
    die "apt-get source hdf5 failed (needs a deb-src entry; apps/scripts/install-deps.sh adds one)"
  tar -xf "$work"/hdf5_*.orig.tar.* -C "$work"
  src="$(find "$work" -maxdepth 2 -name configure -printf '%h\n' | head -1)"
  log "building HDF5 ($(basename "$(ls "$work"/hdf5_*.orig.tar.*)")) static into $hdf5_prefix"
  # Autotools, as Debian builds it (HDF5 1.10's CMake configure fails with CMake 3.25 reading its
  # own float-precision probe). h5cc, which CMake's FindHDF5 asks for the flags, is installed too.
  (cd "$src" && ./configure --prefix="$hdf5_prefix" --enable-static --disable-shared --with-pic \
     --disable-fortran --disable-cxx --disable-hl --disable-tests --disable-tools \
     --without-zlib --without-szlib) >"$work/configure.log" 2>&1 ||
    { tail -30 "$work/configure.log"; die "configuring HDF5 failed"; }
  make -C "$src" -j "$jobs" install >"$work/build.log" 2>&1 || { tail -30 "$work/build.log"; die "building HDF5 failed"; }
  echo "$hdf5_recipe" > "$hdf5_prefix/.joule-complete"
fi
cp -a "$hdf5_prefix" "$root/hdf5"
# h5cc (which CMake's FindHDF5 asks for flags) names its install prefix: make it its own folder.
sed -i 's#^prefix=.*#prefix="$(cd "$(dirname "$0")/.." \&\& pwd)"#' "$root/hdf5/bin/h5cc"
rm -f "$root/hdf5/bin/mirror_server" "$root/hdf5/bin/mirror_server_stop"

# --- Header libraries (and fmt's shared library) from Debian's packages -----------------------------
debs="$stage/debs"; mkdir -p "$debs"
(cd "$debs" && apt-get download catch2 nlohmann-json3-dev libcli11-dev libfmt-dev libfmt9 libstb-dev >/dev/null 2>&1) ||
  die "apt-get download of catch2 nlohmann-json3-dev libcli11-dev libfmt-dev libfmt9 libstb-dev failed"
for d in "$debs"/*.deb; do dpkg -x "$d" "$root"; done
rm -rf "$root/usr/share/doc" "$root/usr/share/lintian"

# --- What is in it, and the archive -------------------------------------------------------------------
{
  echo "joule device bundle, made $(date -u +%FT%TZ) on $(uname -m) by apps/scripts/device_bundle.sh (joule $(git -C "$repo" rev-parse --short HEAD 2>/dev/null || echo '?'))"
  echo "kokkos: $(cat "$root/kokkos/.joule-complete")"
  echo "hdf5: $hdf5_recipe ($(sed -n 's/^#define H5_VERSION "\(.*\)"/\1/p' "$root/hdf5/include/H5pubconf.h"))"
  for d in "$debs"/*.deb; do echo "deb: $(basename "$d")"; done
} > "$root/MANIFEST"
tar -C "$stage" -caf "$out" joule-deps  # compressed as its name says (.tar.gz, .tar.xz)
log "wrote $out ($(du -h "$out" | cut -f1)); contents:"
sed 's/^/  /' "$root/MANIFEST" >&2
