#!/usr/bin/env bash
# apps/scripts/install-deps.sh without apt (issue 53): given Kokkos_ROOT, or where dpkg-query and
# apt-get are missing, it checks what is there and never calls dpkg-query, apt-get or sudo. Stubs
# of the three, first on PATH, write each call to a file and fail; no case may call them:
#   - an empty prefix, and one holding a Kokkos 3.2.0: exit non-zero, naming Kokkos and >= 3.4;
#   - the real prefix (this build's Kokkos, argument 1: a prefix or Kokkos_DIR; else the default
#     install's, `install-deps.sh --print-prefix`, Kokkos 3.4.1): the check passes, exit 0;
#   - no Kokkos_ROOT but no dpkg-query/apt-get on PATH, and JOULE_NO_APT=1: the same check, then a
#     clear stop (Debian's Kokkos source cannot be fetched without apt).
# No network, nothing built or installed; about 3 s.
# Usage: install_deps_no_apt.sh [KOKKOS_PREFIX | Kokkos_DIR]
set -euo pipefail
repo="$(cd "$(dirname "$0")/../.." && pwd)"
script="$repo/apps/scripts/install-deps.sh"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
unset JOULE_NO_APT KOKKOS_SRC KOKKOS_KERNELS_SRC JOULE_KOKKOS_BACKEND JOULE_DEPS_PREFIX Kokkos_ROOT

calls="$work/calls"
: >"$calls"
mkdir -p "$work/stubs"
for tool in dpkg-query apt-get sudo; do
  printf '#!/bin/sh\necho "%s $*" >>"%s"\nexit 1\n' "$tool" "$calls" >"$work/stubs/$tool"
  chmod +x "$work/stubs/$tool"
done
PATH="$work/stubs:$PATH"
for tool in dpkg-query apt-get sudo; do
  [ "$(command -v "$tool")" = "$work/stubs/$tool" ] || fail "the $tool stub is not the first on PATH"
done

run() {  # run NAME VAR=VALUE...: install-deps.sh with these variables; sets rc, output in $work/out-NAME
  set +e
  env "${@:2}" bash "$script" >"$work/out-$1" 2>&1
  rc=$?
  set -e
  echo "== $1 (exit $rc)"; sed 's/^/   /' "$work/out-$1"
}
expect() {  # expect NAME REGEX: the output of run NAME matches
  grep -Eq -- "$2" "$work/out-$1" || fail "$1: no line matches '$2'"
}
no_calls() {
  [ ! -s "$calls" ] || fail "$1 called $(tr '\n' ';' <"$calls")"
}

# A prefix without Kokkos.
mkdir -p "$work/empty"
run empty Kokkos_ROOT="$work/empty"
[ "$rc" != 0 ] || fail "empty: exit 0 for a prefix without Kokkos"
expect empty "MISSING +Kokkos >= 3\.4: no KokkosConfig\.cmake under Kokkos_ROOT=$work/empty"
expect empty "ERROR: .*required dependencies missing"
no_calls empty

# A prefix holding a Kokkos older than joule's minimum.
mkdir -p "$work/old/lib/cmake/Kokkos"
touch "$work/old/lib/cmake/Kokkos/KokkosConfig.cmake"
echo 'set(PACKAGE_VERSION "3.2.0")' >"$work/old/lib/cmake/Kokkos/KokkosConfigVersion.cmake"
run old Kokkos_ROOT="$work/old"
[ "$rc" != 0 ] || fail "old: exit 0 for Kokkos 3.2.0"
expect old "MISSING +Kokkos >= 3\.4: found 3\.2\.0 at $work/old/lib/cmake/Kokkos"
no_calls old

# The real prefix: this build's Kokkos, or the default install's.
real="${1:-}"
real="$(printf '%s' "$real" | sed -E 's#/(lib[^/]*|share)(/[^/]*-linux-gnu)?/cmake/[^/]+/?$##')"
[ -n "$real" ] || real="$(bash "$script" --print-prefix)"
default="$(bash "$script" --print-prefix)"
[ -d "$real" ] || fail "no Kokkos prefix $real (run make deps, or pass this build's Kokkos_DIR)"
run real Kokkos_ROOT="$real"
[ "$rc" = 0 ] || fail "real: exit $rc for $real"
expect real "ok +Kokkos [0-9]"
[ "$real" != "$default" ] || expect real "ok +Kokkos 3\.4\.0?1 "
# Kokkos-Kernels where this build found one (KokkosKernels_DIR); else the note that joule's GEMMs
# call the BLAS directly, and OpenBLAS required for it.
if [ -n "${KokkosKernels_DIR:-}" ] && [ "${KokkosKernels_DIR%-NOTFOUND}" = "$KokkosKernels_DIR" ]; then
  expect real "ok +Kokkos-Kernels"
else
  expect real "note +no Kokkos-Kernels .*joule's GEMMs will call the BLAS directly"
  expect real "ok +OpenBLAS"
fi
expect real "building none, installing nothing"
no_calls real

# No dpkg-query or apt-get at all (RHEL, SLES, Cray): every other program of PATH, linked.
mkdir -p "$work/path"
IFS=: read -ra dirs <<<"$PATH"
for d in "${dirs[@]}"; do
  [ "$d" != "$work/stubs" ] && [ -d "$d" ] || continue
  cp -s -n "$d"/* "$work/path/" 2>/dev/null || true
done
rm -f "$work/path/dpkg-query" "$work/path/apt-get" "$work/path/sudo"
run no_dpkg PATH="$work/path"
[ "$rc" != 0 ] || fail "no_dpkg: exit 0 without Kokkos_ROOT and without apt"
expect no_dpkg "checking joule's dependencies without apt \((no dpkg-query/apt-get here|[A-Za-z_]+(_ROOT|_HOME) is given)\)"
expect no_dpkg "ok +CMake"
expect no_dpkg "Kokkos 3\.4\.1 cannot be fetched: give Kokkos_ROOT="
no_calls no_dpkg

run no_apt JOULE_NO_APT=1
[ "$rc" != 0 ] || fail "no_apt: exit 0 without Kokkos_ROOT and without apt"
expect no_apt "without apt \(JOULE_NO_APT=1\)"
no_calls no_apt

# The control: the Debian path (JOULE_NO_APT=0, as with no *_ROOT) does reach the stubs, which
# fail before anything is fetched or built.
run debian JOULE_NO_APT=0 JOULE_DEPS_PREFIX="$work/debian-prefix"
[ "$rc" != 0 ] || fail "debian: exit 0 with failing apt stubs"
grep -q '^dpkg-query ' "$calls" || fail "debian: the Debian path did not reach the dpkg-query stub"
grep -Eq '^(apt-get|sudo) ' "$calls" || fail "debian: the Debian path did not reach the apt-get or sudo stub"
[ ! -e "$work/debian-prefix" ] || fail "debian: something was written to the prefix"

echo "PASS: without apt install-deps.sh called no dpkg-query, apt-get or sudo (the Debian path, the control, did); Kokkos_ROOT=$real passes, a missing or 3.2.0 Kokkos fails naming >= 3.4"
