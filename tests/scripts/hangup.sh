#!/usr/bin/env bash
# A hang-up never ends a run before its checkpoint (apps/stop_signals.hpp, docs/outputs.md). A
# closed terminal delivers SIGHUP twice: the interactive shell re-sends it to its jobs, and the
# kernel sends it to the terminal's foreground group when the shell exits. Only a SIGINT or
# SIGTERM after a first stop signal ends the process at once; a second SIGHUP is ignored.
#   double-kill: joule train --checkpoint gets two SIGHUPs that both arrive mid-run (two_hangups):
#                exit 129, the checkpoint written and whole, no lock and no temporary left. Then
#                SIGHUP and, once the run has stopped on it and is writing its checkpoint (held
#                there by HOLD_SYNC, tests/support/hold_sync.c), SIGTERM: the process ends at once,
#                killed by SIGTERM (143), without finishing the checkpoint or saying it stopped.
#   terminal:    an interactive bash in a pseudo-terminal runs joule train --checkpoint in the
#                foreground; the terminal is closed (terminal_hangup.py): the same as two SIGHUPs.
# Every signal lands after the output or a file shows the run has got there, and every wait is on
# an event with a deadline of minutes, so a loaded machine only makes it slower.
# usage: hangup.sh JOULE REPO_DIR WORK_DIR double-kill HOLD_SYNC | hangup.sh JOULE REPO_DIR WORK_DIR terminal
set -euo pipefail
joule="$1" repo="$2" work="$3" mode="$4" hold_sync="${5:-}"
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
# two_hangups PID: two SIGHUPs that both arrive, whatever the timing. Two pending process-wide
# would be one, so the process is stopped, two of its threads are sent one each (tgkill: pending
# per thread) and it is continued: both handlers run while the run is still going. (A process of
# one thread gets one SIGHUP, then a second once the first is delivered.)
two_hangups() {  # two_hangups PID
  "$py" - "$1" <<'PY' || fail "could not send the signals"
import ctypes, os, platform, signal, sys, time
pid = int(sys.argv[1])
libc = ctypes.CDLL(None, use_errno=True)
deadline = time.monotonic() + 300
def tgkill(tid, sig):
    if hasattr(libc, "tgkill"):
        return libc.tgkill(pid, tid, sig)
    return libc.syscall({"x86_64": 234, "aarch64": 131, "ppc64le": 250}[platform.machine()], pid, tid, sig)
def threads():  # [(tid, state)]: the state is the field after "(comm)" in /proc/PID/task/TID/stat
    found = []
    for t in os.listdir("/proc/%d/task" % pid):
        try:
            with open("/proc/%d/task/%s/stat" % (pid, t)) as f:
                found.append((int(t), f.read().rsplit(")", 1)[1].split()[0]))
        except (FileNotFoundError, ProcessLookupError):
            pass
    return sorted(found)
def hangup_pending():
    with open("/proc/%d/status" % pid) as f:
        return any(l.startswith("ShdPnd:") and int(l.split()[1], 16) & 1 for l in f)
def hangup_then(second):
    os.kill(pid, signal.SIGHUP)
    while hangup_pending() and time.monotonic() < deadline:
        pass
    os.kill(pid, second)
try:
    if len(threads()) < 2:
        hangup_then(signal.SIGHUP)
        print("one thread: two SIGHUPs one after the other")
        sys.exit(0)
    os.kill(pid, signal.SIGSTOP)
    while True:
        now = threads()
        if len(now) >= 2 and all(state in "Tt" for _, state in now):
            break
        if time.monotonic() > deadline:
            sys.exit("the process did not stop: %s" % now)
        time.sleep(0.001)
    for tid, _ in now[:2]:
        if tgkill(tid, signal.SIGHUP) != 0:
            sys.exit("tgkill: " + os.strerror(ctypes.get_errno()))
    os.kill(pid, signal.SIGCONT)
    print("two SIGHUPs, to threads %d and %d" % (now[0][0], now[1][0]))
except (FileNotFoundError, ProcessLookupError):
    print("the process had ended")  # before its second signal: nothing to test, nothing wrong
PY
}
# The checkpoint is whole (joule resumes it) and nothing of its writing is left.
check_checkpoint() {  # check_checkpoint WHAT
  [ -s "$work/ckpt.h5" ] || fail "$1: no checkpoint: $(ls -A "$work")"
  local left
  left="$(ls -A "$work" | grep -E '\.lock$|^\..*\.joule-' || true)"
  [ -z "$left" ] || fail "$1: left behind: $left"
  local step
  step=$("$py" -c 'import h5py, sys; print(int(h5py.File(sys.argv[1], "r").attrs["step"]))' "$work/ckpt.h5") ||
    fail "$1: the checkpoint does not open"
  [ "$step" -ge 1 ] || fail "$1: the checkpoint is at step $step"
  "$joule" train --config "$work/small.json" --no-energy --resume "$work/ckpt.h5" --steps $((step + 1)) \
    --checkpoint "$work/resumed.h5" >"$work/resume.out" 2>&1 || fail "$1: the checkpoint does not resume: $(tail "$work/resume.out")"
  rm -f "$work/resumed.h5"
  echo "ok: $1: checkpoint at step $step, resumed"
}

if [ "$mode" = double-kill ]; then
  # 1. Two hang-ups: the second is ignored.
  "$joule" train --config "$work/small.json" --no-energy >"$work/hup2.out" 2>&1 &
  pid=$!
  wait_for "$work/hup2.out" "^step +2/" $pid
  two_hangups $pid
  rc=0; wait $pid || rc=$?
  [ $rc = 129 ] || fail "two SIGHUPs: exit $rc, expected 129: $(tail -3 "$work/hup2.out")"
  grep -q "^interrupted by SIGHUP .* after step [0-9]*: the training state is in $work/ckpt.h5" "$work/hup2.out" ||
    fail "two SIGHUPs: the run did not stop between steps (killed by the second?): $(tail -3 "$work/hup2.out")"
  check_checkpoint "two SIGHUPs"

  # 2. SIGHUP, then SIGTERM while the run, stopped on the SIGHUP, writes its checkpoint: the user
  # means it, the process ends at once (the signal's default action: the shell reports 143). The
  # checkpoint's sync is held (hold_sync.so) until the test lets it go, so the SIGTERM comes after
  # the SIGHUP was handled (the run stopped and began its checkpoint: there is none before, with
  # checkpoint_every 0) and before the process could end by itself: one outcome, whatever the load.
  [ -r "$hold_sync" ] || fail "no hold_sync.so given (argument 5): $hold_sync"
  rm -f "$work/ckpt.h5" "$work/held" "$work/go"
  LD_PRELOAD="$hold_sync" JOULE_HOLD_PATH="/.ckpt.h5.joule-" JOULE_HOLD_READY="$work/held" JOULE_HOLD_UNTIL="$work/go" \
    "$joule" train --config "$work/small.json" --no-energy >"$work/hupterm.out" 2>&1 &
  pid=$!
  wait_for "$work/hupterm.out" "^step +2/" $pid
  kill -HUP $pid
  for _ in $(seq 1 6000); do
    [ -e "$work/held" ] && break
    kill -0 $pid 2>/dev/null || fail "SIGHUP: the run ended before writing its checkpoint: $(tail -3 "$work/hupterm.out")"
    sleep 0.02
  done
  [ -e "$work/held" ] || { touch "$work/go"; fail "SIGHUP: no checkpoint begun after 120 s: $(tail -3 "$work/hupterm.out")"; }
  kill -TERM $pid
  for _ in $(seq 1 6000); do kill -0 $pid 2>/dev/null || break; sleep 0.02; done
  if kill -0 $pid 2>/dev/null; then
    touch "$work/go"  # let it finish, to say how it ended
    rc=0; wait $pid || rc=$?
    fail "SIGHUP then SIGTERM: SIGTERM did not end the process (120 s); let go, it exited $rc: $(tail -3 "$work/hupterm.out")"
  fi
  rc=0; wait $pid || rc=$?
  [ $rc = 143 ] || fail "SIGHUP then SIGTERM: exit $rc, expected 143 (killed by SIGTERM): $(tail -3 "$work/hupterm.out")"
  ! grep -q "^interrupted by" "$work/hupterm.out" ||
    fail "SIGHUP then SIGTERM: the run went on to its end of a stop instead of ending at once: $(tail -3 "$work/hupterm.out")"
  [ ! -e "$work/ckpt.h5" ] || fail "SIGHUP then SIGTERM: the checkpoint was finished after SIGTERM"
  echo "ok: SIGHUP, then SIGTERM while the checkpoint was being written: ended at once (143), no checkpoint finished"
elif [ "$mode" = terminal ]; then
  rm -f "$work/ckpt.h5"
  "$py" "$(dirname "$0")/terminal_hangup.py" "$work/terminal.out" "$work/joule.pid" \
    "$joule" train --config "$work/small.json" --no-energy || fail "closing the terminal (its output: $work/terminal.out)"
  check_checkpoint "terminal closed"
else
  fail "unknown mode $mode"
fi
echo "PASS"
