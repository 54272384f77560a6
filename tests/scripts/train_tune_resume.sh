#!/usr/bin/env bash
# joule train --tune end to end: a run tuned in flight and killed with SIGKILL mid-search is
# continued with --resume CHECKPOINT (the checkpoint names its log): the finished trials are kept,
# not measured again, the search finishes, and the run ends with bitwise the parameters of an
# untuned run (every knob of the space is neutral). joule inspect shows the switch points; an
# existing log is never overwritten.
# usage: train_tune_resume.sh JOULE REPO_DIR WORK_DIR
set -euo pipefail
joule="$1" repo="$2" work="$3"
rm -rf "$work" && mkdir -p "$work"
fail() { echo "FAIL: $*" >&2; exit 1; }
py=/usr/bin/python3
data="$work/shapes.h5"
"$joule" data synth --out "$data" --count 256 --image-size 16 --text-len 34 --frames 1 >/dev/null
# The default model made small (what is checked does not depend on its size), 80 steps,
# evaluations and checkpoints every 10; short trials over the 15 offload x recompute configurations
# of a 2-layer model.
make_config() {  # make_config OUT CHECKPOINT
  "$py" - "$repo/apps/configs/tiny.json" "$1" "$data" "$2" <<'PY'
import json, sys
cfg = json.load(open(sys.argv[1]))
cfg["model"].update(layers=2, d_model=64, heads=2, mlp_ratio=2, image_size=16, text_len=34)
cfg["data"]["path"] = sys.argv[3]
cfg["train"].update(batch=16, micro_batch=16, steps=80, eval_every=10, eval_samples=16, log_every=10, checkpoint=sys.argv[4],
                    checkpoint_every=10)
cfg["tune"] = {"warmup_steps": 1, "measured_steps": 2, "max_repeats": 1}
json.dump(cfg, open(sys.argv[2], "w"), indent=1)
PY
}
make_config "$work/tuned.json" "$work/tuned.ckpt.h5"
make_config "$work/untuned.json" "$work/untuned.ckpt.h5"
log="$work/tune.h5"
trials() { "$joule" inspect --csv "$1" 2>/dev/null | tail -n +2 | wc -l; }

# 1. The untuned reference.
"$joule" train --config "$work/untuned.json" --no-energy >"$work/untuned.out" 2>&1 || fail "untuned run: $(tail "$work/untuned.out")"

# 2. Tuned in flight, killed with SIGKILL once 3 trials are in the log and a checkpoint is written
# (trial lines are printed after the trial is in the log: watching the output, the kill lands
# after the third trial however fast or slow the machine is).
"$joule" train --tune --config "$work/tuned.json" --tune-log "$log" >"$work/killed.out" 2>&1 &
pid=$!
for _ in $(seq 1 6000); do
  [ -f "$work/tuned.ckpt.h5" ] && grep -qE "^  trial +([2-9]|1[0-4]) " "$work/killed.out" && break
  kill -0 $pid 2>/dev/null || fail "joule train --tune ended before it could be killed: $(tail "$work/killed.out")"
  sleep 0.02
done
kill -9 $pid; wait $pid 2>/dev/null || true
n_killed=$(trials "$log")
[ "$n_killed" -ge 3 ] || fail "the killed run's log holds $n_killed trials"
[ "$n_killed" -lt 15 ] || fail "the search finished before the kill: nothing tested"
echo "killed with $n_killed finished trials"

# 3. An existing log is not overwritten.
if "$joule" train --tune --config "$work/tuned.json" --tune-log "$log" >"$work/over.out" 2>&1; then
  fail "an existing tuning log was overwritten"
fi
grep -q "exists: write the log elsewhere" "$work/over.out" || fail "no clear message for an existing log: $(cat "$work/over.out")"

# 4. --resume: the checkpoint names the log; finished trials come from it.
"$joule" train --tune --config "$work/tuned.json" --resume "$work/tuned.ckpt.h5" >"$work/resumed.out" 2>&1 ||
  fail "resume failed: $(tail "$work/resumed.out")"
grep -q "resumed: $n_killed finished trials kept" "$work/resumed.out" || fail "resume did not keep the trials: $(head -20 "$work/resumed.out")"
[ "$(grep -c '(from the log)' "$work/resumed.out")" -ge 1 ] || fail "resume measured the finished trials again"
[ "$(trials "$log")" = 15 ] || fail "after resume the log holds $(trials "$log") trials, not 15"
echo "resumed: 15 trials, $n_killed of them from the log"

# 5. Bitwise the untuned run's parameters.
"$py" - "$work/untuned.ckpt.h5" "$work/tuned.ckpt.h5" <<'PY' || fail "the tuned run's parameters differ from the untuned run's"
import sys, h5py, numpy as np
with h5py.File(sys.argv[1], "r") as a, h5py.File(sys.argv[2], "r") as b:
    assert a.attrs["step"] == b.attrs["step"] == 80, (a.attrs["step"], b.attrs["step"])
    names = sorted(a["params"].keys())
    assert names == sorted(b["params"].keys()) and names
    for n in names:
        x, y = a["params"][n][()], b["params"][n][()]
        if x.shape != y.shape or x.tobytes() != y.tobytes():
            print(f"params/{n} differs: max |diff| {np.max(np.abs(x - y))}")
            sys.exit(1)
print(f"bitwise equal: {len(names)} parameter groups at step 80")
PY

# 6. The report shows the in-flight run and its switch points.
"$joule" inspect "$log" >"$work/inspect.out" || fail "inspect failed"
grep -q "tuned in flight" "$work/inspect.out" || fail "inspect does not say the run was tuned in flight"
grep -q "configuration from step" "$work/inspect.out" || fail "inspect shows no switch points"
echo "PASS"
