#!/usr/bin/env bash
# Builds on a build machine (a login node or a workstation with network and nvcc; no GPU needed)
# everything the device check runs on a GPU node, and packs it as one archive for
# `apps/scripts/device_check.sh --bundle`. On the GPU node: no network, no compiler, no configure;
# unpack and run, so the check spends its job's minutes on the GPU.
#   joule-device/bin/joule, lib/libjoule_energy_tool.so   the CUDA (sm_90) + OpenMP build
#   joule-device/tests/   the test executables of the check's step 1 (device_tests.sh), and with
#                         JOULE_BUNDLE_MORE_TESTS=1 those of tests_more
#   joule-device/lib/     every shared library they load that a GPU node may lack (the bundle
#                         expects of the node only glibc, the GCC runtime's libstdc++ and libgcc_s,
#                         the CUDA 13 toolkit's libraries (cudart, cuBLAS, NCCL) and the driver's
#                         libcuda and NVML; it carries HDF5, Kokkos and fmt itself): ldd of every
#                         binary decides
#   joule-device/fixtures/run-log.h5   a small run log, written by this checkout's CPU build
#                         (make build; JOULE_CPU_JOULE): the starts step inspects it with the GPU hidden
#   joule-deps/MANIFEST   what was built from what, the libraries and the sizes
# The build's dependencies, kept in ~/.cache/joule (JOULE_BUNDLE_CACHE) between runs:
#   Kokkos + Kokkos-Kernels with CUDA (sm_90) + OpenMP + Serial and cuBLAS, built statically by
#   apps/scripts/install-deps.sh from your source trees (KOKKOS_SRC, KOKKOS_KERNELS_SRC; with CUDA
#   13 the 4.6.01 tags are built from a copy patched with cmake/patches/kokkos-4.6.01-cuda13.patch);
#   HDF5, static, no filters, from Debian's hdf5 source package; Catch2, nlohmann-json, CLI11, fmt
#   and stb from Debian's binary packages (dpkg -x). No MPI: one process per job on the device.
# The archive must be at most 48 MiB, a guard (it is about 13 MiB): past it something unplanned was
# packed (a debug build, a static toolkit library), and the script fails.
#   KOKKOS_SRC=... KOKKOS_KERNELS_SRC=... apps/scripts/device_bundle.sh OUT.tar.gz   (make device-bundle)
# Then, here, the rehearsal: apps/scripts/device_check.sh --rehearse --bundle OUT.tar.gz
set -euo pipefail
out="${1:?usage: KOKKOS_SRC=... KOKKOS_KERNELS_SRC=... $0 OUT.tar.gz}"
: "${KOKKOS_SRC:?set KOKKOS_SRC to a Kokkos source tree (e.g. the 4.6.01 tag; patched for CUDA 13 on the way)}"
: "${KOKKOS_KERNELS_SRC:?set KOKKOS_KERNELS_SRC to a Kokkos-Kernels source tree}"
repo="$(cd "$(dirname "$0")/../.." && pwd)"
out="$(cd "$(dirname "$out")" && pwd)/$(basename "$out")"
cache="${JOULE_BUNDLE_CACHE:-$HOME/.cache/joule/device-bundle}"
build="${JOULE_BUNDLE_BUILD:-$repo/build-device-bundle}"
jobs="${JOBS:-$(nproc)}"
max_bytes=$((48 * 1024 * 1024))
log() { printf '[device bundle] %s\n' "$*" >&2; }
die() { printf '[device bundle] ERROR: %s\n' "$*" >&2; exit 1; }
# shellcheck source=device_tests.sh
. "$repo/apps/scripts/device_tests.sh"
mkdir -p "$cache"
stage="$(mktemp -d)"; trap 'rm -rf "$stage"' EXIT
t_start=$SECONDS
timed() { local t0=$SECONDS; "$@"; times+=("$1 $((SECONDS - t0)) s"); }
times=()

# --- Kokkos + Kokkos-Kernels with CUDA ---------------------------------------------------------------
export JOULE_KOKKOS_BACKEND=cuda
kokkos_prefix="$(bash "$repo/apps/scripts/install-deps.sh" --print-prefix)"
deps_kokkos() { JOULE_DEPS_PREFIX="$kokkos_prefix" bash "$repo/apps/scripts/install-deps.sh"; }
timed deps_kokkos

# --- HDF5, static -------------------------------------------------------------------------------------
hdf5_prefix="$cache/hdf5-static"
hdf5_recipe="hdf5 static C library, no filters, autotools, v2"
deps_hdf5() {
  [ -f "$hdf5_prefix/.joule-complete" ] && [ "$(cat "$hdf5_prefix/.joule-complete")" = "$hdf5_recipe" ] && return 0
  rm -rf "$hdf5_prefix"
  local work="$stage/hdf5-src" src
  mkdir -p "$work"
  (cd "$work" && apt-get source --download-only hdf5 >/dev/null 2>&1) ||
    die "apt-get source hdf5 failed (needs a deb-src entry; apps/scripts/install-deps.sh adds one)"
  tar -xf "$work"/hdf5_*.orig.tar.* -C "$work"
  src="$(find "$work" -maxdepth 2 -name configure -printf '%h\n' | head -1)"
  log "building HDF5 ($(basename "$(ls "$work"/hdf5_*.orig.tar.*)")) static into $hdf5_prefix"
  # Autotools, as Debian builds it (HDF5 1.10's CMake configure fails with CMake 3.25 reading its
  # own float-precision probe).
  (cd "$src" && ./configure --prefix="$hdf5_prefix" --enable-static --disable-shared --with-pic \
     --disable-fortran --disable-cxx --disable-hl --disable-tests --disable-tools \
     --without-zlib --without-szlib) >"$work/configure.log" 2>&1 ||
    { tail -30 "$work/configure.log"; die "configuring HDF5 failed"; }
  make -C "$src" -j "$jobs" install >"$work/build.log" 2>&1 || { tail -30 "$work/build.log"; die "building HDF5 failed"; }
  echo "$hdf5_recipe" > "$hdf5_prefix/.joule-complete"
}
timed deps_hdf5

# --- Header libraries (and fmt's shared library) from Debian's packages -----------------------------
usr="$cache/debian-usr"
deb_list="catch2 nlohmann-json3-dev libcli11-dev libfmt-dev libfmt9 libstb-dev"
deps_debs() {
  [ "$(cat "$usr/.joule-complete" 2>/dev/null)" = "$deb_list" ] && return 0
  rm -rf "$usr"; mkdir -p "$usr" "$stage/debs"
  # shellcheck disable=SC2086
  (cd "$stage/debs" && apt-get download $deb_list >/dev/null 2>&1) || die "apt-get download of $deb_list failed"
  for d in "$stage/debs"/*.deb; do dpkg -x "$d" "$usr"; done
  echo "$deb_list" > "$usr/.joule-complete"
}
timed deps_debs

# --- joule for CUDA: the command, the energy tool and the check's test executables ------------------
targets="$(device_test_targets "$device_tests_re")"
[ "${JOULE_BUNDLE_MORE_TESTS:-0}" = 1 ] && targets="$(printf '%s %s' "$targets" "$(device_test_targets "$device_more_re")" | tr ' ' '\n' | sort -u | paste -sd' ')"
[ -n "$targets" ] || die "no test executable has a test case matching /$device_tests_re/"
generator=(); command -v ninja >/dev/null && generator=(-G Ninja)
# The preset builds host code for Grace (JOULE_HOST_TARGET=grace); the bundle is built on this x86-64
# machine for a GPU machine of the same architecture: generic host code.
configure() {
  Kokkos_ROOT="$kokkos_prefix" cmake --preset gh200 -S "$repo" -B "$build" "${generator[@]}" -DKokkos_ROOT="$kokkos_prefix" \
    -DCMAKE_PREFIX_PATH="$usr/usr;$hdf5_prefix" -DHDF5_ROOT="$hdf5_prefix" -DHDF5_USE_STATIC_LIBRARIES=ON \
    -DJOULE_WITH_MPI=OFF -DJOULE_HOST_TARGET=generic -DCMAKE_BUILD_TYPE=Release >"$stage/configure.log" 2>&1 ||
    { tail -40 "$stage/configure.log"; die "configuring joule for CUDA failed"; }
}
timed configure
# The CPU build that writes the run log the starts step inspects (checked before the long compile).
cpu_joule="${JOULE_CPU_JOULE:-$repo/build/apps/joule}"
[ -x "$cpu_joule" ] || die "$cpu_joule not found: run make build first (its joule writes the run log that the device check inspects with the GPU hidden), or set JOULE_CPU_JOULE"
read -r -a build_targets <<<"joule joule_energy_tool $targets"
log "building ${build_targets[*]} for CUDA sm_90 in $build ($jobs jobs)"
compile() {
  cmake --build "$build" -j "$jobs" --target "${build_targets[@]}" >"$stage/build.log" 2>&1 ||
    { grep -m 30 -E "error" "$stage/build.log" >&2 || tail -40 "$stage/build.log" >&2; die "building joule for CUDA failed"; }
}
timed compile

# --- The archive: binaries, the libraries a GPU machine may lack, the manifest -----------------------
root="$stage/joule-device"
mkdir -p "$root/bin" "$root/lib" "$root/tests" "$root/fixtures"
bash "$repo/apps/scripts/small_run_log.sh" "$cpu_joule" "$root/fixtures/run-log.h5" ||
  die "writing the run log with $cpu_joule failed"
cp "$build/apps/joule" "$root/bin/"
cp "$build/apps/energy_tool/libjoule_energy_tool.so" "$root/lib/"
for t in $targets; do
  exe="$(find "$build/tests" -maxdepth 2 -type f -name "$t" -perm -u+x | head -1)"
  [ -n "$exe" ] || die "test executable $t was not built"
  cp "$exe" "$root/tests/"
done
# Symbols and debug sections go (the device code is in .nv_fatbin, which strip keeps).
strip --strip-unneeded "$root/bin/joule" "$root/lib/libjoule_energy_tool.so" "$root"/tests/*
# What a GPU machine's image is sure to have: the C library, the GCC runtime (newer there: an older
# copy here would shadow what CUDA's libraries need), the CUDA 13 toolkit and the driver.
on_device='^(linux-vdso|ld-linux|libc|libm|libdl|libpthread|librt|libstdc\+\+|libgcc_s|libcuda|libcudart|libcublas|libcublasLt|libnccl|libnvidia-ml)\.so'
copy_libs() {
  local bin lib path
  for bin in "$root/bin/joule" "$root/lib/libjoule_energy_tool.so" "$root"/tests/*; do
    ldd "$bin" | awk '/=>/ { print $1, $3 }' | while read -r lib path; do
      [[ "$lib" =~ $on_device ]] && continue
      [ -f "$root/lib/$lib" ] && continue
      [ -f "$path" ] || die "$(basename "$bin") needs $lib, which is not found here"
      cp -L "$path" "$root/lib/$lib"
    done
  done
}
copy_libs
# Every binary resolves from the bundle plus the device's list (libcuda from the driver: absent here).
ld_path="$root/lib:${CUDA_HOME:-/usr/local/cuda}/lib64"
unresolved=""
for bin in "$root/bin/joule" "$root/lib/libjoule_energy_tool.so" "$root"/tests/*; do
  missing="$(env -i LD_LIBRARY_PATH="$ld_path" ldd "$bin" | awk '/not found/ { print $1 }' | grep -v '^libcuda\.so' || true)"
  [ -z "$missing" ] || unresolved+="$(basename "$bin"): $missing; "
done
[ -z "$unresolved" ] || die "libraries not resolved from the bundle and the CUDA toolkit: $unresolved"
# No binary of the bundle searches the working directory or a relative folder for a library.
bash "$repo/tests/scripts/elf_search_paths.sh" "$(command -v cc)" "$root" "$repo" >"$stage/elf_search_paths.log" 2>&1 ||
  die "a binary of the bundle has an unsafe RUNPATH: $(tail -5 "$stage/elf_search_paths.log")"
{
  echo "joule device bundle, made $(date -u +%FT%TZ) on $(uname -m) by apps/scripts/device_bundle.sh (joule $(git -C "$repo" rev-parse --short HEAD 2>/dev/null || echo '?')$(git -C "$repo" diff --quiet HEAD 2>/dev/null || echo ', uncommitted changes'))"
  echo "kokkos: $(cat "$kokkos_prefix/.joule-complete")"
  echo "hdf5: $hdf5_recipe ($(sed -n 's/^#define H5_VERSION "\(.*\)"/\1/p' "$hdf5_prefix/include/H5pubconf.h"))"
  echo "debs: $deb_list"
  echo "tests: $targets"
  echo "tests_re: $device_tests_re"
  echo "libraries packed: $(cd "$root/lib" && ls | paste -sd' ')"
  echo "libraries expected on the device: /$on_device/"
  (cd "$root" && find . -type f -printf '%s %p\n' | sort -k2 | awk '{ printf "file: %s %.1f MiB\n", $2, $1 / 1048576 }')
  echo "times: ${times[*]}"
} > "$root/MANIFEST"
tar -C "$stage" -czf "$out" joule-device
size="$(stat -c %s "$out")"
log "wrote $out: $(awk -v s="$size" 'BEGIN { printf "%.1f MiB", s / 1048576 }') (limit 48 MiB) in $((SECONDS - t_start)) s; ${times[*]}"
sed 's/^/  /' "$root/MANIFEST" >&2
[ "$size" -le "$max_bytes" ] || die "the bundle is $size bytes, over the 48 MiB guard: something unplanned was packed (see MANIFEST)"
