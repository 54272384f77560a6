#!/usr/bin/env bash
# The energy tool (libjoule_energy_tool.so) loaded into a Kokkos program that knows nothing of
# joule, on a fake Grace Hopper module meter of constant power (hwmon, 500 W): the program's
# output and status are unchanged; its regions and kernels appear; every figure is that power
# times the time (known energies); the regions' outer energy plus the energy outside them is the
# program's; a program without regions, one that forks, and bad options do not break.
set -euo pipefail
program="$1" tool="$2"
work="$(mktemp -d)"; trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
mkdir -p "$work/hwmon/hwmon3/device" "$work/powercap"
echo "Module Power Socket 0" > "$work/hwmon/hwmon3/device/power1_oem_info"
echo 500000000 > "$work/hwmon/hwmon3/device/power1_average"   # microwatts
export JOULE_HWMON_ROOT="$work/hwmon" JOULE_POWERCAP_ROOT="$work/powercap" JOULE_NVML_LIBRARY=none
export OMP_NUM_THREADS=2 OMP_PROC_BIND=false
# Kokkos 3.4 reads KOKKOS_PROFILE_LIBRARY, 3.5 and later KOKKOS_TOOLS_LIBS.
with_tool() { KOKKOS_TOOLS_LIBS="$tool" KOKKOS_PROFILE_LIBRARY="$tool" "$@"; }

for mode in regions no-regions fork; do
  rc0=0; "$program" $mode >"$work/plain.out" 2>"$work/plain.err" || rc0=$?
  rc1=0; JOULE_ENERGY_OUT="$work/$mode.csv" with_tool "$program" $mode >"$work/tool.out" 2>"$work/tool.err" || rc1=$?
  cat "$work/tool.err"
  [ $rc0 = $rc1 ] || fail "$mode: exit status $rc1 with the tool, $rc0 without"
  [ $rc0 = 0 ] || fail "$mode: the program failed: $(cat "$work/plain.err")"
  cmp -s "$work/plain.out" "$work/tool.out" || fail "$mode: the program's output changed: $(cat "$work/tool.out")"
  grep -q "^joule energy tool: .* J (measured: module" "$work/tool.err" || fail "$mode: no measured summary line"
  [ $(grep -c "^joule energy tool: " "$work/tool.err") = 1 ] || fail "$mode: not one report (a forked child reported?)"
  [ -s "$work/$mode.csv" ] || fail "$mode: no table $work/$mode.csv"
  # Known energies: 500 W times each row's time, within the trace's interpolation (1 %, 2 mJ).
  python3 - "$work/$mode.csv" "$mode" <<'PY' || fail "$mode: the table is wrong"
import csv, sys
rows = list(csv.DictReader(open(sys.argv[1])))
mode = sys.argv[2]
by = {(r["kind"], r["name"]): r for r in rows}
def need(kind, name):
    if (kind, name) not in by: sys.exit(f"missing {kind} {name}: {sorted(by)}")
    return by[(kind, name)]
for r in rows:
    s, j = float(r["seconds"]), float(r["energy_j"])
    if abs(j - 500 * s) > 0.01 * 500 * s + 2e-3: sys.exit(f"{r['kind']} {r['name']}: {j} J over {s} s is not 500 W")
    if "measured: module" not in r["source"]: sys.exit(f"source label {r['source']}")
need("kernel", "axpy"); need("kernel", "dot"); need("kernel", "fill"); need("kernel", "prefix")
if int(need("kernel", "axpy")["calls"]) != 40: sys.exit("axpy calls (a forked child's kernels counted?)")
program, outside = need("program", "(program)"), need("outside", "(outside any region)")
if mode == "regions":
    for name, calls in (("setup", 1), ("solve", 1), ("inner", 40)):
        if int(need("region", name)["calls"]) != calls: sys.exit(f"region {name}: calls")
    outer = float(need("region", "setup")["energy_j"]) + float(need("region", "solve")["energy_j"])
    total = outer + float(outside["energy_j"])
    if abs(total - float(program["energy_j"])) > 2e-3 + 1e-6 * total: sys.exit(f"regions {outer} + outside != program")
    if float(need("region", "inner")["seconds"]) > float(need("region", "solve")["seconds"]): sys.exit("inner > solve")
else:
    if any(r["kind"] == "region" for r in rows): sys.exit("regions where the program opened none")
    if abs(float(outside["energy_j"]) - float(program["energy_j"])) > 1e-6: sys.exit("outside != program")
print(f"{mode}: {len(rows)} rows, {float(program['energy_j']):.3f} J over {float(program['seconds']):.3f} s")
PY
  echo "ok: $mode"
done

# Kernels off: regions only.
JOULE_ENERGY_KERNELS=0 JOULE_ENERGY_OUT="$work/k0.csv" with_tool "$program" >/dev/null 2>"$work/k0.err"
grep -q "^kernel," "$work/k0.csv" && fail "JOULE_ENERGY_KERNELS=0 attributed kernels"
grep -q "^region,solve," "$work/k0.csv" || fail "JOULE_ENERGY_KERNELS=0 lost the regions"
# Fenced edges: Kokkos' fence through the tool interface, the same program output.
JOULE_ENERGY_FENCE=1 with_tool "$program" >"$work/f.out" 2>"$work/f.err"
cmp -s "$work/plain.out" "$work/f.out" || fail "JOULE_ENERGY_FENCE=1 changed the output"
grep -q "edges fenced" "$work/f.err" || fail "JOULE_ENERGY_FENCE=1 not reported"
# Per rank: one file each.
OMPI_COMM_WORLD_RANK=3 JOULE_ENERGY_QUIET=1 JOULE_ENERGY_OUT="$work/r.csv" with_tool "$program" >/dev/null 2>"$work/r.err"
[ -s "$work/r.rank3.csv" ] || fail "rank 3 did not write r.rank3.csv"
[ -s "$work/r.err" ] && fail "JOULE_ENERGY_QUIET=1 printed: $(cat "$work/r.err")"
# Bad options: said, and the program runs as without the tool.
for bad in "JOULE_ENERGY_RATE_HZ=fast" "JOULE_ENERGY_OUT=$work/x.h5" "JOULE_ENERGY_FENCE=maybe"; do
  rc=0; env "$bad" KOKKOS_TOOLS_LIBS="$tool" KOKKOS_PROFILE_LIBRARY="$tool" "$program" >"$work/b.out" 2>"$work/b.err" || rc=$?
  [ $rc = 0 ] || fail "$bad: the program failed ($rc)"
  grep -q "joule energy tool: not attributing energy: ${bad%%=*}=" "$work/b.err" || fail "$bad: not said: $(cat "$work/b.err")"
  echo "ok: $bad: $(grep -m1 'not attributing' "$work/b.err")"
done
# No sensor: the model, labelled.
JOULE_HWMON_ROOT="$work/none" JOULE_ENERGY_OUT="$work/m.csv" with_tool "$program" >/dev/null 2>"$work/m.err"
grep -q "MODEL ESTIMATE" "$work/m.err" || fail "no sensor: not labelled a model: $(cat "$work/m.err")"
grep -q ",measured: " "$work/m.csv" && fail "no sensor: the table says measured"
echo PASS
