#!/usr/bin/env bash
# What JOULE_HOST_TARGET resolves to (cmake/JouleHostTarget.cmake), configured on its own, a few
# seconds a case: Grace through an aarch64 compiler (Debian's g++-aarch64-linux-gnu, where installed)
# takes -mcpu=neoverse-v2 or GCC 12's -mcpu=demeter, with SVE; a Kokkos built for Grace keeps its
# own flags; this machine's x86-64 compiler is refused for Grace with the error that says why;
# flags the compiler refuses are named; a CPU build defaults to native, a CUDA one to generic.
# usage: check.sh WORK_DIR [CXX]
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
work="$1"
cxx="${2:-c++}"
mkdir -p "$work"
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
# configure NAME EXPECT(ok|error) ARGS...: configures into $work/NAME; prints result.txt or the
# error; fails (the text says why) where the configuration did not end as expected
configure() {
  local name="$1" expect="$2"
  shift 2
  rm -rf "${work:?}/$name"
  if cmake -S "$here" -B "$work/$name" "$@" >"$work/$name.log" 2>&1; then
    [ "$expect" = ok ] || { echo "$name: configured, where an error was expected"; return 1; }
    cat "$work/$name/result.txt"
  else
    [ "$expect" = error ] || { echo "$name: configuring failed:"; tail -15 "$work/$name.log"; return 1; }
    cat "$work/$name.log"
  fi
}
expect() {  # expect NAME TEXT OUTPUT: OUTPUT contains TEXT
  if grep -qF -- "$2" <<<"$3"; then echo "ok: $1: $2"; else fail "$1: no '$2' in:"; echo "$3"; fi
}
cross=(-DCMAKE_SYSTEM_NAME=Linux -DCMAKE_SYSTEM_PROCESSOR=aarch64 -DCMAKE_CXX_COMPILER=aarch64-linux-gnu-g++
       -DCMAKE_TRY_COMPILE_TARGET_TYPE=STATIC_LIBRARY)
if command -v aarch64-linux-gnu-g++ >/dev/null; then
  out="$(configure grace-aarch64 ok "${cross[@]}" -DJOULE_HOST_TARGET=grace)" || fail "$out"
  if grep -qE '^flags: -mcpu=(neoverse-v2|demeter)$' <<<"$out"; then echo "ok: grace-aarch64: $(head -1 <<<"$out")"
  else fail "grace-aarch64: not -mcpu=neoverse-v2 or -mcpu=demeter:"; echo "$out"; fi
  expect grace-aarch64 "Neoverse V2" "$out"
  out="$(configure grace-kokkos-arch ok "${cross[@]}" -DJOULE_HOST_TARGET=grace "-DKokkos_ARCH=HOPPER90;ARMV9_GRACE")" || fail "$out"
  if grep -qx 'flags: ' <<<"$out"; then echo "ok: grace-kokkos-arch: no flag of joule's"
  else fail "grace-kokkos-arch: joule adds flags of its own:"; echo "$out"; fi
  expect grace-kokkos-arch "Kokkos_ARCH_ARMV9_GRACE" "$out"
  out="$(configure generic-aarch64 ok "${cross[@]}" -DJOULE_HOST_TARGET=generic)" || fail "$out"
  expect generic-aarch64 "text: generic" "$out"
else
  echo "skipped: the aarch64 cases (no aarch64-linux-gnu-g++; Debian: apt-get install g++-aarch64-linux-gnu)"
fi
if [ "$(uname -m)" = x86_64 ]; then
  out="$(configure grace-x86 error -DCMAKE_CXX_COMPILER="$cxx" -DJOULE_HOST_TARGET=grace)" || fail "$out"
  expect grace-x86 "accepts neither -mcpu=neoverse-v2" "$out"
fi
out="$(configure refused error -DCMAKE_CXX_COMPILER="$cxx" "-DJOULE_HOST_TARGET=-O2 -mno-such-flag")" || fail "$out"
expect refused "refuses -mno-such-flag" "$out"
out="$(configure unknown error -DCMAKE_CXX_COMPILER="$cxx" -DJOULE_HOST_TARGET=neoverse)" || fail "$out"
expect unknown "allowed are native, grace, kokkos, generic" "$out"
out="$(configure default-cpu ok -DCMAKE_CXX_COMPILER="$cxx")" || fail "$out"
expect default-cpu "text: native (-m" "$out"
out="$(configure default-cuda ok -DCMAKE_CXX_COMPILER="$cxx" -DKokkos_ENABLE_CUDA=ON)" || fail "$out"
expect default-cuda "text: generic" "$out"
[ "$failures" = 0 ] || { echo "$failures check(s) failed"; exit 1; }
echo "host target checks passed"
