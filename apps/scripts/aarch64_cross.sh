#!/usr/bin/env bash
# joule cross-built for aarch64 (Grace's cores) on an x86-64 Debian 12 machine, and its Grace-relevant
# unit tests run under qemu-user (issue 53; docs/testing.md, "aarch64 under emulation").
#   aarch64_cross.sh [PHASE...]   phases, in this order for `all` (the default):
#     sysroot  Debian arm64 packages (libc, libstdc++, libgomp, HDF5, OpenBLAS, zlib, fmt, CLI11,
#              nlohmann-json, Catch2 v2, stb) resolved by apt-get with its own state and settings in
#              the cache (the host's Debian sources, its own package lists; nothing is installed on
#              this machine, no foreign architecture added to dpkg), unpacked with dpkg-deb -x
#     kokkos   Kokkos 3.4.1 (OpenMP + Serial) + Kokkos-Kernels (BLAS on the sysroot's OpenBLAS,
#              OpenMP build), cross-built from Debian's trilinos source package, as install-deps.sh
#              builds them for the host
#     build    joule configured with cmake/toolchains/aarch64-linux-gnu.cmake (no MPI), and the test
#              executables of JOULE_AARCH64_TESTS built
#     test     their test cases run by ctest, each through qemu-aarch64
#   Each phase prints its wall time; `all` ends with a table of them.
# Host tools (installed with apt-get where missing, on Debian): g++-aarch64-linux-gnu, qemu-user.
# Caches (each rebuilt only when what it is made from changes; reruns take seconds):
#   JOULE_AARCH64_CACHE   apt's state, the sysroot and the trilinos sources (~/.cache/joule/aarch64)
#   JOULE_AARCH64_SYSROOT the sysroot ($JOULE_AARCH64_CACHE/sysroot); keyed on the package list, the
#                         sources and this recipe; JOULE_AARCH64_REFRESH=1 re-resolves the packages
#                         (newer Debian updates), otherwise no network is used once it exists
#   JOULE_AARCH64_KOKKOS  the Kokkos + Kokkos-Kernels prefix (~/.cache/joule/kokkos-3.4.1-openmp-aarch64);
#                         keyed on the sources, the toolchain file, the target flags and the sysroot
#   JOULE_AARCH64_BUILD   joule's build folder (build-aarch64 in the checkout, like build/)
# An interrupted run (a time limit, Ctrl-C, SIGKILL, a failed step) leaves no half-made cache that a
# later run trusts: the sysroot, the trilinos sources ($JOULE_AARCH64_CACHE/src) and the Kokkos prefix
# are each made in <folder>.partial beside their folder (Kokkos installed there with DESTDIR for its
# final prefix), their stamp (.joule-sysroot, .joule-trilinos, .joule-complete) written last, and
# renamed into place when whole. The next run removes a .partial folder, or a cache without its stamp
# or with another recipe's, saying so in one line, and makes it again (apps/scripts/detail/
# cache_step.sh); each says warm, cold or repaired in JOULE_CACHE_REPORT when that is set (.ci/run).
# Other settings:
#   JOULE_AARCH64_TESTS   the test executables to build and run (default below)
#   JOULE_AARCH64_SKIP    a (Python) regular expression: their tests it finds in the name are not run
#                         (default below; empty: none)
#   JOULE_AARCH64_TEST_TIMEOUT  seconds per test (600)
#   JOULE_AARCH64_SOURCES an apt sources file (deb822 or one-line) with deb and deb-src entries of
#                         Debian 12 (default: the host's /etc/apt/sources.list.d/debian.sources or
#                         sources.list, each entry also as deb-src; apt.conf.d, e.g. a proxy, applies)
#   JOULE_AARCH64_CPU_FLAGS, JOULE_AARCH64_FP_CONTRACT, JOULE_AARCH64_QEMU_CPU: see the toolchain file
#   JOULE_AARCH64_LAUNCHER joule's compiler launcher (make test-aarch64: cmake/ccache_launcher.sh where
#                         ccache is installed; empty: none)
#   JOBS                  parallel compile jobs and ctest's -j (default: nproc)
set -euo pipefail

log() { printf '[joule aarch64] %s\n' "$*" >&2; }
die() { printf '[joule aarch64] ERROR: %s\n' "$*" >&2; exit 1; }
sudo_if_needed() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi; }

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
# shellcheck source=kokkos_kernels_options.sh
. "$repo/apps/scripts/kokkos_kernels_options.sh"
# shellcheck source=detail/cache_step.sh
. "$repo/apps/scripts/detail/cache_step.sh"
toolchain="$repo/cmake/toolchains/aarch64-linux-gnu.cmake"
# Absolute, without a trailing /: each cache is made in "<folder>.partial" beside its folder.
cache="$(realpath -ms -- "${JOULE_AARCH64_CACHE:-$HOME/.cache/joule/aarch64}")"
sysroot="$(realpath -ms -- "${JOULE_AARCH64_SYSROOT:-$cache/sysroot}")"
prefix="$(realpath -ms -- "${JOULE_AARCH64_KOKKOS:-$HOME/.cache/joule/kokkos-3.4.1-openmp-aarch64}")"
build="${JOULE_AARCH64_BUILD:-$repo/build-aarch64}"
jobs="${JOBS:-$(nproc)}"
# What matters for Grace: the host AdamW and the offload worker, the operators the host runs
# (linear, layer norm, row kernels, element-wise, embedding, attention) and training with offload.
tests="${JOULE_AARCH64_TESTS:-test_cross_entropy_adamw test_host_worker test_linear_layernorm test_row_kernels test_elementwise_embedding test_attention test_training}"
# Left out by default, for CI's time (JOULE_AARCH64_SKIP= runs them all):
#  - offload_host_worker, test_training's offload cases again with the updates on the pinned worker
#    thread (91 s under qemu on 2 cores; the same bits are checked inline by the offload cases, the
#    worker itself by test_host_worker);
#  - the training cases whose subject is the loop's bookkeeping, not arithmetic the CPU could change:
#    resuming a checkpoint, a damaged checkpoint, micro-batch switches, the observer, the LM head's
#    padding rows, the loss going down, the peak-memory prediction (184 s of 479 under qemu);
#  - attention on OpenMP: a team is one thread on a CPU, so it runs the host kernels the Serial
#    cases run (as in make test-sanitize).
skip="${JOULE_AARCH64_SKIP-^offload_host_worker\$|^training: (resuming from a checkpoint|a damaged checkpoint|switching micro-batch|an observer|the LM head's padding rows|the loss goes down)|^memory check: a trainer's peak|^attention: .* - Kokkos::OpenMP\$}"

# The sysroot's packages (arm64). libopenblas0-openmp/libopenblas-openmp-dev: OpenBLAS's OpenMP
# build, which Kokkos-Kernels links by path (as install-deps.sh does on the host).
packages=(libc6-dev libstdc++-12-dev libgomp1 libhdf5-dev libopenblas-dev libopenblas0-openmp
          libopenblas-openmp-dev zlib1g-dev libfmt-dev libcli11-dev nlohmann-json3-dev catch2 libstb-dev)
# Bump when the way the sysroot or Kokkos is made changes, so the caches are remade.
sysroot_recipe_version=1
kokkos_recipe_version=1

# --- Host tools ---------------------------------------------------------------------------------------
host_tools() {  # host_tools NEED_QEMU: the cross compiler (and qemu), installed from Debian if missing
  local need_qemu="$1" missing=()
  command -v aarch64-linux-gnu-g++ >/dev/null || missing+=(g++-aarch64-linux-gnu)
  [ "$need_qemu" = 1 ] && ! command -v qemu-aarch64 >/dev/null && missing+=(qemu-user)
  command -v cmake >/dev/null || missing+=(cmake)
  command -v dpkg-deb >/dev/null && command -v apt-get >/dev/null ||
    die "apt-get and dpkg-deb are needed (a Debian or Ubuntu host) to make the arm64 sysroot"
  if [ "${#missing[@]}" -gt 0 ]; then
    log "installing host tools from Debian: ${missing[*]}"
    sudo_if_needed apt-get update -q >/dev/null
    DEBIAN_FRONTEND=noninteractive sudo_if_needed apt-get install -y -q --no-install-recommends "${missing[@]}" >/dev/null ||
      die "could not install ${missing[*]} (apt-get install ${missing[*]})"
  fi
}

# --- apt with its own state: arm64 only, in the cache -------------------------------------------------
aptdir="$cache/apt"
apt_opts=(-o APT::Architecture=arm64 -o APT::Architectures::=arm64
          -o Dir::State="$aptdir/state" -o Dir::State::status="$aptdir/state/status"
          -o Dir::Cache="$aptdir/cache" -o Dir::Etc::SourceList=/dev/null
          -o Dir::Etc::SourceParts="$aptdir/sources.list.d"
          -o Dir::Etc::Preferences=/dev/null -o Dir::Etc::PreferencesParts="$aptdir/preferences.d"
          -o APT::Install-Recommends=false -o Acquire::Languages=none
          -o APT::Sandbox::User="$(id -un)" -o quiet=1)
# The sources: the host's Debian entries (deb822 or one-line), as binary and source entries.
sources_text() {
  if [ -n "${JOULE_AARCH64_SOURCES:-}" ]; then
    cat "$JOULE_AARCH64_SOURCES"
  elif [ -f /etc/apt/sources.list.d/debian.sources ]; then
    sed -E 's/^Types:[[:space:]]*deb[[:space:]]*$/Types: deb deb-src/' /etc/apt/sources.list.d/debian.sources
  elif grep -qE '^deb[[:space:]]' /etc/apt/sources.list 2>/dev/null; then
    grep -E '^deb[[:space:]]' /etc/apt/sources.list | sed -E 's/\[[^]]*\][[:space:]]*//' |
      while read -r _ rest; do printf 'deb %s\ndeb-src %s\n' "$rest" "$rest"; done
  else
    printf 'Types: deb deb-src\nURIs: http://deb.debian.org/debian\nSuites: bookworm bookworm-updates\nComponents: main\nSigned-By: /usr/share/keyrings/debian-archive-keyring.gpg\n'
  fi
}
sources_file() {  # the file name apt reads: .sources for deb822, .list for one-line entries
  if sources_text | grep -qE '^(deb|deb-src)[[:space:]]'; then echo joule-arm64.list; else echo joule-arm64.sources; fi
}
apt_setup() {  # the state folders and the sources, then the package lists (network)
  mkdir -p "$aptdir"/state/lists/partial "$aptdir"/cache/archives/partial "$aptdir"/sources.list.d "$aptdir"/preferences.d
  [ -f "$aptdir/state/status" ] || : >"$aptdir/state/status"  # nothing installed: apt resolves the whole closure
  rm -f "$aptdir"/sources.list.d/*
  sources_text >"$aptdir/sources.list.d/$(sources_file)"
  log "apt-get update (arm64 lists, own state in $aptdir)"
  apt-get "${apt_opts[@]}" update >"$aptdir/update.log" 2>&1 || { tail -20 "$aptdir/update.log" >&2; die "apt-get update failed (log: $aptdir/update.log)"; }
}

# --- Phase: sysroot ------------------------------------------------------------------------------------
# Each cache below is made whole or not at all (detail/cache_step.sh): in DIR.partial, its stamp
# written last, then renamed to DIR; what an interrupted run left is removed by the next one.
sysroot_label="aarch64 sysroot"
sysroot_stamp=.joule-sysroot
sysroot_key() { { echo "sysroot v$sysroot_recipe_version"; printf '%s\n' "${packages[@]}"; sources_text; } | md5sum | cut -c1-16; }
sysroot_ready() { [ -f "$sysroot/$sysroot_stamp" ] && [ "$(head -1 "$sysroot/$sysroot_stamp")" = "key $(sysroot_key)" ]; }
phase_sysroot() {
  local t0=$SECONDS key recipe refresh=0 legacy=0
  key="key $(sysroot_key)"
  # The stamp is the key, then the packages unpacked, which apt resolves only when it runs: a
  # sysroot whose stamp starts with this key was made by this recipe, and its stamp is the recipe.
  recipe="$key"
  sysroot_ready && recipe="$(cat "$sysroot/$sysroot_stamp")"
  if [ -e "$sysroot.new" ]; then  # where this script made it before the .partial protocol
    log "$sysroot_label: removing $sysroot.new, left unfinished by an interrupted run"
    cache_remove "$sysroot.new" || exit 1
    legacy=1
  fi
  local new="$sysroot.partial"
  if [ "${JOULE_AARCH64_REFRESH:-0}" = 1 ] && sysroot_ready; then
    # Newer Debian updates: made beside the current sysroot, which is kept until the new one is whole.
    log "JOULE_AARCH64_REFRESH=1: re-resolving the packages into $new ($sysroot is replaced when that is whole)"
    [ -e "$new" ] && { log "$sysroot_label: removing $new, left unfinished by an interrupted run"; cache_remove "$new" || exit 1; }
    mkdir -p "$new"; cache_state=cold; refresh=1
  else
    if sysroot_ready && [ -e "$new" ]; then  # a refresh interrupted: the sysroot it was to replace is whole
      log "$sysroot_label: removing $new, left unfinished by an interrupted JOULE_AARCH64_REFRESH=1 run"
      cache_remove "$new" || exit 1
    fi
    if ! cache_begin "$sysroot_label" "$sysroot" "$sysroot_stamp" "$recipe"; then
      log "sysroot up to date: $sysroot ($(($(wc -l <"$sysroot/$sysroot_stamp") - 1)) packages)"
      return 0
    fi
  fi
  [ "$legacy" = 1 ] && cache_state=repaired
  host_tools 0
  apt_setup
  log "resolving and downloading ${packages[*]} (arm64) and their dependencies"
  apt-get "${apt_opts[@]}" clean  # .deb files a run interrupted before unpacking them left
  apt-get "${apt_opts[@]}" install --download-only -y "${packages[@]}" >"$aptdir/install.log" 2>&1 ||
    { tail -30 "$aptdir/install.log" >&2; die "apt-get install --download-only failed (log: $aptdir/install.log)"; }
  local debs=("$aptdir"/cache/archives/*.deb)
  [ -e "${debs[0]}" ] || die "apt-get downloaded no package (log: $aptdir/install.log)"
  log "unpacking ${#debs[@]} packages into $new"
  local deb
  for deb in "${debs[@]}"; do
    # Documentation, manual pages and translations are never read by a build.
    dpkg-deb --fsys-tarfile "$deb" | tar -x -C "$new" --exclude=./usr/share/doc --exclude=./usr/share/man \
      --exclude=./usr/share/locale --exclude=./usr/share/lintian --exclude=./usr/share/info ||
      die "unpacking $(basename "$deb") failed"
  done
  # Absolute links (libz.so -> /lib/aarch64-linux-gnu/libz.so.1.2.13, ...) would point into this
  # machine's own /: made relative, inside the sysroot (relative links stay right when the folder
  # is renamed from $new to $sysroot; links into $new would not).
  local link target fixed=0
  while IFS= read -r -d '' link; do
    target="$(readlink "$link")"
    ln -sfn "$(realpath -m --relative-to="$(dirname "$link")" "$new$target")" "$link"
    fixed=$((fixed + 1))
  done < <(find "$new" -type l -lname '/*' -print0)
  # What update-alternatives would have made (dpkg-deb -x runs no maintainer scripts): the BLAS and
  # LAPACK a program linked by soname loads are OpenBLAS's OpenMP build.
  local libdir="$new/usr/lib/aarch64-linux-gnu" lib
  for lib in libopenblas.so.0 libblas.so.3 liblapack.so.3; do
    [ -e "$libdir/$lib" ] || ln -s "openblas-openmp/$lib" "$libdir/$lib"
  done
  [ -e "$new/usr/include/stdio.h" ] && [ -e "$new/lib/ld-linux-aarch64.so.1" ] ||
    die "the unpacked sysroot has no usr/include/stdio.h or lib/ld-linux-aarch64.so.1"
  link="$(find "$new" -type l \( -lname '/*' -o -lname "*$new*" \) -print -quit)"
  [ -z "$link" ] || die "$link -> $(readlink "$link"): a link still absolute or into $new, which breaks when it is renamed to $sysroot (teach this step to make it relative); the sysroot was not made"
  recipe="$key"
  for deb in "${debs[@]}"; do recipe+=$'\n'"$(basename "$deb" .deb)"; done
  [ "$refresh" = 1 ] && { cache_remove "$sysroot" || exit 1; }
  cache_commit "$sysroot" "$sysroot_stamp" "$recipe" || die "could not rename $new to $sysroot"
  apt-get "${apt_opts[@]}" clean  # the .deb files: unpacked, no longer needed
  log "sysroot ready: $sysroot ($(du -sh "$sysroot" | cut -f1), $fixed absolute links made relative)"
  cache_report "$sysroot_label" "$cache_state" "${#debs[@]} packages unpacked in $((SECONDS - t0)) s"
}
require_sysroot() { sysroot_ready || die "no sysroot for these packages at $sysroot: run '$0 sysroot' first"; }

# --- Phase: kokkos -------------------------------------------------------------------------------------
srcdir="$cache/src"
src_label="trilinos sources (aarch64)"
src_stamp=.joule-trilinos
trilinos_sources() {  # packages/kokkos and packages/kokkos-kernels of Debian's trilinos, kept unpacked
  local t0=$SECONDS recipe=trilinos legacy=0
  # The stamp names the orig tarball they came from, known once apt has fetched it: a stamped folder
  # with both packages is current (a newer trilinos is taken only when the folder is removed).
  if [ -f "$srcdir/$src_stamp" ] && [ -d "$srcdir/kokkos" ] && [ -d "$srcdir/kokkos-kernels" ]; then
    recipe="$(cat "$srcdir/$src_stamp")"
  fi
  if [ -e "$cache/src.download" ]; then  # where this script fetched them before the .partial protocol
    log "$src_label: removing $cache/src.download, left unfinished by an interrupted run"
    cache_remove "$cache/src.download" || exit 1
    legacy=1
  fi
  cache_begin "$src_label" "$srcdir" "$src_stamp" "$recipe" || return 0
  [ "$legacy" = 1 ] && cache_state=repaired
  host_tools 0
  [ -f "$aptdir/sources.list.d/$(sources_file)" ] && compgen -G "$aptdir/state/lists/*Sources*" >/dev/null || apt_setup
  # The download inside the unfinished folder: an interruption leaves nothing anywhere else.
  local dl="$srcdir.partial/.download"
  mkdir -p "$dl"
  log "fetching Debian's trilinos source package (Kokkos 3.4.1 and Kokkos-Kernels inside; about 170 MB)"
  (cd "$dl" && apt-get "${apt_opts[@]}" source --download-only trilinos >"$dl/source.log" 2>&1) ||
    { tail -20 "$dl/source.log" >&2; die "apt-get source --download-only trilinos failed: the sources need a deb-src entry (JOULE_AARCH64_SOURCES)"; }
  local tarball; tarball="$(ls "$dl"/trilinos_*.orig.tar.*)" || die "apt-get source fetched no trilinos_*.orig.tar.* (log: $dl/source.log)"
  log "unpacking packages/kokkos and packages/kokkos-kernels from $(basename "$tarball")"
  tar -xf "$tarball" -C "$dl" --wildcards '*/packages/kokkos/*' '*/packages/kokkos-kernels/*' ||
    die "unpacking $(basename "$tarball") failed"
  mv "$dl"/Trilinos-*/packages/kokkos "$dl"/Trilinos-*/packages/kokkos-kernels "$srcdir.partial/"
  rm -rf "$dl"  # the 170 MB tarball: only the two packages are kept
  cache_commit "$srcdir" "$src_stamp" "$(basename "$tarball")" || die "could not rename $srcdir.partial to $srcdir"
  cache_report "$src_label" "$cache_state" "$(basename "$tarball") in $((SECONDS - t0)) s"
}
kokkos_label="Kokkos 3.4.1 (aarch64)"
kokkos_stamp=.joule-complete
kokkos_recipe() {
  echo "joule-aarch64-kokkos v$kokkos_recipe_version: $(cat "$srcdir/$src_stamp" 2>/dev/null || echo trilinos)," \
       "openmp+serial, kokkos-kernels blas=openblas-openmp, toolchain $(md5sum <"$toolchain" | cut -c1-16)," \
       "cpu '${JOULE_AARCH64_CPU_FLAGS:-default}' contract '${JOULE_AARCH64_FP_CONTRACT:-fast}'," \
       "sysroot $(head -1 "$sysroot/$sysroot_stamp" 2>/dev/null)"
}
kokkos_ready() { cache_is_current "$prefix" "$kokkos_stamp" "$(kokkos_recipe)"; }
# The toolchain file reads these from the environment too: CMake's sub-projects (FortranCInterface,
# try_compile) do not see the cache.
export JOULE_AARCH64_SYSROOT="$sysroot" JOULE_AARCH64_PREFIXES="$prefix"
cross_args() {  # cross_args [PREFIXES]: what every cross configure gets (the prefixes: $prefix)
  printf '%s\n' -DCMAKE_TOOLCHAIN_FILE="$toolchain" -DJOULE_AARCH64_SYSROOT="$sysroot" \
    -DJOULE_AARCH64_PREFIXES="${1:-$prefix}" -DCMAKE_BUILD_TYPE=Release
  [ -n "${JOULE_AARCH64_CPU_FLAGS:-}" ] && printf '%s\n' -DJOULE_AARCH64_CPU_FLAGS="$JOULE_AARCH64_CPU_FLAGS"
  [ -n "${JOULE_AARCH64_FP_CONTRACT:-}" ] && printf '%s\n' -DJOULE_AARCH64_FP_CONTRACT="$JOULE_AARCH64_FP_CONTRACT"
  [ -n "${JOULE_AARCH64_QEMU_CPU:-}" ] && printf '%s\n' -DJOULE_AARCH64_QEMU_CPU="$JOULE_AARCH64_QEMU_CPU"
  return 0
}
phase_kokkos() {
  require_sysroot
  trilinos_sources  # current: a look at its stamp, no network
  local t0=$SECONDS recipe; recipe="$(kokkos_recipe)"
  if ! cache_begin "$kokkos_label" "$prefix" "$kokkos_stamp" "$recipe"; then
    log "Kokkos + Kokkos-Kernels (aarch64) up to date: $prefix"
    return 0
  fi
  host_tools 0
  rm -f "$prefix".failed-*.log
  # Built and installed inside $prefix.partial: the build folders in .build, the install under
  # .stage (DESTDIR) for the prefix $prefix, so that Kokkos' installed CMake files name the prefix
  # the cache will have; the staged tree is moved up when both are installed.
  local partial="$prefix.partial"
  local stage="$partial/.stage"
  local staged="$stage$prefix"
  work="$partial/.build"  # global: report() removes it after a failure
  mkdir -p "$work"
  # Kokkos-Kernels finds the staged Kokkos: the toolchain searches for packages only below the
  # sysroot and JOULE_AARCH64_PREFIXES, so the staged prefix is the one it names here.
  local args; mapfile -t args < <(cross_args "$staged")
  local blas_dir="$sysroot/usr/lib/aarch64-linux-gnu/openblas-openmp"
  kbuild() {  # kbuild NAME SRC OPTIONS...: configure, build, install; the log kept on failure
    local name="$1" src="$2" t0=$SECONDS; shift 2
    JOULE_AARCH64_PREFIXES="$staged" cmake -S "$src" -B "$work/build-$name" "${args[@]}" -DCMAKE_INSTALL_PREFIX="$prefix" \
      -DCMAKE_CXX_STANDARD=17 -DCMAKE_CXX_EXTENSIONS=OFF -DCMAKE_POSITION_INDEPENDENT_CODE=ON "$@" \
      >"$work/$name.log" 2>&1 || { tail -40 "$work/$name.log" >&2; cp "$work/$name.log" "$prefix.failed-$name.log"; die "configuring $name failed (log: $prefix.failed-$name.log)"; }
    JOULE_AARCH64_PREFIXES="$staged" cmake --build "$work/build-$name" -j "$jobs" >>"$work/$name.log" 2>&1 || {
      grep -m 20 -E 'error' "$work/$name.log" >&2 || tail -40 "$work/$name.log" >&2
      cp "$work/$name.log" "$prefix.failed-$name.log"
      die "building $name failed (log: $prefix.failed-$name.log)"; }
    DESTDIR="$stage" cmake --install "$work/build-$name" >>"$work/$name.log" 2>&1 || {
      tail -40 "$work/$name.log" >&2; cp "$work/$name.log" "$prefix.failed-$name.log"
      die "installing $name failed (log: $prefix.failed-$name.log)"; }
    log "$name (aarch64) installed in $((SECONDS - t0)) s"
  }
  log "building Kokkos 3.4.1 (OpenMP + Serial, aarch64) for $prefix (in $partial) with $jobs jobs"
  kbuild kokkos "$srcdir/kokkos" -DKokkos_ENABLE_OPENMP=ON -DKokkos_ENABLE_SERIAL=ON -DKokkos_ENABLE_TESTS=OFF
  log "building Kokkos-Kernels (BLAS: the sysroot's OpenBLAS, OpenMP build; no ETI) for $prefix"
  # F77_BLAS_MANGLE: OpenBLAS's Fortran symbols, lower case with one underscore (GNU Fortran's; what
  # Kokkos-Kernels finds on the host). Given, so that Kokkos-Kernels does not enable Fortran to find
  # out: it would take this machine's gfortran (there is no cross gfortran here).
  kbuild kokkos-kernels "$srcdir/kokkos-kernels" -DKokkos_ROOT="$staged" \
    -DKokkosKernels_ENABLE_TPL_BLAS=ON -DBLAS_LIBRARIES=openblas -DBLAS_LIBRARY_DIRS="$blas_dir" \
    -DLAPACK_LIBRARIES=openblas -DLAPACK_LIBRARY_DIRS="$blas_dir" \
    -DF77_BLAS_MANGLE="(name,NAME) name ## _" "${kokkos_kernels_common_options[@]}"
  rm -rf "$work"; work=""
  [ -d "$staged" ] || die "the install left nothing in $staged"
  find "$staged" -mindepth 1 -maxdepth 1 -exec mv -t "$partial" {} +
  rm -rf "$stage"
  # Kokkos-Kernels records where it found Kokkos (find_dependency(Kokkos HINTS <staged>/lib/cmake/
  # Kokkos) in KokkosKernelsConfig.cmake): named by the prefix it will have. No installed file may
  # name the staging folder after that: it is gone once the cache is renamed.
  local file
  while IFS= read -r -d '' file; do
    FROM="$staged" TO="$prefix" perl -pi -e 's/\Q$ENV{FROM}\E/$ENV{TO}/g' "$file"
  done < <(grep -rlZF --include='*.cmake' "$staged" "$partial" || true)
  file="$(grep -rlIF "$partial" "$partial" | head -1 || true)"
  [ -z "$file" ] || die "$file names the staging folder $partial, which is renamed to $prefix (grep -nF '$partial' '$file'; a package recording its build-time path elsewhere: teach this step to rewrite it); nothing was installed"
  file="$(find "$partial" -type l -lname "*$partial*" -print -quit)"
  [ -z "$file" ] || die "$file -> $(readlink "$file"): a link into the staging folder $partial, which is renamed to $prefix (teach this step to rewrite it); nothing was installed"
  cache_commit "$prefix" "$kokkos_stamp" "$recipe" || die "could not rename $partial to $prefix"
  log "Kokkos + Kokkos-Kernels (aarch64) ready: $prefix"
  cache_report "$kokkos_label" "$cache_state" "built in $((SECONDS - t0)) s"
}
require_kokkos() {
  [ -f "$srcdir/$src_stamp" ] && kokkos_ready || die "no Kokkos (aarch64) for this sysroot and toolchain at $prefix: run '$0 kokkos' first"
}

# --- Phase: build --------------------------------------------------------------------------------------
phase_build() {
  require_sysroot; require_kokkos; host_tools 1  # qemu too: the toolchain names it as the tests' emulator
  local args; mapfile -t args < <(cross_args)
  # The compile flags enter a build folder's cache once, at its first configure: a folder made for
  # another recipe (flags, toolchain, sysroot, Kokkos) is started afresh.
  if [ -d "$build" ] && [ "$(cat "$build/.joule-recipe" 2>/dev/null)" != "$(kokkos_recipe)" ]; then
    log "the toolchain, flags or Kokkos changed since $build was configured: starting it afresh"
    rm -rf "$build"
  fi
  mkdir -p "$build"; kokkos_recipe >"$build/.joule-recipe"
  log "configuring joule for aarch64 in $build"
  # No MPI (no arm64 MPI in the sysroot); joule's code for the toolchain's CPU, not this machine's;
  # not Kokkos' own example programs (energy tool tests, not run here).
  cmake -S "$repo" -B "$build" "${args[@]}" -DKokkos_ROOT="$prefix" -DJOULE_WITH_MPI=OFF \
    -DJOULE_NATIVE_ARCH=OFF -DJOULE_FOREIGN_KOKKOS_PROGRAMS=OFF \
    -DCMAKE_CXX_COMPILER_LAUNCHER="${JOULE_AARCH64_LAUNCHER:-}" -DCMAKE_C_COMPILER_LAUNCHER="${JOULE_AARCH64_LAUNCHER:-}" \
    >"$build/joule-configure.log" 2>&1 || { tail -40 "$build/joule-configure.log" >&2; die "configuring joule failed (log: $build/joule-configure.log)"; }
  log "building $tests with $jobs jobs"
  # shellcheck disable=SC2086
  cmake --build "$build" -j "$jobs" --target $tests >"$build/joule-build.log" 2>&1 || {
    grep -m 20 -E 'error|Error' "$build/joule-build.log" >&2 || tail -40 "$build/joule-build.log" >&2
    die "building joule's tests for aarch64 failed (log: $build/joule-build.log)"; }
  local exe
  for exe in $tests; do  # ELF e_machine 183 (0xb7): AArch64
    [ "$(od -An -tu2 -j18 -N2 "$build/tests/$exe" 2>/dev/null | tr -d ' ')" = 183 ] ||
      die "$build/tests/$exe is not an aarch64 executable"
  done
}

# --- Phase: test ---------------------------------------------------------------------------------------
phase_test() {
  require_sysroot; host_tools 1
  local exe
  for exe in $tests; do [ -x "$build/tests/$exe" ] || die "$build/tests/$exe is not built: run '$0 build' first"; done
  # ctest registers the test cases of every test executable of the build (listed through qemu at
  # test time, cmake/detail/catch_list_tests.cmake) and the scripts; only these executables are
  # built. The tests to run: those that start one of them, directly or through the emulator (the
  # Catch2 cases, and offload_host_worker; not scripts given one as an argument), and their
  # listing failures, less those matching $skip; picked by number from ctest's own JSON (ctest
  # numbers the tests -R/-E leave, so -I does not combine with them).
  local numbers
  numbers="$(ctest --test-dir "$build" --show-only=json-v1 2>/dev/null | python3 -c '
import json, os, re, sys
targets = sys.argv[2].split()
skip = re.compile(sys.argv[3]) if sys.argv[3] else None
exes = {os.path.join(sys.argv[1], "tests", t) for t in targets}
names = {t + ": test discovery failed" for t in targets}
def runs_one(command):
    if not command: return False
    if command[0] in exes: return True
    return os.path.basename(command[0]).startswith("qemu-aarch64") and bool(exes & set(command[1:]))
tests = json.load(sys.stdin)["tests"]
print(",".join(str(i + 1) for i, t in enumerate(tests)
               if (t["name"] in names or runs_one(t.get("command"))) and not (skip and skip.search(t["name"]))))
' "$build" "$tests" "$skip")" || die "reading the tests of $build failed (ctest --show-only=json-v1)"
  [ -n "$numbers" ] || die "ctest lists no test of $tests in $build"
  log "running the $(tr ',' '\n' <<<"$numbers" | wc -l) tests of $tests${skip:+ but those matching $skip} under qemu-aarch64 (ctest -j $jobs)"
  ctest --test-dir "$build" -I "0,0,0,$numbers" --output-on-failure --no-tests=error -j "$jobs" \
    --timeout "${JOULE_AARCH64_TEST_TIMEOUT:-600}"
}

# --- Main ----------------------------------------------------------------------------------------------
phases=("$@")
[ "${#phases[@]}" -gt 0 ] || phases=(all)
run=()
for p in "${phases[@]}"; do
  case "$p" in
    all) run+=(sysroot kokkos build test) ;;
    sysroot|kokkos|build|test) run+=("$p") ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) die "unknown phase '$p': sysroot, kokkos, build, test or all" ;;
  esac
done
times=()
current=""
work=""
report() {  # on exit, also after a failure: each phase's wall time
  local rc=$?
  [ -n "$work" ] && rm -rf "$work"
  [ -n "$current" ] && times+=("$(printf '%-8s %5d s  (failed, status %d)' "$current" $((SECONDS - phase_t0)) "$rc")")
  if [ "${#times[@]}" -gt 0 ]; then
    log "phase times:"
    printf '  %s\n' "${times[@]}" >&2
  fi
}
trap report EXIT
for p in "${run[@]}"; do
  phase_t0=$SECONDS current="$p"
  log "== $p =="
  "phase_$p"
  times+=("$(printf '%-8s %5d s' "$p" $((SECONDS - phase_t0)))")
  log "== $p: $((SECONDS - phase_t0)) s =="
  current=""
done
