#!/usr/bin/env bash
# Checkpoints are never left damaged.
#   checkpoint_safety.sh shards CKPT mpirun... joule train ... --checkpoint CKPT
#       runs the sequence-shard job several times: one process writes, so every run ends with a
#       complete checkpoint and no leftover temporary (two writers used to race on CKPT.tmp).
#   checkpoint_safety.sh kill JOULE WORKDIR CONFIG
#       kills a training run that checkpoints every step (SIGKILL, at several moments): after each
#       kill the checkpoint on disk is complete and resumable, never a half-written file.
set -u
fail() { echo "FAIL: $*"; exit 1; }
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
  run=("$joule" train --config "$config" --make-data --data "$data" --micro-batch 32 --no-energy --checkpoint "$ckpt" --checkpoint-every 1)
  "${run[@]}" --steps 1 > "$dir/first.log" 2>&1 || { cat "$dir/first.log"; fail "first run"; }
  for delay in 0.8 1.1 1.4 1.7; do
    "${run[@]}" --steps 100000 --resume "$ckpt" > "$dir/run.log" 2>&1 &
    pid=$!
    sleep "$delay"
    kill -9 "$pid" 2>/dev/null
    wait "$pid" 2>/dev/null
    step=$(check "$ckpt") || fail "after a kill at ${delay}s the checkpoint is damaged"
    "$joule" train --config "$config" --data "$data" --resume "$ckpt" --steps $((step + 1)) --micro-batch 32 --no-energy \
      > "$dir/resume.log" 2>&1 || { cat "$dir/resume.log"; fail "cannot resume from the checkpoint at step $step"; }
    echo "killed after ${delay}s: complete checkpoint at step $step, resumed"
  done
  rm -rf "$dir"
  ;;
*) fail "usage: $0 shards|kill ..." ;;
esac
echo PASS
