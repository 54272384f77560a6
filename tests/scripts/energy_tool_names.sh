#!/usr/bin/env bash
# The energy tool's output names (docs/energy-tool.md): processes that share JOULE_ENERGY_OUT never
# lose a profile and never replace one another's.
#   1. A lost race, every time: process A writes its profile and is held (hold_sync.so) between its
#      sync and its rename; process B, with the same JOULE_ENERGY_OUT, writes the name meanwhile; A
#      then finds the name taken at its rename and writes the next free one, saying where. B's file
#      is left bitwise as B wrote it. For the run log (.h5) and for the table (.csv).
#   2. Six processes started at once on one name: six files, each process saying its own.
#   3. Slurm array tasks (SLURM_ARRAY_JOB_ID, SLURM_ARRAY_TASK_ID; all of them SLURM_PROCID 0): a
#      name of their own each, NAME.array<job>_<task>.rank0.EXT.
#   4. Every name taken (NAME.EXT, NAME.1.EXT ... NAME.9999.EXT): the profile is lost, and the tool
#      says so on stderr, JOULE_ENERGY_QUIET=1 or not, naming the first and last names tried and
#      why the last was not written. (The program's exit status is its own: a tool cannot change it.)
# Every wait is on an event, with a deadline of minutes: a loaded machine is only slower.
# usage: energy_tool_names.sh PROGRAM TOOL JOULE HOLD_SYNC_SO
set -euo pipefail
program="$1" tool="$2" joule="$3" hold="$4"
work="$(mktemp -d)"; trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
mkdir -p "$work/hwmon/hwmon3/device" "$work/powercap"
echo "Module Power Socket 0" > "$work/hwmon/hwmon3/device/power1_oem_info"
echo 500000000 > "$work/hwmon/hwmon3/device/power1_average"   # microwatts
export JOULE_HWMON_ROOT="$work/hwmon" JOULE_POWERCAP_ROOT="$work/powercap" JOULE_NVML_LIBRARY=none
export OMP_NUM_THREADS=1 OMP_PROC_BIND=false
for v in OMPI_COMM_WORLD_RANK PMI_RANK PMIX_RANK SLURM_PROCID MV2_COMM_WORLD_RANK OMPI_COMM_WORLD_LOCAL_RANK \
         SLURM_ARRAY_JOB_ID SLURM_ARRAY_TASK_ID; do unset $v; done
tools_variable="${JOULE_TEST_KOKKOS_TOOLS_VARIABLE:-KOKKOS_TOOLS_LIBS}"
with_tool() { env "$tools_variable=$tool" "$@"; }
# A preloaded module not linked with the sanitizers, in a sanitized program (as fault_writes.so).
asan_options="${ASAN_OPTIONS:+$ASAN_OPTIONS:}verify_asan_link_order=0"

is_profile() {  # is_profile FILE: a whole profile of the program
  case "$1" in
    *.h5) "$joule" inspect "$1" >"$work/inspect.out" 2>&1; grep -q "^joule energy profile $1" "$work/inspect.out" ;;
    *.csv) grep -q "^region,solve," "$1" ;;
  esac
}

# 1. The lost race.
for ext in h5 csv; do
  out="$work/race.$ext"
  rm -f "$work/a.ready" "$work/b.done"
  LD_PRELOAD="$hold" ASAN_OPTIONS="$asan_options" JOULE_HOLD_PATH="/.race.$ext.joule-" \
    JOULE_HOLD_READY="$work/a.ready" JOULE_HOLD_UNTIL="$work/b.done" JOULE_ENERGY_OUT="$out" \
    with_tool "$program" >"$work/a.out" 2>"$work/a.err" &
  a=$!
  for _ in $(seq 1 12000); do
    [ -e "$work/a.ready" ] && break
    kill -0 $a 2>/dev/null || fail "$ext: A ended before its write was held: $(tail -3 "$work/a.err")"
    sleep 0.02
  done
  [ -e "$work/a.ready" ] || fail "$ext: A's write was not held within 4 minutes"
  [ -e "$out" ] && fail "$ext: $out exists before B ran (A was not held before its rename)"
  JOULE_ENERGY_OUT="$out" with_tool "$program" >"$work/b.out" 2>"$work/b.err" || fail "$ext: B failed: $(tail -3 "$work/b.err")"
  grep -q "^  written: $out\$" "$work/b.err" || fail "$ext: B did not write $out: $(grep 'joule energy tool\|written' "$work/b.err")"
  b_sum="$(cksum <"$out")"
  touch "$work/b.done"
  rc=0; wait $a || rc=$?
  [ $rc = 0 ] || fail "$ext: A ended with $rc: $(tail -3 "$work/a.err")"
  beside="$work/race.1.$ext"
  grep -q "^joule energy tool: $out is already there and is never replaced; written beside it: $beside\$" "$work/a.err" ||
    fail "$ext: A did not say it wrote beside: $(grep -E 'written|no file' "$work/a.err")"
  [ "$(cksum <"$out")" = "$b_sum" ] || fail "$ext: B's $out was replaced"
  is_profile "$out" || fail "$ext: $out is not B's whole profile"
  is_profile "$beside" || fail "$ext: $beside is not A's whole profile"
  left="$(ls -A "$work" | grep -E '^\.race\.' || true)"
  [ -z "$left" ] || fail "$ext: temporaries left: $left"
  echo "ok: $ext: a race lost at the rename: B wrote $out, A $beside"
done

# 2. Six at once on one name.
pids=()
for i in 1 2 3 4 5 6; do
  JOULE_ENERGY_OUT="$work/burst.h5" with_tool "$program" >/dev/null 2>"$work/burst$i.err" &
  pids+=($!)
done
for i in 1 2 3 4 5 6; do
  wait "${pids[$((i - 1))]}" || fail "burst: process $i failed: $(tail -3 "$work/burst$i.err")"
done
said=()
for i in 1 2 3 4 5 6; do
  name="$(sed -n -e 's/^  written: //p' -e 's/^joule energy tool: .* written beside it: //p' "$work/burst$i.err")"
  [ -n "$name" ] || fail "burst: process $i did not say where it wrote: $(grep -E 'written|no file' "$work/burst$i.err")"
  is_profile "$name" || fail "burst: $name (process $i) is not a whole profile"
  said+=("$name")
done
[ "$(printf '%s\n' "${said[@]}" | sort -u | wc -l)" = 6 ] || fail "burst: two processes named one file: ${said[*]}"
[ "$(ls "$work" | grep -c '^burst.*\.h5$')" = 6 ] || fail "burst: not six files: $(ls "$work")"
echo "ok: six processes at once: six files"

# 3. Slurm array tasks.
for task in 3 4; do
  SLURM_ARRAY_JOB_ID=777 SLURM_ARRAY_TASK_ID=$task SLURM_PROCID=0 JOULE_ENERGY_OUT="$work/array.h5" \
    with_tool "$program" >/dev/null 2>"$work/array$task.err" || fail "array task $task failed"
  name="$work/array.array777_$task.rank0.h5"
  grep -q "^  written: $name\$" "$work/array$task.err" || fail "array task $task: not $name: $(grep 'written' "$work/array$task.err")"
  is_profile "$name" || fail "array task $task: $name is not a whole profile"
done
SLURM_ARRAY_JOB_ID=777 SLURM_ARRAY_TASK_ID=5 JOULE_ENERGY_OUT="$work/single.csv" with_tool "$program" >/dev/null 2>&1
[ -s "$work/single.array777_5.csv" ] || fail "an array task without a rank: not single.array777_5.csv: $(ls "$work")"
echo "ok: Slurm array tasks: a name each"

# 4. Every name taken.
mkdir "$work/full"
: >"$work/full/p.h5"
for ((n = 1; n <= 9999; n++)); do : >"$work/full/p.$n.h5"; done
before="$(ls -A "$work/full" | wc -l)"
JOULE_ENERGY_QUIET=1 JOULE_ENERGY_OUT="$work/full/p.h5" with_tool "$program" >/dev/null 2>"$work/full.err" ||
  fail "every name taken: the program failed: $(tail -3 "$work/full.err")"
grep -q "^joule energy tool: ERROR: no profile written: $work/full/p.h5 and p.1.h5 ... p.9999.h5 are all taken (the last, $work/full/p.9999.h5: a regular file is there)" \
  "$work/full.err" || fail "every name taken: not said: $(cat "$work/full.err")"
[ "$(ls -A "$work/full" | wc -l)" = "$before" ] || fail "every name taken: something was added or removed in the folder"
[ ! -s "$work/full/p.h5" ] && [ ! -s "$work/full/p.9999.h5" ] || fail "every name taken: a file was replaced"
echo "ok: every name taken: $(cut -c1-150 "$work/full.err")..."
echo PASS
