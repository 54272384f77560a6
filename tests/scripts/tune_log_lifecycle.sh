#!/usr/bin/env bash
# joule tune's run log end to end: a tune killed with SIGKILL mid-search leaves a log that opens
# and holds every finished trial; --resume keeps them (same figures) and finishes the search; a
# SIGINT stops cleanly; joule inspect reads the log back (report and CSV) and rejects a damaged or
# foreign file with a clear error; the plotting script turns the log into non-trivial PNGs.
# usage: tune_log_lifecycle.sh JOULE REPO_DIR WORK_DIR
set -euo pipefail
joule="$1" repo="$2" work="$3"
rm -rf "$work" && mkdir -p "$work"
fail() { echo "FAIL: $*" >&2; exit 1; }
data="$work/shapes.h5"
# A small model (what is checked here does not depend on its size) with the default search space
# of a 2-layer model (5 offload ratios x 3 recompute depths); short trials.
config="$work/small.json"
/usr/bin/python3 - "$repo/apps/configs/tiny.json" "$config" "$data" <<'PY'
import json, sys
cfg = json.load(open(sys.argv[1]))
cfg["model"].update(layers=2, d_model=64, heads=2, mlp_ratio=2, image_size=16, text_len=34)
cfg["data"]["path"] = sys.argv[3]
cfg["train"].update(batch=16, micro_batch=16, eval_samples=16)
json.dump(cfg, open(sys.argv[2], "w"), indent=1)
PY
quick=(--config "$config" --warmup-steps 1 --measured-steps 2 --max-repeats 1)
"$joule" data synth --out "$data" --count 256 --image-size 16 --text-len 34 --frames 1 >/dev/null
trials() { "$joule" inspect --csv "$1" | tail -n +2 | wc -l; }
# Waits until joule has printed trial N's line (printed after the trial is in the log), so that a
# signal sent next lands after N + 1 finished trials, however fast or slow the machine is.
wait_for_trial() {  # wait_for_trial OUTPUT N PID
  for _ in $(seq 1 6000); do
    grep -qE "^  trial +$2 " "$1" 2>/dev/null && return 0
    kill -0 "$3" 2>/dev/null || fail "joule tune ended before trial $2 was printed: $(tail -5 "$1")"
    sleep 0.02
  done
  fail "no trial $2 after 120 s: $(tail -5 "$1")"
}
# The first N trials' own figures: the `chosen` and `pareto` columns depend on the trials measured
# later (a faster trial after the resume takes them over), so they are left out.
own_figures() {
  "$joule" inspect --csv "$1" | /usr/bin/python3 -c '
import csv, sys
rows = list(csv.DictReader(sys.stdin))[: int(sys.argv[1])]
for r in rows:
    print(",".join(v for k, v in r.items() if k not in ("chosen", "pareto")))' "$2"
}

# 1. SIGKILL after at least 3 finished trials.
log="$work/killed.h5"
"$joule" tune "${quick[@]}" --no-train --out "$log" >"$work/killed.out" 2>&1 &
pid=$!
wait_for_trial "$work/killed.out" 2 $pid
kill -9 $pid; wait $pid 2>/dev/null || true
n_killed=$(trials "$log")
[ "$n_killed" -ge 3 ] || fail "the killed run's log holds $n_killed trials"
[ "$n_killed" -lt 15 ] || fail "the run finished before the kill (15 trials): nothing tested"
own_figures "$log" "$n_killed" > "$work/before.csv"
echo "killed with $n_killed finished trials; the log opens"

# 2. --resume: the finished trials are kept as they were, the rest measured, best and Pareto written.
"$joule" tune "${quick[@]}" --no-train --resume "$log" >"$work/resumed.out" 2>&1 || fail "resume failed: $(tail "$work/resumed.out")"
grep -q "resumed: $n_killed finished trials kept" "$work/resumed.out" || fail "resume did not report the kept trials"
[ "$(grep -c '(from the log)' "$work/resumed.out")" -ge 1 ] || fail "resume measured the finished trials again"
[ "$(trials "$log")" = 15 ] || fail "after resume the log holds $(trials "$log") trials, not 15"
own_figures "$log" "$n_killed" | cmp -s - "$work/before.csv" || fail "resume changed finished trials"
# Reports are captured before grep: under pipefail a grep -q that stops reading early ends joule's
# write of a long report in SIGPIPE, and the pipeline fails though the line is there.
"$joule" inspect "$log" >"$work/resumed.report" && grep -q "Chosen configuration" "$work/resumed.report" ||
  fail "no chosen configuration after resume"
echo "resumed: 15 trials, the first $n_killed unchanged"

# 3. Writing over an existing log is refused; nothing is lost.
if "$joule" tune "${quick[@]}" --no-train --out "$log" >"$work/over.out" 2>&1; then fail "an existing log was overwritten"; fi
grep -q "exists: continue it with --resume" "$work/over.out" || fail "no clear message for an existing log"
[ "$(trials "$log")" = 15 ] || fail "the refused run changed the log"

# 3b. A dataset whose images are not the model's size ends the job before its log exists.
"$joule" data synth --out "$work/big-images.h5" --count 16 --image-size 32 --text-len 34 --frames 1 >/dev/null
rc=0
"$joule" tune "${quick[@]}" --no-train --data "$work/big-images.h5" --out "$work/never.h5" >"$work/size.out" 2>&1 || rc=$?
[ "$rc" != 0 ] || fail "a dataset of 32x32 images was tuned on with a 16x16 model"
grep -qF "image height is 32 but the model's model.image_size is 16" "$work/size.out" || fail "size: $(cat "$work/size.out")"
[ ! -e "$work/never.h5" ] || fail "a run log was written before the dataset was refused"
echo "a dataset of the wrong image size: refused before the log was written"

# 4. SIGINT stops cleanly, the log stays readable and resumable.
ilog="$work/interrupted.h5"
"$joule" tune "${quick[@]}" --no-train --out "$ilog" >"$work/int.out" 2>&1 &
pid=$!
wait_for_trial "$work/int.out" 1 $pid
kill -INT $pid
rc=0; wait $pid || rc=$?
[ $rc = 130 ] || fail "SIGINT: exit code $rc, expected 130 ($(tail -3 "$work/int.out"))"
grep -q "continue with joule tune --resume" "$work/int.out" || fail "SIGINT: no resume hint"
"$joule" inspect "$ilog" >/dev/null || fail "the interrupted log does not open"
echo "SIGINT: exit 130, log readable"

# 5. A whole run with training, the report, and the plots.
full="$work/full.h5"
"$joule" tune "${quick[@]}" --steps 30 --out "$full" >"$work/full.out" 2>&1 || fail "full run failed: $(tail "$work/full.out")"
grep -q "Energy: MODEL ESTIMATE\|Energy: measured" "$work/full.out" || fail "the report does not say where energy comes from"
# One process, one trial: nouns in the singular (issue 65: "1 processes").
grep -qE "^tuning .* \(1 process, " "$work/full.out" || fail "no '(1 process, ' in: $(grep -m1 '^tuning' "$work/full.out")"
if grep -qE "(^|[^0-9])1 (processes|trials|samples|configurations|switches)\b" "$work/full.out"; then
  fail "a plural after 1: $(grep -E '(^|[^0-9])1 (processes|trials|samples|configurations|switches)\b' "$work/full.out")"
fi
"$joule" inspect "$full" >"$work/full.report" && grep -q "Training with the chosen configuration" "$work/full.report" ||
  fail "inspect: no training section"
bash "$repo/tests/scripts/plot_run_check.sh" "$full" "$repo/apps/scripts/plot_run.py" "$work/plots" || fail "plots"
# The same log with every region's time and energy scaled: the axes' labels must stay apart at any
# magnitude (9 ticks like '0.0125' on half the figure's width overlapped when a run's regions were
# short, and failed this test at random before).
for scale in 0.00037 0.071 53; do
  cp "$full" "$work/scaled.h5"
  /usr/bin/python3 - "$work/scaled.h5" "$scale" <<'PY' || fail "scaling the regions by $scale"
import sys
import h5py
with h5py.File(sys.argv[1], "r+") as f:
    def scale(name, obj):
        if isinstance(obj, h5py.Dataset) and name.rsplit("/", 2)[-2] in ("regions", "region_paths", "kernels") \
                and name.rsplit("/", 1)[-1] in ("seconds", "energy_j"):
            obj[...] = obj[...] * float(sys.argv[2])
    f.visititems(scale)
PY
  bash "$repo/tests/scripts/plot_run_check.sh" "$work/scaled.h5" "$repo/apps/scripts/plot_run.py" "$work/plots-$scale" ||
    fail "plots, regions scaled by $scale"
done

# 6. Damaged and foreign files are rejected with exit code 2 and a message naming the file.
head -c $(( $(stat -c %s "$full") / 2 )) "$full" > "$work/truncated.h5"
rc=0; "$joule" inspect "$work/truncated.h5" >"$work/trunc.out" 2>&1 || rc=$?
[ $rc = 2 ] && grep -q "truncated.h5" "$work/trunc.out" || fail "truncated log: exit $rc, $(cat "$work/trunc.out")"
rc=0; "$joule" inspect "$data" >"$work/foreign.out" 2>&1 || rc=$?
[ $rc = 2 ] && grep -qi "not a joule run log" "$work/foreign.out" || fail "dataset as log: exit $rc, $(cat "$work/foreign.out")"
echo "damaged and foreign files rejected"
echo "PASS"
