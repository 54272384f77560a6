#!/usr/bin/env bash
# The compiler cache (ccache, through cmake/ccache_launcher.sh) survives an interrupted or damaged
# write (issue 66): ccache writes each result to a temporary file and renames it, and checks what
# it reads (a checksum), so a damaged entry is a miss, not a wrong object. Shown, not assumed, with
# a tiny compile (g++ -O1 -c, no debug info, so objects compare byte for byte) into a private
# CCACHE_DIR:
#   - a cached compile, then a hit: both objects identical to an uncached g++ compile;
#   - SIGKILL of the launcher's process group while the compiler runs under ccache (a stand-in
#     compiler that holds: ccache has its temporary files open in the cache folder): the next
#     compile succeeds, its object identical;
#   - every file in the cache truncated to half its size (what a write cut short would leave,
#     had ccache not renamed whole files into place), then every file overwritten with garbage of
#     the same size: each time the next compile succeeds, its object identical, and the one after
#     that is a hit again (the entry was written anew).
# A SIGKILL in the middle of ccache's own write of a result is not arranged (no deterministic point
# to stop it at): the truncated and garbage files stand for what such a write could leave. ~2 s.
set -euo pipefail
repo="$(cd "$(dirname "$0")/../.." && pwd)"
source "$repo/tests/scripts/detail/interrupt.sh"  # kill_when_held
launcher="$repo/cmake/ccache_launcher.sh"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
command -v ccache >/dev/null || fail "no ccache on PATH (make deps installs it)"
command -v g++ >/dev/null || fail "no g++ on PATH"
# Only this test's settings: no caller's ccache configuration or cache.
while IFS= read -r v; do unset "$v"; done < <(env | sed -n 's/^\(CCACHE_[A-Za-z0-9_]*\)=.*/\1/p')
export CCACHE_DIR="$work/ccache" CCACHE_CONFIGPATH="$work/ccache.conf" CCACHE_MAXSIZE=0
: >"$CCACHE_CONFIGPATH"

# The stand-in compiler: g++, but it holds (marker written, waits to be killed) when HOLD is set.
# Its path and contents are the same in every compile, so they key the cache alike.
mkdir -p "$work/bin" "$work/src"
cat >"$work/bin/cxx" <<EOF
#!/bin/sh
if [ -n "\${HOLD:-}" ]; then
  case " \$* " in *" -c "*) : >"$work/held"; while :; do sleep 1; done ;; esac
fi
exec g++ "\$@"
EOF
chmod +x "$work/bin/cxx"
cat >"$work/src/unit.cpp" <<'EOF'
#include <vector>
#include <numeric>
int total(int n) { std::vector<int> v(n); std::iota(v.begin(), v.end(), 1); return std::accumulate(v.begin(), v.end(), 0); }
EOF
# Another unit for the interrupted compile: a miss (a -D alone would hit the preprocessed entry).
sed 's/total/killed_total/' "$work/src/unit.cpp" >"$work/src/killed.cpp"
cd "$work/src"
"$work/bin/cxx" -O1 -c unit.cpp -o reference.o   # uncached
stat_of() { ccache --print-stats | awk -v k="$1" '$1 == k { print $2 }'; }
compile() {  # compile NAME: through the launcher; the object must be the uncached one
  rm -f unit.o
  bash "$launcher" "$work/bin/cxx" -O1 -c unit.cpp -o unit.o 2>"$work/err-$1" ||
    fail "$1: the compile through ccache failed: $(cat "$work/err-$1")"
  cmp -s unit.o reference.o || fail "$1: the object differs from the uncached compile's"
}
hits() { echo $(( $(stat_of direct_cache_hit) + $(stat_of preprocessed_cache_hit) )); }

compile cold
[ "$(stat_of cache_miss)" = 1 ] || fail "cold: expected one miss, stats: $(ccache --print-stats | tr '\n' ' ')"
compile warm
[ "$(hits)" = 1 ] || fail "warm: expected a hit"
echo "== cold then warm: objects identical to the uncached compile"

# SIGKILL while the compiler runs under ccache.
rm -f "$work/held"
kill_when_held "$work/held" /dev/null "$work/err-hold" \
  env HOLD=1 bash "$launcher" "$work/bin/cxx" -O1 -c killed.cpp -o killed.o ||
  { cat "$work/err-hold" >&2; fail "killed: the compiler never held"; }
rm -f killed.o
bash "$launcher" "$work/bin/cxx" -O1 -c killed.cpp -o killed.o 2>"$work/err-killed" ||
  fail "after the kill: the same compile failed: $(cat "$work/err-killed")"
"$work/bin/cxx" -O1 -c killed.cpp -o killed-reference.o
cmp -s killed.o killed-reference.o || fail "after the kill: the object differs from the uncached compile's"
compile after-kill
echo "== SIGKILL while the compiler ran under ccache: the next compiles succeed, objects identical"

# Every file of the cache damaged: truncated to half, then garbage of the same size.
damage() {  # damage half|garbage
  local f n=0 size
  while IFS= read -r -d '' f; do
    size="$(stat -c %s "$f")"
    if [ "$1" = half ]; then truncate -s $((size / 2)) "$f"
    else head -c "$size" /dev/urandom >"$f"; fi
    n=$((n + 1))
  done < <(find "$CCACHE_DIR" -type f ! -name ccache.conf -print0)
  [ "$n" -ge 2 ] || fail "$1: only $n cache files to damage (is the cache where the test put it?)"
  echo "== $n cache files damaged ($1)"
}
for how in half garbage; do
  damage "$how"
  compile "after-$how"
  h="$(hits)"
  compile "after-$how-again"
  [ "$(hits)" -gt "$h" ] || fail "after-$how-again: no hit: the entry was not written anew"
done
echo "PASS: ccache through cmake/ccache_launcher.sh: cold, warm, after a SIGKILL mid-compile and after every cache file was truncated or overwritten with garbage, each compile succeeded with an object identical to an uncached g++ compile (and hit again after)"
