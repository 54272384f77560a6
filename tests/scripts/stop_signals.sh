#!/usr/bin/env bash
# What a batch system does to a run, and what joule must do then. SIGTERM (Slurm's time limit) and
# SIGHUP (a terminal or launcher gone) are handled as SIGINT is: the run stops between steps, keeps
# what is due (a checkpoint where train.checkpoint is set, the run log's finished trials) and exits
# with 128 + the signal (143, 129), saying how to continue; the checkpoint resumes. A file-size
# limit (ulimit -f) is an error naming the file and the limit, with no temporary and no lock left,
# not a silent death by SIGXFSZ. Every kill lands after the output shows the run has got there, so
# however fast or slow the machine is, it lands where it is meant to.
# usage: stop_signals.sh JOULE REPO_DIR WORK_DIR
set -euo pipefail
joule="$1" repo="$2" work="$3"
rm -rf "$work" && mkdir -p "$work"
fail() { echo "FAIL: $*" >&2; exit 1; }
py=/usr/bin/python3
data="$work/shapes.h5"
"$joule" data synth --out "$data" --count 128 --image-size 16 --text-len 34 --frames 1 >/dev/null
"$py" - "$repo/apps/configs/tiny.json" "$work/small.json" "$data" "$work/ckpt.h5" <<'PY'
import json, sys
cfg = json.load(open(sys.argv[1]))
cfg["model"].update(layers=2, d_model=32, heads=2, mlp_ratio=2, image_size=16, text_len=34)
cfg["data"]["path"] = sys.argv[3]
cfg["train"].update(batch=16, micro_batch=16, steps=100000, eval_every=0, eval_samples=16, log_every=1,
                    checkpoint=sys.argv[4], checkpoint_every=0)
cfg["tune"] = {"warmup_steps": 1, "measured_steps": 2, "max_repeats": 1}
json.dump(cfg, open(sys.argv[2], "w"), indent=1)
PY
wait_for() {  # wait_for OUTPUT PATTERN PID
  for _ in $(seq 1 6000); do
    grep -qE "$2" "$1" 2>/dev/null && return 0
    kill -0 "$3" 2>/dev/null || fail "ended before '$2' was printed: $(tail -5 "$1")"
    sleep 0.02
  done
  fail "no '$2' after 120 s: $(tail -5 "$1")"
}
step_of() { "$py" -c 'import h5py, sys; print(int(h5py.File(sys.argv[1], "r").attrs["step"]))' "$1"; }

# 1. joule train, SIGTERM: a checkpoint at the step it stopped after, exit 143, and it resumes.
"$joule" train --config "$work/small.json" --no-energy >"$work/term.out" 2>&1 &
pid=$!
wait_for "$work/term.out" "^step +3/" $pid
kill -TERM $pid
rc=0; wait $pid || rc=$?
[ $rc = 143 ] || fail "train, SIGTERM: exit $rc, expected 143: $(tail -3 "$work/term.out")"
grep -q "^interrupted by SIGTERM .* after step [0-9]*: the training state is in $work/ckpt.h5; continue with joule train --resume" \
  "$work/term.out" || fail "train, SIGTERM: no message saying where the state is: $(tail -3 "$work/term.out")"
step=$(step_of "$work/ckpt.h5")
[ "$step" -ge 3 ] || fail "train, SIGTERM: the checkpoint is at step $step"
[ ! -e "$work/ckpt.h5.lock" ] || fail "train, SIGTERM: the lock was left behind"
"$joule" train --config "$work/small.json" --no-energy --resume "$work/ckpt.h5" --steps $((step + 2)) \
  --checkpoint "$work/resumed.h5" >"$work/resume.out" 2>&1 || fail "the SIGTERM checkpoint does not resume: $(tail "$work/resume.out")"
[ "$(step_of "$work/resumed.h5")" = $((step + 2)) ] || fail "the resumed run did not go on from step $step"
echo "ok: train, SIGTERM after step $step: exit 143, checkpoint resumed"

# 2. joule train --tune, SIGTERM during the in-flight search: the trials in the log, the training
# state in the checkpoint, exit 143, and --resume continues both.
rm -f "$work/ckpt.h5"
"$joule" train --tune --config "$work/small.json" --steps 400 --tune-log "$work/tune.h5" >"$work/tune.out" 2>&1 &
pid=$!
wait_for "$work/tune.out" "^  trial +2 " $pid
kill -TERM $pid
rc=0; wait $pid || rc=$?
[ $rc = 143 ] || fail "train --tune, SIGTERM: exit $rc, expected 143: $(tail -3 "$work/tune.out")"
grep -q "interrupted by SIGTERM .* during the search at step [0-9]*: [0-9]* trials\{0,1\} \(are\|is\) in .*tune.h5, the training state in .*ckpt.h5" \
  "$work/tune.out" || fail "train --tune, SIGTERM: no message: $(tail -3 "$work/tune.out")"
[ -s "$work/ckpt.h5" ] || fail "train --tune, SIGTERM: no checkpoint"
"$joule" inspect "$work/tune.h5" >/dev/null || fail "train --tune, SIGTERM: the log does not open"
"$joule" train --tune --config "$work/small.json" --steps 400 --resume "$work/ckpt.h5" >"$work/tune-resumed.out" 2>&1 ||
  fail "train --tune, SIGTERM: --resume failed: $(tail "$work/tune-resumed.out")"
grep -q "finished trials kept" "$work/tune-resumed.out" || fail "train --tune --resume did not keep the trials"
echo "ok: train --tune, SIGTERM during the search: exit 143, resumed"

# 3. joule tune, SIGHUP: exit 129, the log readable and resumable.
"$joule" tune --config "$work/small.json" --no-train --out "$work/hup.h5" >"$work/hup.out" 2>&1 &
pid=$!
wait_for "$work/hup.out" "^  trial +1 " $pid
kill -HUP $pid
rc=0; wait $pid || rc=$?
[ $rc = 129 ] || fail "tune, SIGHUP: exit $rc, expected 129: $(tail -3 "$work/hup.out")"
grep -q "interrupted by SIGHUP .*continue with joule tune --resume" "$work/hup.out" || fail "tune, SIGHUP: no resume hint"
"$joule" inspect "$work/hup.h5" >/dev/null || fail "tune, SIGHUP: the log does not open"
echo "ok: tune, SIGHUP: exit 129, log readable"

# 4. A file-size limit: an error naming the file and the limit; nothing left behind.
rc=0; (ulimit -f 64; exec "$joule" data synth --out "$work/big.h5" --count 400 --image-size 32 --text-len 36) \
  >"$work/fsize.out" 2>&1 || rc=$?
[ $rc = 1 ] || fail "ulimit -f: exit $rc, expected 1 (153 = killed by SIGXFSZ): $(tail -3 "$work/fsize.out")"
grep -q "big.h5" "$work/fsize.out" && grep -q "File too large" "$work/fsize.out" &&
  grep -q "file-size limit (ulimit -f) is 64.0 KiB" "$work/fsize.out" || fail "ulimit -f: the file or the limit not named: $(cat "$work/fsize.out")"
left="$(ls -A "$work" | grep -c "^\.big\.h5\.joule-\|^big\.h5" || true)"
[ "$left" = 0 ] || fail "ulimit -f: left behind: $(ls -A "$work")"
echo "ok: ulimit -f: exit 1, the file and the limit named, nothing left"

# 5. An address-space limit (ulimit -v) that the run and the BLAS's buffers do not fit in: refused
# before the first step, naming the limit (OpenBLAS retried its buffer allocation forever: a hang).
# Not under AddressSanitizer, whose shadow memory needs an unlimited address space.
if [[ "$(ldd "$joule")" != *libasan* ]]; then  # the whole output: no SIGPIPE race under pipefail
  rc=0; (ulimit -v 450000; OMP_NUM_THREADS=2 exec timeout 120 "$joule" train --config "$work/small.json" --no-energy \
    --steps 3) >"$work/vlimit.out" 2>&1 || rc=$?
  [ $rc = 1 ] || fail "ulimit -v: exit $rc, expected 1 (124: it hung): $(tail -3 "$work/vlimit.out")"
  grep -q "address-space limit (ulimit -v 439.5 MiB" "$work/vlimit.out" || fail "ulimit -v: the limit not named: $(cat "$work/vlimit.out")"
  echo "ok: ulimit -v: refused before the first step, the limit named"
fi
echo "PASS"
