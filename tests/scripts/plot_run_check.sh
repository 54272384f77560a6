#!/usr/bin/env bash
# Checks apps/scripts/plot_run.py on a run log:
#   plot_run_check.sh LOG SCRIPT OUTDIR
# The script must exit 0 on LOG, print and write pareto.png, power_trace.png, regions.png and
# loss.png into OUTDIR, each a valid PNG (magic bytes) of more than 5 kB with more than a handful
# of distinct pixel colours and some coloured (non-grey) pixels, i.e. data drawn; and it must exit 2, writing no plot, on an HDF5 file that is not a
# joule run log and on a file that is not HDF5 at all. What the plots show, from the script's own
# --describe summary (issue 53): no text reaches outside its figure and no two texts overlap; each
# legend names each entry once, and no power column names its source twice ("model (model,
# model)"); the power axes start at 0 W; pareto.png draws the 95% intervals when the log's trials
# have two or more measured steps.
#   plot_run_check.sh --faults FAULT_WRITES_SO SCRIPT
# Writing under a fault instead (tests/support/fault_writes.c): on a small run log of its own (a
# /train loss curve, made here in a second), loss.png is plotted once, then again with its writes
# failing (ENOSPC) a few KiB in: exit 1 with one line naming loss.png, the error and the free space,
# the previous loss.png bitwise unchanged, no temporary left in the folder.
set -euo pipefail
if [ "${1:-}" = --faults ] && [ "$#" -eq 3 ]; then
  fault_so="$2"; script="$3"
  py=/usr/bin/python3
  fail() { echo "plot_run_check --faults: $*" >&2; exit 1; }
  [ -f "$fault_so" ] || fail "no write-failure injector at $fault_so"
  work="$(mktemp -d)"; trap 'rm -rf "$work"' EXIT
  "$py" - "$work/run.h5" <<'PY'
import sys

import h5py
import numpy as np

with h5py.File(sys.argv[1], "w") as f:
    f.attrs["format"] = "joule-run-log-v1"
    train = f.create_group("train")
    train["step"] = np.arange(1, 41, dtype=np.int64)
    train["loss"] = np.linspace(5.0, 1.0, 40) + 0.1 * np.sin(np.arange(40))
    train.attrs["complete"] = 1
PY
  plot="$work/plots/loss.png"
  "$py" "$script" "$work/run.h5" --out "$work/plots" >"$work/stdout" 2>"$work/stderr" ||
    { cat "$work/stdout" "$work/stderr" >&2; fail "the plot without a fault failed"; }
  size="$(stat -c %s "$plot")"
  [ "$size" -gt 4096 ] || fail "loss.png is only $size bytes: a fault a few KiB in would miss it"
  cp "$plot" "$work/loss.copy"
  rc=0
  LD_PRELOAD="$fault_so" JOULE_FAULT_PATH=loss.png JOULE_FAULT_AFTER_BYTES=2048 JOULE_FAULT_ERRNO=ENOSPC \
    "$py" "$script" "$work/run.h5" --out "$work/plots" >"$work/stdout" 2>"$work/stderr" || rc=$?
  [ "$rc" -eq 1 ] || { cat "$work/stdout" "$work/stderr" >&2; fail "exit $rc under ENOSPC, want 1"; }
  grep -vE "^plot_run.py: skipped (pareto|power_trace|regions)\.png: " "$work/stderr" >"$work/errors" || true
  [ "$(wc -l <"$work/errors")" -eq 1 ] || { cat "$work/stderr" >&2; fail "not one error line"; }
  grep -qE "^plot_run.py: cannot write $plot \(temporary [^)]*\): No space left on device \(ENOSPC\); [0-9.]+ ([KMGT]iB|bytes) free in $work/plots; $plot is left as it was\$" \
    "$work/errors" || { cat "$work/errors" >&2; fail "the message lacks the file, the error or the free space"; }
  if grep -q Traceback "$work/stderr"; then cat "$work/stderr" >&2; fail "a traceback"; fi
  cmp "$plot" "$work/loss.copy" || fail "the previous loss.png changed"
  [ "$(ls -A "$work/plots")" = loss.png ] || fail "left in the folder: $(ls -A "$work/plots" | tr '\n' ' ')"
  echo "plot_run check --faults: ENOSPC after 2048 of $size bytes refused, loss.png unchanged"
  exit 0
fi
if [ "$#" -ne 3 ]; then echo "usage: $0 LOG SCRIPT OUTDIR | $0 --faults FAULT_WRITES_SO SCRIPT" >&2; exit 2; fi
log="$1"; script="$2"; outdir="${3%/}"
py=/usr/bin/python3
fail() { echo "plot_run_check: $*" >&2; exit 1; }
[ -f "$log" ] || fail "no run log at $log"
[ -f "$script" ] || fail "no script at $script"
work="$(mktemp -d)"; trap 'rm -rf "$work"' EXIT

plots=(pareto.png power_trace.png regions.png loss.png)
rm -f "${plots[@]/#/$outdir/}"
rc=0
"$py" "$script" "$log" --out "$outdir" --describe "$work/describe.json" >"$work/stdout" 2>"$work/stderr" || rc=$?
if [ "$rc" -ne 0 ]; then
  cat "$work/stdout" "$work/stderr" >&2
  fail "plot_run.py exited $rc on $log"
fi
cat "$work/stdout"
[ -s "$work/stderr" ] && sed 's/^/  (note) /' "$work/stderr"

for p in "${plots[@]}"; do
  f="$outdir/$p"
  [ -f "$f" ] || fail "$f was not written"
  grep -qxF "$f" "$work/stdout" || fail "$f was written but its path not printed"
  magic="$(head -c 8 "$f" | od -An -tx1 | tr -d ' \n')"
  [ "$magic" = 89504e470d0a1a0a ] || fail "$f is not a PNG (first bytes $magic)"
  size="$(stat -c %s "$f")"
  [ "$size" -gt 5000 ] || fail "$f is only $size bytes"
done

# Distinct colours, and coloured pixels: a blank figure has one colour; empty axes have a few
# hundred (anti-aliased black text on white) but no coloured pixel, which every data series adds.
"$py" - "$outdir" "${plots[@]}" <<'PY' || fail "a plot is (nearly) blank, see above"
import os
import sys

import numpy as np

try:
    from matplotlib.image import imread
except ImportError:
    from PIL import Image

    def imread(path):
        return np.asarray(Image.open(path).convert("RGBA"), dtype=float) / 255
outdir, names = sys.argv[1], sys.argv[2:]
bad = 0
for name in names:
    img = imread(os.path.join(outdir, name))
    if img.dtype != np.uint8:
        img = np.round(np.asarray(img) * 255).astype(np.uint8)
    h, w = img.shape[:2]
    colours = len(np.unique(img.reshape(h * w, -1), axis=0))
    rgb = img[..., :3].astype(int) if img.ndim == 3 else np.stack([img.astype(int)] * 3, -1)
    coloured = int(((rgb.max(-1) - rgb.min(-1)) > 60).sum())
    if h < 100 or w < 100 or colours <= 16 or coloured < 200:
        print(f"plot_run_check: {name}: {w}x{h} pixels, {colours} distinct colours, {coloured} "
              "coloured pixels (want > 16 and >= 200)", file=sys.stderr)
        bad += 1
sys.exit(1 if bad else 0)
PY

# What the plots show (--describe): nothing cut off or overlapping, each source and entry named once,
# power from 0 W, the trials' intervals drawn.
"$py" - "$work/describe.json" "$log" <<'PY' || fail "a plot reads wrong, see above"
import json
import re
import sys

import h5py
import numpy as np

plots = {p["plot"]: p for p in json.load(open(sys.argv[1]))["plots"]}
bad = []
for name, p in sorted(plots.items()):
    for t in p["texts_outside_figure"]:
        bad.append(f"{name}: text outside the figure: {t}")
    for a, b in p["overlapping_texts"]:
        bad.append(f"{name}: texts overlap: {a!r} and {b!r}")
    for ax in p["axes"]:
        legend = ax["legend"]
        if len(set(legend)) != len(legend):
            bad.append(f"{name}: a legend entry twice: {legend}")
        if any(t.endswith("...") or t.endswith("\u2026") for t in [ax["title"]] + p["titles"]):
            bad.append(f"{name}: a title cut short: {ax['title']!r}")
power = plots.get("power_trace.png")
for ax in power["axes"] if power else []:
    if ax["ylabel"].startswith("power") and ax["ylim"][0] != 0:
        bad.append(f"power_trace.png: {ax['title']!r}: the power axis starts at {ax['ylim'][0]}, not 0")
    for entry in ax["legend"]:
        if re.search(r"\(([^,()]+)(, \1)+[,)]", entry) or re.match(r"([^ (]+) \(\1[,)]", entry):
            bad.append(f"power_trace.png: {entry!r} names its source twice")
with h5py.File(sys.argv[2], "r") as f:  # trials with 2+ measured steps: their intervals are drawn
    trials = f["trials"].values() if isinstance(f.get("trials"), h5py.Group) else []
    intervals = any(np.isfinite(np.asarray(g.get("step_time_s", [])[()], dtype=float)).sum() >= 2
                    and g.attrs.get("status", b"ok") in (b"ok", "ok") and g.attrs.get("complete", 0) == 1
                    for g in trials if isinstance(g, h5py.Group) and "step_energy_j" in g)
if intervals:
    entries = [e for ax in plots["pareto.png"]["axes"] for e in ax["legend"]]
    if not any(e.startswith("95% interval") for e in entries):
        bad.append(f"pareto.png: the log's trials have intervals but the legend has none: {entries}")
for line in bad:
    print(f"plot_run_check: {line}", file=sys.stderr)
if bad:
    sys.exit(1)
print(f"plots read right: {', '.join(sorted(plots))} (nothing cut off or overlapping, legends unique, "
      f"power from 0 W{', intervals drawn' if intervals else ''})")
PY

# Not a joule run log: an HDF5 file of another format, and a file that is not HDF5.
"$py" - "$work/other.h5" <<'PY'
import sys

import h5py
import numpy as np

with h5py.File(sys.argv[1], "w") as f:
    f.attrs["format"] = "joule-captions-v1"
    f.create_dataset("tokens", data=np.zeros((2, 4), dtype=np.int32))
PY
echo "not an HDF5 file" >"$work/text.h5"
for bad in other.h5 text.h5; do
  rc=0
  "$py" "$script" "$work/$bad" --out "$work/out-$bad" >"$work/bad.out" 2>"$work/bad.err" || rc=$?
  [ "$rc" -eq 2 ] || { cat "$work/bad.out" "$work/bad.err" >&2; fail "$bad: exit $rc, expected 2"; }
  grep -q "not a joule run log" "$work/bad.err" || fail "$bad: no 'not a joule run log' message"
  [ "$(wc -l <"$work/bad.err")" -eq 1 ] || { cat "$work/bad.err" >&2; fail "$bad: error is not one line"; }
  if [ -d "$work/out-$bad" ] && [ -n "$(ls -A "$work/out-$bad")" ]; then fail "$bad: plots written"; fi
  echo "$bad refused: $(cat "$work/bad.err")"
done
echo "plot_run check: ok"
