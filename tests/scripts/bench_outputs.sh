#!/usr/bin/env bash
# What `joule bench` writes, against another user on a shared node (docs/outputs.md):
#   1. --json (suites ops, launches, roofline) through io::commit_file: a symbolic link at the path
#      is itself replaced, the file it points to (root's, mode 0600) is left as it was; a folder
#      there is refused before any benchmark runs.
#   2. The offload and energy suites' scratch files (their dataset, the energy tool's profile) in a
#      private folder under $TMPDIR, never at a guessable name: with folders planted at the names
#      the old code used (/tmp/joule-bench-offload-<pid>.h5, /tmp/joule-bench-energy-<pid>.h5, for
#      the next 1000 process ids) both suites still succeed, and leave nothing in $TMPDIR.
#   3. The energy suite reads back the file the energy tool says it wrote: where the tool could write
#      none (every write of its profile fails: fault_writes.so), the suite fails (exit 1) naming
#      why, after the tool's own ERROR line, and its scratch folder is removed all the same.
# No timing is checked. Part `json` is 1 (seconds); part `scratch` is 2 and 3 (the suites with
# --repeats 1 --steps 2: what they write does not depend on how long they measure;
# about 30 s on a loaded 2-core machine; labelled long).
# usage: bench_outputs.sh JOULE ENERGY_TOOL FAULT_WRITES_SO json|scratch
set -euo pipefail
joule="$1" tool="$2" fault="$3" part="$4"
work="$(mktemp -d)"
planted_list="$work/planted"
: >"$planted_list"
unplant() {  # the folders planted in /tmp (names listed as they were made)
  while read -r p; do rmdir "$p" 2>/dev/null || true; done <"$planted_list"
  : >"$planted_list"
}
cleanup() { unplant; rm -rf "$work"; }
trap cleanup EXIT
fail() { echo "FAIL: $*"; exit 1; }
mkdir "$work/tmp"
export TMPDIR="$work/tmp"
export JOULE_NVML_LIBRARY=none JOULE_HWMON_ROOT=/nonexistent JOULE_POWERCAP_ROOT=/nonexistent
export OMP_NUM_THREADS=2 OMP_PROC_BIND=false
asan_options="${ASAN_OPTIONS:+$ASAN_OPTIONS:}verify_asan_link_order=0"
cd "$work"

# --- 1. --json through a link ----------------------------------------------------------------------
if [ "$part" = json ]; then
for suite in ops launches roofline; do
  args=(--suite "$suite"); [ $suite = ops ] && args+=(--preset tiny --repeats 1)
  echo "root's secret" >"$work/secret-$suite" && chmod 600 "$work/secret-$suite"
  ln -s "$work/secret-$suite" "$work/$suite.json"
  "$joule" bench "${args[@]}" --json "$work/$suite.json" >"$work/out.txt" 2>&1 </dev/null ||
    fail "$suite --json through a link failed: $(tail -3 "$work/out.txt")"
  [ "$(cat "$work/secret-$suite")" = "root's secret" ] || fail "$suite: the file the link named was written"
  [ "$(stat -c %a "$work/secret-$suite")" = 600 ] || fail "$suite: the file the link named changed mode"
  [ -f "$work/$suite.json" ] && [ ! -L "$work/$suite.json" ] || fail "$suite: the link was not replaced by a file"
  python3 -c 'import json, sys; json.load(open(sys.argv[1]))' "$work/$suite.json" || fail "$suite: not whole JSON"
  [ -z "$(ls -A "$work" | grep -E '^\.[a-z]+\.json\.' || true)" ] || fail "$suite: temporaries left: $(ls -A "$work")"
  echo "ok: $suite --json: the link replaced, the file it named unchanged"
done
mkdir "$work/folder.json"
rc=0; "$joule" bench --preset tiny --repeats 1 --json "$work/folder.json" >"$work/out.txt" 2>&1 </dev/null || rc=$?
[ $rc = 1 ] || fail "--json at a folder: exit $rc, expected 1: $(tail -3 "$work/out.txt")"
grep -q -- "--json $work/folder.json: is a folder" "$work/out.txt" || fail "--json at a folder: not said: $(tail -3 "$work/out.txt")"
grep -q "GFLOP" "$work/out.txt" && fail "--json at a folder: refused only after the benchmark ran"
echo "ok: --json at a folder: refused before any work"
echo PASS
exit 0
fi
[ "$part" = scratch ] || fail "no part $part (json or scratch)"

# --- 2. planted names ------------------------------------------------------------------------------
# One process plants them all, so the process ids it names are the next ones the system hands out;
# the suite is started at once, and must get one of them (else the machine started 1000 processes
# meanwhile: tried again).
plant() {  # plant SUITE: folders at the old names for the next 1000 process ids
  python3 - "$1" "$planted_list" <<'PY'
import os, sys
suite, listing = sys.argv[1], sys.argv[2]
first = int(open("/proc/sys/kernel/ns_last_pid").read()) + 1
with open(listing, "a") as names:
    for n in range(first, first + 1000):
        for name in ("/tmp/joule-bench-%s-%d.h5" % (suite, n), "/tmp/joule-bench-%s-%d.h5.profile.h5" % (suite, n)):
            try:
                os.mkdir(name, 0o755)
                names.write(name + "\n")
            except FileExistsError:
                pass
PY
}
run_planted() {  # run_planted SUITE ARGS...: the suite, started on a process id whose names are planted
  local suite="$1"; shift
  for attempt in 1 2 3; do
    plant "$suite"
    rc=0
    "$joule" bench --suite "$suite" --repeats 1 "$@" >"$work/$suite.out" 2>&1 </dev/null &
    pid=$!
    wait $pid || rc=$?
    if grep -qx "/tmp/joule-bench-$suite-$pid.h5" "$planted_list"; then
      [ -d "/tmp/joule-bench-$suite-$pid.h5" ] || fail "$suite: the folder planted at its old name is gone"
      [ -z "$(ls -A "/tmp/joule-bench-$suite-$pid.h5")" ] || fail "$suite: something was written into the planted folder"
      return 0
    fi
    echo "note: $suite ran as process $pid, not one of those planted for; again"
  done
  fail "$suite: three tries, no process id planted for (the machine starts processes too fast)"
}
run_planted offload --steps 2
[ $rc = 0 ] || fail "offload with its old names planted: exit $rc: $(tail -5 "$work/offload.out")"
grep -q "rolled back" "$work/offload.out" || fail "offload: no table: $(tail -5 "$work/offload.out")"
[ -z "$(ls -A "$work/tmp")" ] || fail "offload: left in \$TMPDIR: $(ls -A "$work/tmp")"
echo "ok: offload: its old names planted, it ran (process $pid) and left nothing"

run_planted energy --steps 2 --energy-tool "$tool"
[ $rc = 0 ] || fail "energy with its old names planted: exit $rc: $(tail -5 "$work/energy.out")"
grep -q "^tool: regions + kernels" "$work/energy.out" || fail "energy: the tool's rounds did not run: $(tail -5 "$work/energy.out")"
[ -z "$(ls -A "$work/tmp")" ] || fail "energy: left in \$TMPDIR: $(ls -A "$work/tmp")"
echo "ok: energy: its old names planted, it ran (process $pid) and left nothing"

# --- 3. the tool writes no profile ---------------------------------------------------------------
unplant
rc=0
LD_PRELOAD="$fault" ASAN_OPTIONS="$asan_options" JOULE_FAULT_PATH="profile.h5$" JOULE_FAULT_ERRNO=EIO \
  "$joule" bench --suite energy --repeats 1 --steps 2 --energy-tool "$tool" >"$work/fault.out" 2>&1 </dev/null &
pid=$!
wait $pid || rc=$?
[ $rc = 1 ] || fail "energy, the tool's profile unwritable: exit $rc, expected 1: $(tail -5 "$work/fault.out")"
grep -q "^joule energy tool: ERROR: no profile written: .*Input/output error" "$work/fault.out" ||
  fail "energy: the tool's ERROR line is missing: $(tail -5 "$work/fault.out")"
grep -q "^joule: error: the energy tool .* wrote no profile: " "$work/fault.out" ||
  fail "energy: the suite did not say why it failed: $(tail -5 "$work/fault.out")"
[ -z "$(ls -A "$work/tmp")" ] || fail "energy, failed: left in \$TMPDIR: $(ls -A "$work/tmp")"
[ ! -e "/tmp/joule-bench-energy-$pid.h5" ] || fail "energy, failed: left /tmp/joule-bench-energy-$pid.h5"
echo "ok: energy: the tool wrote no profile: exit 1, $(grep -m1 '^joule: error' "$work/fault.out" | cut -c1-160)"
echo PASS
