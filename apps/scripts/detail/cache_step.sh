# One cached dependency made whole or not at all (sourced by the scripts that fill ~/.cache/joule:
# install-deps.sh, aarch64_cross.sh, sid_root.sh, fetch_catch2_v3.sh, compile_check.sh).
#
# The protocol, the same for every cache:
#   - a cache is a folder DIR whose stamp file (DIR/STAMP) holds the recipe it was made by, and the
#     stamp is written last: a folder without it, or with another recipe, was never finished or was
#     made another way, and is removed and made again, said in one line;
#   - it is made in DIR.partial, beside DIR (the same file system, so that the rename is one step),
#     and renamed to DIR only when complete: an interruption (a time limit, Ctrl-C, SIGKILL, a full
#     disk) leaves DIR.partial, which the next run removes (or, where the step can, repairs);
#   - each step says what it found in JOULE_CACHE_REPORT, when set (.ci/run's table reads it): one
#     line "LABEL STATE DETAIL", STATE one of warm (used as it was), cold (made: there was none, or
#     its recipe changed) and repaired (an unfinished one was found, and removed or mended).
# Functions (LABEL names the cache in messages, e.g. "Kokkos 3.4.1 (host)"):
#   cache_is_current DIR STAMP RECIPE     true when DIR is whole and made by RECIPE
#   cache_begin LABEL DIR STAMP RECIPE    true (0) when there is work to do: DIR.partial is then an
#                                         empty folder to make the cache in; false (1) when DIR is
#                                         current (said as warm). Removes what is unfinished or stale.
#   cache_commit DIR STAMP RECIPE         writes the stamp into DIR.partial, then renames it to DIR
#   cache_report LABEL STATE [DETAIL...]  one line into JOULE_CACHE_REPORT (nothing when unset)
# cache_begin sets cache_state (cold or repaired) for the caller's report of what it made.
# The caller's log function is used when it exists (each script prefixes its own lines).

cache_say() { if declare -F log >/dev/null; then log "$@"; else printf '[joule cache] %s\n' "$*" >&2; fi; }

cache_report() {  # cache_report LABEL STATE [DETAIL...]
  [ -n "${JOULE_CACHE_REPORT:-}" ] || return 0
  local label="$1" state="$2"; shift 2
  printf '%s\t%s\t%s\n' "$label" "$state" "$*" >>"$JOULE_CACHE_REPORT" 2>/dev/null || true
}

cache_is_current() {  # cache_is_current DIR STAMP RECIPE
  [ -f "$1/$2" ] && [ "$(cat "$1/$2")" = "$3" ]
}

cache_remove() {  # cache_remove DIR: a cache folder, refused if anything is mounted below it
  local dir="$1" below
  [ -e "$dir" ] || [ -L "$dir" ] || return 0
  below="$(awk -v d="$(readlink -f "$dir")/" 'index($2 "/", d) == 1 { print $2 }' /proc/self/mounts 2>/dev/null | head -1)"
  if [ -n "$below" ]; then
    cache_say "ERROR: $below is mounted inside $dir: not removing it (umount -R $below, then run again)"
    return 1
  fi
  rm -rf --one-file-system "$dir"
}

cache_begin() {  # cache_begin LABEL DIR STAMP RECIPE
  local label="$1" dir="$2" stamp="$3" recipe="$4"
  cache_state=cold
  if cache_is_current "$dir" "$stamp" "$recipe"; then
    cache_report "$label" warm
    return 1
  fi
  if [ -e "$dir.partial" ]; then
    cache_say "$label: removing $dir.partial, left unfinished by an interrupted run"
    cache_remove "$dir.partial" || exit 1
    cache_state=repaired
  fi
  if [ -e "$dir" ]; then
    if [ ! -f "$dir/$stamp" ]; then
      cache_say "$label: $dir has no stamp (an interrupted run, or not made by joule's recipe): removing it and making it again"
      cache_state=repaired
    else
      cache_say "$label: $dir was made by another recipe: making it again"
    fi
    cache_remove "$dir" || exit 1
  fi
  mkdir -p "$dir.partial"
  return 0
}

cache_commit() {  # cache_commit DIR STAMP RECIPE
  local dir="$1" stamp="$2" recipe="$3"
  printf '%s\n' "$recipe" >"$dir.partial/$stamp.tmp" && mv "$dir.partial/$stamp.tmp" "$dir.partial/$stamp" &&
    mv -T "$dir.partial" "$dir"
}

# The compiler caches (ccache, on the host and inside each sid root) are read from their counters:
#   ccache_counts                          "HITS MISSES" from `ccache --print-stats` on stdin
#   cache_report_compilations LABEL HITS MISSES   warm when at most a tenth of the compilations
#                                          missed (also when there were none), else cold
ccache_counts() {
  awk -F'\t' '$1 == "direct_cache_hit" || $1 == "preprocessed_cache_hit" { h += $2 }
    $1 == "cache_miss" { m += $2 } END { if (NR) print h + 0, m + 0 }'
}
cache_report_compilations() {
  local label="$1" hits="$2" misses="$3" total=$(($2 + $3)) state=cold
  [ $((misses * 10)) -le "$total" ] && state=warm
  cache_report "$label" "$state" "$hits of $total compilations from the cache"
}
