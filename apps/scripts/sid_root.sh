#!/usr/bin/env bash
# joule's suite at run time against a newer Kokkos than Debian 12 has, inside a Debian sid root made
# with debootstrap from Debian's archive (issue 52; docs/testing.md, "Newer Kokkos in a sid root").
#   sid_root.sh [PHASE...]   phases, in this order for `all` (the default):
#     root   the root in the cache: a copy of the base root (`debootstrap --variant=minbase
#            trixie`, its sources pointed at sid, the build packages both variants share), then the
#            variant's Kokkos installed; each remade when its package list or this recipe
#            changes, otherwise no network is used
#     build  joule built inside the root with its toolchain (the checkout bind-mounted at /joule,
#            the build folder build-sid-<variant> in the checkout)
#     test   the whole suite run by ctest inside the root
#     run    (not in `all`) the command JOULE_SID_RUN run by bash in /joule inside the root, e.g.
#            JOULE_SID_RUN='build-sid-kokkos45/apps/joule info' sid_root.sh run
#   Each phase prints its wall time; `all` ends with a table of them.
# Variants (JOULE_SID_VARIANT):
#   kokkos45  trilinos 16.1's Kokkos 4.5.1 (Serial device only) + Kokkos-Kernels 4.5, g++ 16 (default)
#   kokkos52  Debian's Kokkos 5.2.2 (OpenMP), no Kokkos-Kernels: joule's GEMMs call OpenBLAS directly
# Settings:
#   JOULE_SID_CACHE   where the roots live (~/.cache/joule/sid); each variant has its own, and
#                     base/ is what both are copied from (made once: one debootstrap and one install
#                     of the shared packages, about 200 s of a cold CI run, for two roots)
#   JOULE_SID_MIRROR  the Debian mirror (default: the host's first deb.debian.org-style URI, else
#                     http://deb.debian.org/debian)
#   JOULE_SID_REFRESH=1  re-resolve the packages (a newer sid) even if the root is current
#   JOBS              parallel compile jobs and ctest's -j (default: nproc)
#   JOULE_SID_CTEST_ARGS  extra ctest arguments (e.g. -R attention)
#   JOULE_SID_MOUNTS  (for tests only) the mount table read for mounts left below a root
#                     (default /proc/self/mounts)
# Needs: root (debootstrap, chroot and bind mounts), debootstrap (installed from Debian if missing).
# Every mount this script makes is undone when it ends, also on failure or interruption; one left by
# a run that could not undo it (SIGKILL) is undone before any phase touches the root, said in one
# line. A root with anything still mounted below it is never removed. One run per variant at a time
# (a lock, $JOULE_SID_CACHE/<variant>.lock; a second run waits), and one at a time makes or copies
# the base root (base.lock, taken while the variant's is held, never the other way round).
# An interrupted root (issue 66): the root is made whole or not at all. It is made in
# <variant>.partial beside it (a copy of the base root, then the packages), its stamp (.joule-stamp,
# the recipe) written last, and renamed to <variant> only then. The base root is made the same way
# (base.partial: debootstrap, then the shared packages), and heals the same way. The next run,
# finding (for <variant> read base too):
#   - <variant>.partial whose debootstrap had finished (an interrupted apt-get install: "dpkg was
#     interrupted"): repairs it, `dpkg --configure -a` then the install again; if that fails, removes
#     it and makes it again from debootstrap;
#   - <variant>.partial whose debootstrap (or copy of the base) had not finished: removes it and
#     makes it again;
#   - <variant> made by another recipe (package list changed, or JOULE_SID_REFRESH=1): moves it to
#     <variant>.partial (stamp removed), installs there, stamps it and renames it back, so that its
#     compiler cache (/var/cache/ccache) is kept;
#   - <variant> without a stamp: handled as an unfinished <variant>.partial (repaired, else remade).
# Each says so in one line, and what the step found goes to JOULE_CACHE_REPORT (.ci/run's table).
set -euo pipefail

log() { printf '[joule sid] %s\n' "$*" >&2; }
die() { printf '[joule sid] ERROR: %s\n' "$*" >&2; exit 1; }

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
# shellcheck source=detail/cache_step.sh
. "$repo/apps/scripts/detail/cache_step.sh"
variant="${JOULE_SID_VARIANT:-kokkos45}"
cache="${JOULE_SID_CACHE:-$HOME/.cache/joule/sid}"
# Written into $partial once debootstrap has finished: an unfinished root with it can be repaired
# (its packages installed again), one without it is removed and made again.
debootstrapped=.joule-debootstrapped
mounts_table="${JOULE_SID_MOUNTS:-/proc/self/mounts}"
jobs="${JOBS:-$(nproc)}"
build_dir="build-sid-$variant"

# The root's packages: joule's build and test dependencies (as install-deps.sh installs them on the
# host), in the base root, and the variant's Kokkos.
common=(g++ cmake make pkg-config libopenmpi-dev openmpi-bin libhdf5-dev catch2
        libopenblas-dev libopenblas-openmp-dev nlohmann-json3-dev libcli11-dev libfmt-dev libstb-dev
        python3 python3-numpy python3-h5py python3-pil python3-matplotlib procps file ccache)
case "$variant" in
  kokkos45 | kokkos52) ;;
  *) die "unknown JOULE_SID_VARIANT '$variant' (allowed: kokkos45, kokkos52)" ;;
esac
# Bump when the way the root is made changes, so that it is remade.
recipe_version=3

# target NAME: the root the next steps make or use: the variant's, or base (the shared part). Sets
# root, partial (where it is made, renamed to $root when whole), its packages, stamp and logs.
target() {
  name="$1" root="$cache/$1" partial="$cache/$1.partial" apt_log="$cache/$1.apt.log"
  case "$1" in
    base) packages=("${common[@]}") ;;
    kokkos45) packages=("${common[@]}" libtrilinos-kokkos-dev libtrilinos-kokkos-kernels-dev) ;;
    kokkos52) packages=("${common[@]}" libkokkos-dev) ;;
  esac
  stamp_text="recipe $recipe_version; packages ${packages[*]}"
  at="$root"
}
target "$variant"

# --- Checks -------------------------------------------------------------------------------------------
need_root_tools() {
  [ "$(id -u)" = 0 ] || die "a sid root needs root: debootstrap, chroot and bind mounts (run as root, e.g. sudo make test-kokkos45)"
  command -v chroot >/dev/null || die "chroot is missing (coreutils)"
  if ! command -v debootstrap >/dev/null; then
    command -v apt-get >/dev/null || die "debootstrap is missing, and there is no apt-get to install it"
    log "installing debootstrap from Debian"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends debootstrap >/dev/null ||
      die "could not install debootstrap (apt-get install debootstrap)"
  fi
}

mirror() {
  if [ -n "${JOULE_SID_MIRROR:-}" ]; then echo "$JOULE_SID_MIRROR"; return; fi
  local uri
  uri="$(grep -hsE '^(URIs:|deb )' /etc/apt/sources.list.d/*.sources /etc/apt/sources.list 2>/dev/null |
         grep -v security | head -1 | sed -E 's/^URIs:[[:space:]]*//; s/^deb[[:space:]]+(\[[^]]*\][[:space:]]+)?//; s/[[:space:]].*$//')"
  echo "${uri:-http://deb.debian.org/debian}"
}

# --- Mounts, always undone ----------------------------------------------------------------------------
# at: the root the mounts and in_root work on ($root, or $partial while the root is made).
mounted=()
unmount_all() {
  local i
  for ((i = ${#mounted[@]} - 1; i >= 0; i--)); do
    umount -R "${mounted[$i]}" 2>/dev/null || umount -R -l "${mounted[$i]}" 2>/dev/null ||
      printf '[joule sid] WARNING: could not unmount %s\n' "${mounted[$i]}" >&2
  done
  mounted=()
}
trap unmount_all EXIT
trap 'unmount_all; exit 130' INT
trap 'unmount_all; exit 143' TERM
trap 'unmount_all; exit 129' HUP

# mounts_below DIR: the mount points strictly below DIR in the mount table, deepest first (the
# table escapes a space as \040 and a backslash as \134; printed decoded).
mounts_below() {
  local d
  d="$(readlink -m "$1")/"
  d="${d//\\/\\134}"; d="${d// /\\040}"
  [ -r "$mounts_table" ] || return 0
  awk -v d="$d" 'index($2, d) == 1 { n = gsub("/", "/", $2); print n "\t" $2 }' "$mounts_table" |
    sort -rn -k1,1 | cut -f2- | uniq | while IFS= read -r m; do printf '%b\n' "$m"; done
}

# clear_stale_mounts: undo what a run that could not clean up (SIGKILL) left mounted below $root or
# $partial, before this run touches them: the root's own mounts would be mounted twice, and a root
# cannot be removed safely with the host's /dev or the checkout bound below it. The lock (below)
# makes sure no other run of this variant (or of the base root) is using them.
clear_stale_mounts() {
  local d m left
  local -a found
  for d in "$root" "$partial"; do
    mapfile -t found < <(mounts_below "$d")
    [ "${#found[@]}" -gt 0 ] || continue
    log "undoing ${#found[@]} mount(s) left below $d by an interrupted run: ${found[*]}"
    for m in "${found[@]}"; do
      umount -R "$m" 2>/dev/null || umount -R -l "$m" 2>/dev/null || true
    done
    left="$(mounts_below "$d" | head -1)"
    [ -z "$left" ] || die "$left is still mounted below $d and could not be unmounted: run 'umount -R -l $left' as root, then run again"
  done
}

# remove_root DIR: remove a root (or its partial), never with anything mounted below it (the host's
# /dev, /sys or the checkout would be deleted through it): checked here in the table this script
# reads, again by cache_remove in /proc/self/mounts, and rm stays on DIR's file system.
remove_root() {
  local left
  left="$(mounts_below "$1" | head -1)"
  [ -z "$left" ] || die "$left is mounted below $1: not removing it (run 'umount -R -l $left' as root, then run again)"
  cache_remove "$1" || die "could not remove $1 (see above)"
}

mount_into_root() {  # mount_into_root: /proc, /sys, /dev (mpirun needs /dev/shm), the checkout at /joule
  mkdir -p "$at/proc" "$at/sys" "$at/dev" "$at/joule" || return 1
  # Each is recorded as soon as it is made, so that unmount_all undoes it whatever fails next.
  mount -t proc proc "$at/proc" || return 1
  mounted+=("$at/proc")
  mount --rbind /sys "$at/sys" || return 1
  mounted+=("$at/sys")
  mount --make-rslave "$at/sys" || return 1
  mount --rbind /dev "$at/dev" || return 1
  mounted+=("$at/dev")
  mount --make-rslave "$at/dev" || return 1
  mount --bind "$repo" "$at/joule" || return 1
  mounted+=("$at/joule")
}

# in_root [VAR=VALUE...] COMMAND...: run inside the root, as root, with a plain environment and
# these variables (env -i drops the caller's). The root's OpenMPI 5 loads UCX, whose memory hooks
# patch code at every process start (0.4 s of 1 s for `joule --help` on a 2-core VM, where the
# host's OpenMPI 4 takes 0.02 s): the suite starts joule hundreds of times, so the hooks are off
# here (UCX_MEM_MMAP_HOOK_MODE=none; joule uses no UCX transport).
in_root() {
  chroot "$at" /usr/bin/env -i HOME=/root PATH=/usr/local/bin:/usr/bin:/bin LANG=C.UTF-8 \
    OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 UCX_MEM_MMAP_HOOK_MODE=none "$@"
}

# --- Phases -------------------------------------------------------------------------------------------
# install_packages REPAIR URL: the sources, the packages and the fixes below, in $partial (after
# debootstrap); REPAIR=1 first finishes what an interrupted dpkg left (`dpkg --configure -a`) and
# lets apt mend the rest (--fix-broken). Returns 0 when done, 2 when apt-get update failed (the
# network or the mirror: the root itself may be fine), 1 on any other failure; `why` says what failed.
# The mounts are undone in every case.
install_packages() {
  local repair="$1" url="$2" rc=0
  at="$partial" why=""
  mount_into_root && install_steps "$repair" "$url" || rc=$?
  [ "$rc" = 0 ] || [ -n "$why" ] || why="could not mount /proc, /sys, /dev and the checkout into $partial"
  unmount_all
  return $rc
}
install_steps() {
  local repair="$1" url="$2" lib fix=()
  # sid's Release file may be past its Valid-Until date on a mirror's snapshot: apt is told to accept it.
  { printf 'deb %s sid main\n' "$url" >"$partial/etc/apt/sources.list" &&
    rm -f "$partial/etc/apt/sources.list.d/"* &&
    printf 'Acquire::Check-Valid-Until "false";\nAPT::Install-Recommends "false";\n' >"$partial/etc/apt/apt.conf.d/90joule"; } ||
    { why="could not write apt's sources into $partial"; return 1; }
  cp /etc/resolv.conf "$partial/etc/resolv.conf" 2>/dev/null || true
  if [ "$repair" = 1 ]; then
    # An apt-get killed while dpkg worked leaves packages half set up, and apt refuses to run
    # ("dpkg was interrupted") until they are configured. If that fails too, apt's --fix-broken may
    # still mend it; the caller remakes the root when the install then fails.
    in_root DEBIAN_FRONTEND=noninteractive dpkg --configure -a >>"$apt_log" 2>&1 ||
      log "dpkg --configure -a failed in $partial (log: $apt_log); trying apt-get install --fix-broken"
    fix=(--fix-broken)
  fi
  log "installing into the root: ${packages[*]}"
  in_root apt-get update -q >>"$apt_log" 2>&1 ||
    { why="apt-get update in the root failed (is $url reachable? log: $apt_log)"; return 2; }
  in_root DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${fix[@]}" "${packages[@]}" >>"$apt_log" 2>&1 ||
    { why="apt-get install in the root failed (log: $apt_log)"; return 1; }
  in_root apt-get clean || { why="apt-get clean in the root failed"; return 1; }
  # One OpenBLAS: apt may leave the run-time links (.so.3, .so.0) on the pthread build while the
  # link-time ones (.so) name the OpenMP build, whose liblapack then misses OpenMP-only symbols.
  for lib in libblas.so.3 liblapack.so.3 libopenblas.so.0; do
    in_root update-alternatives --quiet --set "$lib-x86_64-linux-gnu" "/usr/lib/x86_64-linux-gnu/openblas-openmp/$lib" ||
      { why="could not point $lib at OpenBLAS's OpenMP build in the root"; return 1; }
  done
  # Debian's libkokkos-dev 5.2.2 names two static libraries in its CMake targets that it does not
  # ship (libkokkosalgorithms.a, libkokkossimd.a), and find_package(Kokkos) stops on a missing
  # file. In Kokkos 5 both hold only a placeholder unit (algorithms and SIMD are header-only), so
  # each missing archive is made empty, and said.
  in_root bash -c 'for t in /usr/lib/*/cmake/Kokkos/KokkosTargets-*.cmake; do
      [ -f "$t" ] || continue
      for f in $(grep -o "\${_IMPORT_PREFIX}/lib/[^\"]*\.a" "$t" | sort -u); do
        f="/usr${f#\$\{_IMPORT_PREFIX\}}"
        [ -e "$f" ] && continue
        echo "[joule sid] $f: named by $(basename "$t") but not shipped; made an empty archive" >&2
        ar rc "$f"
      done
    done' || { why="could not mend the Kokkos CMake targets' missing archives in the root"; return 1; }
}

# start_partial URL: $partial begun, marked as debootstrapped when done: for base a fresh minimal
# trixie; for a variant a copy of the base root (made first if it is not whole and current), which
# has every package but the variant's Kokkos.
start_partial() {
  local url="$1" mine="$name"
  if [ "$name" = base ]; then
    log "debootstrap --variant=minbase trixie $partial from $url (a few minutes)"
    mkdir -p "$partial"
    debootstrap --variant=minbase trixie "$partial" "$url" >"$cache/base.debootstrap.log" 2>&1 ||
      die "debootstrap failed (is $url reachable? log: $cache/base.debootstrap.log)"
    : >"$partial/$debootstrapped"
    return
  fi
  # The base root's lock, held from its check to the end of the copy: no other run changes it meanwhile.
  exec 8>>"$cache/base.lock"
  if ! flock -n 8; then
    log "another sid_root.sh run is making the base root: waiting for it (lock $cache/base.lock)"
    flock 8 || die "could not lock $cache/base.lock"
  fi
  target base
  make_root
  target "$mine"
  log "copying the base root $cache/base to $partial (then only the variant's packages are installed)"
  mkdir -p "$partial" && cp -a "$cache/base/." "$partial/" && rm -f "$partial/.joule-stamp" ||
    die "could not copy the base root $cache/base to $partial (is the disk full?)"
  exec 8>&-
  : >"$partial/$debootstrapped"
}

phase_root() {
  need_root_tools
  make_root
}
# make_root: the root $name whole and current (made, repaired or left as it is), said and reported.
make_root() {
  clear_stale_mounts
  local label="sid root $name" url state=cold detail rc=0 from="debootstrap"
  [ "$name" = base ] || from="the base root"
  detail="made from $from"
  if [ "${JOULE_SID_REFRESH:-0}" != 1 ] && cache_is_current "$root" .joule-stamp "$stamp_text"; then
    log "root $root is current"
    cache_report "$label" warm
    return
  fi
  url="$(mirror)"
  : >"$apt_log"
  if [ -e "$root" ] || [ -L "$root" ]; then
    # A whole root ($partial beside it can only be an older leftover) or one left without a stamp.
    if [ -e "$partial" ] || [ -L "$partial" ]; then
      log "removing $partial, left by an interrupted run, as $root is there"
      remove_root "$partial"
    fi
    if [ -f "$root/.joule-stamp" ]; then
      # Installed again in place of a remake, so that the root's compiler cache is kept; moved aside
      # meanwhile, so that an interruption cannot leave a stamped root with half its packages.
      if [ "${JOULE_SID_REFRESH:-0}" = 1 ]; then
        log "JOULE_SID_REFRESH=1: installing the packages again in $root (moved to $partial meanwhile; its compiler cache is kept)"
        detail="packages refreshed, compiler cache kept"
      else
        log "$root was made by another recipe (package list or recipe_version changed): installing the packages again (moved to $partial meanwhile; its compiler cache is kept)"
        detail="recipe changed, packages installed again, compiler cache kept"
      fi
    else
      log "$root has no stamp (an install was interrupted): repairing it as an unfinished root"
      state=repaired
    fi
    rm -f "$root/.joule-stamp"
    mv -T "$root" "$partial" || die "could not move $root to $partial"
    # A root that was renamed into place had finished its debootstrap.
    if [ -x "$partial/usr/bin/apt-get" ]; then : >"$partial/$debootstrapped"; fi
  elif [ -e "$partial" ] || [ -L "$partial" ]; then
    state=repaired
  fi
  # $partial now holds whatever is to be finished: a debootstrapped root (repaired, or the packages
  # installed again when its recipe changed), or an unfinished debootstrap (removed); or is absent.
  local installed=0
  if [ -f "$partial/$debootstrapped" ] && [ "$state" = repaired ]; then
    log "repairing $partial, left unfinished by an interrupted run: dpkg --configure -a, then the install again"
    install_packages 1 "$url" || rc=$?
    case "$rc" in
      0) installed=1 detail="dpkg repaired" ;;
      2) die "$why; $partial is kept, for the next run to repair" ;;
      *) log "the repair failed ($why): removing $partial and making it again from $from"
         remove_root "$partial"
         detail="remade after a failed repair" ;;
    esac
  elif [ -e "$partial" ] && [ ! -f "$partial/$debootstrapped" ]; then
    log "removing $partial, left by an interrupted $([ "$name" = base ] && echo debootstrap || echo "copy of the base root"): making it again"
    remove_root "$partial"
    state=repaired detail="remade after an interrupted $([ "$name" = base ] && echo debootstrap || echo copy)"
  fi
  [ -e "$partial" ] || start_partial "$url"
  if [ "$installed" = 0 ]; then install_packages 0 "$url" || die "$why"; fi
  # The stamp last, then the rename: $root is whole or not there.
  cache_commit "$root" .joule-stamp "$stamp_text" || die "could not stamp $partial and rename it to $root"
  at="$root"
  log "root $root is whole ($detail)"
  cache_report "$label" "$state" "$detail"
}

# The roots' builds are unity builds (CMake's batches of 8 units): they compile the same sources
# against heavy headers (Kokkos 4.5 and 5.x, C++20), which a unity build reads once per batch instead
# of once per unit: about a fifth of a cold build's CPU saved (docs/testing.md, "Newer Kokkos in a
# sid root"). Their compiler cache still hits, because the checkout is always at /joule (a
# unity file names its units by absolute path, which is why the host builds are not unity builds).
# A unit that clashes with another in its batch (two helpers of one name in anonymous namespaces)
# fails here first: give the helper a name of its own.
unity_args="-DCMAKE_UNITY_BUILD=ON -DCMAKE_UNITY_BUILD_BATCH_SIZE=8"
cmake_args() {
  case "$variant" in
    # C++20, as a Kokkos 5 build must be: this build also stands for the compile check's g++ pass
    # against Kokkos 4.5 (JOULE_COMPILE_CHECK_HOST45=0).
    kokkos45) echo "-DKokkos_ROOT=/usr -DCMAKE_CXX_STANDARD=20" ;;
    kokkos52) echo "-DKokkos_ROOT=/usr -DCMAKE_CXX_STANDARD=20" ;;  # Kokkos 5 requires C++20
  esac
}

# in_checkout TEXT: bash runs TEXT in /joule inside the root, the mounts made and undone around it;
# returns its status.
in_checkout() {
  need_root_tools
  clear_stale_mounts
  at="$root"
  mount_into_root || die "could not mount /proc, /sys, /dev and the checkout into $root"
  local rc=0
  # Without the lock's descriptor: a process the suite leaves running must not hold up later runs.
  in_root bash -c "cd /joule && $1" 9>&- || rc=$?
  unmount_all
  return $rc
}

# The root's compilations go through ccache, whose cache lives in the root (/var/cache/ccache): a
# fresh clone of a later commit compiles only what changed (the checkout is always at /joule, so
# the paths match). PCH-using units need the sloppiness below to be cached.
ccache_env="CCACHE_DIR=/var/cache/ccache CCACHE_MAXSIZE=2G CCACHE_SLOPPINESS=pch_defines,time_macros,include_file_mtime,include_file_ctime"
phase_build() {
  [ -f "$root/.joule-stamp" ] || die "no root at $root yet: run the root phase first (sid_root.sh root)"
  rm -f "$repo/$build_dir/ccache-stats.txt"
  in_checkout "export $ccache_env && ccache -z >/dev/null && cmake -S . -B $build_dir -DCMAKE_BUILD_TYPE=Release -DCMAKE_CXX_COMPILER_LAUNCHER=ccache $unity_args $(cmake_args) && cmake --build $build_dir -j $jobs && ccache --print-stats > $build_dir/ccache-stats.txt"
  report_compiler_cache "$repo/$build_dir/ccache-stats.txt"
}

# report_compiler_cache FILE: how much of this build the root's ccache gave (FILE: `ccache
# --print-stats` after the build's `ccache -z`, one "counter<TAB>value" a line), said and reported.
report_compiler_cache() {
  local counts hits misses
  [ -s "$1" ] || { log "no compiler cache statistics in $1 (ccache --print-stats): not reported"; return 0; }
  counts="$(ccache_counts <"$1")"
  read -r hits misses <<<"${counts:-0 0}"
  log "compiler cache: $hits of $((hits + misses)) compilations from the cache"
  cache_report_compilations "sid $variant compiler cache" "$hits" "$misses"
}

phase_test() {
  [ -d "$repo/$build_dir" ] || die "no build at $repo/$build_dir: run the build phase first"
  in_checkout "ctest --test-dir $build_dir --output-on-failure --no-tests=error -j $jobs ${JOULE_SID_CTEST_ARGS:-}"
}

phase_run() {
  [ -n "${JOULE_SID_RUN:-}" ] || die "the run phase runs JOULE_SID_RUN: give it a command"
  in_checkout "$JOULE_SID_RUN"
}

if [ "${1:-}" = --help ] || [ "${1:-}" = -h ]; then
  sed -n '2,/^set -euo pipefail/p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//'
  exit 0
fi
phases=("$@")
[ "${#phases[@]}" = 0 ] && phases=(all)
[ "${phases[*]}" = all ] && phases=(root build test)
for p in "${phases[@]}"; do
  case "$p" in root | build | test | run) ;; *) die "unknown phase '$p' (allowed: root, build, test, run, all)" ;; esac
done
# One run per variant: a second one would take the first's live mounts for stale ones and undo
# them, or remove the root it is making. The lock is held by this shell and what it starts (the
# file descriptor is inherited), so a run killed with its apt-get still going is waited for too.
mkdir -p "$cache" || die "could not make the cache folder $cache (JOULE_SID_CACHE)"
exec 9>>"$cache/$variant.lock"
if ! flock -n 9; then
  log "another sid_root.sh run of $variant is using $root: waiting for it (lock $cache/$variant.lock)"
  flock 9 || die "could not lock $cache/$variant.lock"
fi
names=() seconds=()
for p in "${phases[@]}"; do
  t0=$SECONDS
  log "phase $p ($variant)"
  "phase_$p"
  names+=("$p") seconds+=($((SECONDS - t0)))
  log "phase $p: $((SECONDS - t0)) s"
done
if [ "${#names[@]}" -gt 1 ]; then
  for i in "${!names[@]}"; do printf '[joule sid] %-6s %5d s\n' "${names[$i]}" "${seconds[$i]}" >&2; done
fi
