#!/usr/bin/env bash
# The energy tool (libjoule_energy_tool.so) loaded into a Kokkos program that knows nothing of
# joule, on a fake Grace Hopper module meter of constant power (hwmon, 500 W): the program's
# output and status are unchanged; its regions and kernels appear; every figure is that power
# times the time (known energies); the regions' outer energy plus the energy outside them is the
# program's; a program without regions, one that forks, and bad options do not break. The HDF5
# output is a joule run log: `joule inspect` prints it, its CSV passes the same checks, its power
# trace is the program's, and plot_run.py draws it. A process that is not its node's
# local rank 0 does not count the node's module meter again. Loaded into `joule train`, the tool
# and joule's own regions attribute the same energy.
set -euo pipefail
#   energy_tool.sh PROGRAM TOOL JOULE PLOT_RUN [train]: with `train`, only the joule train part
#   (a test of its own, labelled long: under the sanitizers it takes over a minute).
program="$1" tool="$2" joule="$3" plot_run="$4" part="${5:-program}"
work="$(mktemp -d)"; trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
mkdir -p "$work/hwmon/hwmon3/device" "$work/powercap"
echo "Module Power Socket 0" > "$work/hwmon/hwmon3/device/power1_oem_info"
echo 500000000 > "$work/hwmon/hwmon3/device/power1_average"   # microwatts
export JOULE_HWMON_ROOT="$work/hwmon" JOULE_POWERCAP_ROOT="$work/powercap" JOULE_NVML_LIBRARY=none
export OMP_NUM_THREADS=2 OMP_PROC_BIND=false
# Kokkos 3.4 reads KOKKOS_PROFILE_LIBRARY, 3.5 and later KOKKOS_TOOLS_LIBS (and 4.x warns when the
# first is set): tests/CMakeLists.txt names the one this Kokkos reads.
tools_variable="${JOULE_TEST_KOKKOS_TOOLS_VARIABLE:-KOKKOS_TOOLS_LIBS}"
with_tool() { env "$tools_variable=$tool" "$@"; }

if [ "$part" = program ]; then
for mode in regions no-regions fork; do
  rc0=0; "$program" $mode >"$work/plain.out" 2>"$work/plain.err" || rc0=$?
  # regions: the run log (.h5), its table by `joule inspect --csv`; the others: the CSV directly.
  out="$work/$mode.csv"; [ $mode = regions ] && out="$work/$mode.h5"
  rc1=0; JOULE_ENERGY_OUT="$out" with_tool "$program" $mode >"$work/tool.out" 2>"$work/tool.err" || rc1=$?
  cat "$work/tool.err"
  if [ $mode = regions ]; then
    grep -q "^  written: $out" "$work/tool.err" || fail "no 'written: $out' line"
    "$joule" inspect "$out" >"$work/inspect.txt" || fail "joule inspect $out failed"
    cat "$work/inspect.txt"
    grep -q "^joule energy profile $out" "$work/inspect.txt" || fail "joule inspect: no profile heading"
    grep -Eq "^  kernel +axpy +40 " "$work/inspect.txt" || fail "joule inspect: no axpy row"
    grep -Eq "^  region +inner +40 " "$work/inspect.txt" || fail "joule inspect: no inner row"
    "$joule" inspect --csv "$out" >"$work/$mode.csv" || fail "joule inspect --csv $out failed"
    /usr/bin/python3 - "$out" <<'PY' || fail "the run log is wrong"
import sys, h5py, numpy as np
f = h5py.File(sys.argv[1], "r")
if f.attrs["format"] != b"joule-run-log-v1" and f.attrs["format"] != "joule-run-log-v1": sys.exit("format")
def s(x): return x.decode() if isinstance(x, bytes) else x
if s(f.attrs["tuning"]) != "profile" or s(f.attrs["energy_kind"]) != "measured": sys.exit("tuning or energy_kind")
p = f["profile"]
if p.attrs["complete"] != 1: sys.exit("not complete")
t, w = p["power_time_s"][()], p["power_w"][()]
domains = [s(d) for d in p["power_domains"][()]]
col = [i for i, d in enumerate(domains) if d.startswith("module")]
if not col or t.size < 1: sys.exit(f"no module column or no sample: {domains}, {t.size}")
if np.max(np.abs(w[:, col[0]] - 500.0)) > 1e-6: sys.exit("the module's trace is not 500 W")
# The trace is the program's: sample times increasing, from its start to its end. (How closely the
# samples follow the rate depends on the machine's load: not checked.)
seconds = float(p.attrs["seconds"])
if t[0] < 0 or t[-1] > seconds + 1e-9 or np.any(np.diff(t) <= 0):
    sys.exit(f"the trace's times {t} are not increasing within the {seconds} s program")
e = float(p.attrs["energy_j"])
if abs(e - 500 * seconds) > 0.01 * e + 2e-3: sys.exit(f"program {e} J over {seconds} s is not 500 W")
names = [s(n) for n in p["kernels/name"][()]]
if "axpy" not in names or "solve" not in [s(n) for n in p["regions/name"][()]]: sys.exit("rows missing")
print(f"run log: {t.size} samples over {t[-1] - t[0]:.3f} s of a {seconds:.3f} s program, {e:.3f} J")
PY
    rm -rf "$work/plots"
    /usr/bin/python3 "$plot_run" "$out" --out "$work/plots" >"$work/plots.txt" 2>"$work/plots.err" ||
      fail "plot_run.py failed: $(cat "$work/plots.err")"
    for png in power_trace.png regions.png; do
      [ -s "$work/plots/$png" ] || fail "plot_run.py drew no $png: $(cat "$work/plots.err")"
    done
  fi
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
    # One row per call path, named by its path: inner was opened inside solve only.
    paths = [(r["path"], r["parent"]) for r in rows if r["kind"] == "region"]
    if paths != [("solve", ""), ("solve/inner", "solve"), ("setup", "")]: sys.exit(f"region paths {paths}")
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
# A node's other processes: the module meter is local rank 0's, so local rank 1 does not count it.
OMPI_COMM_WORLD_LOCAL_RANK=1 JOULE_ENERGY_OUT="$work/l1.csv" with_tool "$program" >/dev/null 2>"$work/l1.err"
grep -q ",measured: module" "$work/l1.csv" && fail "local rank 1 counted the node's module meter again"
grep -q "^  note: .*local rank" "$work/l1.err" || fail "local rank 1: no note saying why: $(cat "$work/l1.err")"
# A file that cannot be written: said, and the program's status and output unchanged.
rc=0; JOULE_ENERGY_OUT="$work/no-such-folder/x.h5" with_tool "$program" >"$work/nf.out" 2>"$work/nf.err" || rc=$?
[ $rc = 0 ] || fail "an unwritable output changed the program's status ($rc)"
cmp -s "$work/plain.out" "$work/nf.out" || fail "an unwritable output changed the program's output"
grep -q "^joule energy tool: ERROR: no profile written: .*no-such-folder/x.h5" "$work/nf.err" || fail "unwritable output not said: $(cat "$work/nf.err")"
# An existing output is never replaced (a user's file, an earlier run's table): the profile goes beside it.
echo "the user's own notes" >"$work/mine.csv"
JOULE_ENERGY_OUT="$work/mine.csv" with_tool "$program" >/dev/null 2>"$work/mine.err"
[ "$(cat "$work/mine.csv")" = "the user's own notes" ] || fail "JOULE_ENERGY_OUT replaced an existing file"
grep -q "^region,solve," "$work/mine.1.csv" || fail "the profile was not written beside the existing file"
grep -q "mine.csv is already there and is never replaced; written beside it: .*mine.1.csv" "$work/mine.err" ||
  fail "writing beside was not said: $(cat "$work/mine.err")"
JOULE_ENERGY_OUT="$work/mine.csv" with_tool "$program" >/dev/null 2>/dev/null
[ -s "$work/mine.2.csv" ] || fail "a second run did not take the next free name"
# Bad options: said, and the program runs as without the tool.
for bad in "JOULE_ENERGY_RATE_HZ=fast" "JOULE_ENERGY_OUT=$work/x.txt" "JOULE_ENERGY_FENCE=maybe"; do
  rc=0; env "$bad" "$tools_variable=$tool" "$program" >"$work/b.out" 2>"$work/b.err" || rc=$?
  [ $rc = 0 ] || fail "$bad: the program failed ($rc)"
  grep -q "joule energy tool: not attributing energy: ${bad%%=*}=" "$work/b.err" || fail "$bad: not said: $(cat "$work/b.err")"
  echo "ok: $bad: $(grep -m1 'not attributing' "$work/b.err")"
done
# A sensor that blocks (a FIFO no one writes, as a hung BMC-backed meter): the program still ends on
# its own, with its output and status, the sensor dropped after its read deadline and named.
stalled="$work/stalled-hwmon/hwmon3/device"
mkdir -p "$stalled" && echo "Module Power Socket 0" >"$stalled/power1_oem_info" && mkfifo "$stalled/power1_average"
rc=0; JOULE_HWMON_ROOT="$work/stalled-hwmon" timeout 120 env "$tools_variable=$tool" "$program" >"$work/st.out" \
  2>"$work/st.err" || rc=$?
[ $rc = 0 ] || fail "a blocking sensor: the program ended with $rc (124: it hung): $(tail -3 "$work/st.err")"
cmp -s "$work/plain.out" "$work/st.out" || fail "a blocking sensor changed the program's output"
grep -q "power1_average did not answer within 2 s (a stalled sensor: no longer read)" "$work/st.err" ||
  fail "a blocking sensor was not named: $(cat "$work/st.err")"
echo "ok: a blocking sensor: dropped after its deadline, the program ended on its own"
# No sensor: the model, labelled.
JOULE_HWMON_ROOT="$work/none" JOULE_ENERGY_OUT="$work/m.csv" with_tool "$program" >/dev/null 2>"$work/m.err"
grep -q "MODEL ESTIMATE" "$work/m.err" || fail "no sensor: not labelled a model: $(cat "$work/m.err")"
grep -q ",measured: " "$work/m.csv" && fail "no sensor: the table says measured"
fi

if [ "$part" = train ]; then
# joule train with the tool loaded: joule's recorder passes every region on to the loaded tool, so in
# one run both attribute the same regions; they must agree call for call, and in energy to within
# what two stamps of one edge can differ by. With --no-energy (joule's own
# regions off) the tool alone still sees them.
"$joule" train --make-data --data "$work/d.h5" --steps 1 --no-energy >/dev/null 2>&1 || fail "joule train --make-data"
JOULE_ENERGY_OUT="$work/train.h5" JOULE_ENERGY_QUIET=1 with_tool "$joule" train --data "$work/d.h5" --steps 8 \
  >"$work/train.out" 2>"$work/train.err" || fail "joule train with the tool: $(cat "$work/train.err")"
JOULE_ENERGY_OUT="$work/train0.h5" JOULE_ENERGY_QUIET=1 with_tool "$joule" train --data "$work/d.h5" --steps 8 \
  --no-energy >/dev/null 2>"$work/train0.err" || fail "joule train --no-energy with the tool: $(cat "$work/train0.err")"
/usr/bin/python3 - "$work/train.out" "$work/train.h5" "$work/train0.h5" <<'PY' || fail "joule's regions and the tool's disagree"
import re, sys, h5py
text = open(sys.argv[1]).read()
table = text[text.index("energy by region"):text.index("(whole run)")]
joule = {}
for line in table.splitlines()[3:]:
    m = re.match(r"^  (\S+)(?: \*)? +(\d+) +([0-9.]+) +.* ([0-9.]+)$", line)
    if m: joule[m.group(1)] = (int(m.group(2)), float(m.group(4)))
def tool_regions(path):
    p = h5py.File(path, "r")["profile/regions"]
    names = [n.decode() if isinstance(n, bytes) else n for n in p["name"][()]]
    return {n: (int(c), float(e)) for n, c, e in zip(names, p["calls"][()], p["energy_j"][()])}
tool = tool_regions(sys.argv[2])
for name in ("step", "forward", "backward", "joule::block_forward", "evaluate"):
    if name not in joule: sys.exit(f"joule's table has no {name}: {sorted(joule)}")
for name, (calls, j) in joule.items():
    if name not in tool: sys.exit(f"the tool did not see joule's region {name}")
    tc, tj = tool[name]
    if tc != calls: sys.exit(f"{name}: {calls} calls in joule's table, {tc} in the tool's")
    # Each edge is stamped twice, microseconds apart (more if the thread is descheduled between
    # the two stamps on a loaded machine): 2 % and 0.05 J (0.1 ms at 500 W) a call of slack.
    if abs(tj - j) > 0.05 + 0.05 * calls + 0.02 * j: sys.exit(f"{name}: {j} J in joule's table, {tj} J in the tool's")
alone = tool_regions(sys.argv[3])
for name in ("step", "forward", "backward"):
    if alone.get(name, (0,))[0] != joule[name][0]: sys.exit(f"--no-energy: the tool saw {alone.get(name)} of {name}")
print(f"joule train: {len(joule)} regions agree, e.g. step {joule['step'][1]:.2f} J (joule) vs {tool['step'][1]:.2f} J (tool)")
PY
fi
echo PASS
