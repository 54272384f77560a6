#!/usr/bin/env bash
# cmake/compile-check/compile_check.sh --fetch-only made whole or not at all (issue 66): the Kokkos
# 4.5/5 headers are fetched and unpacked in CACHE/fetch.partial, moved into place (CACHE/debs,
# CACHE/<package>: where they always were) and stamped last, so that a run interrupted anywhere is
# recovered by the next one, and a cache the old script made whole stays as it is (its .debs, whose
# `ls -l` is part of the reused CUDA batches' keys, untouched). apt-get is a stub first on PATH (no
# network): `download` copies small real .debs built here with dpkg-deb (stand-in headers with the
# Kokkos versions the script checks), so dpkg -x is the real one; nvcc is a stub too (only its
# toolkit root is asked before the fetch). A stub can hold (marker, then wait) or fail:
#   - cold, then warm (no apt-get; `ls -l debs` and passed-batches/ unchanged);
#   - the old script's whole cache (.unpacked, no stamp): stamped as it is, nothing fetched, in one line;
#   - SIGKILL of the script's process group during the download and in the middle of the second
#     package's dpkg -x; the old script's cache interrupted in dpkg -x (no .unpacked, half a
#     package); a failing apt-get update: each repaired by the next run, in one line;
#   - another recipe's stamp: fetched again ("cold");
# (the interrupted runs start from another recipe's cache: they have something to fetch)
# and in every case passed-batches/ (the reused batches' logs) survives. About 3 s.
set -euo pipefail
repo="$(cd "$(dirname "$0")/../.." && pwd)"
source "$repo/tests/scripts/detail/interrupt.sh"  # kill_when_held
script="$repo/cmake/compile-check/compile_check.sh"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
unset STANDIN_HOLD STANDIN_FAIL JOULE_CACHE_REPORT JOULE_COMPILE_CHECK_ONLY
real_dpkg="$(command -v dpkg)" || fail "no dpkg here (dpkg -x and dpkg-deb are needed)"
command -v dpkg-deb >/dev/null || fail "no dpkg-deb here"
packages=(libkokkos-dev libtrilinos-kokkos-dev libtrilinos-kokkos-kernels-dev)

# The stand-in packages, built once: KokkosCore_config.h with the versions the script checks.
make_deb() {  # make_deb PACKAGE VERSION INCLUDE-DIR DEFINE
  local t="$work/pkg-$1"
  mkdir -p "$t/DEBIAN" "$t/usr/include/$3/impl"
  printf 'Package: %s\nVersion: %s\nArchitecture: all\nMaintainer: joule tests <tests@joule.invalid>\nDescription: stand-in\n' \
    "$1" "$2" >"$t/DEBIAN/control"
  echo "$4" >"$t/usr/include/$3/$( [ "$3" = kokkos ] && echo KokkosCore_config.h || echo KokkosKernels_config.h)"
  for i in $(seq 1 12); do echo "// $1 stand-in header $i" >"$t/usr/include/$3/impl/h$i.hpp"; done
  dpkg-deb --root-owner-group -Znone -b "$t" "$work/debs/${1}_${2}_all.deb" >/dev/null
}
mkdir -p "$work/debs"
make_deb libkokkos-dev 5.2.2-2 kokkos '#define KOKKOS_VERSION 50202'
make_deb libtrilinos-kokkos-dev 16.1.0-5 kokkos '#define KOKKOS_VERSION 40500'
make_deb libtrilinos-kokkos-kernels-dev 16.1.0-5 trilinos '#define KOKKOSKERNELS_VERSION 40500'
expected() { (cd "$work/pkg-$1" && find usr -type f | LC_ALL=C sort); }

mkdir -p "$work/stubs" "$work/cuda/include"
cat >"$work/stubs/step" <<EOF
#!/bin/sh
if [ "\${STANDIN_HOLD:-}" = "\$1" ]; then : >"$work/held-\$1"; while :; do sleep 1; done; fi
if [ "\${STANDIN_FAIL:-}" = "\$1" ]; then echo "stand-in: \$1 fails as asked" >&2; exit 1; fi
exit 0
EOF
calls="$work/calls"; : >"$calls"
cat >"$work/stubs/apt-get" <<EOF
#!/bin/bash
echo "apt-get \$*" >>"$calls"
while [ \$# -gt 0 ]; do
  case "\$1" in
    -o) shift 2 ;;
    -q) shift ;;
    update) exec "$work/stubs/step" update ;;
    download) shift; "$work/stubs/step" download || exit 100
              for p in "\$@"; do cp "$work"/debs/"\$p"_*.deb . || exit 100; done; exit 0 ;;
    *) break ;;
  esac
done
echo "apt-get stub: unexpected call \$*" >&2; exit 1
EOF
# dpkg -x, then (STANDIN_HOLD=unpack-PACKAGE) half the package's headers taken away before holding:
# the state a SIGKILL in the middle of dpkg -x leaves.
cat >"$work/stubs/dpkg" <<EOF
#!/bin/sh
[ "\$1" = -x ] || { echo "dpkg stub: only -x is expected, got \$*" >&2; exit 1; }
"$real_dpkg" -x "\$2" "\$3" || exit \$?
p="\$(basename "\$2")"; p="\${p%%_*}"
if [ "\${STANDIN_HOLD:-}" = "unpack-\$p" ]; then rm -f "\$3"/usr/include/*/impl/h1*.hpp; fi
exec "$work/stubs/step" "unpack-\$p"
EOF
# nvcc: asked only for its toolkit root before the fetch.
printf '#!/bin/sh\necho "#\\$ TOP=%s" >&2\n' "$work/cuda" >"$work/stubs/nvcc"
for t in sudo dpkg-query; do printf '#!/bin/sh\necho "%s $*" >>"%s"\nexit 1\n' "$t" "$calls" >"$work/stubs/$t"; done
chmod +x "$work/stubs"/*
export PATH="$work/stubs:$PATH" NVCC="$work/stubs/nvcc"

cache="$work/cache/compile-check"
label="Kokkos 4.5/5 headers (compile check)"
run() {  # run NAME [VAR=VALUE...]: --fetch-only; sets rc, output in $work/out-NAME
  local name="$1"; shift
  : >"$work/report-$name"
  set +e
  env JOULE_COMPILE_CHECK_CACHE="$cache" JOULE_CACHE_REPORT="$work/report-$name" "$@" bash "$script" --fetch-only \
    >"$work/out-$name" 2>&1
  rc=$?
  set -e
  echo "== $name (exit $rc)"; sed 's/^/   /' "$work/out-$name"
}
interrupt() {  # interrupt NAME STEP: the script in its own process group, SIGKILLed while STEP holds
  local name="$1" step="$2"
  rm -f "$work/held-$step"
  kill_when_held "$work/held-$step" "$work/out-$name" "$work/out-$name" \
    env JOULE_COMPILE_CHECK_CACHE="$cache" STANDIN_HOLD="$step" bash "$script" --fetch-only ||
    { cat "$work/out-$name" >&2; fail "$name: the script never held in $step"; }
  echo "== $name: killed (SIGKILL to its process group) while $step held"
}
once() {  # once NAME TEXT: exactly one line of the run's output holds TEXT
  [ "$(grep -Fc -- "$2" "$work/out-$1" || true)" = 1 ] || fail "$1: not exactly one line holds '$2'"
}
report() {
  [ "$(wc -l <"$work/report-$1")" = 1 ] && grep -q "^$label	$2	" "$work/report-$1" ||
    fail "$1: JOULE_CACHE_REPORT holds '$(cat "$work/report-$1")', expected one line '$label<TAB>$2<TAB>...'"
}
whole() {  # whole NAME: exit 0, every package whole, the stamp and .unpacked there, passed-batches kept
  local p
  [ "$rc" = 0 ] || fail "$1: exit $rc"
  grep -q "Kokkos 50202 (libkokkos-dev), Kokkos 40500" "$work/out-$1" || fail "$1: the versions were not reported"
  [ ! -e "$cache/fetch.partial" ] || fail "$1: $cache/fetch.partial is left"
  grep -qx "joule compile-check headers v[0-9]*: deb http://deb.debian.org/debian sid main, ${packages[*]}" "$cache/.headers-complete" ||
    fail "$1: the stamp is missing or holds '$(cat "$cache/.headers-complete" 2>/dev/null)'"
  [ -f "$cache/.unpacked" ] || fail "$1: no .unpacked (older checkouts look for it)"
  for p in "${packages[@]}"; do
    [ "$(cd "$cache/$p" && find usr -type f | LC_ALL=C sort)" = "$(expected "$p")" ] || fail "$1: $cache/$p is not whole"
    compgen -G "$cache/debs/${p}_*.deb" >/dev/null || fail "$1: no $p .deb in $cache/debs"
  done
  [ "$(ls "$cache/debs" | wc -l)" = 3 ] || fail "$1: $cache/debs holds $(ls "$cache/debs")"
  [ -f "$cache/apt/sources.list" ] || fail "$1: no $cache/apt/sources.list"
  [ "$(cat "$cache/passed-batches/k.log" 2>/dev/null)" = "a passed batch" ] || fail "$1: passed-batches/k.log is gone"
}
downloads() { grep -c ' download ' "$calls" || true; }
batches() { mkdir -p "$cache/passed-batches"; echo "a passed batch" >"$cache/passed-batches/k.log"; }

mkdir -p "$cache"; batches   # the reused batches' logs: no fetch may remove them
run cold
whole cold; report cold cold
run warm
whole warm; report warm warm
[ "$(downloads)" = 1 ] || fail "warm: apt-get was called: $(tail -1 "$calls")"
debs_ls="$(ls -l --time-style=full-iso "$cache/debs")"

# The old script's whole cache: .unpacked without the stamp.
rm "$cache/.headers-complete"
run old-whole
whole old-whole; report old-whole warm
once old-whole "$label: $cache, fetched whole before the stamp existed (.unpacked), is stamped as it is"
[ "$(downloads)" = 1 ] || fail "old-whole: apt-get was called: $(tail -1 "$calls")"
[ "$(ls -l --time-style=full-iso "$cache/debs")" = "$debs_ls" ] || fail "old-whole: ls -l $cache/debs changed (the reused batches' keys with it)"
run old-whole-again
whole old-whole-again; report old-whole-again warm
[ ! -s "$work/out-old-whole-again" ] || ! grep -q "$label" "$work/out-old-whole-again" || fail "old-whole-again: it said something about the cache"

for step in download unpack-libtrilinos-kokkos-dev; do
  echo "another recipe" >"$cache/.headers-complete"   # so that the run fetches
  interrupt "killed-$step" "$step"
  [ ! -e "$cache/.headers-complete" ] || fail "killed-$step: the stamp is still there during a fetch"
  run "after-$step"
  whole "after-$step"; report "after-$step" repaired
  once "after-$step" "$label: $cache holds an unfinished fetch (no stamp; an interrupted run): removing it and fetching again"
done

# The old script interrupted in dpkg -x: no .unpacked, the first package half there.
rm -rf "$cache/.headers-complete" "$cache/.unpacked" "${packages[@]/#/$cache/}"
"$real_dpkg" -x "$work/debs/libkokkos-dev_5.2.2-2_all.deb" "$cache/libkokkos-dev"; rm -f "$cache"/libkokkos-dev/usr/include/kokkos/impl/h1*.hpp
run old-interrupted
whole old-interrupted; report old-interrupted repaired
once old-interrupted "$label: $cache holds an unfinished fetch (no stamp; an interrupted run): removing it and fetching again"

echo "another recipe" >"$cache/.headers-complete"
run failed STANDIN_FAIL=update
[ "$rc" != 0 ] || fail "failed: exit 0 with a failing apt-get update"
grep -q "FAILED: apt-get update of the sid package lists failed" "$work/out-failed" || fail "failed: the error does not name apt-get update"
run after-failed
whole after-failed; report after-failed repaired

echo "another recipe" >"$cache/.headers-complete"
run stale
whole stale; report stale cold
once stale "$label: $cache was fetched by another recipe: fetching again"

! grep -Eq '^(sudo|dpkg-query) ' "$calls" || fail "sudo or dpkg-query was called: $(grep -E '^(sudo|dpkg-query) ' "$calls")"
echo "PASS: compile_check.sh --fetch-only (stub apt-get and nvcc, real dpkg -x of stand-in .debs) cold then warm; the old script's whole cache stamped as it is (debs untouched); SIGKILL during the download and in the middle of dpkg -x, the old script's interrupted cache and a failing update each repaired by the next run in one line; passed-batches kept throughout"
