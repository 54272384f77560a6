#!/usr/bin/env bash
# apps/scripts/aarch64_cross.sh's caches heal after an interruption (issue 66): the arm64 sysroot,
# the trilinos sources and the cross-built Kokkos prefix, each interrupted at a point chosen here,
# by SIGKILL of the script's whole process group or by a failing step, are made again by the next
# run, which exits 0, says so in one line and reports "repaired" in JOULE_CACHE_REPORT; the folder
# is then whole with its stamp, and no *.partial is left. A stamp removed, or another recipe's, is
# remade too; a JOULE_AARCH64_REFRESH=1 run killed midway leaves the sysroot it was to replace whole
# (the next run removes what it left); a Kokkos-Kernels that records the staged Kokkos' path where
# the rewrite does not look is refused, naming the file; and a last run finds all three warm,
# running no apt-get, dpkg-deb, cmake or compiler.
#
# Real: the script, dpkg-deb and tar (the sysroot is unpacked from real .deb files, made here with
# dpkg-deb -b), CMake with the aarch64 toolchain file (configure, build, install with DESTDIR, the
# path rewrite), the stamps and renames. Stand-ins, first on PATH: apt-get (update, clean,
# install --download-only copy those small .deb files, source --download-only a small
# trilinos_13.2.0.orig.tar.gz whose packages/kokkos and packages/kokkos-kernels are tiny CMake
# projects, a header and a one-file library, installed and found like the real ones), and
# aarch64-linux-gnu-gcc/g++, which run this machine's gcc/g++ without --sysroot and -mcpu (the
# stand-in's code is x86-64; only the CMake side is the real one's). A wrapper around dpkg-deb and
# the compilers stops at the point a case picks: it writes a marker and waits to be killed, or fails.
# No network; ~/.cache/joule, /etc/apt and dpkg's state are never read or written (HOME, the cache,
# sysroot and prefix are in a temporary folder). CPU time: about 1.5 s for the sysroot part, 5 s for
# the other (on a 2-core machine busy with other work, 5 s and 12 s).
# Usage: aarch64_caches_heal.sh [sysroot|kokkos|all]  the sysroot's cases, or the trilinos sources'
# and the Kokkos prefix's (after a plain run makes a sysroot), or both (the default); each part ends
# with its warm run. JOULE_TEST_AARCH64_SCRIPT: another copy of the script to check, kept in
# apps/scripts/ beside the original (the mutation check of an older version).
set -euo pipefail
repo="$(cd "$(dirname "$0")/../.." && pwd)"
source "$repo/tests/scripts/detail/interrupt.sh"  # kill_when_held
script="${JOULE_TEST_AARCH64_SCRIPT:-$repo/apps/scripts/aarch64_cross.sh}"
part="${1:-all}"
case "$part" in sysroot|kokkos|all) ;; *) echo "usage: $0 [sysroot|kokkos|all]" >&2; exit 2 ;; esac
for tool in dpkg-deb tar setsid cmake g++ gcc perl; do
  command -v "$tool" >/dev/null || { echo "SKIP: no $tool on this machine (the test needs it)"; exit 77; }
done
real_dpkg_deb="$(command -v dpkg-deb)"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
failures=0
t_start=$SECONDS
fail() { echo "FAIL: $*" >&2; failures=$((failures + 1)); }

# --- The stand-ins --------------------------------------------------------------------------------
bin="$tmp/bin" calls="$tmp/calls"
mkdir -p "$bin"
: >"$calls"
# The hook every stand-in calls at its points: STUB_HANG=POINT writes $tmp/at-POINT and waits to be
# killed; STUB_FAIL=POINT fails there. Each call is written to $calls (the warm run must make none).
cat >"$bin/stub_hook" <<EOF
# sourced: stub_hook POINT
stub_hook() {
  if [ "\${STUB_HANG:-}" = "\$1" ]; then : >"$tmp/at-\$1.tmp"; mv "$tmp/at-\$1.tmp" "$tmp/at-\$1"; exec sleep 600; fi
  if [ "\${STUB_FAIL:-}" = "\$1" ]; then echo "stand-in: failing at \$1 (as the test asks)" >&2; exit 100; fi
  return 0
}
EOF
cat >"$bin/apt-get" <<EOF
#!/usr/bin/env bash
# apt-get's stand-in: the options -o Dir::State=..., -o Dir::Cache=... name apt's folders.
set -euo pipefail
. "$bin/stub_hook"
echo "apt-get \$*" >>"$calls"
state="" cache="" cmd=""
while [ \$# -gt 0 ]; do
  case "\$1" in
    -o) case "\$2" in Dir::State=*) state="\${2#*=}" ;; Dir::Cache=*) cache="\${2#*=}" ;; esac; shift 2 ;;
    -*) shift ;;
    *) [ -n "\$cmd" ] || cmd="\$1"; shift ;;
  esac
done
[ -n "\$state" ] && [ -n "\$cache" ] || { echo "stand-in apt-get: called without the cache's own state (-o Dir::State, Dir::Cache)" >&2; exit 2; }
case "\$cmd" in
  update) stub_hook apt-update; mkdir -p "\$state/lists"; : >"\$state/lists/deb.debian.org_debian_dists_bookworm_main_source_Sources" ;;
  clean) rm -f "\$cache"/archives/*.deb ;;
  install) stub_hook apt-install; mkdir -p "\$cache/archives"; cp "$tmp"/debs/*.deb "\$cache/archives/"; stub_hook apt-downloaded ;;
  source) stub_hook apt-source; cp "$tmp/trilinos_13.2.0.orig.tar.gz" .; stub_hook apt-source-fetched ;;
  *) echo "stand-in apt-get: unexpected command \$cmd" >&2; exit 2 ;;
esac
EOF
cat >"$bin/dpkg-deb" <<EOF
#!/usr/bin/env bash
# The real dpkg-deb, after the hook "dpkg-deb:PACKAGE" (the package of the .deb it is given).
. "$bin/stub_hook"
echo "dpkg-deb \$*" >>"$calls"
for a in "\$@"; do case "\$a" in *.deb) stub_hook "dpkg-deb:\$(basename "\$a" | cut -d_ -f1)" ;; esac; done
exec "$real_dpkg_deb" "\$@"
EOF
for lang in gcc g++; do
  cat >"$bin/aarch64-linux-gnu-$lang" <<EOF
#!/usr/bin/env bash
# The cross compiler's stand-in: this machine's $lang, without the target's sysroot and CPU, after
# the hook "compile:SOURCE" for each source file it compiles.
. "$bin/stub_hook"
echo "$lang \$*" >>"$calls"
args=() skip=0
for a in "\$@"; do
  if [ \$skip = 1 ]; then skip=0; continue; fi
  case "\$a" in
    --sysroot) skip=1 ;;
    --sysroot=*|-mcpu=*|-march=*) ;;
    *.cpp|*.c) stub_hook "compile:\$(basename "\$a")"; args+=("\$a") ;;
    *) args+=("\$a") ;;
  esac
done
exec $lang "\${args[@]}"
EOF
done
real_cmake="$(command -v cmake)"
cat >"$bin/cmake" <<EOF
#!/usr/bin/env bash
echo "cmake \$*" >>"$calls"
exec "$real_cmake" "\$@"
EOF
chmod +x "$bin"/*

# Small real .deb files (what the sysroot step needs to find, and links of both kinds: a relative
# one, and an absolute one the step makes relative).
mkdir -p "$tmp/debs"
deb() {  # deb PACKAGE: made from the tree $tmp/pkg/PACKAGE
  local p="$1" d="$tmp/pkg/$1"
  mkdir -p "$d/DEBIAN" "$d/usr/share/doc/$p"
  echo "copyright" >"$d/usr/share/doc/$p/copyright"  # left out of the sysroot
  printf 'Package: %s\nVersion: 1.0-1\nArchitecture: arm64\nMaintainer: joule tests <t@example.org>\nDescription: stand-in\n' "$p" >"$d/DEBIAN/control"
  "$real_dpkg_deb" --root-owner-group -Znone -b "$d" "$tmp/debs/${p}_1.0-1_arm64.deb" >/dev/null
}
mkdir -p "$tmp/pkg/libc6/lib/aarch64-linux-gnu" "$tmp/pkg/libc6-dev/usr/include" \
         "$tmp/pkg/zlib1g-dev/usr/lib/aarch64-linux-gnu" "$tmp/pkg/zlib1g-dev/lib/aarch64-linux-gnu" \
         "$tmp/pkg/libopenblas0-openmp/usr/lib/aarch64-linux-gnu/openblas-openmp"
echo "ld.so" >"$tmp/pkg/libc6/lib/aarch64-linux-gnu/ld-linux-aarch64.so.1"
ln -s aarch64-linux-gnu/ld-linux-aarch64.so.1 "$tmp/pkg/libc6/lib/ld-linux-aarch64.so.1"
echo "int printf(const char *, ...);" >"$tmp/pkg/libc6-dev/usr/include/stdio.h"
echo "libz" >"$tmp/pkg/zlib1g-dev/lib/aarch64-linux-gnu/libz.so.1"
ln -s /lib/aarch64-linux-gnu/libz.so.1 "$tmp/pkg/zlib1g-dev/usr/lib/aarch64-linux-gnu/libz.so"
for lib in libopenblas.so.0 libblas.so.3 liblapack.so.3; do
  echo "$lib" >"$tmp/pkg/libopenblas0-openmp/usr/lib/aarch64-linux-gnu/openblas-openmp/$lib"
done
for p in libc6 libc6-dev zlib1g-dev libopenblas0-openmp; do deb "$p"; done

# The stand-in trilinos orig tarball: Kokkos and Kokkos-Kernels as tiny CMake projects that install
# what the real ones do for this test's purpose: a library, its exported targets, and a config file
# recording the install prefix (Kokkos) and where Kokkos and the BLAS were found (Kokkos-Kernels).
top="$tmp/tarball/Trilinos-trilinos-release-13-2-0"
mkdir -p "$top/packages/kokkos" "$top/packages/kokkos-kernels" "$top/packages/teuchos"
echo "not unpacked" >"$top/packages/teuchos/README"
# Kokkos' stand-in compiles nothing (no compiler to detect: a second configure of a few seconds on a
# loaded machine), but is configured with the toolchain and installed as the real one is.
cat >"$top/packages/kokkos/CMakeLists.txt" <<'EOF'
cmake_minimum_required(VERSION 3.16)
project(Kokkos VERSION 3.4.1 LANGUAGES NONE)
add_library(kokkoscore INTERFACE)
target_include_directories(kokkoscore INTERFACE $<INSTALL_INTERFACE:include>)
install(FILES Kokkos_Core.hpp DESTINATION include)
install(TARGETS kokkoscore EXPORT KokkosTargets)
install(EXPORT KokkosTargets NAMESPACE Kokkos:: DESTINATION lib/cmake/Kokkos)
configure_file(KokkosConfig.cmake.in KokkosConfig.cmake @ONLY)
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/KokkosConfig.cmake DESTINATION lib/cmake/Kokkos)
EOF
cat >"$top/packages/kokkos/KokkosConfig.cmake.in" <<'EOF'
include("${CMAKE_CURRENT_LIST_DIR}/KokkosTargets.cmake")
set(_HINTS "${CMAKE_CURRENT_LIST_DIR}/../.." "@CMAKE_INSTALL_PREFIX@")
EOF
echo "inline int kokkos_core() { return 1; }" >"$top/packages/kokkos/Kokkos_Core.hpp"
cat >"$top/packages/kokkos-kernels/CMakeLists.txt" <<'EOF'
cmake_minimum_required(VERSION 3.16)
project(KokkosKernels VERSION 3.4.1 LANGUAGES CXX)
find_package(Kokkos REQUIRED)
add_library(kokkoskernels STATIC kk.cpp)
target_link_libraries(kokkoskernels PUBLIC Kokkos::kokkoscore)
install(TARGETS kokkoskernels EXPORT KokkosKernelsTargets ARCHIVE DESTINATION lib)
install(EXPORT KokkosKernelsTargets NAMESPACE Kokkos:: DESTINATION lib/cmake/KokkosKernels)
configure_file(KokkosKernelsConfig.cmake.in KokkosKernelsConfig.cmake @ONLY)
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/KokkosKernelsConfig.cmake DESTINATION lib/cmake/KokkosKernels)
if(DEFINED ENV{STANDIN_RECORD_KOKKOS_DIR})  # the build-time Kokkos path, where no rewrite looks
  file(WRITE ${CMAKE_CURRENT_BINARY_DIR}/build-info.txt "Kokkos_DIR=${Kokkos_DIR}\n")
  install(FILES ${CMAKE_CURRENT_BINARY_DIR}/build-info.txt DESTINATION share/KokkosKernels)
endif()
EOF
cat >"$top/packages/kokkos-kernels/KokkosKernelsConfig.cmake.in" <<'EOF'
include(CMakeFindDependencyMacro)
find_dependency(Kokkos HINTS @Kokkos_DIR@)
set(KokkosKernels_BLAS_DIRS "@BLAS_LIBRARY_DIRS@")
include("${CMAKE_CURRENT_LIST_DIR}/KokkosKernelsTargets.cmake")
EOF
echo "int kokkos_kernels() { return 2; }" >"$top/packages/kokkos-kernels/kk.cpp"
tar -czf "$tmp/trilinos_13.2.0.orig.tar.gz" -C "$tmp/tarball" Trilinos-trilinos-release-13-2-0

# --- The script's settings: everything in $tmp --------------------------------------------------
printf 'Types: deb deb-src\nURIs: http://deb.example.org/debian\nSuites: bookworm\nComponents: main\n' >"$tmp/sources"
cache="$tmp/cache" sysroot="$tmp/cache/sysroot" prefix="$tmp/kokkos-3.4.1-openmp-aarch64"
mkdir -p "$tmp/home"
unset JOULE_AARCH64_REFRESH JOULE_AARCH64_CPU_FLAGS JOULE_AARCH64_FP_CONTRACT JOULE_AARCH64_QEMU_CPU \
      JOULE_AARCH64_PREFIXES DESTDIR STUB_HANG STUB_FAIL STANDIN_RECORD_KOKKOS_DIR CMAKE_PREFIX_PATH Kokkos_ROOT
export HOME="$tmp/home" PATH="$bin:$PATH" JOBS=2 JOULE_AARCH64_CACHE="$cache" \
       JOULE_AARCH64_SYSROOT="$sysroot" JOULE_AARCH64_KOKKOS="$prefix" JOULE_AARCH64_SOURCES="$tmp/sources"
for tool in apt-get dpkg-deb aarch64-linux-gnu-g++ cmake; do
  [ "$(command -v "$tool")" = "$bin/$tool" ] || { echo "FAIL: the $tool stand-in is not the first on PATH"; exit 1; }
done

# --- Running the script ---------------------------------------------------------------------------
run() {  # run NAME [VAR=VALUE...] -- PHASES...: to its end; sets rc; output $tmp/NAME.out, report $tmp/NAME.tsv
  local name="$1" vars=(); shift
  while [ "$1" != -- ]; do vars+=("$1"); shift; done; shift
  : >"$tmp/$name.tsv"
  set +e
  env "${vars[@]}" JOULE_CACHE_REPORT="$tmp/$name.tsv" bash "$script" "$@" >"$tmp/$name.out" 2>&1 </dev/null
  rc=$?
  set -e
  echo "== $name: $* (exit $rc, $((SECONDS - t_start)) s into the test)"
  sed 's/^/   /' "$tmp/$name.out"
}
killed_at() {  # killed_at NAME POINT [VAR=VALUE...] PHASES...: started in its own session, SIGKILLed with its whole
  # process group once the stand-in at POINT has written its marker; its processes gone before the next run
  local name="$1" point="$2" vars=(); shift 2
  while [[ "$1" == *=* ]]; do vars+=("$1"); shift; done
  : >"$tmp/$name.tsv"
  rm -f "$tmp/at-$point"
  kill_when_held "$tmp/at-$point" "$tmp/$name.out" "$tmp/$name.out" \
    env STUB_HANG="$point" JOULE_CACHE_REPORT="$tmp/$name.tsv" "${vars[@]}" bash "$script" "$@" ||
    { sed 's/^/   /' "$tmp/$name.out"; echo "FAIL: $name: the run was not killed at $point"; exit 1; }
  echo "== $name: $* SIGKILLed (whole process group $KILLED_PGID) at $point, $((SECONDS - t_start)) s into the test"
  sed 's/^/   /' "$tmp/$name.out"
}

# --- Checks ---------------------------------------------------------------------------------------
expect_rc() { [ "$rc" = "$2" ] || fail "$1: exit $rc, expected $2"; }
expect_failed() { [ "$rc" != 0 ] || fail "$1: exit 0 after a failing step"; }
one_line() {  # one_line NAME REGEX: exactly one line of the run's output matches
  local n; n="$(grep -Ec -- "$2" "$tmp/$1.out" || true)"
  [ "$n" = 1 ] || fail "$1: $n lines match '$2', expected one"
}
no_line() { ! grep -Eq -- "$2" "$tmp/$1.out" || fail "$1: a line matches '$2'"; }
reported() {  # reported NAME LABEL STATE: the run's JOULE_CACHE_REPORT has that line
  awk -F'\t' -v l="$2" -v s="$3" '$1 == l && $2 == s { f = 1 } END { exit !f }' "$tmp/$1.tsv" ||
    fail "$1: no '$2<TAB>$3' line in JOULE_CACHE_REPORT (it holds: $(tr '\t\n' '|;' <"$tmp/$1.tsv"))"
}
no_partial() {
  local left; left="$(find "$tmp" -path "$tmp/pkg" -prune -o \( -name '*.partial' -o -name '*.new' -o -name src.download \) -print)"
  [ -z "$left" ] || fail "$1: left behind: $left"
}
not_whole() {  # after an interruption: the cache is not there with its stamp (the point was early enough)
  [ ! -f "$2/$3" ] || fail "$1: $2/$3 exists after the interruption (the test's point came too late)"
}
sysroot_whole() {
  [ "$(head -1 "$sysroot/.joule-sysroot" 2>/dev/null)" = "$(head -1 "$tmp/sysroot-stamp")" ] || fail "$1: $sysroot/.joule-sysroot is not the one the first run wrote"
  [ -f "$sysroot/usr/include/stdio.h" ] && [ -f "$sysroot/lib/ld-linux-aarch64.so.1" ] || fail "$1: the sysroot lacks stdio.h or the loader"
  [ "$(tail -n +2 "$sysroot/.joule-sysroot" | sort | tr '\n' ' ')" = "libc6-dev_1.0-1_arm64 libc6_1.0-1_arm64 libopenblas0-openmp_1.0-1_arm64 zlib1g-dev_1.0-1_arm64 " ] ||
    fail "$1: the stamp does not list the 4 packages: $(tail -n +2 "$sysroot/.joule-sysroot" | tr '\n' ' ')"
  [ "$(readlink -f "$sysroot/usr/lib/aarch64-linux-gnu/libz.so")" = "$(readlink -f "$sysroot")/lib/aarch64-linux-gnu/libz.so.1" ] ||
    fail "$1: libz.so -> $(readlink "$sysroot/usr/lib/aarch64-linux-gnu/libz.so"), not the sysroot's libz.so.1"
  [ "$(readlink -f "$sysroot/usr/lib/aarch64-linux-gnu/libblas.so.3")" = "$(readlink -f "$sysroot")/usr/lib/aarch64-linux-gnu/openblas-openmp/libblas.so.3" ] ||
    fail "$1: libblas.so.3 is not OpenBLAS's OpenMP build"
  local bad; bad="$(find "$sysroot" -type l \( -lname '/*' -o -lname '*.partial*' \) -print)"
  [ -z "$bad" ] || fail "$1: links absolute or into a .partial folder: $bad"
  [ ! -e "$sysroot/usr/share/doc" ] || fail "$1: usr/share/doc was unpacked"
}
sources_whole() {
  [ "$(cat "$cache/src/.joule-trilinos" 2>/dev/null)" = trilinos_13.2.0.orig.tar.gz ] || fail "$1: $cache/src/.joule-trilinos does not name the tarball"
  [ -f "$cache/src/kokkos/CMakeLists.txt" ] && [ -f "$cache/src/kokkos-kernels/kk.cpp" ] || fail "$1: the sources lack kokkos or kokkos-kernels"
  [ "$(find "$cache/src" -mindepth 1 -maxdepth 1 | sort | tr '\n' ' ')" = "$cache/src/.joule-trilinos $cache/src/kokkos $cache/src/kokkos-kernels " ] ||
    fail "$1: $cache/src holds more than the two packages and the stamp: $(ls -A "$cache/src")"
}
kokkos_whole() {
  [ -s "$prefix/.joule-complete" ] && grep -q "^joule-aarch64-kokkos v1: trilinos_13.2.0.orig.tar.gz, " "$prefix/.joule-complete" ||
    fail "$1: $prefix/.joule-complete is missing or not the recipe"
  [ -f "$prefix/include/Kokkos_Core.hpp" ] && [ -f "$prefix/lib/libkokkoskernels.a" ] || fail "$1: the prefix lacks Kokkos or Kokkos-Kernels"
  grep -qxF "set(_HINTS \"\${CMAKE_CURRENT_LIST_DIR}/../..\" \"$prefix\")" "$prefix/lib/cmake/Kokkos/KokkosConfig.cmake" ||
    fail "$1: KokkosConfig.cmake does not name the final prefix: $(grep _HINTS "$prefix/lib/cmake/Kokkos/KokkosConfig.cmake" || true)"
  grep -qxF "find_dependency(Kokkos HINTS $prefix/lib/cmake/Kokkos)" "$prefix/lib/cmake/KokkosKernels/KokkosKernelsConfig.cmake" ||
    fail "$1: KokkosKernelsConfig.cmake does not find Kokkos in the final prefix: $(grep HINTS "$prefix/lib/cmake/KokkosKernels/KokkosKernelsConfig.cmake" || true)"
  grep -qF "\"$sysroot/usr/lib/aarch64-linux-gnu/openblas-openmp\"" "$prefix/lib/cmake/KokkosKernels/KokkosKernelsConfig.cmake" ||
    fail "$1: KokkosKernelsConfig.cmake does not name the final sysroot's OpenBLAS"
  local bad; bad="$(grep -rlF .partial "$prefix" || true)"
  [ -z "$bad" ] || fail "$1: files naming a .partial folder: $bad"
  [ ! -e "$prefix/.stage" ] && [ ! -e "$prefix/.build" ] || fail "$1: the staging or build folder is left in $prefix"
  [ ! -e "$prefix/share/KokkosKernels/build-info.txt" ] || fail "$1: the prefix has the file naming the staging folder"
}

# --- The sysroot ----------------------------------------------------------------------------------
part_sysroot() {
  # Killed while unpacking: libc6 unpacked, libc6-dev about to be.
  killed_at sysroot-killed dpkg-deb:libc6-dev sysroot
  not_whole sysroot-killed "$sysroot" .joule-sysroot
  run sysroot-after-kill -- sysroot
  expect_rc sysroot-after-kill 0
  one_line sysroot-after-kill 'aarch64 sysroot: removing .*/sysroot\.partial, left unfinished by an interrupted run'
  reported sysroot-after-kill "aarch64 sysroot" repaired
  head -1 "$sysroot/.joule-sysroot" >"$tmp/sysroot-stamp" 2>/dev/null || true
  grep -q '^key [0-9a-f]\{16\}$' "$tmp/sysroot-stamp" || fail "sysroot-after-kill: no key in $sysroot/.joule-sysroot"
  sysroot_whole sysroot-after-kill
  no_partial sysroot-after-kill

  # Another recipe (the apt sources changed), and the remake fails unpacking zlib1g-dev: then back.
  cp "$tmp/sources" "$tmp/sources.first"
  echo "# another mirror" >>"$tmp/sources"
  run sysroot-fails STUB_FAIL=dpkg-deb:zlib1g-dev -- sysroot
  expect_failed sysroot-fails
  one_line sysroot-fails "aarch64 sysroot: .*/sysroot was made by another recipe: making it again"
  one_line sysroot-fails 'unpacking zlib1g-dev_1.0-1_arm64.deb failed'
  not_whole sysroot-fails "$sysroot" .joule-sysroot
  cp "$tmp/sources.first" "$tmp/sources"
  run sysroot-after-failure -- sysroot
  expect_rc sysroot-after-failure 0
  one_line sysroot-after-failure 'aarch64 sysroot: removing .*/sysroot\.partial, left unfinished by an interrupted run'
  reported sysroot-after-failure "aarch64 sysroot" repaired
  sysroot_whole sysroot-after-failure
  no_partial sysroot-after-failure

  # A sysroot without its stamp (what an older run could leave): removed and made again.
  rm "$sysroot/.joule-sysroot"
  run sysroot-no-stamp -- sysroot
  expect_rc sysroot-no-stamp 0
  one_line sysroot-no-stamp 'aarch64 sysroot: .*/sysroot has no stamp .*removing it and making it again'
  reported sysroot-no-stamp "aarch64 sysroot" repaired
  sysroot_whole sysroot-no-stamp
  no_partial sysroot-no-stamp

  # JOULE_AARCH64_REFRESH=1 (newer packages) killed while unpacking: the sysroot it was to replace is
  # kept, whole; the next run finds it warm and removes what the refresh left.
  killed_at sysroot-refresh-killed dpkg-deb:libc6-dev JOULE_AARCH64_REFRESH=1 sysroot
  sysroot_whole sysroot-refresh-killed
  run sysroot-after-refresh -- sysroot
  expect_rc sysroot-after-refresh 0
  one_line sysroot-after-refresh 'aarch64 sysroot: removing .*/sysroot\.partial, left unfinished by an interrupted JOULE_AARCH64_REFRESH=1 run'
  reported sysroot-after-refresh "aarch64 sysroot" warm
  sysroot_whole sysroot-after-refresh
  no_partial sysroot-after-refresh
  run sysroot-refreshed JOULE_AARCH64_REFRESH=1 -- sysroot
  expect_rc sysroot-refreshed 0
  reported sysroot-refreshed "aarch64 sysroot" cold
  sysroot_whole sysroot-refreshed
  no_partial sysroot-refreshed
}

# --- The trilinos sources and the Kokkos prefix ----------------------------------------------------
part_kokkos() {
  if [ ! -f "$sysroot/.joule-sysroot" ]; then  # a sysroot to build against, made by a plain run
    run setup -- sysroot
    expect_rc setup 0
    reported setup "aarch64 sysroot" cold
    head -1 "$sysroot/.joule-sysroot" >"$tmp/sysroot-stamp" 2>/dev/null || true
  fi
  # --- The trilinos sources -------------------------------------------------------------------------
  # Killed with the orig tarball fetched, before it is unpacked.
  killed_at sources-killed apt-source-fetched kokkos
  not_whole sources-killed "$cache/src" .joule-trilinos
  run sources-after-kill -- kokkos
  expect_rc sources-after-kill 0
  one_line sources-after-kill 'trilinos sources \(aarch64\): removing .*/src\.partial, left unfinished by an interrupted run'
  reported sources-after-kill "trilinos sources (aarch64)" repaired
  reported sources-after-kill "Kokkos 3.4.1 (aarch64)" cold
  sources_whole sources-after-kill
  kokkos_whole sources-after-kill
  no_partial sources-after-kill

  # --- The Kokkos prefix ----------------------------------------------------------------------------
  # Another recipe's stamp, and the remake fails compiling Kokkos-Kernels (Kokkos installed in the
  # staging folder by then).
  echo "joule-aarch64-kokkos v0: an older recipe" >"$prefix/.joule-complete"
  run kokkos-fails STUB_FAIL=compile:kk.cpp -- kokkos
  expect_failed kokkos-fails
  one_line kokkos-fails "Kokkos 3.4.1 \(aarch64\): .*/kokkos-3.4.1-openmp-aarch64 was made by another recipe: making it again"
  one_line kokkos-fails 'building kokkos-kernels failed'
  not_whole kokkos-fails "$prefix" .joule-complete
  run kokkos-after-failure -- kokkos
  expect_rc kokkos-after-failure 0
  one_line kokkos-after-failure 'Kokkos 3.4.1 \(aarch64\): removing .*/kokkos-3.4.1-openmp-aarch64\.partial, left unfinished by an interrupted run'
  reported kokkos-after-failure "trilinos sources (aarch64)" warm
  reported kokkos-after-failure "Kokkos 3.4.1 (aarch64)" repaired
  kokkos_whole kokkos-after-failure
  no_partial kokkos-after-failure
  [ -z "$(find "$tmp" -maxdepth 1 -name '*.failed-*.log')" ] || fail "kokkos-after-failure: the failed build's log is left beside the prefix"

  # Without its stamp, and the remake is killed compiling Kokkos-Kernels.
  rm "$prefix/.joule-complete"
  killed_at kokkos-killed compile:kk.cpp kokkos
  one_line kokkos-killed "Kokkos 3.4.1 \(aarch64\): .*/kokkos-3.4.1-openmp-aarch64 has no stamp"
  not_whole kokkos-killed "$prefix" .joule-complete
  run kokkos-after-kill -- kokkos
  expect_rc kokkos-after-kill 0
  one_line kokkos-after-kill 'Kokkos 3.4.1 \(aarch64\): removing .*/kokkos-3.4.1-openmp-aarch64\.partial, left unfinished by an interrupted run'
  reported kokkos-after-kill "Kokkos 3.4.1 (aarch64)" repaired
  kokkos_whole kokkos-after-kill
  no_partial kokkos-after-kill

  # Another recipe (JOULE_AARCH64_FP_CONTRACT=off), and Kokkos-Kernels records the staged Kokkos'
  # path in a file the rewrite does not know (share/KokkosKernels/build-info.txt): the step refuses
  # to install, naming the file; the next run (the first recipe again) makes it anew.
  run kokkos-staging-left JOULE_AARCH64_FP_CONTRACT=off STANDIN_RECORD_KOKKOS_DIR=1 -- kokkos
  expect_failed kokkos-staging-left
  one_line kokkos-staging-left "Kokkos 3.4.1 \(aarch64\): .*/kokkos-3.4.1-openmp-aarch64 was made by another recipe: making it again"
  one_line kokkos-staging-left 'ERROR: .*/share/KokkosKernels/build-info\.txt names the staging folder .*\.partial, which is renamed to .*; nothing was installed'
  not_whole kokkos-staging-left "$prefix" .joule-complete
  run kokkos-after-staging -- kokkos
  expect_rc kokkos-after-staging 0
  one_line kokkos-after-staging 'Kokkos 3.4.1 \(aarch64\): removing .*/kokkos-3.4.1-openmp-aarch64\.partial, left unfinished by an interrupted run'
  reported kokkos-after-staging "Kokkos 3.4.1 (aarch64)" repaired
  kokkos_whole kokkos-after-staging
  no_partial kokkos-after-staging
}

# --- Warm: nothing to do, nothing run -------------------------------------------------------------
warm_check() {  # warm_check PHASES...: a run of these phases finds their caches warm and runs nothing
  local labels=("aarch64 sysroot") label
  [ "$*" = sysroot ] || labels+=("trilinos sources (aarch64)" "Kokkos 3.4.1 (aarch64)")
  : >"$calls"
  run warm -- "$@"
  expect_rc warm 0
  for label in "${labels[@]}"; do reported warm "$label" warm; done
  [ "$(wc -l <"$tmp/warm.tsv")" = "${#labels[@]}" ] ||
    fail "warm: JOULE_CACHE_REPORT has $(wc -l <"$tmp/warm.tsv") lines, expected ${#labels[@]}"
  no_line warm 'removing|making it again'
  [ ! -s "$calls" ] || fail "warm: the warm run ran: $(cut -c1-80 "$calls" | sort | uniq -c | tr '\n' ';')"
  sysroot_whole warm; no_partial warm
  [ "$*" = sysroot ] || { sources_whole warm; kokkos_whole warm; }
}

case "$part" in
  sysroot) part_sysroot; warm_check sysroot ;;
  kokkos) part_kokkos; warm_check sysroot kokkos ;;
  all) part_sysroot; part_kokkos; warm_check sysroot kokkos ;;
esac

echo "== $((SECONDS - t_start)) s"
if [ "$failures" != 0 ]; then echo "FAIL: $failures checks failed"; exit 1; fi
echo "PASS"
