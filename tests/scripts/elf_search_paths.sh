#!/usr/bin/env bash
# Every ELF file the build made (joule, the energy tool, the tests, the fake NVML; a device bundle's
# binaries when given its folder) searches for its libraries only in absolute folders: no empty
# entry in a RUNPATH or RPATH (the loader reads it as the working directory, so a library planted
# where a user runs joule would be loaded into their process), no relative one (relative to the
# working directory too), and no folder of the build or source tree written as an absolute path
# (entries there must be $ORIGIN-relative; joule links none). readelf -d reads each.
# A positive control first: binaries linked with such entries, which the check must refuse.
# usage: elf_search_paths.sh C_COMPILER BUILD_DIR SOURCE_DIR [MORE_FOLDERS...]
set -euo pipefail
cc="$1" build="$2" src="$3"
shift 3
fail() { echo "FAIL: $*" >&2; exit 1; }
command -v readelf >/dev/null || fail "readelf is needed (Debian's binutils)"
build=$(cd "$build" && pwd -P) src=$(cd "$src" && pwd -P)

# Problems of one file's search paths, one per line; nothing when it is sound.
problems() {
  local file="$1" line tag paths entry
  { readelf -d "$file" 2>/dev/null || true; } | { grep -E '\((RPATH|RUNPATH)\)' || true; } | while IFS= read -r line; do
    tag=$(sed -E 's/.*\((RPATH|RUNPATH)\).*/\1/' <<<"$line")
    paths=$(sed -E 's/.*\[(.*)\]$/\1/' <<<"$line")
    # Every entry, empty ones included (a leading, trailing or doubled ':').
    while IFS= read -r -d: entry || [ -n "$entry" ]; do
      case "$entry" in
        '') echo "$tag [$paths] has an empty entry (the working directory)" ;;
        '$ORIGIN'|'$ORIGIN/'*|'${ORIGIN}'|'${ORIGIN}/'*) ;;
        /*)
          case "$entry/" in
            "$build"/*|"$src"/*) echo "$tag [$paths] names the tree $entry by its absolute path, not \$ORIGIN" ;;
          esac ;;
        *) echo "$tag [$paths] has the relative entry '$entry' (relative to the working directory)" ;;
      esac
    done < <(printf '%s:' "$paths")
  done
}

is_elf() { [ "$(head -c 4 "$1" 2>/dev/null | od -An -c | tr -d ' ')" = '177ELF' ]; }

# Positive control: the check finds a trailing ':', a relative entry and the tree by absolute path.
control=$(mktemp -d)
trap 'rm -rf "$control"' EXIT
echo 'int main(void) { return 0; }' >"$control/main.c"
"$cc" "$control/main.c" -o "$control/colon" -Wl,-rpath,/usr/lib:
"$cc" "$control/main.c" -o "$control/relative" -Wl,-rpath,lib
"$cc" "$control/main.c" -o "$control/tree" -Wl,-rpath,"$build/lib"
"$cc" "$control/main.c" -o "$control/sound" -Wl,-rpath,'$ORIGIN/../lib:/usr/lib/x86_64-linux-gnu/openmpi/lib'
problems "$control/colon" | grep -q "empty entry" || fail "the check misses a trailing ':'"
problems "$control/relative" | grep -q "relative entry 'lib'" || fail "the check misses a relative entry"
problems "$control/tree" | grep -q "by its absolute path" || fail "the check misses the build tree named absolutely"
[ -z "$(problems "$control/sound")" ] || fail "the check refuses a sound RUNPATH: $(problems "$control/sound")"

checked=0 bad=0
while IFS= read -r -d '' file; do
  is_elf "$file" || continue
  case "$(readelf -h "$file" 2>/dev/null || true)" in *"Type:"*EXEC*|*"Type:"*DYN*) ;; *) continue ;; esac  # not objects
  checked=$((checked + 1))
  found=$(problems "$file")
  if [ -n "$found" ]; then
    bad=$((bad + 1))
    echo "$file:" >&2
    sed 's/^/  /' <<<"$found" >&2
  fi
done < <(find "$build" "$@" -type f \( -perm -u+x -o -name '*.so' -o -name '*.so.*' \) -not -path '*/CMakeFiles/*' -print0)
[ "$checked" -gt 0 ] || fail "no ELF file found under $build $*"
[ "$bad" = 0 ] || fail "$bad of $checked ELF files search for libraries where another user may plant one"
echo "ok: $checked ELF files: every RUNPATH and RPATH entry absolute, none empty, the tree only through \$ORIGIN"
echo PASS
