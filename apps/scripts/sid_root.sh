#!/usr/bin/env bash
# joule's suite at run time against a newer Kokkos than Debian 12 has, inside a Debian sid root made
# with debootstrap from Debian's archive (issue 52; docs/testing.md, "Newer Kokkos in a sid root").
#   sid_root.sh [PHASE...]   phases, in this order for `all` (the default):
#     root   the root in the cache: `debootstrap --variant=minbase trixie`, its sources pointed at
#            sid, joule's build packages installed (the variant's Kokkos among them); remade when
#            the package list or this recipe changes, otherwise no network is used
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
#   JOULE_SID_CACHE   where the roots live (~/.cache/joule/sid); each variant has its own
#   JOULE_SID_MIRROR  the Debian mirror (default: the host's first deb.debian.org-style URI, else
#                     http://deb.debian.org/debian)
#   JOULE_SID_REFRESH=1  re-resolve the packages (a newer sid) even if the root is current
#   JOBS              parallel compile jobs and ctest's -j (default: nproc)
#   JOULE_SID_CTEST_ARGS  extra ctest arguments (e.g. -R attention)
# Needs: root (debootstrap, chroot and bind mounts), debootstrap (installed from Debian if missing).
# Every mount this script makes is undone when it ends, also on failure or interruption.
set -euo pipefail

log() { printf '[joule sid] %s\n' "$*" >&2; }
die() { printf '[joule sid] ERROR: %s\n' "$*" >&2; exit 1; }

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
variant="${JOULE_SID_VARIANT:-kokkos45}"
cache="${JOULE_SID_CACHE:-$HOME/.cache/joule/sid}"
root="$cache/$variant"
jobs="${JOBS:-$(nproc)}"
build_dir="build-sid-$variant"

# The root's packages: joule's build and test dependencies (as install-deps.sh installs them on the
# host) and the variant's Kokkos.
common=(g++ cmake make pkg-config libopenmpi-dev openmpi-bin libhdf5-dev catch2
        libopenblas-dev libopenblas-openmp-dev nlohmann-json3-dev libcli11-dev libfmt-dev libstb-dev
        python3 python3-numpy python3-h5py python3-pil python3-matplotlib procps file ccache)
case "$variant" in
  kokkos45) packages=("${common[@]}" libtrilinos-kokkos-dev libtrilinos-kokkos-kernels-dev) ;;
  kokkos52) packages=("${common[@]}" libkokkos-dev) ;;
  *) die "unknown JOULE_SID_VARIANT '$variant' (allowed: kokkos45, kokkos52)" ;;
esac
# Bump when the way the root is made changes, so that it is remade.
recipe_version=3
stamp_text="recipe $recipe_version; packages ${packages[*]}"

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

mount_into_root() {  # mount_into_root: /proc, /sys, /dev (mpirun needs /dev/shm), the checkout at /joule
  mkdir -p "$root/proc" "$root/sys" "$root/dev" "$root/joule"
  mount -t proc proc "$root/proc" && mounted+=("$root/proc")
  mount --rbind /sys "$root/sys" && mount --make-rslave "$root/sys" && mounted+=("$root/sys")
  mount --rbind /dev "$root/dev" && mount --make-rslave "$root/dev" && mounted+=("$root/dev")
  mount --bind "$repo" "$root/joule" && mounted+=("$root/joule")
}

# in_root COMMAND...: run inside the root, as root, with a plain environment. The root's OpenMPI 5
# loads UCX, whose memory hooks patch code at every process start (0.4 s of 1 s for `joule --help`
# on a 2-core VM, where the host's OpenMPI 4 takes 0.02 s): the suite starts joule hundreds of
# times, so the hooks are off here (UCX_MEM_MMAP_HOOK_MODE=none; joule uses no UCX transport).
in_root() {
  chroot "$root" /usr/bin/env -i HOME=/root PATH=/usr/local/bin:/usr/bin:/bin LANG=C.UTF-8 \
    OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 UCX_MEM_MMAP_HOOK_MODE=none "$@"
}

# --- Phases -------------------------------------------------------------------------------------------
phase_root() {
  need_root_tools
  if [ -f "$root/.joule-stamp" ] && [ "$(cat "$root/.joule-stamp")" = "$stamp_text" ] && [ "${JOULE_SID_REFRESH:-0}" != 1 ]; then
    log "root $root is current"
    return
  fi
  local url
  url="$(mirror)"
  if [ ! -x "$root/usr/bin/apt-get" ]; then
    log "debootstrap --variant=minbase trixie $root from $url (a few minutes)"
    rm -rf "$root.partial"
    mkdir -p "$cache"
    debootstrap --variant=minbase trixie "$root.partial" "$url" > "$cache/$variant.debootstrap.log" 2>&1 ||
      die "debootstrap failed (is $url reachable? log: $cache/$variant.debootstrap.log)"
    mv "$root.partial" "$root"
  fi
  # sid's Release file may be past its Valid-Until date on a mirror's snapshot: apt is told to accept it.
  printf 'deb %s sid main\n' "$url" > "$root/etc/apt/sources.list"
  rm -f "$root/etc/apt/sources.list.d/"*
  printf 'Acquire::Check-Valid-Until "false";\nAPT::Install-Recommends "false";\n' > "$root/etc/apt/apt.conf.d/90joule"
  cp /etc/resolv.conf "$root/etc/resolv.conf" 2>/dev/null || true
  mount_into_root
  log "installing into the root: ${packages[*]}"
  in_root apt-get update -q > "$cache/$variant.apt.log" 2>&1 ||
    die "apt-get update in the root failed (is $url reachable? log: $cache/$variant.apt.log)"
  DEBIAN_FRONTEND=noninteractive in_root apt-get install -y -q "${packages[@]}" >> "$cache/$variant.apt.log" 2>&1 ||
    die "apt-get install in the root failed (log: $cache/$variant.apt.log)"
  in_root apt-get clean
  # One OpenBLAS: apt may leave the run-time links (.so.3, .so.0) on the pthread build while the
  # link-time ones (.so) name the OpenMP build, whose liblapack then misses OpenMP-only symbols.
  local lib
  for lib in libblas.so.3 liblapack.so.3 libopenblas.so.0; do
    in_root update-alternatives --quiet --set "$lib-x86_64-linux-gnu" "/usr/lib/x86_64-linux-gnu/openblas-openmp/$lib" ||
      die "could not point $lib at OpenBLAS's OpenMP build in the root"
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
    done' || die "could not mend the Kokkos CMake targets' missing archives in the root"
  unmount_all
  echo "$stamp_text" > "$root/.joule-stamp"
}

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
  mount_into_root
  local rc=0
  in_root bash -c "cd /joule && $1" || rc=$?
  unmount_all
  return $rc
}

# The root's compilations go through ccache, whose cache lives in the root (/var/cache/ccache): a
# fresh clone of a later commit compiles only what changed (the checkout is always at /joule, so
# the paths match). PCH-using units need the sloppiness below to be cached.
ccache_env="CCACHE_DIR=/var/cache/ccache CCACHE_MAXSIZE=2G CCACHE_SLOPPINESS=pch_defines,time_macros,include_file_mtime,include_file_ctime"
phase_build() {
  [ -f "$root/.joule-stamp" ] || die "no root at $root yet: run the root phase first (sid_root.sh root)"
  in_checkout "export $ccache_env && ccache -z >/dev/null && cmake -S . -B $build_dir -DCMAKE_BUILD_TYPE=Release -DCMAKE_CXX_COMPILER_LAUNCHER=ccache $(cmake_args) && cmake --build $build_dir -j $jobs && ccache -s | grep -iE 'hits|misses' | head -3"
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
names=() seconds=()
for p in "${phases[@]}"; do
  case "$p" in root | build | test | run) ;; *) die "unknown phase '$p' (allowed: root, build, test, run, all)" ;; esac
  t0=$SECONDS
  log "phase $p ($variant)"
  "phase_$p"
  names+=("$p") seconds+=($((SECONDS - t0)))
  log "phase $p: $((SECONDS - t0)) s"
done
if [ "${#names[@]}" -gt 1 ]; then
  for i in "${!names[@]}"; do printf '[joule sid] %-6s %5d s\n' "${names[$i]}" "${seconds[$i]}" >&2; done
fi
