#!/usr/bin/env bash
# tests/scripts/fetch_catch2_v3.sh made whole or not at all (issue 66): its cache is fetched and
# unpacked in CACHE.partial, stamped and renamed when complete, so that a run interrupted anywhere
# is recovered by the next one. apt-get is a stub first on PATH (no network): `update` does nothing,
# `download libcatch2-dev` copies a small real .deb built here with dpkg-deb (a stand-in Catch2
# 3.4.0: config files and a few headers), so that dpkg -x is the real one; a dpkg wrapper can stop
# an unpack half done. A stub or the wrapper can be made to hold (marker written, then wait to be
# killed) or fail:
#   - cold: stdout is one line, the config folder; the cache is whole and stamped; report "cold";
#   - warm: a second run calls no apt-get, prints the same folder; report "warm";
#   - SIGKILL of the script's process group during the download and during dpkg -x (half the files
#     unpacked: the old script trusted any folder with a Catch2Config.cmake): the next run removes
#     CACHE.partial in one line, fetches again, the cache is whole; report "repaired";
#   - a failing apt-get download: exit non-zero naming it, nothing printed on stdout; then repaired;
#   - a cache of the old layout (no stamp; complete or not): removed and fetched again, in one line.
# Nothing outside a temp folder is read or written (JOULE_CATCH2_V3_CACHE); about 2 s.
set -euo pipefail
repo="$(cd "$(dirname "$0")/../.." && pwd)"
source "$repo/tests/scripts/detail/interrupt.sh"  # kill_when_held
script="$repo/tests/scripts/fetch_catch2_v3.sh"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
unset STANDIN_HOLD STANDIN_FAIL JOULE_CACHE_REPORT
real_dpkg="$(command -v dpkg)" || fail "no dpkg here (dpkg -x and dpkg-deb are needed)"
command -v dpkg-deb >/dev/null || fail "no dpkg-deb here"

# The stand-in package, built once.
pkg="$work/pkg"
mkdir -p "$pkg/DEBIAN" "$pkg/usr/lib/x86_64-linux-gnu/cmake/Catch2" "$pkg/usr/include/catch2/internal"
cat >"$pkg/DEBIAN/control" <<'EOF'
Package: libcatch2-dev
Version: 3.4.0-1
Architecture: all
Maintainer: joule tests <tests@joule.invalid>
Description: stand-in Catch2 v3 for fetch_catch2_v3_interrupted
EOF
echo 'set(Catch2_FOUND TRUE)' >"$pkg/usr/lib/x86_64-linux-gnu/cmake/Catch2/Catch2Config.cmake"
echo 'set(PACKAGE_VERSION "3.4.0")' >"$pkg/usr/lib/x86_64-linux-gnu/cmake/Catch2/Catch2ConfigVersion.cmake"
for i in $(seq 1 20); do echo "// stand-in header $i" >"$pkg/usr/include/catch2/internal/catch_$i.hpp"; done
echo '// stand-in' >"$pkg/usr/include/catch2/catch_all.hpp"
deb="$work/libcatch2-dev_3.4.0-1_all.deb"
dpkg-deb --root-owner-group -Znone -b "$pkg" "$deb" >/dev/null
expected_files="$(cd "$pkg" && find usr -type f | LC_ALL=C sort)"

# step STEP: in the stubs; holds when STANDIN_HOLD names STEP, fails when STANDIN_FAIL does.
mkdir -p "$work/stubs"
cat >"$work/stubs/step" <<EOF
#!/bin/sh
if [ "\${STANDIN_HOLD:-}" = "\$1" ]; then : >"$work/held-\$1"; while :; do sleep 1; done; fi
if [ "\${STANDIN_FAIL:-}" = "\$1" ]; then echo "stand-in: \$1 fails as asked" >&2; exit 1; fi
exit 0
EOF
calls="$work/calls"; : >"$calls"
cat >"$work/stubs/apt-get" <<EOF
#!/bin/sh
echo "apt-get \$*" >>"$calls"
for a in "\$@"; do
  case "\$a" in
    update) exec "$work/stubs/step" update ;;
    download) "$work/stubs/step" download || exit 100
              echo "Get:1 stand-in libcatch2-dev 3.4.0-1"; cp "$deb" .; exit 0 ;;
  esac
done
echo "apt-get stub: unexpected call" >&2; exit 1
EOF
# dpkg -x, then (STANDIN_HOLD=unpack) half the unpacked headers taken away before holding: the
# state a SIGKILL in the middle of dpkg -x leaves.
cat >"$work/stubs/dpkg" <<EOF
#!/bin/sh
[ "\$1" = -x ] || { echo "dpkg stub: only -x is expected, got \$*" >&2; exit 1; }
"$real_dpkg" -x "\$2" "\$3" || exit \$?
if [ "\${STANDIN_HOLD:-}" = unpack ]; then rm -f "\$3"/usr/include/catch2/internal/catch_1*.hpp; fi
exec "$work/stubs/step" unpack
EOF
for t in sudo dpkg-query; do printf '#!/bin/sh\necho "%s $*" >>"%s"\nexit 1\n' "$t" "$calls" >"$work/stubs/$t"; done
chmod +x "$work/stubs"/*
export PATH="$work/stubs:$PATH"

cache="$work/cache/catch2-v3"
confdir="$cache/root/usr/lib/x86_64-linux-gnu/cmake/Catch2"
label="Catch2 v3"
run() {  # run NAME [VAR=VALUE...]: sets rc; stdout in $work/out-NAME, stderr in $work/err-NAME
  local name="$1"; shift
  : >"$work/report-$name"
  set +e
  env JOULE_CATCH2_V3_CACHE="$cache" JOULE_CACHE_REPORT="$work/report-$name" "$@" bash "$script" \
    >"$work/out-$name" 2>"$work/err-$name"
  rc=$?
  set -e
  echo "== $name (exit $rc)"; sed 's/^/   stdout: /' "$work/out-$name"; sed 's/^/   stderr: /' "$work/err-$name"
}
interrupt() {  # interrupt NAME STEP: the script in its own process group, SIGKILLed while STEP holds
  local name="$1" step="$2"
  rm -f "$work/held-$step"
  kill_when_held "$work/held-$step" "$work/out-$name" "$work/out-$name" \
    env JOULE_CATCH2_V3_CACHE="$cache" STANDIN_HOLD="$step" bash "$script" ||
    { cat "$work/out-$name" >&2; fail "$name: the script never held in $step"; }
  echo "== $name: killed (SIGKILL to its process group) while $step held"
}
once() {  # once NAME TEXT: exactly one line of the run's stderr holds TEXT
  [ "$(grep -Fc -- "$2" "$work/err-$1" || true)" = 1 ] || fail "$1: not exactly one line holds '$2'"
}
report() {
  [ "$(wc -l <"$work/report-$1")" = 1 ] && grep -q "^$label	$2	" "$work/report-$1" ||
    fail "$1: JOULE_CACHE_REPORT holds '$(cat "$work/report-$1")', expected one line '$label<TAB>$2<TAB>...'"
}
whole() {  # whole NAME: exit 0, stdout the config folder alone, the cache complete and stamped
  [ "$rc" = 0 ] || fail "$1: exit $rc"
  [ "$(cat "$work/out-$1")" = "$confdir" ] || fail "$1: stdout is '$(cat "$work/out-$1")', expected the one line $confdir"
  [ ! -e "$cache.partial" ] || fail "$1: $cache.partial is left"
  [ -f "$cache/.joule-complete" ] || fail "$1: $cache has no stamp"
  grep -q "^joule catch2-v3 v[0-9]*: deb http://deb.debian.org/debian bookworm-backports main, libcatch2-dev$" "$cache/.joule-complete" ||
    fail "$1: the stamp holds '$(cat "$cache/.joule-complete")'"
  [ "$(cd "$cache/root" && find usr -type f | LC_ALL=C sort)" = "$expected_files" ] ||
    fail "$1: $cache/root does not hold the package's files: $(diff <(echo "$expected_files") <(cd "$cache/root" && find usr -type f | LC_ALL=C sort) | head)"
}
downloads() { grep -c ' download ' "$calls" || true; }

run cold
whole cold; report cold cold
[ "$(downloads)" = 1 ] || fail "cold: $(downloads) downloads"

run warm
whole warm; report warm warm
[ "$(downloads)" = 1 ] || fail "warm: apt-get was called: $(tail -1 "$calls")"
[ ! -s "$work/err-warm" ] || fail "warm: it said something: $(cat "$work/err-warm")"

for step in download unpack; do
  rm -rf "$cache"
  interrupt "killed-$step" "$step"
  [ -e "$cache.partial" ] && [ ! -e "$cache" ] || fail "killed-$step: expected $cache.partial and no $cache"
  run "after-$step"
  whole "after-$step"; report "after-$step" repaired
  once "after-$step" "$label: removing $cache.partial, left unfinished by an interrupted run"
done

rm -rf "$cache"
run failed STANDIN_FAIL=download
[ "$rc" != 0 ] || fail "failed: exit 0 with a failing download"
[ ! -s "$work/out-failed" ] || fail "failed: something was printed on stdout: $(cat "$work/out-failed")"
grep -q "fetch_catch2_v3.sh: ERROR: bookworm-backports no longer offers libcatch2-dev (or the download failed" "$work/err-failed" ||
  fail "failed: the error does not name the download"
run after-failed
whole after-failed; report after-failed repaired
once after-failed "$label: removing $cache.partial, left unfinished by an interrupted run"

# The old layout, as the old script left it interrupted in dpkg -x (a Catch2Config.cmake, half the
# headers, no stamp): removed and fetched again.
rm -rf "$cache"; mkdir -p "$cache/debs" "$cache/lists"; cp "$deb" "$cache/debs/"
"$real_dpkg" -x "$deb" "$cache/root"; rm -f "$cache"/root/usr/include/catch2/internal/catch_1*.hpp
run old-layout
whole old-layout; report old-layout repaired
once old-layout "$label: $cache has no stamp (an interrupted run, or not made by joule's recipe): removing it and making it again"

echo "another recipe" >"$cache/.joule-complete"
run stale
whole stale; report stale cold
once stale "$label: $cache was made by another recipe: making it again"

! grep -Eq '^(sudo|dpkg-query) ' "$calls" || fail "sudo or dpkg-query was called: $(grep -E '^(sudo|dpkg-query) ' "$calls")"
echo "PASS: fetch_catch2_v3.sh (stub apt-get, real dpkg -x of a stand-in .deb) cold then warm (no apt-get); SIGKILL during the download and in the middle of dpkg -x, a failing download, an old unstamped half-unpacked cache and another recipe's: each recovered by the next run in one line, whole and stamped, stdout the config folder alone"
