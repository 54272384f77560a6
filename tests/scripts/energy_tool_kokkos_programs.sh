#!/usr/bin/env bash
# The energy tool in programs no one here wrote: Kokkos' own tutorial and benchmark programs and a
# Kokkos-Kernels performance test, from the trilinos sources install-deps.sh keeps beside joule's
# Kokkos, built against it unchanged. On a fake Grace Hopper module meter of constant power
# (hwmon, 500 W), for each program: its exit status and output are what they are without the tool
# (timings masked where it prints them); the kernels and regions it runs appear with their calls;
# every row is 500 W times its time; the top-level regions plus the energy outside any region are
# the program's energy. None of the Kokkos programs opens a region: their energy is all outside.
#   energy_tool_kokkos_programs.sh TOOL HELLO_WORLD MDRANGE GUPS TRTRI_PERF
set -euo pipefail
tool="$1" hello="$2" mdrange="$3" gups="$4" trtri="$5"
work="$(mktemp -d)"; trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
mkdir -p "$work/hwmon/hwmon3/device"
echo "Module Power Socket 0" > "$work/hwmon/hwmon3/device/power1_oem_info"
echo 500000000 > "$work/hwmon/hwmon3/device/power1_average"   # microwatts
export JOULE_HWMON_ROOT="$work/hwmon" JOULE_POWERCAP_ROOT="$work/none" JOULE_NVML_LIBRARY=none
export OMP_NUM_THREADS=2 OMP_PROC_BIND=false

# check NAME OUTPUT EXPECT TOP -- PROGRAM ARGS...
#   OUTPUT: exact (the same lines, in any order: kernels print from several threads) or timings
#   (numbers masked too); EXPECT: kind:name:calls,... (calls * for any); TOP: the top-level region
#   names, comma-separated ("" for none).
check() {
  local name="$1" output="$2" expect="$3" top="$4"; shift 5
  local rc0=0 rc1=0
  "$@" >"$work/$name.plain" 2>"$work/$name.plain.err" || rc0=$?
  JOULE_ENERGY_OUT="$work/$name.csv" env "${JOULE_TEST_KOKKOS_TOOLS_VARIABLE:-KOKKOS_TOOLS_LIBS}=$tool" "$@" \
    >"$work/$name.tool" 2>"$work/$name.tool.err" || rc1=$?
  sed -n '/^joule energy tool/,$p' "$work/$name.tool.err" | head -12
  [ $rc0 = $rc1 ] || fail "$name: exit status $rc1 with the tool, $rc0 without"
  [ $rc0 = 0 ] || fail "$name: the program failed ($rc0): $(tail -5 "$work/$name.plain.err")"
  local mask='s/[0-9]+([.][0-9]+)?([eE][-+]?[0-9]+)?/N/g'
  if [ "$output" = timings ]; then
    cmp -s <(sed -E "$mask" "$work/$name.plain" | sort) <(sed -E "$mask" "$work/$name.tool" | sort) ||
      fail "$name: the program's output changed: $(diff <(sed -E "$mask" "$work/$name.plain") <(sed -E "$mask" "$work/$name.tool") | head)"
  else
    cmp -s <(sort "$work/$name.plain") <(sort "$work/$name.tool") ||
      fail "$name: the program's output changed: $(diff "$work/$name.plain" "$work/$name.tool" | head)"
  fi
  # The program's own stderr is unchanged too, less the tool's report after it.
  cmp -s "$work/$name.plain.err" <(awk '/^joule energy tool/ {exit} {print}' "$work/$name.tool.err" | sed '${/^$/d}') ||
    fail "$name: the program's stderr changed"
  [ $(grep -c "^joule energy tool: .* J (measured: module" "$work/$name.tool.err") = 1 ] || fail "$name: not one measured report"
  /usr/bin/python3 - "$work/$name.csv" "$expect" "$top" <<'PY' || fail "$name: the table is wrong"
import csv, sys
rows = list(csv.DictReader(open(sys.argv[1])))
by = {(r["kind"], r["name"]): r for r in rows}
for r in rows:
    s, j = float(r["seconds"]), float(r["energy_j"])
    if abs(j - 500 * s) > 0.01 * 500 * s + 2e-3: sys.exit(f"{r['kind']} {r['name']}: {j} J over {s} s is not 500 W")
for item in filter(None, sys.argv[2].split(",")):
    kind, name, calls = item.split(":", 2)[0], item.split(":", 1)[1].rsplit(":", 1)[0], item.rsplit(":", 1)[1]
    if (kind, name) not in by: sys.exit(f"no {kind} '{name}' in the table: {sorted(by)}")
    if calls != "*" and int(by[(kind, name)]["calls"]) != int(calls):
        sys.exit(f"{kind} '{name}': {by[(kind, name)]['calls']} calls, expected {calls}")
program, outside = float(by[("program", "(program)")]["energy_j"]), float(by[("outside", "(outside any region)")]["energy_j"])
top = [n for n in sys.argv[3].split(",") if n]
inside = sum(float(by[("region", n)]["energy_j"]) for n in top)
if not top and any(r["kind"] == "region" for r in rows): sys.exit("regions where the program opened none")
if abs(inside + outside - program) > 2e-3 + 1e-6 * program:
    sys.exit(f"top-level regions {inside} J + outside {outside} J != the program's {program} J")
print(f"{len(rows)} rows; program {program:.3f} J, top-level regions {inside:.3f} J, outside {outside:.3f} J")
PY
  echo "ok: $name"
}

# Kokkos' tutorial: a named parallel_for that prints from every iteration; MDRange kernels that check
# their own results (exit status 0 when right).
check hello_world exact "kernel:HelloWorld:1" "" -- "$hello"
check mdrange exact "kernel:md2d:1,kernel:md3d:1" "" -- "$mdrange"
# Kokkos' GUPS benchmark (random updates), small: its timings masked.
check gups timings "kernel:init-data:1,kernel:init-indices:1,kernel:bench-gups-non-atomic:5" "" -- \
  "$gups" --indices 200000 --data 2000000 --repeats 5
# Kokkos-Kernels' BLAS perf test of trtri: every call is a Kokkos-Kernels region, KokkosBlas::trtri
# (3 sizes x (1 warm-up + 5 timed) x 10 matrices = 180 calls), the copies and fills are kernels.
check trtri_perf timings "region:KokkosBlas::trtri[noETI]:180,kernel:Kokkos::fill_random:*" "KokkosBlas::trtri[noETI]" -- \
  "$trtri" -b 20x20,20x20 -e 40x40,40x40 -s 10 -w 1 -i 5 -k 10
echo PASS
