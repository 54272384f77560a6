#!/usr/bin/env bash
# Catch2 v3 for building the tests against it: Debian's libcatch2-dev from bookworm-backports,
# fetched with apt-get download through a private sources list and unpacked into a cache folder
# (never installed, so the system's Catch2 v2 stays what `make test` uses). Prints the folder to
# pass as -DCatch2_DIR. Environment: JOULE_CATCH2_V3_CACHE (default ~/.cache/joule/catch2-v3).
set -euo pipefail
cache="${JOULE_CATCH2_V3_CACHE:-$HOME/.cache/joule/catch2-v3}"
config_dir() { find "$cache/root" -name Catch2Config.cmake -printf '%h\n' 2>/dev/null | head -1; }
if [ -z "$(config_dir)" ]; then
  rm -rf "$cache"; mkdir -p "$cache/lists/partial" "$cache/debs"
  echo "deb http://deb.debian.org/debian bookworm-backports main" > "$cache/sources.list"
  opts=(-o "Dir::Etc::SourceList=$cache/sources.list" -o Dir::Etc::SourceParts=/dev/null
        -o "Dir::State::Lists=$cache/lists" -o Debug::NoLocking=1 -o APT::Sandbox::User=root)
  apt-get "${opts[@]}" update -q >/dev/null || { echo "fetch_catch2_v3.sh: apt-get update of bookworm-backports failed" >&2; exit 1; }
  (cd "$cache/debs" && apt-get "${opts[@]}" download libcatch2-dev >/dev/null) ||
    { echo "fetch_catch2_v3.sh: bookworm-backports no longer offers libcatch2-dev" >&2; exit 1; }
  dpkg -x "$cache"/debs/libcatch2-dev_*.deb "$cache/root"
fi
dir="$(config_dir)"
version="$(sed -n 's/.*PACKAGE_VERSION "\([0-9.]*\)".*/\1/p' "$dir/Catch2ConfigVersion.cmake")"
case "$version" in 3.*) ;; *) echo "fetch_catch2_v3.sh: $dir holds Catch2 '$version', expected 3.x" >&2; exit 1 ;; esac
echo "$dir"
