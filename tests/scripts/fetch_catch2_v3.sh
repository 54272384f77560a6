#!/usr/bin/env bash
# Catch2 v3 for building the tests against it: Debian's libcatch2-dev from bookworm-backports,
# fetched with apt-get download through a private sources list and unpacked into a cache folder
# (never installed, so the system's Catch2 v2 stays what `make test` uses). Prints the folder to
# pass as -DCatch2_DIR (the only line on stdout; messages go to stderr). Environment:
# JOULE_CACHE_REPORT, JOULE_CATCH2_V3_CACHE (default ~/.cache/joule/catch2-v3).
# The cache is made whole or not at all (apps/scripts/detail/cache_step.sh): fetched and unpacked
# in CACHE.partial, stamped (.joule-complete, holding the recipe below) and renamed when complete.
# A folder without the stamp (an interrupted dpkg -x, or one made before the stamp existed) is
# removed and fetched again, said in one line.
set -euo pipefail
cache="${JOULE_CATCH2_V3_CACHE:-$HOME/.cache/joule/catch2-v3}"
log() { printf 'fetch_catch2_v3.sh: %s\n' "$*" >&2; }
die() { printf 'fetch_catch2_v3.sh: ERROR: %s\n' "$*" >&2; exit 1; }
# shellcheck source=../../apps/scripts/detail/cache_step.sh
. "$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)/apps/scripts/detail/cache_step.sh"
label="Catch2 v3"
sources="deb http://deb.debian.org/debian bookworm-backports main"
# Bump v when how the cache is made changes: every cache is then made again.
recipe="joule catch2-v3 v1: $sources, libcatch2-dev"
config_dir() { find "$1/root" -name Catch2Config.cmake -printf '%h\n' 2>/dev/null | head -1; }
check_version() {  # check_version DIR: the Catch2 there is 3.x
  local v; v="$(sed -n 's/.*PACKAGE_VERSION "\([0-9.]*\)".*/\1/p' "$1/Catch2ConfigVersion.cmake" 2>/dev/null || true)"
  case "$v" in 3.*) ;; *) die "$1 holds Catch2 '$v', expected 3.x (remove $cache and run again)" ;; esac
}

mkdir -p "$(dirname "$cache")"
if cache_begin "$label" "$cache" .joule-complete "$recipe"; then
  part="$cache.partial"
  mkdir -p "$part/lists/partial" "$part/debs"
  echo "$sources" >"$part/sources.list"
  opts=(-o "Dir::Etc::SourceList=$part/sources.list" -o Dir::Etc::SourceParts=/dev/null
        -o "Dir::State::Lists=$part/lists" -o Debug::NoLocking=1 -o APT::Sandbox::User=root)
  log "fetching libcatch2-dev from bookworm-backports into $cache (download only, nothing is installed)"
  apt-get "${opts[@]}" update -q >/dev/null || die "apt-get update of bookworm-backports failed (the network? run again)"
  (cd "$part/debs" && apt-get "${opts[@]}" download libcatch2-dev >/dev/null) ||
    die "bookworm-backports no longer offers libcatch2-dev (or the download failed: run again)"
  debs=("$part"/debs/libcatch2-dev_*.deb)
  [ -f "${debs[0]}" ] || die "apt-get download left no libcatch2-dev_*.deb in $part/debs"
  dpkg -x "${debs[0]}" "$part/root" || die "dpkg -x ${debs[0]} failed"
  dir="$(config_dir "$part")"
  [ -n "$dir" ] || die "${debs[0]} holds no Catch2Config.cmake"
  check_version "$dir"
  cache_commit "$cache" .joule-complete "$recipe" || die "could not rename $part to $cache"
  cache_report "$label" "$cache_state" "$(basename "${debs[0]}")"
fi
dir="$(config_dir "$cache")"
[ -n "$dir" ] || die "$cache is stamped but holds no Catch2Config.cmake (remove $cache and run again)"
check_version "$dir"
echo "$dir"
