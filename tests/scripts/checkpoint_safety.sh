#!/usr/bin/env bash
# Checkpoints are never left damaged.
#   checkpoint_safety.sh shards CKPT mpirun... joule train ... --checkpoint CKPT
#       runs the sequence-shard job several times: one process writes, so every run ends with a
#       complete checkpoint and no leftover temporary (two writers used to race on CKPT.tmp).
#   checkpoint_safety.sh kill JOULE WORKDIR CONFIG
#       kills a training run that checkpoints every step (SIGKILL) four times, each resumed from the
#       last: after each kill the checkpoint on disk is complete and resumable, never a half-written
#       file, and later than the one before (a step was made and kept between kills). Each kill is
#       set off by an event, never a delay: the line of the second step after the resumed one (the
#       first's checkpoint is then committed: a step's line comes before its checkpoint is
#       written), then, alternately, at once or at the first write into the next checkpoint's
#       temporary (inotify). Deadlines of 120 s only bound a broken run; a loaded machine is slower.
set -u
pid=""
fail() { echo "FAIL: $*"; [ -z "$pid" ] || kill -9 "$pid" 2>/dev/null; exit 1; }
py=/usr/bin/python3
# Prints the checkpoint's step if it is complete: format attribute, every dataset readable in full.
check() {
  "$py" - "$1" <<'PY'
import sys, h5py, numpy as np
with h5py.File(sys.argv[1], "r") as f:
    assert f.attrs["format"] in (b"joule-checkpoint-v1", "joule-checkpoint-v1"), "format"
    n = 0
    def visit(name, obj):
        global n
        if isinstance(obj, h5py.Dataset):
            a = obj[()]
            assert np.all(np.isfinite(a)), name + " not finite"
            n += 1
    f.visititems(visit)
    assert n > 0 and "params" in f, "no parameters"
    print(int(f.attrs["step"]))
PY
}

case "$1" in
shards)
  ckpt=$2; shift 2
  for i in 1 2 3 4; do
    rm -f "$ckpt"
    "$@" > /tmp/joule-ckpt-shards.$$ 2>&1 || { cat /tmp/joule-ckpt-shards.$$; fail "run $i failed"; }
    left="$(ls -A "$(dirname "$ckpt")" | grep -c "^\.$(basename "$ckpt")\.joule-" || true)"
    [ "$left" = 0 ] || fail "run $i left a temporary of $ckpt behind"
    step=$(check "$ckpt") || fail "run $i: $ckpt is not a complete checkpoint"
    echo "run $i: complete checkpoint at step $step"
  done
  rm -f /tmp/joule-ckpt-shards.$$
  ;;
kill)
  joule=$2; dir=$3; config=$4
  rm -rf "$dir"; mkdir -p "$dir"
  data=$dir/shapes.h5; ckpt=$dir/ckpt.h5
  # A line for every step (the config may log every 20th).
  "$py" - "$config" "$dir/config.json" <<'PY' || fail "cannot write the run's configuration"
import json, sys
cfg = json.load(open(sys.argv[1]))
cfg["train"]["log_every"] = 1
json.dump(cfg, open(sys.argv[2], "w"), indent=1)
PY
  run=("$joule" train --config "$dir/config.json" --make-data --data "$data" --micro-batch 32 --no-energy --checkpoint "$ckpt" --checkpoint-every 1)
  "${run[@]}" --steps 1 > "$dir/first.log" 2>&1 || { cat "$dir/first.log"; fail "first run"; }
  prev=$(check "$ckpt") || fail "the first run's checkpoint is damaged"
  for moment in step-line checkpoint-write step-line checkpoint-write; do
    # Emptied before the run starts (its `>` truncates only once the background shell runs): the wait
    # below must see this run's lines, never the previous one's.
    : >"$dir/run.log"
    "${run[@]}" --steps 100000 --resume "$ckpt" > "$dir/run.log" 2>&1 &
    pid=$!
    line="^step +$((prev + 2))/"
    for _ in $(seq 1 6000); do
      grep -qE "$line" "$dir/run.log" && break
      kill -0 "$pid" 2>/dev/null || { cat "$dir/run.log"; fail "the run resumed at step $prev ended"; }
      sleep 0.02
    done
    grep -qE "$line" "$dir/run.log" || fail "no line of step $((prev + 2)) after 120 s: $(tail -3 "$dir/run.log")"
    if [ "$moment" = checkpoint-write ]; then
      # SIGKILL at the first write into a checkpoint's temporary made from now on.
      "$py" - "$dir" ".$(basename "$ckpt").joule-" "$(basename "$ckpt")" "$pid" <<'PY' || fail "no kill during a checkpoint's write"
import ctypes, os, select, signal, struct, sys, time
folder, prefix, name, pid = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
IN_MODIFY, IN_CREATE, IN_ISDIR = 0x2, 0x100, 0x40000000
libc = ctypes.CDLL(None, use_errno=True)
fd = libc.inotify_init1(os.O_NONBLOCK)
top = libc.inotify_add_watch(fd, folder.encode(), IN_CREATE)
if fd < 0 or top < 0:
    sys.exit("inotify failed: errno %d" % ctypes.get_errno())
deadline = time.monotonic() + 120
while time.monotonic() < deadline:
    if not select.select([fd], [], [], 0.1)[0]:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            sys.exit("the run ended")
        continue
    data = os.read(fd, 65536)
    at = 0
    while at + 16 <= len(data):
        wd, mask, _cookie, length = struct.unpack_from("iIII", data, at)
        entry = data[at + 16:at + 16 + length].rstrip(b"\0").decode(errors="replace")
        at += 16 + length
        if wd == top and mask & IN_ISDIR and entry.startswith(prefix):
            libc.inotify_add_watch(fd, os.path.join(folder, entry).encode(), IN_MODIFY)  # gone: the next one
        elif wd != top and mask & IN_MODIFY and entry == name:
            os.kill(pid, signal.SIGKILL)
            sys.exit(0)
sys.exit("no write into a checkpoint's temporary in 120 s")
PY
    fi
    kill -9 "$pid" 2>/dev/null
    wait "$pid" 2>/dev/null
    pid=""
    step=$(check "$ckpt") || fail "after a kill at $moment (step $((prev + 2))) the checkpoint is damaged"
    [ "$step" -gt "$prev" ] || fail "after a kill at $moment: the checkpoint is still at step $step: no step kept since the last kill"
    "$joule" train --config "$config" --data "$data" --resume "$ckpt" --steps $((step + 1)) --micro-batch 32 --no-energy \
      > "$dir/resume.log" 2>&1 || { cat "$dir/resume.log"; fail "cannot resume from the checkpoint at step $step"; }
    echo "killed at $moment after the line of step $((prev + 2)): complete checkpoint at step $step (was $prev), resumed"
    prev=$step
  done
  rm -rf "$dir"
  ;;
*) fail "usage: $0 shards|kill ..." ;;
esac
echo PASS
