#!/usr/bin/env bash
# Compile check for GPU builds on a machine without a GPU (and without a CUDA Kokkos install):
# every translation unit of core/, parallel/, runlog/, scheduler/, energy/ and apps/ is compiled (compile
# only: nothing links or runs)
#   - with nvcc for CUDA sm_90 (Hopper) in C++20, against Kokkos 5.x headers configured for
#     CUDA + OpenMP + Serial;
#   - with g++ in C++20 against the same headers configured for OpenMP + Serial; translation
#     units that need Kokkos-Kernels against the Kokkos 4.5 / Kokkos-Kernels 4.5 pair, the newest
#     Debian ships together. (Kokkos 4.5's CUDA backend does not compile with CUDA 13, so for CUDA
#     those units see Kokkos 5.x and a declaration of gemm: kernels-declarations/.)
# Deprecated Kokkos code is configured out, so using deprecated API fails the check.
# Headers come from Debian's newer releases (binary packages libkokkos-dev,
# libtrilinos-kokkos-dev, libtrilinos-kokkos-kernels-dev), fetched with apt-get download through a
# private sources list and unpacked with dpkg -x into a cache folder, never installed. If the
# archive no longer offers them, the check fails loudly.
# Device code is compiled in full (cicc, ptxas for sm_90); the host side of each CUDA compilation
# is checked by nvcc's front end and by g++ with -fsyntax-only (every error, no object code: the
# object went to /dev/null anyway, and emitting it took a sixth of the time).
# The GPU audit's resource part reads ptxas' report of every kernel (-Xptxas -v on these same
# compilations: nothing is compiled twice) and gates on spills and occupancy (gpu_audit.py; the
# ptxas logs are kept in $JOULE_GPU_AUDIT_DIR, default the cache's gpu-audit/ folder).
# A CUDA batch that passed is not compiled again from the same inputs: its log is reused
# (JOULE_COMPILE_CHECK_REUSE=0 compiles everything; see reuse_key below).
# Environment: NVCC (default: nvcc on PATH or /usr/local/cuda/bin/nvcc), JOULE_COMPILE_CHECK_CACHE,
# JOULE_COMPILE_CHECK_ONLY (a grep pattern: check only the matching translation units; the audit
# then sees only their kernels), JOULE_GPU_AUDIT_LAUNCHES (the JSON of `joule bench --suite
# launches`: launch blocks and threads for the audit), JOULE_GPU_AUDIT_WAVE_GATE=1 (those launches
# are medium.json's: gate on the threads each exposes too), JOULE_GPU_AUDIT=0 (no audit).
# JOULE_COMPILE_CHECK_HOST45=0 leaves out the g++ pass against Kokkos 4.5, JOULE_COMPILE_CHECK_HOST5=0
# the one against Kokkos 5.x (where a real build against that Kokkos replaces it: CI's sid roots).
# --fetch-only: fetch and unpack the headers (step 1), compile nothing.
set -euo pipefail
fetch_only=0
case "${1:-}" in
  --fetch-only) fetch_only=1 ;;
  "") ;;
  *) echo "usage: $0 [--fetch-only]" >&2; exit 2 ;;
esac
here="$(cd "$(dirname "$0")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
cache="${JOULE_COMPILE_CHECK_CACHE:-$HOME/.cache/joule/compile-check}"
nvcc="${NVCC:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}"
cxx="${CXX:-g++}"
jobs="$(nproc)"
log() { printf '[compile-check] %s\n' "$*" >&2; }
die() { printf '[compile-check] FAILED: %s\n' "$*" >&2; exit 1; }

[ -x "$nvcc" ] || die "no nvcc (looked for '$nvcc'); install the CUDA toolkit or set NVCC"
# The toolkit root as nvcc itself reports it: nvcc on PATH may be a wrapper script elsewhere
# (/usr/local/bin/nvcc on the CI machines execs /usr/local/cuda-13.0/bin/nvcc).
cuda_top="$(cd /tmp && "$nvcc" --dryrun -v -x cu /dev/null 2>&1 | sed -n 's/^#\$ TOP=//p' | head -1)"
[ -n "$cuda_top" ] && [ -d "$cuda_top" ] || die "could not ask $nvcc for its toolkit root (nvcc --dryrun printed no TOP=)"
cuda_top="$(cd "$cuda_top" && pwd -P)"
cuda_include="$cuda_top/include"
nccl_lib="$cuda_top/lib64"
# The NCCL backend is checked when the toolkit ships NCCL (these machines' CUDA 13 does); without
# it the rest is still checked and the summary says NCCL was not.
have_nccl=1
if [ ! -f "$cuda_include/nccl.h" ] || [ ! -e "$nccl_lib/libnccl.so" ]; then
  have_nccl=0
  log "NOTE: no nccl.h / libnccl.so under $cuda_top: the NCCL backend is NOT checked"
fi
mkdir -p "$cache"

# --- 1. Kokkos headers from Debian's archive ------------------------------------------------------
# Whole or not at all (apps/scripts/detail/cache_step.sh's messages and report): fetched and unpacked
# in $cache/fetch.partial, each piece renamed into place when all are, the stamp .headers-complete
# (holding the recipe) written last. A cache without the stamp (an interrupted fetch) loses those
# pieces and is fetched again, said in one line. The pieces stay where the script always put them
# ($cache/debs, $cache/<package>; their paths and `ls -l $cache/debs` are part of the passed
# batches' keys below), and passed-batches/ and gpu-audit/ beside them are never touched. A cache
# the script made before the stamp existed is whole when it has .unpacked (touched after the last
# dpkg -x) and every package's folder and .deb: it is stamped as it is.
# shellcheck source=../../apps/scripts/detail/cache_step.sh
. "$repo/apps/scripts/detail/cache_step.sh"
packages=(libkokkos-dev libtrilinos-kokkos-dev libtrilinos-kokkos-kernels-dev)
sources="deb http://deb.debian.org/debian sid main"
# Bump v when how the headers are fetched changes: every cache is then fetched again.
headers_recipe="joule compile-check headers v1: $sources, ${packages[*]}"
headers_label="Kokkos 4.5/5 headers (compile check)"
headers_stamp="$cache/.headers-complete"
headers_whole_unstamped() {  # the old script's complete cache: .unpacked and every piece
  local p
  [ -f "$cache/.unpacked" ] && [ ! -e "$cache/fetch.partial" ] || return 1
  for p in "${packages[@]}"; do
    [ -d "$cache/$p" ] && compgen -G "$cache/debs/${p}_*.deb" >/dev/null || return 1
  done
}
headers_stamp_write() {
  printf '%s\n' "$headers_recipe" >"$headers_stamp.tmp" && mv "$headers_stamp.tmp" "$headers_stamp"
}
if cache_is_current "$cache" .headers-complete "$headers_recipe"; then
  cache_report "$headers_label" warm
elif [ ! -e "$headers_stamp" ] && headers_whole_unstamped; then
  headers_stamp_write
  log "$headers_label: $cache, fetched whole before the stamp existed (.unpacked), is stamped as it is"
  cache_report "$headers_label" warm "stamped as it was"
else
  headers_state=cold
  if [ -e "$headers_stamp" ]; then
    log "$headers_label: $cache was fetched by another recipe: fetching again"
  elif [ -e "$cache/fetch.partial" ] || [ -e "$cache/debs" ] || [ -e "$cache/.unpacked" ] || [ -e "$cache/apt" ] ||
       compgen -G "$cache/lib*-dev" >/dev/null; then
    log "$headers_label: $cache holds an unfinished fetch (no stamp; an interrupted run): removing it and fetching again"
    headers_state=repaired
  fi
  # The markers first (.unpacked before the stamp, so that a stale cache interrupted here is not
  # taken for the old script's whole one): from here until the stamp is written again, the pieces
  # are not whole.
  rm -f "$cache/.unpacked"; rm -f "$headers_stamp"
  for d in fetch.partial apt debs "${packages[@]}"; do cache_remove "$cache/$d" || exit 1; done
  part="$cache/fetch.partial"
  mkdir -p "$part/apt/lists/partial" "$part/debs"
  echo "$sources" >"$part/apt/sources.list"
  apt_opts=(-o "Dir::Etc::SourceList=$part/apt/sources.list" -o Dir::Etc::SourceParts=/dev/null
            -o "Dir::State::Lists=$part/apt/lists" -o Debug::NoLocking=1 -o APT::Sandbox::User=root)
  log "fetching ${packages[*]} from Debian sid (download only, nothing is installed)"
  apt-get "${apt_opts[@]}" update -q >/dev/null || die "apt-get update of the sid package lists failed (the network? run again)"
  (cd "$part/debs" && apt-get "${apt_opts[@]}" download "${packages[@]}" >/dev/null) ||
    die "Debian no longer offers ${packages[*]} (or the download failed: run again): the compile check cannot run"
  for p in "${packages[@]}"; do
    deb="$(ls "$part/debs/${p}_"*.deb 2>/dev/null | head -1)"
    [ -n "$deb" ] || die "package $p was not downloaded"
    dpkg -x "$deb" "$part/$p" || die "dpkg -x $deb failed"
  done
  for p in apt debs "${packages[@]}"; do mv -T "$part/$p" "$cache/$p"; done
  rmdir "$part"
  headers_stamp_write
  touch "$cache/.unpacked"   # what older checkouts of this script look for
  cache_report "$headers_label" "$headers_state" "$(cd "$cache/debs" && echo *.deb)"
fi
k5="$cache/libkokkos-dev/usr/include/kokkos"
k45="$cache/libtrilinos-kokkos-dev/usr/include/kokkos"
kk45="$cache/libtrilinos-kokkos-kernels-dev/usr/include/trilinos"
for d in "$k5" "$k45" "$kk45"; do [ -d "$d" ] || die "missing unpacked headers $d"; done
version() { sed -n 's/^#define KOKKOS_VERSION \([0-9]*\).*/\1/p' "$1/KokkosCore_config.h"; }
v5="$(version "$k5")"; v45="$(version "$k45")"
[ "${v5:0:1}" = 5 ] || die "libkokkos-dev holds Kokkos $v5, expected 5.x"
log "Kokkos $v5 (libkokkos-dev), Kokkos $v45 + Kokkos-Kernels (libtrilinos-kokkos*-dev)"
[ "$fetch_only" = 1 ] && exit 0

# --- 2. Configuration headers for a CUDA + OpenMP (GH200) build and a host-only build -------------
# KokkosCore_config.h: the packaged header with the settings in *.settings applied; the backend
# headers and desul's Config.hpp from the templates beside this script.
generate() {  # generate OUT_DIR KOKKOS_INCLUDE SETTINGS BACKENDS...
  local out="$1" inc="$2" settings="$3"; shift 3
  local backends="$*" fwd="" decl="" setup="" desul=""
  mkdir -p "$out/desul/atomics"
  cp "$inc/KokkosCore_config.h" "$out/KokkosCore_config.h"
  while read -r action macro; do
    case "$action" in
      define) sed -i -E "s@^(/\* #undef $macro \*/|#define $macro)\$@#define $macro@" "$out/KokkosCore_config.h"
              grep -q "^#define $macro\$" "$out/KokkosCore_config.h" ||
                sed -i "s@^#define KOKKOS_VERSION_PATCH.*@&\n#define $macro@" "$out/KokkosCore_config.h" ;;
      undef)  sed -i -E "s@^#define $macro\$@/* #undef $macro */@" "$out/KokkosCore_config.h" ;;
    esac
  done < <(grep -Ev '^(#|$)' "$here/$settings")
  for b in $backends; do
    fwd+="#include <fwd/Kokkos_Fwd_$b.hpp>"$'\n'
    decl+="#include <decl/Kokkos_Declare_$b.hpp>"$'\n'
    [ "$b" = CUDA ] && setup+="#include <setup/Kokkos_Setup_Cuda.hpp>"$'\n'
    [ "$b" = CUDA ] && desul+="#define DESUL_ATOMICS_ENABLE_CUDA"$'\n'
    [ "$b" = OPENMP ] && desul+="#define DESUL_ATOMICS_ENABLE_OPENMP"$'\n'
  done
  fill() { awk -v B="$backends" -v F="$fwd" -v D="$decl" -v S="$setup" -v U="$desul" '
      { gsub(/@BACKENDS@/, B); gsub(/@FWD_INCLUDES@/, F); gsub(/@DECLARE_INCLUDES@/, D);
        gsub(/@SETUP_INCLUDES@/, S); gsub(/@DESUL_DEFINES@/, U); print }' "$here/$1" > "$2"; }
  fill KokkosCore_Config_FwdBackend.hpp.in "$out/KokkosCore_Config_FwdBackend.hpp"
  fill KokkosCore_Config_DeclareBackend.hpp.in "$out/KokkosCore_Config_DeclareBackend.hpp"
  fill KokkosCore_Config_SetupBackend.hpp.in "$out/KokkosCore_Config_SetupBackend.hpp"
  fill desul_Config.hpp.in "$out/desul/atomics/Config.hpp"
}
work="$(mktemp -d)"; trap '[ -n "${KEEP:-}" ] && echo "kept $work" >&2 || rm -rf "$work"' EXIT
# Host backends first: CUDA's headers instantiate host mirrors of the host space.
generate "$work/cuda5" "$k5" cuda_openmp.settings OPENMP SERIAL CUDA
generate "$work/host5" "$k5" openmp.settings OPENMP SERIAL
generate "$work/host45" "$k45" openmp.settings OPENMP SERIAL
# The generated headers: `joule`'s apps/default_config.hpp (from CMake), ...
mkdir -p "$work/gen" && { echo '#pragma once'; echo 'namespace joule::apps { inline constexpr char const* kDefaultConfigJson = "{}"; }'; } > "$work/gen/default_config.hpp"
# ... apps/build_facts_config.hpp (from CMake: the commit, the host target; MPI on, as below) ...
sed -e 's/@JOULE_GIT_COMMIT@/check/' -e 's/@_joule_host_target_text@/check/' -e 's/@_joule_kk_text@/check/' \
  -e 's/@_joule_with_mpi@/1/' "$repo/apps/build_facts_config.hpp.in" > "$work/gen/build_facts_config.hpp"
# ... and core/model/limits.hpp, made from core/model/limits.json by the build's own generator.
cmake -DJOULE_LIMITS_JSON="$repo/core/model/limits.json" -DJOULE_LIMITS_TEMPLATE="$repo/core/model/limits.hpp.in" \
  -DJOULE_LIMITS_HEADER="$work/gen/core/model/limits.hpp" -P "$repo/cmake/detail/generate_limits.cmake" ||
  die "cannot generate core/model/limits.hpp from core/model/limits.json"

# --- 3. Compile every translation unit ---------------------------------------------------------
units=()
while IFS= read -r f; do units+=("$f"); done < <(cd "$repo" && find core parallel runlog scheduler energy apps -name '*.cpp' 2>/dev/null | sort | grep -E "${JOULE_COMPILE_CHECK_ONLY:-.}")
[ "${#units[@]}" -gt 0 ] || die "no translation units found"
common=(-I"$repo" -I"$work/gen" -I"$repo/apps" -I/usr/include/hdf5/serial -DJOULE_VERSION=\"check\" -DJOULE_GIT_COMMIT=\"check\")
for d in $(mpicxx --showme:incdirs 2>/dev/null); do common+=(-I"$d"); done
# Does the unit include Kokkos-Kernels (its headers' dependencies fail without them)? Asked once
# per unit, all units at once, before the compilations (each compilation asking again cost ~100 s
# on 2 cores).
# Only the host passes ask (CI leaves both to its sid builds: JOULE_COMPILE_CHECK_HOST45=0 and _HOST5=0).
mkdir -p "$work/kernels"
if [ "${JOULE_COMPILE_CHECK_HOST45:-1}${JOULE_COMPILE_CHECK_HOST5:-1}" != 00 ]; then
  for u in "${units[@]}"; do
    while [ "$(jobs -rp | wc -l)" -ge "$jobs" ]; do sleep 0.1; done
    ( "$cxx" -std=c++20 -fopenmp -M "${common[@]}" -I"$work/host5" -I"$k5" -I"$cuda_include" "$repo/$u" \
        >/dev/null 2>&1 || touch "$work/kernels/${u//\//_}" ) &
  done
  wait
fi
needs_kernels() { [ -e "$work/kernels/${1//\//_}" ]; }

# The units of one folder are compiled together, as one translation unit that includes them all
# (a "unity" batch), for CUDA and for the host. Each unit's own compilation spent most of its time
# parsing the same Kokkos headers again: an apps/ unit's preprocessed CUDA source is 9 MB, its
# device code empty; one nvcc batch of the 12 units of apps/ took 44 s, the 12 alone ~280 s. Every
# unit's device code is still compiled in full (cicc, ptxas for sm_90) and its host side checked
# by nvcc's front end and g++. What a batch cannot see, a unit missing an include that an earlier
# unit of its batch provided, is seen by the build itself, which compiles every unit alone.
# JOULE_COMPILE_CHECK_UNITY=0: every unit alone, as before (to time one, or to bisect a clash).
compile_cuda() {  # compile_cuda NAME UNIT... -> prints a result line
  local name="$1"; shift
  local logf="$work/log.cuda.${name//\//_}" src="$work/unity/${name//\//_}.cu" rc=0 t0=$SECONDS inc=() args key reused=""
  mkdir -p "$work/unity"
  { for u in "$@"; do echo "#include \"$repo/$u\""; done; } > "$src"
  [ "$have_nccl" = 1 ] && inc+=(-I"$cuda_include" -DJOULE_HAVE_NCCL)
  # Units that need Kokkos-Kernels see Kokkos 5.x and a declaration of gemm (see
  # kernels-declarations/KokkosBlas3_gemm.hpp); the folder is harmless for the others.
  # -Xptxas -v: ptxas reports each kernel's registers, spills, stack and static shared memory (the
  # GPU audit, gpu_audit.py, reads them from these logs: no compilation of its own).
  args=(-x cu -std=c++20 -arch=sm_90 --extended-lambda --expt-relaxed-constexpr -Xptxas -v
    -Xcompiler -fopenmp -Xcompiler -fsyntax-only -Wno-deprecated-gpu-targets -DFMT_USE_CONSTEXPR=1 "${common[@]}"
    -I"$work/cuda5" -I"$k5" -I"$here/kernels-declarations" "${inc[@]}" -c "$src" -o /dev/null)
  key="$(reuse_key "$name" "$@" -- "${args[@]}")"
  if [ -n "$key" ] && [ -f "$reuse_dir/$key.log" ]; then  # this batch passed before, from the same inputs
    sed -e "s|@REPO@|$repo|g" -e "s|@WORK@|$work|g" "$reuse_dir/$key.log" >"$logf"
    touch "$reuse_dir/$key.log"
    reused=" (reused)"
  else
    "$nvcc" "${args[@]}" >"$logf" 2>&1 || rc=$?
  fi
  # nvcc only warns (#20011/#20014) when device code calls a host-only function; in joule's own
  # code that is an error (Kokkos' desul atomics trigger the same warning harmlessly: they guard
  # the call by target, so only warnings located in this repository count).
  if grep -E "^$repo/[^(]*\([0-9]+\): warning #2001[14]-D" "$logf" >"$logf.device"; then
    rc=1
    sed 's/warning #2001/error (device code calls a host function) #2001/' "$logf.device" >>"$logf"
  fi
  local what="$name ($# unit$([ $# = 1 ] || echo s))"
  [ $# = 1 ] && what="$1"
  if [ $rc = 0 ] && [ -n "$key" ] && [ -z "$reused" ]; then
    sed -e "s|$repo|@REPO@|g" -e "s|$work|@WORK@|g" "$logf" >"$reuse_dir/$key.log.tmp" && mv "$reuse_dir/$key.log.tmp" "$reuse_dir/$key.log"
  fi
  printf '%-6s %-17s %-38s %-7s %4ds%s\n' cuda "$v5" "$what" "$([ $rc = 0 ] && echo ok || echo FAILED)" $((SECONDS - t0)) "$reused"
  if [ $rc != 0 ]; then
    { echo "--- cuda $what ($*):"; grep -m 12 -E 'error' "$logf" || tail -20 "$logf"; } >>"$work/errors"
  fi
  return 0
}
# A batch that passed is not compiled again from the same inputs (CI compiles the same commit in a
# fresh clone): its log (ptxas' figures, the warnings) is kept in $reuse_dir under a key of
# everything the compilation reads: nvcc's version, the arguments (this checkout's and the work
# folder's paths written as placeholders, so that a clone elsewhere finds it), the generated
# configuration headers, the Kokkos headers' packages, the system headers' packages and every
# source, header and template file of the checkout's source folders and of this folder (a batch
# includes headers from anywhere in them, so any change there compiles every batch again). JOULE_COMPILE_CHECK_REUSE=0 compiles everything.
reuse_dir="$cache/passed-batches"
reuse_inputs=""
if [ "${JOULE_COMPILE_CHECK_REUSE:-1}" != 0 ]; then
  mkdir -p "$reuse_dir"
  find "$reuse_dir" -name '*.log' -mtime +14 -delete 2>/dev/null || true  # not used for two weeks
  reuse_inputs="$( { "$nvcc" --version; ls -l "$cache/debs"; find "$work/cuda5" "$work/gen" -type f | LC_ALL=C sort | xargs cat;
    dpkg-query -W libhdf5-dev libopenmpi-dev libfmt-dev nlohmann-json3-dev libcli11-dev libstb-dev g++ 2>/dev/null || true
    cd "$repo" && find core parallel runlog scheduler energy apps cmake/compile-check -type f \( -name '*.[ch]pp' -o -name '*.h' \
      -o -name '*.cuh' -o -name '*.inc' -o -name '*.in' -o -name '*.json' -o -name '*.settings' \) 2>/dev/null | LC_ALL=C sort | xargs sha256sum; } |
    sha256sum | cut -c1-64)"
fi
reuse_key() {  # reuse_key NAME UNIT... -- ARG... -> the key, or nothing (reuse off)
  [ -n "$reuse_inputs" ] || return 0
  printf '%s\n' "$reuse_inputs" "$@" | sed -e "s|$repo|@REPO@|g" -e "s|$work|@WORK@|g" | sha256sum | cut -c1-64
}
compile_host() {  # compile_host NAME SET UNIT... -> prints a result line; SET: 5 or 4.5 (Kokkos-Kernels units)
  local name="$1" which="$2"; shift 2
  local set cfg inc logf="$work/log.host.${name//\//_}.$which" src="$work/unity/${name//\//_}.$which.cpp" rc=0 t0=$SECONDS
  if [ "$which" = 4.5 ]; then
    set="4.5+KK4.5"; inc=(-I"$k45" -I"$kk45"); cfg=host45
  else
    set="$v5"; inc=(-I"$k5"); cfg=host5
  fi
  mkdir -p "$work/unity"
  { for u in "$@"; do echo "#include \"$repo/$u\""; done; } > "$src"
  "$cxx" -std=c++20 -fopenmp -fsyntax-only -Wall "${common[@]}" -I"$work/$cfg" "${inc[@]}" "$src" >"$logf" 2>&1 || rc=$?
  local what="$name ($# unit$([ $# = 1 ] || echo s))"
  [ $# = 1 ] && what="$1"
  printf '%-6s %-17s %-38s %-7s %4ds\n' host "$set" "$what" "$([ $rc = 0 ] && echo ok || echo FAILED)" $((SECONDS - t0))
  if [ $rc != 0 ]; then
    { echo "--- host $what ($*):"; grep -m 12 -E 'error' "$logf" || tail -20 "$logf"; } >>"$work/errors"
  fi
  return 0
}
cuda_units=()
for u in "${units[@]}"; do
  if [ "$u" = parallel/nccl_communicator.cpp ] && [ "$have_nccl" = 0 ]; then
    echo "cuda   -                 $u NOT CHECKED (no NCCL in the toolkit)" >>"$work/notes"; continue
  fi
  cuda_units+=("$u")
done
# Batches by folder, the folders with the most device code first (the longest compilations start
# first, so that two run side by side to the end).
# Small folders join a bigger one's batch (each batch costs a parse of Kokkos' headers): the run
# log with the scheduler, energy's Kokkos units with energy, the configuration with the model.
batch_of() {
  case "$1" in
    runlog) echo scheduler ;;
    energy/kokkos) echo energy ;;
    core/config) echo core/model ;;
    *) echo "$1" ;;
  esac
}
batches=()
if [ "${JOULE_COMPILE_CHECK_UNITY:-1}" = 0 ]; then
  batches=("${cuda_units[@]}")
else
  for d in core/model core/train core/ops apps scheduler apps/bench energy core/data core/io parallel energy/detail; do
    batches+=("$d")
  done
  # Alternatives to another unit of their folder (the same functions, for builds without MPI)
  # cannot share its batch: compiled alone.
  batches+=(parallel/no_mpi_session.cpp)
  for u in "${cuda_units[@]}"; do  # a folder not in the list above gets a batch of its own
    printf '%s\n' "${batches[@]}" | grep -qx "$(batch_of "$(dirname "$u")")" || batches+=("$(batch_of "$(dirname "$u")")")
  done
fi
log "compiling ${#units[@]} translation units for CUDA sm_90 (nvcc $("$nvcc" --version | sed -n 's/.*release \([0-9.]*\).*/\1/p'))$([ "${JOULE_COMPILE_CHECK_HOST45:-1}${JOULE_COMPILE_CHECK_HOST5:-1}" = 00 ] || echo " and for g++ C++20"), $([ "${JOULE_COMPILE_CHECK_UNITY:-1}" = 0 ] && echo "each alone" || echo "one batch per folder"), $jobs at a time"
results="$work/results"
: > "$results"
for b in "${batches[@]}"; do
  members=()
  for u in "${cuda_units[@]}"; do
    if [ "$u" = "$b" ] || { [ "$(batch_of "$(dirname "$u")")" = "$b" ] && ! printf '%s\n' "${batches[@]}" | grep -qx "$u"; }; then
      members+=("$u")
    fi
  done
  [ "${#members[@]}" -gt 0 ] || continue
  while [ "$(jobs -rp | wc -l)" -ge "$jobs" ]; do sleep 0.2; done
  ( compile_cuda "$b" "${members[@]}" >>"$results" ) &
  echo "${#members[@]}" >>"$work/cuda_counted"
done
# The host compilations in the same batches, split by the Kokkos they are checked against. The
# NCCL backend exists on CUDA builds only (JOULE_HAVE_NCCL).
for u in "${units[@]}"; do
  [ "$u" = parallel/nccl_communicator.cpp ] && echo "host   -                 $u ok (CUDA builds only)" >>"$work/notes"
done
# JOULE_COMPILE_CHECK_HOST45=0: the g++ pass against Kokkos 4.5 + Kokkos-Kernels 4.5 is left out,
# where a real build against that Kokkos, in C++20, replaces it (CI: make test-kokkos45).
# JOULE_COMPILE_CHECK_HOST5=0 likewise leaves out the pass against Kokkos 5.x (make test-kokkos52).
host_sets=()
if [ "${JOULE_COMPILE_CHECK_HOST45:-1}" = 0 ]; then
  echo "host   4.5+KK4.5         (the Kokkos-Kernels units) not here: JOULE_COMPILE_CHECK_HOST45=0, built in full against Kokkos 4.5.1 by make test-kokkos45" >>"$work/notes"
else
  host_sets+=(4.5)
fi
if [ "${JOULE_COMPILE_CHECK_HOST5:-1}" = 0 ]; then
  echo "host   5.x               (the other units) not here: JOULE_COMPILE_CHECK_HOST5=0, built in full against Kokkos 5.2.2 by make test-kokkos52" >>"$work/notes"
else
  host_sets+=(5)
fi
for b in "${batches[@]}"; do
  for which in "${host_sets[@]}"; do
    members=()
    for u in "${units[@]}"; do
      [ "$u" = parallel/nccl_communicator.cpp ] && continue
      if needs_kernels "$u"; then [ $which = 4.5 ] || continue; else [ $which = 5 ] || continue; fi
      if [ "$u" = "$b" ] || { [ "$(batch_of "$(dirname "$u")")" = "$b" ] && ! printf '%s\n' "${batches[@]}" | grep -qx "$u"; }; then
        members+=("$u")
      fi
    done
    [ "${#members[@]}" -gt 0 ] || continue
    while [ "$(jobs -rp | wc -l)" -ge "$jobs" ]; do sleep 0.2; done
    ( compile_host "$b" $which "${members[@]}" >>"$results" ) &
    echo "${#members[@]}" >>"$work/host_counted"
  done
done
wait
sort "$results"
[ -f "$work/errors" ] && cat "$work/errors" >&2
[ -f "$work/notes" ] && cat "$work/notes"
expected=$(( $(cat "$work/host_counted" 2>/dev/null | wc -l) + $(cat "$work/cuda_counted" 2>/dev/null | wc -l) ))
cuda_checked=$(awk '{n += $1} END {print n + 0}' "$work/cuda_counted" 2>/dev/null || echo 0)
host_checked=$(awk '{n += $1} END {print n + 0}' "$work/host_counted" 2>/dev/null || echo 0)
host_units=0  # the units of the host sets checked here (JOULE_COMPILE_CHECK_HOST45, _HOST5)
for u in "${units[@]}"; do
  [ "$u" = parallel/nccl_communicator.cpp ] && continue
  if needs_kernels "$u"; then set_of_unit=4.5; else set_of_unit=5; fi
  printf '%s\n' "${host_sets[@]}" | grep -qxF "$set_of_unit" && host_units=$((host_units + 1))
done
[ "$cuda_checked" = "${#cuda_units[@]}" ] || die "only $cuda_checked of ${#cuda_units[@]} units were given to nvcc"
[ "$host_checked" = "$host_units" ] || die "only $host_checked of $host_units units were given to g++"
# The reused batches, for CI's table: warm when every CUDA batch came from passed-batches/.
cuda_batches="$(grep -c '^cuda ' "$results" || true)" cuda_reused="$(grep -c '^cuda .*(reused)$' "$results" || true)"
cache_report "nvcc batches (compile check)" "$([ "$cuda_reused" = "$cuda_batches" ] && echo warm || echo cold)" \
  "$cuda_reused of $cuda_batches batches reused"
[ "$(wc -l < "$results")" = "$expected" ] || die "only $(wc -l < "$results") of $expected compilations reported"
if grep -q FAILED "$results"; then die "$(grep -c FAILED "$results") translation unit(s) do not compile (errors above)"; fi
# The GPU audit of the kernels compiled above (ptxas' figures), before the link check.
if [ "${JOULE_GPU_AUDIT:-1}" != 0 ]; then
  audit_dir="${JOULE_GPU_AUDIT_DIR:-$cache/gpu-audit}"
  rm -rf "$audit_dir/ptxas" && mkdir -p "$audit_dir/ptxas"
  for f in "$work"/log.cuda.*; do
    case "$f" in *.device) continue ;; esac
    grep '^ptxas info\|bytes stack frame' "$f" > "$audit_dir/ptxas/${f##*/log.cuda.}.log" || true
  done
  audit_args=(--json "$audit_dir/audit.json")
  [ -n "${JOULE_GPU_AUDIT_LAUNCHES:-}" ] && audit_args+=(--launches "$JOULE_GPU_AUDIT_LAUNCHES")
  [ "${JOULE_GPU_AUDIT_WAVE_GATE:-0}" = 1 ] && audit_args+=(--wave-gate)
  [ "${JOULE_GPU_AUDIT_GATE:-1}" = 0 ] && audit_args+=(--no-gate)
  python3 "$here/gpu_audit.py" "${audit_args[@]}" "$audit_dir"/ptxas/*.log ||
    die "the GPU audit failed (table above; the ptxas logs are in $audit_dir/ptxas)"
fi
log "all $(wc -l < "$results") compilations passed (${#cuda_units[@]} units for CUDA, $host_units for the host)$([ "$have_nccl" = 1 ] || echo " (the NCCL backend NOT checked: no NCCL in the toolkit)")"

# --- 4. The NCCL backend links against the toolkit's libnccl and libcudart (it cannot run here:
# no GPU). Only when no JOULE_COMPILE_CHECK_ONLY filter excludes it.
if [ "$have_nccl" = 1 ] && printf '%s\n' "${units[@]}" | grep -qx parallel/nccl_communicator.cpp; then
  cat > "$work/nccl_link_main.cpp" <<'MAIN'
#include "parallel/mpi_communicator.hpp"
#include "parallel/nccl_communicator.hpp"
int main(int argc, char** argv) {
  joule::parallel::MpiSession mpi(&argc, &argv);
  if (argc > 1) joule::parallel::make_nccl_communicator(*mpi.world());  // linked, never run here
  return 0;
}
MAIN
  "$nvcc" -std=c++20 -arch=sm_90 -I"$repo" -I"$cuda_include" "${common[@]}" "$work/nccl_link_main.cpp" \
    "$repo/parallel/nccl_communicator.cpp" "$repo/parallel/mpi_communicator.cpp" -o "$work/nccl_link_check" \
    -L"$nccl_lib" -lnccl -lcudart $(mpicxx --showme:link) >"$work/log.nccl_link" 2>&1 \
    || { cat "$work/log.nccl_link" >&2; die "the NCCL backend does not link"; }
  log "the NCCL backend compiles and links (libnccl from $nccl_lib; not run: no GPU here)"
fi

# --- 5. The cuBLASLt backend (bf16 GEMMs) compiles as a CUDA build has it, links against the
# toolkit's libcublasLt and libcudart, and says it is there (have_cublaslt() calls no CUDA function,
# so this much runs without a GPU; the GEMM itself does not run here).
if printf '%s\n' "${units[@]}" | grep -qx core/precision/cublaslt_gemm.cpp; then
  cat > "$work/cublaslt_link_main.cpp" <<'MAIN'
#include "core/precision/detail/cublaslt_gemm.hpp"
int main(int argc, char**) {
  if (argc > 1)  // linked, never run here
    joule::detail::cublaslt_gemm_bf16(nullptr, false, false, 1, 1, 1, 1.0f, nullptr, 1, nullptr, 1, 0.0f, nullptr, 1,
                                      false, nullptr, 0);
  return joule::detail::have_cublaslt() ? 0 : 3;
}
MAIN
  "$nvcc" -x cu -std=c++20 -arch=sm_90 --extended-lambda -Xcompiler -fopenmp "${common[@]}" -I"$work/cuda5" -I"$k5" \
    "$work/cublaslt_link_main.cpp" \
    "$repo/core/precision/cublaslt_gemm.cpp" -o "$work/cublaslt_link_check" -L"$cuda_top/lib64" -lcublasLt -lcudart \
    >"$work/log.cublaslt_link" 2>&1 || { cat "$work/log.cublaslt_link" >&2; die "the cuBLASLt backend does not link"; }
  LD_LIBRARY_PATH="$cuda_top/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" "$work/cublaslt_link_check" \
    || die "the cuBLASLt backend was linked without its CUDA path (have_cublaslt() is false)"
  log "the cuBLASLt backend compiles and links (libcublasLt from $cuda_top/lib64; not run: no GPU here)"
fi
