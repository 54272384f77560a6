#!/usr/bin/env bash
# Installs everything joule needs on a fresh Debian 12 machine, and skips whatever is already there.
#   - Debian packages (compiler, CMake, OpenMPI, HDF5, Catch2, OpenBLAS, json/CLI/fmt headers,
#     python3 with numpy, h5py, PIL and matplotlib for apps/scripts and their tests, ccache for
#     the Makefile's host builds)
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
#   Kokkos_ROOT          if set, the user's own Kokkos is used and nothing is built, nor installed
#   JOULE_NO_APT=1       never call dpkg, apt or sudo (see below); JOULE_NO_APT=0 keeps the Debian
#                        path even with a *_ROOT given
#   --print-prefix       print the prefix these settings build into, and do nothing else
# Without apt (RHEL, SLES, Cray, Spack, modules): when Kokkos_ROOT or another dependency's *_ROOT
# is given (KokkosKernels_ROOT, HDF5_ROOT, NCCL_ROOT, CUDAToolkit_ROOT, MPI_HOME, Catch2_ROOT,
# nlohmann_json_ROOT, CLI11_ROOT, fmt_ROOT, ZLIB_ROOT), with JOULE_NO_APT=1, or where dpkg-query or
# apt-get is missing, nothing is installed and no dpkg, apt or sudo is called: the script checks
# what is there, where CMake will look (each *_ROOT first, then CMAKE_PREFIX_PATH, the prefixes of
# PATH's bin folders, /usr/local and /usr), names what is missing with the minimum version joule
# needs and exits non-zero if a required one is (optional ones get a note). Kokkos is then the
# user's (Kokkos_ROOT) or built from KOKKOS_SRC + KOKKOS_KERNELS_SRC. The check follows CXX (the
# compiler), JOULE_WITH_MPI=OFF and JOULE_ENABLE_TESTS=OFF (MPI, Catch2 not checked; give CMake the
# same in CMAKE_ARGS) and JOULE_STB_INCLUDE_DIR.
set -euo pipefail
# shellcheck source=kokkos_kernels_options.sh
. "$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/kokkos_kernels_options.sh"

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

# --- Without apt: what is there, checked -----------------------------------------------------------
# The minimum versions are what joule's build asks: CMakePresets.json (CMake 3.21; CMakeLists.txt
# alone: 3.19), find_package(Kokkos 3.4), find_package(nlohmann_json 3.9), Catch2 2.13 to 3.x
# (tests/CMakeLists.txt), a GH200 build Kokkos 4.0 (JOULE_GH200); and what the code calls: HDF5
# 1.10.5 (H5Dget_num_chunks), MPI 3 (MPI_Iallreduce), C++17 with <filesystem> (GCC 9, Clang 9).
# The tested versions are Debian 12's (README.md, "Dependencies").
dep_roots=(Kokkos_ROOT KokkosKernels_ROOT HDF5_ROOT NCCL_ROOT CUDAToolkit_ROOT MPI_HOME Catch2_ROOT
           nlohmann_json_ROOT CLI11_ROOT fmt_ROOT ZLIB_ROOT)
no_apt_why=""
if [ "${JOULE_NO_APT:-}" = 1 ]; then
  no_apt_why="JOULE_NO_APT=1"
elif [ "${JOULE_NO_APT:-}" != 0 ]; then
  for v in "${dep_roots[@]}"; do
    if [ -n "${!v:-}" ]; then no_apt_why="$v is given"; break; fi
  done
  if [ -z "$no_apt_why" ] && ! { command -v dpkg-query && command -v apt-get; } >/dev/null 2>&1; then
    no_apt_why="no dpkg-query/apt-get here"
  fi
fi

search_prefixes() {  # search_prefixes PKG: the prefixes CMake searches for PKG, its PKG_ROOT first
  local var="${1}_ROOT" p
  [ -n "${!var:-}" ] && printf '%s\n' "${!var}"
  local IFS=:
  for p in ${CMAKE_PREFIX_PATH:-}; do [ -n "$p" ] && printf '%s\n' "$p"; done
  for p in $PATH; do case "$p" in */bin|*/sbin) printf '%s\n' "${p%/*}";; esac; done
  printf '%s\n' /usr/local /usr
}
config_version() {  # config_version DIR NAME: PACKAGE_VERSION from NAME's config-version file in DIR
  local f
  for f in "$1/${2}ConfigVersion.cmake" "$1/${2}-config-version.cmake" \
           "$1/$(printf '%s' "$2" | tr '[:upper:]' '[:lower:]')-config-version.cmake"; do
    if [ -f "$f" ]; then
      sed -n -E 's/^ *[Ss][Ee][Tt] *\( *PACKAGE_VERSION +"([0-9][^" ]*)".*/\1/p' "$f" | head -1
      return 0
    fi
  done
}
# find_config NAME PREFIX...: sets cfg_dir, cfg_prefix and cfg_version to where find_package(NAME)
# would find NAME's CMake configuration (CMake's search layout on Unix); returns 1 if nowhere.
find_config() {
  local name="$1" lower p d; lower="$(printf '%s' "$1" | tr '[:upper:]' '[:lower:]')"; shift
  cfg_dir="" cfg_prefix="" cfg_version=""
  local restore; restore="$(shopt -p nullglob nocaseglob || true)"
  shopt -s nullglob nocaseglob
  for p in "$@"; do
    [ -d "$p" ] || continue
    for d in "$p" "$p"/cmake "$p"/"$name"* "$p"/"$name"*/cmake \
             "$p"/{lib/*-linux-gnu,lib64,lib,lib32,libx32,share}/cmake/"$name"* \
             "$p"/{lib/*-linux-gnu,lib64,lib,lib32,libx32,share}/"$name"* \
             "$p"/{lib/*-linux-gnu,lib64,lib,lib32,libx32,share}/"$name"*/cmake; do
      if [ -f "$d/${name}Config.cmake" ] || [ -f "$d/${lower}-config.cmake" ]; then
        cfg_dir="$d" cfg_prefix="$p" cfg_version="$(config_version "$d" "$name")"
        eval "$restore"; return 0
      fi
    done
  done
  eval "$restore"; return 1
}
# find_pkg NAME [PREFIX...]: find_config over NAME_ROOT, NAME_DIR (both as CMake reads them from
# the environment too), PREFIX..., then the rest.
find_pkg() {
  local name="$1" var="${1}_ROOT" dir="${1}_DIR" pfx; shift
  mapfile -t pfx < <(search_prefixes "$name")
  find_config "$name" ${!var:+"${!var}"} ${!dir:+"${!dir}"} "$@" "${pfx[@]}"
}
find_in_prefixes() {  # find_in_prefixes PKG PATH-UNDER-PREFIX...: the first that exists
  local p rel
  while read -r p; do
    for rel in "${@:2}"; do
      for f in "$p"/$rel; do [ -e "$f" ] && { printf '%s\n' "$f"; return 0; }; done
    done
  done < <(search_prefixes "$1")
  return 1
}
header_define() {  # header_define FILE MACRO: the value of #define MACRO in FILE
  sed -n -E "s/^#[ \t]*define[ \t]+$2[ \t]+\"?([^\" \t]*)\"?.*/\1/p" "$1" | head -1
}

check_deps() {  # everything joule's build looks for; with Kokkos only when Kokkos_ROOT is given
  local errors=() notes=() v f w cxx kk_prefix="" kokkos_cuda=0 kokkos_h="" kk_h=""
  ok()   { log "  ok       $*"; }
  need() { errors+=("$*"); log "  MISSING  $*"; }
  note() { notes+=("$*"); log "  note     $*"; }
  log "checking joule's dependencies without apt ($no_apt_why):"

  # CMake: the presets (make) need 3.21, CMakeLists.txt 3.19.
  if command -v cmake >/dev/null; then
    v="$(cmake --version | sed -n 's/^cmake version \([0-9][0-9.]*\).*/\1/p')"
    if version_lt "$v" 3.21; then need "CMake >= 3.21 (CMakePresets.json; 3.19 for CMakeLists.txt alone): found $v at $(command -v cmake)"
    else ok "CMake $v"; fi
  else need "CMake >= 3.21: no cmake on PATH"; fi

  # The C++ compiler: C++17 with <filesystem> (GCC >= 9, Clang >= 9); others are not compared.
  cxx="${CXX:-}"
  if [ -z "$cxx" ]; then for w in g++ c++ clang++ CC; do command -v "$w" >/dev/null && { cxx="$w"; break; }; done; fi
  if [ -z "$cxx" ] || ! command -v "${cxx%% *}" >/dev/null; then
    need "a C++17 compiler (GCC >= 9 or Clang >= 9): $([ -n "$cxx" ] && echo "CXX=$cxx not found" || echo "none of g++, c++, clang++, CC on PATH")"
  else
    local first; first="$($cxx --version 2>/dev/null | head -1 || true)"
    if [[ "$first" =~ clang\ version\ ([0-9]+(\.[0-9]+)*) ]]; then
      v="${BASH_REMATCH[1]}"
      if version_lt "$v" 9; then need "Clang >= 9 (C++17 with <filesystem>): found $v ($cxx)"; else ok "C++ compiler: Clang $v ($cxx)"; fi
    elif [[ "$first" =~ (g\+\+|GCC|gcc) ]]; then
      v="$($cxx -dumpfullversion -dumpversion 2>/dev/null || true)"
      if version_lt "$v" 9; then need "GCC >= 9 (C++17 with <filesystem>): found $v ($cxx)"; else ok "C++ compiler: GCC $v ($cxx)"; fi
    else
      ok "C++ compiler: $cxx (${first:-version not read}; not compared: joule needs C++17 with <filesystem>)"
    fi
  fi

  # Kokkos + Kokkos-Kernels: the user's install (Kokkos_ROOT), or built below from source trees.
  if [ -n "${Kokkos_ROOT:-}" ]; then
    if find_config Kokkos "$Kokkos_ROOT"; then
      v="${cfg_version:-unknown}"
      if [ "$v" = unknown ]; then note "Kokkos at $cfg_dir: version not read (joule needs >= 3.4)"
      elif version_lt "$v" 3.4; then need "Kokkos >= 3.4: found $v at $cfg_dir (Kokkos_ROOT=$Kokkos_ROOT)"
      else ok "Kokkos $v ($cfg_dir)"; fi
      kokkos_h="$(find "$Kokkos_ROOT" -maxdepth 3 -name KokkosCore_config.h 2>/dev/null | head -1)"
      if [ -n "$kokkos_h" ] && grep -Eq '^#[ \t]*define[ \t]+KOKKOS_ENABLE_CUDA([ \t]|$)' "$kokkos_h"; then
        kokkos_cuda=1
        [ "$v" != unknown ] && version_lt "$v" 4.0 &&
          note "Kokkos $v has CUDA: the gh200 preset (JOULE_GH200) needs Kokkos >= 4.0"
        grep -Eq '^#[ \t]*define[ \t]+KOKKOS_ARCH_HOPPER90([ \t]|$)' "$kokkos_h" ||
          note "Kokkos at $Kokkos_ROOT is not built for Hopper (Kokkos_ARCH_HOPPER90): the gh200 preset refuses it"
        grep -Eq '^#[ \t]*define[ \t]+KOKKOS_ENABLE_OPENMP([ \t]|$)' "$kokkos_h" ||
          note "Kokkos at $Kokkos_ROOT has no OpenMP backend: the gh200 preset refuses it"
      fi
    else
      need "Kokkos >= 3.4: no KokkosConfig.cmake under Kokkos_ROOT=$Kokkos_ROOT (an install prefix, with lib/cmake/Kokkos or lib64/cmake/Kokkos)"
    fi
    # Kokkos-Kernels: KokkosKernels_ROOT, else next to Kokkos, else where CMake looks.
    if find_pkg KokkosKernels "$Kokkos_ROOT"; then
      ok "Kokkos-Kernels ${cfg_version:-(version not read)} ($cfg_dir; no version asked, use the one matching Kokkos)"
      kk_prefix="$cfg_prefix"
      kk_h="$(find "$kk_prefix" -maxdepth 3 -name KokkosKernels_config.h 2>/dev/null | head -1)"
    else
      # Optional: without it joule's GEMMs call the BLAS directly (CMake's JOULE_GEMM=auto), which
      # needs OpenBLAS's cblas (checked below).
      note "no Kokkos-Kernels (no KokkosKernelsConfig.cmake in KokkosKernels_ROOT, Kokkos_ROOT or the usual prefixes): joule's GEMMs will call the BLAS directly (cblas on the host, cuBLAS on CUDA)"
      no_kernels=1
    fi
  fi

  # HDF5 (C): found by CMake's FindHDF5 through h5cc/h5pcc (HDF5_ROOT/bin, PATH) or its CMake config.
  local hdf5="" hdf5_v=""
  for w in ${HDF5_ROOT:+"$HDF5_ROOT/bin/h5pcc" "$HDF5_ROOT/bin/h5cc"} "$(command -v h5pcc || true)" "$(command -v h5cc || true)"; do
    if [ -n "$w" ] && [ -x "$w" ]; then
      hdf5="$w"; hdf5_v="$("$w" -showconfig 2>/dev/null | sed -n 's/^ *HDF5 Version: *\([0-9][0-9.]*\).*/\1/p' | head -1 || true)"
      break
    fi
  done
  if [ -z "$hdf5" ]; then
    local pfx; mapfile -t pfx < <(search_prefixes HDF5)
    if find_config hdf5 "${pfx[@]}"; then hdf5="$cfg_dir"; hdf5_v="$cfg_version"; fi
  fi
  if [ -z "$hdf5" ] && command -v pkg-config >/dev/null && pkg-config --exists hdf5 2>/dev/null; then
    hdf5="pkg-config hdf5"; hdf5_v="$(pkg-config --modversion hdf5)"
  fi
  if [ -z "$hdf5" ]; then need "HDF5 >= 1.10.5 (C library): no h5cc/h5pcc (HDF5_ROOT/bin or PATH), no hdf5-config.cmake, no hdf5.pc"
  elif [ -z "$hdf5_v" ]; then note "HDF5 at $hdf5: version not read (joule needs >= 1.10.5)"
  elif version_lt "$hdf5_v" 1.10.5; then need "HDF5 >= 1.10.5 (H5Dget_num_chunks): found $hdf5_v ($hdf5)"
  else ok "HDF5 $hdf5_v ($hdf5)"; fi

  # MPI (MPI 3): CMake's FindMPI, through the compiler wrapper (MPI_HOME/bin or PATH) or Cray's CC.
  if [ "${JOULE_WITH_MPI:-ON}" = OFF ]; then
    note "MPI not checked (JOULE_WITH_MPI=OFF; configure with CMAKE_ARGS=-DJOULE_WITH_MPI=OFF too)"
  else
    w=""
    for f in ${MPI_HOME:+"$MPI_HOME/bin/mpicxx"} mpicxx mpic++ mpiCC; do
      if [ -x "$f" ] || command -v "$f" >/dev/null 2>&1; then w="$(command -v "$f")"; break; fi
    done
    if [ -n "$w" ]; then
      v="$("$w" --showme:version 2>/dev/null || { command -v mpichversion >/dev/null && mpichversion | head -1; } ||
           { command -v mpiexec >/dev/null && mpiexec --version 2>/dev/null | head -1; } || true)"
      v="$(printf '%s\n' "$v" | head -1 | sed -e 's/^[^ :]*: //' -e 's/ (Language: [^)]*)//')"
      ok "MPI: ${v:-version not read} ($w; joule needs MPI 3)"
    elif [ -n "${CRAY_MPICH_DIR:-}${CRAY_MPICH_VERSION:-}" ] && command -v CC >/dev/null; then
      ok "MPI: Cray MPICH ${CRAY_MPICH_VERSION:-} through the CC wrapper"
    else
      need "MPI (MPI 3, e.g. Open MPI >= 1.8 or MPICH >= 3.0): no mpicxx (MPI_HOME/bin or PATH); or build without MPI: JOULE_WITH_MPI=OFF and CMAKE_ARGS=-DJOULE_WITH_MPI=OFF"
    fi
    command -v mpiexec >/dev/null || command -v mpirun >/dev/null || command -v srun >/dev/null ||
      note "no mpiexec, mpirun or srun on PATH: the mpirun tests need a launcher"
  fi

  # The header-only and small libraries, as find_package finds them.
  if [ "${JOULE_ENABLE_TESTS:-ON}" = OFF ]; then note "Catch2 not checked (JOULE_ENABLE_TESTS=OFF)"
  elif find_pkg Catch2; then
    v="${cfg_version:-unknown}"
    if [ "$v" != unknown ] && { version_lt "$v" 2.13 || ! version_lt "$v" 4; }; then
      need "Catch2 2.13+ or 3.x (the tests): found $v at $cfg_dir"
    else ok "Catch2 $v ($cfg_dir)"; fi
  else need "Catch2 2.13+ or 3.x (the tests; Catch2Config.cmake): not found (Catch2_ROOT, CMAKE_PREFIX_PATH, /usr/local, /usr)"; fi
  if find_pkg nlohmann_json; then
    v="${cfg_version:-unknown}"
    if [ "$v" != unknown ] && version_lt "$v" 3.9; then need "nlohmann-json >= 3.9: found $v at $cfg_dir"
    else ok "nlohmann-json $v ($cfg_dir)"; fi
  else need "nlohmann-json >= 3.9 (nlohmann_jsonConfig.cmake): not found (nlohmann_json_ROOT, CMAKE_PREFIX_PATH, /usr/local, /usr)"; fi
  if find_pkg CLI11; then ok "CLI11 ${cfg_version:-(version not read)} ($cfg_dir)"
  else need "CLI11 (CLI11Config.cmake; 2.1.2 tested): not found (CLI11_ROOT, CMAKE_PREFIX_PATH, /usr/local, /usr)"; fi
  if find_pkg fmt; then ok "fmt ${cfg_version:-(version not read)} ($cfg_dir)"
  else need "fmt (fmt-config.cmake; 9.1.0 tested): not found (fmt_ROOT, CMAKE_PREFIX_PATH, /usr/local, /usr)"; fi
  if f="$(find_in_prefixes stb include/stb/stb_image.h)" ||
     { [ -n "${JOULE_STB_INCLUDE_DIR:-}" ] && [ -f "$JOULE_STB_INCLUDE_DIR/stb/stb_image.h" ] && f="$JOULE_STB_INCLUDE_DIR/stb/stb_image.h"; }; then
    ok "stb_image ($f)"
  else need "stb (stb/stb_image.h, header only: the image files of joule caption): not found; give CMAKE_ARGS=-DJOULE_STB_INCLUDE_DIR=<folder holding stb/>"; fi
  if f="$(find_in_prefixes ZLIB include/zlib.h)"; then ok "zlib $(header_define "$f" ZLIB_VERSION) ($f)"
  else need "zlib (zlib.h): not found (ZLIB_ROOT, CMAKE_PREFIX_PATH, /usr/local, /usr)"; fi

  # A BLAS: what a Kokkos-Kernels with the BLAS TPL links (an install built elsewhere carries its
  # own path), and what the OpenMP build from source trees needs.
  if f="$(find_in_prefixes OpenBLAS 'lib/*-linux-gnu/openblas-openmp/libopenblas.so*' 'lib64/libopenblas*.so*' 'lib/libopenblas*.so*' 'lib/*-linux-gnu/libopenblas*.so*')"; then
    ok "OpenBLAS ($f)"
  elif [ "${no_kernels:-0}" = 1 ]; then
    need "OpenBLAS (libopenblas and its cblas.h): without Kokkos-Kernels joule's GEMMs call it directly; not found (OpenBLAS_ROOT, CMAKE_PREFIX_PATH, /usr/local, /usr), or give CMAKE_ARGS=-DJOULE_CBLAS_INCLUDE_DIR=... -DJOULE_CBLAS_LIBRARY=..."
  elif [ -z "${Kokkos_ROOT:-}" ] && [ "$backend" = openmp ]; then
    need "OpenBLAS (libopenblas, its OpenMP build preferred; Kokkos-Kernels' BLAS TPL): not found (OpenBLAS_ROOT, CMAKE_PREFIX_PATH, /usr/local, /usr)"
  elif [ -n "$kk_h" ] && grep -Eq '^#[ \t]*define[ \t]+KOKKOSKERNELS_ENABLE_TPL_BLAS([ \t]|$)' "$kk_h"; then
    note "no libopenblas found, and Kokkos-Kernels at $kk_prefix uses a BLAS TPL: its library must be where that build found it"
  else note "no OpenBLAS found (not needed by this Kokkos-Kernels)"; fi

  # A CUDA Kokkos (a GH200 build): the toolkit, cuBLASLt, nvcc_wrapper; NCCL is optional.
  if [ "$kokkos_cuda" = 1 ] || [ "$backend" = cuda ]; then
    local cuda=""
    for f in ${CUDAToolkit_ROOT:+"$CUDAToolkit_ROOT/bin/nvcc"} ${CUDA_HOME:+"$CUDA_HOME/bin/nvcc"} ${CUDA_PATH:+"$CUDA_PATH/bin/nvcc"} "$(command -v nvcc || true)" /usr/local/cuda/bin/nvcc; do
      if [ -n "$f" ] && [ -x "$f" ]; then cuda="$(cd "$(dirname "$f")/.." && pwd)"; break; fi
    done
    if [ -z "$cuda" ]; then need "the CUDA toolkit (nvcc; CUDA 12.x or 13.0): no nvcc in CUDAToolkit_ROOT/bin, CUDA_HOME/bin or PATH"
    else
      ok "CUDA $("$cuda/bin/nvcc" --version | sed -n 's/.*release \([0-9.]*\).*/\1/p') ($cuda)"
      if compgen -G "$cuda/lib64/libcublasLt.so*" >/dev/null || compgen -G "$cuda/targets/*/lib/libcublasLt.so*" >/dev/null ||
         compgen -G "$cuda/lib/libcublasLt.so*" >/dev/null; then ok "cuBLASLt ($cuda)"
      else need "cuBLASLt (libcublasLt, part of the CUDA toolkit: joule's bf16 GEMMs): not found under $cuda"; fi
    fi
    if [ -n "${Kokkos_ROOT:-}" ] && [ "$kokkos_cuda" = 1 ]; then
      [ -x "$Kokkos_ROOT/bin/nvcc_wrapper" ] ||
        note "no $Kokkos_ROOT/bin/nvcc_wrapper (the gh200 preset's compiler): give CMAKE_ARGS=-DCMAKE_CXX_COMPILER=/path/to/nvcc_wrapper"
      if [ -n "$kk_h" ] && ! grep -Eq '^#[ \t]*define[ \t]+KOKKOSKERNELS_ENABLE_TPL_CUBLAS([ \t]|$)' "$kk_h"; then
        note "Kokkos-Kernels at $kk_prefix has no cuBLAS TPL: the gh200 preset refuses it"
      fi
    fi
    f="$( { [ -n "${NCCL_ROOT:-}" ] && [ -f "$NCCL_ROOT/include/nccl.h" ] && echo "$NCCL_ROOT/include/nccl.h"; } ||
          { [ -n "$cuda" ] && [ -f "$cuda/include/nccl.h" ] && echo "$cuda/include/nccl.h"; } ||
          find_in_prefixes NCCL include/nccl.h || true)"
    if [ -n "$f" ] && ! compgen -G "$(dirname "$f")/../lib*/libnccl.so*" >/dev/null &&
       ! compgen -G "$(dirname "$f")/../lib/*-linux-gnu/libnccl.so*" >/dev/null && ! compgen -G "$cuda/lib64/libnccl.so*" >/dev/null; then
      note "$f has no libnccl.so beside it: NCCL will not be used (GPU collectives through MPI)"
    elif [ -n "$f" ]; then
      ok "NCCL $(header_define "$f" NCCL_MAJOR).$(header_define "$f" NCCL_MINOR).$(header_define "$f" NCCL_PATCH) ($f; CMake reads NCCL_ROOT from the environment)"
    else note "no NCCL (nccl.h in NCCL_ROOT/include or the CUDA toolkit): GPU collectives go through MPI (host-staged)"; fi
  fi

  # Python 3 for apps/scripts and their tests (not for the build itself; the tests run
  # /usr/bin/python3 where there is one); PyTorch for bench-torch.
  local py=/usr/bin/python3
  [ -x "$py" ] || py="$(command -v python3 || true)"
  if [ -n "$py" ]; then
    local want=(numpy h5py PIL matplotlib) missing_py
    [ "${JOULE_WITH_TORCH:-0}" = 1 ] && want+=(torch)
    missing_py="$("$py" - "${want[@]}" 2>/dev/null <<'PY' || echo "${want[*]}"
import importlib.util, sys
print(" ".join(m for m in sys.argv[1:] if importlib.util.find_spec(m) is None))
PY
)"
    if [[ " $missing_py " == *" torch "* ]]; then
      need "PyTorch for python3 (JOULE_WITH_TORCH=1: the golden files, make bench-torch)"
      missing_py="${missing_py/torch/}"
    fi
    missing_py="$(echo $missing_py)"
    if [ -n "$missing_py" ]; then note "$py lacks $missing_py: apps/scripts and some tests need numpy, h5py, PIL and matplotlib"
    else ok "$py $("$py" -c 'import sys; print(sys.version.split()[0])') with ${want[*]}"; fi
  else note "no python3: apps/scripts and some tests need it (with numpy, h5py, PIL and matplotlib)"; fi

  if [ "${#errors[@]}" -gt 0 ]; then
    printf '[joule deps] ERROR: %d required dependencies missing or too old (%s: nothing was installed):\n' \
      "${#errors[@]}" "$no_apt_why" >&2
    printf '  - %s\n' "${errors[@]}" >&2
    printf '[joule deps] give each one'"'"'s prefix as <Package>_ROOT (make ... HDF5_ROOT=...), or in CMAKE_PREFIX_PATH; on Debian, JOULE_NO_APT=0 installs them with apt\n' >&2
    exit 1
  fi
  log "all required dependencies found${notes[0]:+ (${#notes[@]} notes above)}"
}

if [ -n "$no_apt_why" ]; then
  check_deps
  if [ -n "${Kokkos_ROOT:-}" ]; then
    log "Kokkos_ROOT=$Kokkos_ROOT given: using that Kokkos, building none, installing nothing"
    exit 0
  fi
  [ "$from_source" = 1 ] ||
    die "without apt ($no_apt_why) Debian's Kokkos 3.4.1 cannot be fetched: give Kokkos_ROOT=<your Kokkos + Kokkos-Kernels install> or KOKKOS_SRC + KOKKOS_KERNELS_SRC (source trees to build), or JOULE_NO_APT=0 on Debian"
fi

# --- Debian packages --------------------------------------------------------------------------------
packages=(g++ cmake make pkg-config libopenmpi-dev openmpi-bin libhdf5-dev catch2
          libopenblas-dev libopenblas-openmp-dev nlohmann-json3-dev libcli11-dev libfmt-dev libstb-dev
          python3 python3-numpy python3-h5py python3-pil python3-matplotlib ccache)
if [ "${JOULE_WITH_TORCH:-0}" = 1 ]; then packages+=(python3-torch); fi
# patch(1) for cmake/patches (a CUDA Kokkos from source trees; see kokkos_patch below).
if [ "$from_source" = 1 ] && [ "$backend" = cuda ]; then packages+=(patch); fi

# Without apt (checked above) none of this: no dpkg-query, apt or sudo is called.
missing=()
[ -n "$no_apt_why" ] || for p in "${packages[@]}"; do
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
openblas_dir=""
if [ -z "$no_apt_why" ]; then
  openblas_dir=/usr/lib/$(gcc -print-multiarch)/openblas-openmp
  openblas_name=openblas
elif [ "$backend" = openmp ]; then
  # Without apt: the libopenblas the check found, its OpenMP build where there is one (Debian's
  # openblas-openmp folder, Fedora/RHEL's libopenblaso).
  openblas_lib="$(find_in_prefixes OpenBLAS 'lib/*-linux-gnu/openblas-openmp/libopenblas.so' 'lib64/libopenblaso.so' \
                  'lib/libopenblaso.so' 'lib64/libopenblas.so' 'lib/libopenblas.so' 'lib/*-linux-gnu/libopenblas.so')" ||
    die "no libopenblas.so (OpenBLAS_ROOT, CMAKE_PREFIX_PATH, /usr/local, /usr): Kokkos-Kernels' BLAS TPL needs it"
  openblas_dir="$(dirname "$openblas_lib")"
  openblas_name="$(basename "$openblas_lib" .so)"; openblas_name="${openblas_name#lib}"
fi

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
  kernels_options+=(-DKokkosKernels_ENABLE_TPL_BLAS=ON -DBLAS_LIBRARIES="$openblas_name" -DBLAS_LIBRARY_DIRS="$openblas_dir"
                    -DLAPACK_LIBRARIES="$openblas_name" -DLAPACK_LIBRARY_DIRS="$openblas_dir")
  tpl_text="blas=$openblas_dir/lib$openblas_name"
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
# Made whole or not at all (detail/cache_step.sh): built, then installed into $prefix.partial and
# renamed to $prefix when complete, the stamp (.joule-complete, holding the recipe) written last. An
# interrupted run leaves $prefix.partial (or, from before this protocol, a $prefix without its
# stamp): the next run removes it, says so in one line, and builds again.
# shellcheck source=detail/cache_step.sh
. "$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/detail/cache_step.sh"
if [ "$from_source" = 1 ]; then label="Kokkos $kokkos_version ($backend)"; else label="Kokkos 3.4.1 (host)"; fi
# Absolute: CMake's DESTDIR staging below needs it (and the build runs in another folder).
case "$prefix" in /*) ;; *) prefix="$PWD/$prefix" ;; esac
mkdir -p "$(dirname "$prefix")"
if ! cache_begin "$label" "$prefix" .joule-complete "$recipe"; then
  log "Kokkos + Kokkos-Kernels already in $prefix"
  exit 0
fi
# CMake installs into $stage$prefix (DESTDIR), so that what it writes into the installed files
# names the final prefix; Kokkos-Kernels is configured against the staged Kokkos, whose path its
# config file records (rewritten to the final prefix below, before the rename).
stage="$prefix.partial/.destdir"
staged="$stage$prefix"

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
  DESTDIR="$stage" cmake --install "build-$name" >>"build-$name.log" 2>&1 || {
    tail -40 "build-$name.log" >&2
    cp "build-$name.log" "$prefix.failed-$name.log"
    die "installing $name into $stage failed; full log: $prefix.failed-$name.log"
  }
  log "$name installed in $((SECONDS - t0)) s"
}
# Kokkos 5 needs C++20; joule is C++17 that is also valid C++20.
cxx_standard=17
[ "$from_source" = 1 ] && ! version_lt "$kokkos_version" 5.0.0 && cxx_standard=20

log "building Kokkos ($backend) into $prefix with $jobs jobs"
build kokkos "$kokkos_src" "${kokkos_options[@]}" -DKokkos_ENABLE_TESTS=OFF
# ETI off and the rest: kokkos_kernels_options.sh.
log "building Kokkos-Kernels ($tpl_text, no ETI) into $prefix"
build kokkos-kernels "$kernels_src" -DKokkos_ROOT="$staged" "${kernels_options[@]}" "${kokkos_kernels_common_options[@]}"

programs="$staged/share/joule/kokkos-programs"
mkdir -p "$programs/kokkos" "$programs/kokkos-kernels/perf_test"
for part in example benchmarks LICENSE; do
  [ -e "$kokkos_src/$part" ] && cp -r "$kokkos_src/$part" "$programs/kokkos/"
done
[ -d "$kernels_src/perf_test/blas" ] && cp -r "$kernels_src/perf_test/blas" "$programs/kokkos-kernels/perf_test/"
[ -e "$kernels_src/LICENSE" ] && cp "$kernels_src/LICENSE" "$programs/kokkos-kernels/"
log "kept the sources of Kokkos' tutorial and benchmarks and Kokkos-Kernels' BLAS perf tests in ${programs#"$stage"}"

# The installed CMake files that name the staged Kokkos (KokkosKernelsConfig.cmake's
# find_dependency(Kokkos HINTS ...)) are made to name the final prefix; any other file that still
# names the staging folder would break once it is renamed, so the install is refused.
sed_literal() { printf '%s' "$1" | sed 's/[][\\.*^$|&/]/\\&/g'; }
while IFS= read -r -d '' f; do
  sed -i "s|$(sed_literal "$staged")|$(sed_literal "$prefix")|g" "$f"
done < <(grep -rlZF --include='*.cmake' "$staged" "$staged" || true)
left="$(grep -rlF "$prefix.partial" "$staged" | sed "s|^$(sed_literal "$staged")|$prefix|" || true)"
[ -z "$left" ] || die "these installed files name the staging folder $prefix.partial, which is renamed to $prefix: $(echo $left) (a package that records its build-time Kokkos path elsewhere: teach install-deps.sh to rewrite it); nothing was installed"
# The staged tree becomes $prefix.partial itself, then $prefix with the stamp written last.
shopt -s dotglob
mv "$staged"/* "$prefix.partial/"
shopt -u dotglob
rm -rf "$stage"
cache_commit "$prefix" .joule-complete "$recipe" || die "could not rename $prefix.partial to $prefix"
cache_report "$label" "$cache_state" "built in $SECONDS s"
log "done: Kokkos_ROOT=$prefix"
