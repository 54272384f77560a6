#!/usr/bin/env bash
# apps/scripts/install-deps.sh made whole or not at all (issue 66): its Kokkos + Kokkos-Kernels
# prefix is installed into PREFIX.partial and renamed when complete, the stamp written last, so
# that a run interrupted anywhere is recovered by the next one. Driven through the source-tree mode
# (KOKKOS_SRC + KOKKOS_KERNELS_SRC, JOULE_NO_APT=1) with two tiny stand-in CMake projects (no
# compiler: a real Kokkos build takes minutes) that install a few files and config files recording
# CMAKE_INSTALL_PREFIX and, for the stand-in Kokkos-Kernels, the Kokkos_DIR it was configured with
# (the staged Kokkos: the script's path rewrite is checked for real, by including the installed
# config file). A stand-in step can be made to hold (write a marker, then wait) or fail:
#   - cold: a first run builds, the prefix is whole, stamped, config files name the final prefix;
#   - warm: a second run builds nothing (the stand-in build steps do not run);
#   - SIGKILL of the script's process group while Kokkos builds, while Kokkos-Kernels builds (the
#     staged Kokkos already installed) and while Kokkos-Kernels installs: the next run says in one
#     line that it removes PREFIX.partial, rebuilds and reports "repaired";
#   - a failing Kokkos-Kernels build: exit non-zero, the failure's log kept beside the prefix, no
#     prefix; the next run repairs;
#   - a prefix without its stamp (an interrupted run of the old script) and one with another
#     recipe's stamp: removed and rebuilt, said in one line (repaired, cold);
#   - an installed file that names the staging folder (not a *.cmake file the script rewrites):
#     the run fails saying so, and nothing is renamed into place.
# After each recovery the prefix holds the same files as the cold run's (paths compared with the
# prefix's name replaced). No network, no apt (stubs that fail), nothing outside a temp folder.
# Usage: install_deps_interrupted.sh kills|stamps (two tests: the cold run, then warm and the
# interruptions, ~8 s; or the cold run, then the stamps and the staging-path refusal, ~5 s).
set -euo pipefail
part="${1:-}"
case "$part" in kills|stamps) ;; *) echo "usage: $0 kills|stamps" >&2; exit 2 ;; esac
repo="$(cd "$(dirname "$0")/../.." && pwd)"
source "$repo/tests/scripts/detail/interrupt.sh"  # kill_when_held
script="$repo/apps/scripts/install-deps.sh"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
unset JOULE_NO_APT KOKKOS_SRC KOKKOS_KERNELS_SRC JOULE_KOKKOS_BACKEND JOULE_DEPS_PREFIX Kokkos_ROOT \
  KokkosKernels_ROOT STANDIN_HOLD STANDIN_FAIL STANDIN_LEAK JOULE_CACHE_REPORT
export TMPDIR="$work/tmp" JOBS=1   # the script's mktemp work folder, left by a SIGKILL, goes here
mkdir -p "$TMPDIR"

# apt, dpkg-query and sudo must never be reached (JOULE_NO_APT=1): stubs that record and fail.
calls="$work/calls"; : >"$calls"
mkdir -p "$work/stubs"
for tool in dpkg-query apt-get sudo; do
  printf '#!/bin/sh\necho "%s $*" >>"%s"\nexit 1\n' "$tool" "$calls" >"$work/stubs/$tool"
  chmod +x "$work/stubs/$tool"
done
export PATH="$work/stubs:$PATH"

# --- The stand-ins ---------------------------------------------------------------------------------
# step.sh STEP: every build or install step of the stand-ins runs it. It counts the step, then holds
# (marker written, waits to be killed) when STANDIN_HOLD names the step, or fails when STANDIN_FAIL
# does. It lives outside the source trees: their checksum is part of the recipe.
cat >"$work/step.sh" <<EOF
#!/bin/sh
echo "\$1" >>"$work/steps"
if [ "\${STANDIN_HOLD:-}" = "\$1" ]; then
  : >"$work/held-\$1"
  while :; do sleep 1; done
fi
if [ "\${STANDIN_FAIL:-}" = "\$1" ]; then echo "stand-in error: \$1 fails as asked" >&2; exit 1; fi
exit 0
EOF
chmod +x "$work/step.sh"
mkdir -p "$work/src/kokkos" "$work/src/kernels/perf_test/blas" "$work/src/kokkos/example"
cat >"$work/src/kokkos/CMakeLists.txt" <<EOF
cmake_minimum_required(VERSION 3.16)
project(Kokkos NONE)
set(Kokkos_VERSION_MAJOR 9)
set(Kokkos_VERSION_MINOR 8)
set(Kokkos_VERSION_PATCH 7)
add_custom_target(standin ALL COMMAND sh $work/step.sh kokkos-build)
install(CODE "execute_process(COMMAND sh $work/step.sh kokkos-install COMMAND_ERROR_IS_FATAL ANY)")
configure_file(KokkosConfig.cmake.in KokkosConfig.cmake @ONLY)
install(FILES \${CMAKE_CURRENT_BINARY_DIR}/KokkosConfig.cmake DESTINATION lib/cmake/Kokkos)
install(FILES Kokkos_Core.hpp DESTINATION include)
EOF
cat >"$work/src/kokkos/KokkosConfig.cmake.in" <<'EOF'
set(Kokkos_VERSION 9.8.7)
set(Kokkos_INSTALL_PREFIX "@CMAKE_INSTALL_PREFIX@")
set(Kokkos_FOUND_HERE "${CMAKE_CURRENT_LIST_DIR}")
EOF
echo '// stand-in' >"$work/src/kokkos/Kokkos_Core.hpp"
echo 'stand-in example' >"$work/src/kokkos/example/README"
echo 'stand-in license' >"$work/src/kokkos/LICENSE"
cat >"$work/src/kernels/CMakeLists.txt" <<EOF
cmake_minimum_required(VERSION 3.16)
project(KokkosKernels NONE)
set(KokkosKernels_VERSION_MAJOR 9)
set(KokkosKernels_VERSION_MINOR 8)
set(KokkosKernels_VERSION_PATCH 7)
find_package(Kokkos REQUIRED)   # the staged one: Kokkos_ROOT
add_custom_target(standin ALL COMMAND sh $work/step.sh kernels-build)
install(CODE "execute_process(COMMAND sh $work/step.sh kernels-install COMMAND_ERROR_IS_FATAL ANY)")
configure_file(KokkosKernelsConfig.cmake.in KokkosKernelsConfig.cmake @ONLY)
install(FILES \${CMAKE_CURRENT_BINARY_DIR}/KokkosKernelsConfig.cmake DESTINATION lib/cmake/KokkosKernels)
install(FILES KokkosBlas.hpp DESTINATION include)
# STANDIN_LEAK=1: a file other than a *.cmake config that records the build-time Kokkos path.
if(DEFINED ENV{STANDIN_LEAK})
  file(WRITE \${CMAKE_CURRENT_BINARY_DIR}/kokkos-dir.txt "\${Kokkos_DIR}\n")
  install(FILES \${CMAKE_CURRENT_BINARY_DIR}/kokkos-dir.txt DESTINATION share/kokkoskernels)
endif()
EOF
# As Kokkos-Kernels' own config does: the Kokkos it was built against, by the path it was found at.
cat >"$work/src/kernels/KokkosKernelsConfig.cmake.in" <<'EOF'
set(KokkosKernels_INSTALL_PREFIX "@CMAKE_INSTALL_PREFIX@")
set(KokkosKernels_KOKKOS_DIR "@Kokkos_DIR@")
include("@Kokkos_DIR@/KokkosConfig.cmake")
EOF
echo '// stand-in' >"$work/src/kernels/KokkosBlas.hpp"
echo 'stand-in perf test' >"$work/src/kernels/perf_test/blas/README"
echo 'stand-in license' >"$work/src/kernels/LICENSE"

label="Kokkos 9.8.7 (openmp)"
steps() { grep -c . "$work/steps" 2>/dev/null || true; }
# run NAME PREFIX [VAR=VALUE...]: install-deps.sh into PREFIX, in the foreground; sets rc, output in
# $work/out-NAME, the cache report in $work/report-NAME.
run() {
  local name="$1" prefix="$2"; shift 2
  : >"$work/report-$name"
  set +e
  env JOULE_NO_APT=1 KOKKOS_SRC="$work/src/kokkos" KOKKOS_KERNELS_SRC="$work/src/kernels" \
    JOULE_DEPS_PREFIX="$prefix" JOULE_CACHE_REPORT="$work/report-$name" "$@" \
    bash "$script" >"$work/out-$name" 2>&1
  rc=$?
  set -e
  echo "== $name (exit $rc)"; grep -v '^\[joule deps\]   \(ok\|note\) ' "$work/out-$name" | sed 's/^/   /'
}
# interrupt NAME PREFIX STEP: install-deps.sh in its own process group until the stand-in STEP
# holds, then SIGKILL of the whole group (the script, cmake, make, the step).
interrupt() {
  local name="$1" prefix="$2" step="$3"
  rm -f "$work/held-$step"
  kill_when_held "$work/held-$step" "$work/out-$name" "$work/out-$name" \
    env JOULE_NO_APT=1 KOKKOS_SRC="$work/src/kokkos" KOKKOS_KERNELS_SRC="$work/src/kernels" \
    JOULE_DEPS_PREFIX="$prefix" STANDIN_HOLD="$step" bash "$script" ||
    { cat "$work/out-$name" >&2; fail "$name: install-deps.sh never held in $step"; }
  echo "== $name: killed (SIGKILL to process group $KILLED_PGID) while $step held"
}
expect() { grep -Eq -- "$2" "$work/out-$1" || fail "$1: no line matches '$2'"; }
# once NAME TEXT: exactly one line of the run's output holds TEXT
once() { [ "$(grep -Fc -- "$2" "$work/out-$1" || true)" = 1 ] || fail "$1: not exactly one line holds '$2'"; }
report() {  # report NAME STATE: the run's one JOULE_CACHE_REPORT line
  [ "$(wc -l <"$work/report-$1")" = 1 ] && grep -q "^$label	$2	" "$work/report-$1" ||
    fail "$1: JOULE_CACHE_REPORT holds '$(cat "$work/report-$1")', expected one line '$label<TAB>$2<TAB>...'"
}
listing() {  # listing PREFIX: every file and its contents, with PREFIX's name written as @PREFIX@
  (cd "$1" && find . -type f | LC_ALL=C sort | while read -r f; do echo "--- $f"; sed "s|$1|@PREFIX@|g" "$f"; done)
}
whole() {  # whole NAME PREFIX: the prefix is complete, stamped and the same as the cold run's
  local name="$1" prefix="$2"
  [ -d "$prefix" ] || fail "$name: no $prefix"
  [ ! -e "$prefix.partial" ] || fail "$name: $prefix.partial is left"
  [ -f "$prefix/.joule-complete" ] || fail "$name: $prefix has no stamp"
  [ "$(cat "$prefix/.joule-complete")" = "$recipe" ] || fail "$name: the stamp holds '$(cat "$prefix/.joule-complete")', not the recipe '$recipe'"
  ! grep -rqF ".partial" "$prefix" || fail "$name: files in $prefix name a staging folder: $(grep -rlF .partial "$prefix" | tr '\n' ' ')"
  [ "$(listing "$prefix")" = "$reference" ] ||
    fail "$name: $prefix differs from the cold run's prefix: $(diff <(echo "$reference") <(listing "$prefix") | head -20)"
  # The installed config files, read as find_package would: the Kokkos they name is there.
  cmake -DKK="$prefix/lib/cmake/KokkosKernels/KokkosKernelsConfig.cmake" -P "$work/read-config.cmake" >"$work/cmake-p" 2>&1 ||
    fail "$name: including the installed KokkosKernelsConfig.cmake failed: $(cat "$work/cmake-p")"
  grep -qxF "kernels $prefix kokkos $prefix from $prefix/lib/cmake/Kokkos" "$work/cmake-p" ||
    fail "$name: the installed config files name '$(cat "$work/cmake-p")', expected $prefix throughout"
}

cat >"$work/read-config.cmake" <<'EOF'
include("${KK}")
message("kernels ${KokkosKernels_INSTALL_PREFIX} kokkos ${Kokkos_INSTALL_PREFIX} from ${Kokkos_FOUND_HERE}")
EOF

# --- cold, then warm ---------------------------------------------------------------------------------
p="$work/cache/kokkos"
run cold "$p"
[ "$rc" = 0 ] || fail "cold: exit $rc"
report cold cold
recipe="$(cat "$p/.joule-complete")"
case "$recipe" in "joule-deps v4: kokkos 9.8.7 ($work/src/kokkos, "*) ;; *) fail "cold: the stamp holds '$recipe'";; esac
reference="$(listing "$p")"
whole cold "$p"
grep -q 'KokkosKernels_KOKKOS_DIR "'"$p"'/lib/cmake/Kokkos"' "$p/lib/cmake/KokkosKernels/KokkosKernelsConfig.cmake" ||
  fail "cold: KokkosKernelsConfig.cmake does not name $p/lib/cmake/Kokkos"
[ -f "$p/share/joule/kokkos-programs/kokkos/example/README" ] && [ -f "$p/share/joule/kokkos-programs/kokkos-kernels/perf_test/blas/README" ] ||
  fail "cold: the kept program sources are missing"

if [ "$part" = kills ]; then
  n="$(steps)"
  run warm "$p"
  [ "$rc" = 0 ] || fail "warm: exit $rc"
  report warm warm
  expect warm "Kokkos \+ Kokkos-Kernels already in $p"
  ! grep -q 'building' "$work/out-warm" || fail "warm: it built something"
  [ "$(steps)" = "$n" ] || fail "warm: stand-in steps ran: $(tail -n +$((n + 1)) "$work/steps" | tr '\n' ' ')"
  whole warm "$p"

  # --- SIGKILL at three points, each recovered by the next run ---------------------------------------
  for step in kokkos-build kernels-build kernels-install; do
    p="$work/cache/killed-$step"
    interrupt "killed-$step" "$p" "$step"
    [ -e "$p.partial" ] || fail "killed-$step: no $p.partial (was the run staged?)"
    [ ! -e "$p" ] || fail "killed-$step: $p exists after an interrupted run"
    run "after-$step" "$p"
    [ "$rc" = 0 ] || fail "after-$step: exit $rc"
    once "after-$step" "$label: removing $p.partial, left unfinished by an interrupted run"
    report "after-$step" repaired
    whole "after-$step" "$p"
  done

  # --- a failing Kokkos-Kernels build: its log kept, then repaired --------------------------------------
  p="$work/cache/failed"
  run failed "$p" STANDIN_FAIL=kernels-build
  [ "$rc" != 0 ] || fail "failed: exit 0 with a failing Kokkos-Kernels build"
  expect failed "building kokkos-kernels from .* failed"
  [ -f "$p.failed-kokkos-kernels.log" ] && grep -q "stand-in error: kernels-build fails as asked" "$p.failed-kokkos-kernels.log" ||
    fail "failed: no $p.failed-kokkos-kernels.log with the build's error"
  [ ! -e "$p" ] || fail "failed: $p exists after a failed build"
  run after-failed "$p"
  [ "$rc" = 0 ] || fail "after-failed: exit $rc"
  once after-failed "$label: removing $p.partial, left unfinished by an interrupted run"
  report after-failed repaired
  whole after-failed "$p"

fi

if [ "$part" = stamps ]; then
  # --- a prefix without a stamp (the old script, interrupted), and another recipe's -------------------
  p="$work/cache/nostamp"
  cp -a "$work/cache/kokkos" "$p"; rm "$p/.joule-complete"; rm "$p/include/KokkosBlas.hpp"
  run nostamp "$p"
  [ "$rc" = 0 ] || fail "nostamp: exit $rc"
  once nostamp "$label: $p has no stamp (an interrupted run, or not made by joule's recipe): removing it and making it again"
  report nostamp repaired
  whole nostamp "$p"

  p="$work/cache/stale"
  cp -a "$work/cache/kokkos" "$p"; echo "joule-deps v3: an older recipe" >"$p/.joule-complete"
  run stale "$p"
  [ "$rc" = 0 ] || fail "stale: exit $rc"
  once stale "$label: $p was made by another recipe: making it again"
  report stale cold
  whole stale "$p"

  # --- an installed file naming the staging folder: refused, nothing renamed into place ---------------
  p="$work/cache/leak"
  run leak "$p" STANDIN_LEAK=1
  [ "$rc" != 0 ] || fail "leak: exit 0 with an installed file naming the staging folder"
  expect leak "ERROR: these installed files name the staging folder $p\.partial, which is renamed to $p: $p/share/kokkoskernels/kokkos-dir\.txt "
  [ ! -e "$p" ] || fail "leak: $p was renamed into place"

fi

[ ! -s "$calls" ] || fail "apt, dpkg-query or sudo was called: $(tr '\n' ';' <"$calls")"
if [ "$part" = kills ]; then
    echo "PASS: install-deps.sh (stand-in Kokkos + Kokkos-Kernels) cold then warm (nothing built); SIGKILL while Kokkos builds, Kokkos-Kernels builds or installs, and a failing build (log kept): each recovered by the next run in one line, whole and stamped, config files naming the final prefix"
  else
    echo "PASS: install-deps.sh (stand-in Kokkos + Kokkos-Kernels) cold; a prefix without stamp and one of another recipe each rebuilt in one line, whole and stamped, config files naming the final prefix; a staging path left in an installed file refused"
fi
