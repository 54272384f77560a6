#!/usr/bin/env bash
# Every file joule writes, under the faults of a shared cluster's scratch space: a full disk
# (ENOSPC), an exhausted quota (EDQUOT) and an I/O error (EIO) at several moments of the write
# (the first byte, the middle, the last bytes), injected by tests/support/fault_writes.c. For each
# writer and each fault: joule exits 1 with one message naming the file, the system's reason and
# the free space; the previous file is bitwise unchanged; no temporary is left behind; nothing
# crashes (HDF5 errors included). Then: two jobs on one output (the second stops at once, naming
# the first's process), a stale lock taken over, and a dataset swapped under a running job.
# usage: writer_faults.sh JOULE FAULT_WRITES_SO SMALL_MODEL_CONFIG WORK_DIR [all|full-file-system]
set -euo pipefail
joule="$1" injector="$2" config="$3" work="$4" part="${5:-all}"
rm -rf "$work" && mkdir -p "$work" && cd "$work"
fail() { echo "FAIL: $*" >&2; exit 1; }
export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}verify_asan_link_order=0"
reason() {
  case "$1" in ENOSPC) echo "No space left on device" ;; EDQUOT) echo "Disk quota exceeded" ;; EIO) echo "Input/output error" ;; esac
}

# temporaries FILE: the temporaries of FILE in its folder (io::Temporary: .FILE.joule-XXXXXX/).
temporaries() { ls -A "$(dirname "$1")" | grep -c "^\.$(basename "$1")\.joule-" || true; }
# faulted NAME FILE BYTES ERRNO joule-args...: the command, with writes to FILE (or its temporary)
# failing after BYTES bytes, must fail cleanly and leave FILE as it was.
faulted() {
  local name="$1" file="$2" bytes="$3" errno="$4" rc=0
  shift 4
  cp -p "$file" "$file.before"
  LD_PRELOAD="$injector" JOULE_FAULT_PATH="/$(basename "$file")\$" JOULE_FAULT_AFTER_BYTES="$bytes" \
    JOULE_FAULT_ERRNO="$errno" "$joule" "$@" >out.txt 2>&1 || rc=$?
  [ $rc = 1 ] || fail "$name, $errno after $bytes bytes: exit status $rc, expected 1: $(tail -5 out.txt)"
  grep -q "$(reason "$errno")" out.txt || fail "$name, $errno after $bytes bytes: the reason is not named: $(tail -3 out.txt)"
  grep -q "$file" out.txt || fail "$name, $errno after $bytes bytes: the file is not named: $(tail -3 out.txt)"
  grep -q " free in " out.txt || fail "$name, $errno after $bytes bytes: the free space is not said: $(tail -3 out.txt)"
  cmp -s "$file" "$file.before" || fail "$name, $errno after $bytes bytes: the previous $file was changed"
  [ "$(temporaries "$file")" = 0 ] || fail "$name, $errno after $bytes bytes: a temporary of $file was left behind"
  echo "ok: $name, $errno after $bytes bytes: exit 1, $file unchanged: $(grep -m1 "$(reason "$errno")" out.txt)"
  rm -f "$file.before"
}
# written FILE joule-args...: the bytes the command writes to FILE (and its temporary), counted by the
# injector on a run where nothing fails; the moments to fail at are chosen from it.
written() {
  local file="$1"
  shift
  LD_PRELOAD="$injector" JOULE_FAULT_PATH="/$(basename "$file")\$" JOULE_FAULT_AFTER_BYTES=$((1 << 60)) \
    JOULE_FAULT_COUNT_TO=count.txt "$@" >/dev/null 2>&1 || fail "a run without faults failed: $* (writing $file)"
  cat count.txt
}

# --- the writers -------------------------------------------------------------------------------
"$joule" data synth --out data.h5 --count 48 --image-size 32 --text-len 36 >/dev/null
# The same model printing every step (for the runs that wait for a step before they act) and
# evaluating one sample at the end: under the sanitizers the default log_every 20 made each wait
# ~20 steps, and the closing evaluation of 8 samples took 2.4 s of each run's 2.6 s.
/usr/bin/python3 -c 'import json, sys; c = json.load(open(sys.argv[1])); c["train"].update(log_every=1, eval_samples=1)
json.dump(c, open("fast.json", "w"))' "$config"
config=$PWD/fast.json
train=(train --config "$config" --data data.h5 --steps 1 --no-energy --no-memory-check)
# A real full file system (the part full-file-system, its own ctest entry; root mounts a tmpfs of
# 128 KiB, skipped with exit 77 where the machine does not let the test mount one): the checkpoint's
# size is known, so the run is refused before its first step, not at its end.
full_file_system() {
  mkdir -p small-fs
  mount -t tmpfs -o size=128k tmpfs small-fs 2>/dev/null || {
    echo "SKIP: cannot mount a tmpfs here (not root): the free-space refusal is not checked"
    exit 77
  }
  rc=0
  "$joule" "${train[@]}" --checkpoint small-fs/ckpt.h5 >out.txt 2>&1 || rc=$?
  umount small-fs
  [ $rc = 1 ] && grep -q "^joule: error: --checkpoint small-fs/ckpt.h5: a checkpoint of this model takes .* free in small-fs" out.txt ||
    fail "a checkpoint larger than the free space: status $rc: $(tail -3 out.txt)"
  grep -qE "^(step|training:)" out.txt && fail "the run trained before it was refused: $(cat out.txt)"
  echo "PASS: a checkpoint larger than the free space is refused before training: $(grep -m1 'joule: error' out.txt)"
}
[ "$part" = full-file-system ] && { full_file_system; exit 0; }
[ "$part" = all ] || { echo "usage: $0 JOULE FAULT_WRITES_SO SMALL_MODEL_CONFIG WORK_DIR [all|full-file-system]" >&2; exit 2; }
n=$(written ckpt.h5 "$joule" "${train[@]}" --checkpoint ckpt.h5)
for case in "0 ENOSPC" "$((n / 2)) EDQUOT" "$((n - 1)) EIO"; do
  set -- $case
  faulted "train --checkpoint" ckpt.h5 "$1" "$2" "${train[@]}" --checkpoint ckpt.h5
done
# A fault at the second checkpoint of a run: the first one of the same run is kept, and resumable.
rc=0
LD_PRELOAD="$injector" JOULE_FAULT_PATH="/ckpt2.h5\$" JOULE_FAULT_AFTER_BYTES=$((n + n / 2)) \
  "$joule" train --config "$config" --data data.h5 --steps 2 --no-energy --no-memory-check --checkpoint ckpt2.h5 \
  --checkpoint-every 1 >out.txt 2>&1 || rc=$?
[ $rc = 1 ] || fail "a fault at the second checkpoint: exit status $rc: $(tail -3 out.txt)"
"$joule" train --config "$config" --data data.h5 --steps 3 --no-energy --no-memory-check --resume ckpt2.h5 \
  --checkpoint ckpt3.h5 >out.txt 2>&1 || fail "the checkpoint before the fault does not resume: $(tail -3 out.txt)"
grep -q "resumed from ckpt2.h5 at step 1" out.txt || fail "the kept checkpoint is not the first step's: $(cat out.txt)"
echo "ok: a fault at the second checkpoint keeps the first, which resumes at step 2"

n=$(written data.h5 "$joule" data synth --out data.h5 --count 48 --image-size 32 --text-len 36)
for case in "0 ENOSPC" "$((n / 2)) EIO" "$((n - 1)) EDQUOT"; do
  set -- $case
  faulted "data synth" data.h5 "$1" "$2" data synth --out data.h5 --count 48 --image-size 32 --text-len 36 --seed 7
done
# --make-data writes through the same path (a missing dataset: there is no old one to keep).
rc=0
LD_PRELOAD="$injector" JOULE_FAULT_PATH="/made.h5\$" JOULE_FAULT_AFTER_BYTES=1000 \
  "$joule" train --config "$config" --data made.h5 --make-data --steps 1 --no-energy --no-memory-check >out.txt 2>&1 || rc=$?
[ $rc = 1 ] && grep -q "No space left on device" out.txt && [ ! -e made.h5 ] && [ "$(temporaries made.h5)" = 0 ] ||
  fail "train --make-data on a full disk: status $rc, files: $(ls made.h5* 2>/dev/null): $(tail -3 out.txt)"
echo "ok: train --make-data on a full disk: exit 1, no made.h5 and no temporary of it"

for out in table.csv table.h5; do
  n=$(written $out "$joule" caption --checkpoint ckpt.h5 --data data.h5 --limit 4 --out $out)
  for case in "0 ENOSPC" "$((n / 2)) EIO" "$((n - 1)) EDQUOT"; do
    set -- $case
    faulted "caption --out $out" $out "$1" "$2" caption --checkpoint ckpt.h5 --data data.h5 --limit 4 --out $out
  done
done


# --- one writer per output ------------------------------------------------------------------------
# A job holding ckpt.h5 (a long run, stopped once the second job has been refused).
"$joule" train --config "$config" --data data.h5 --steps 100000 --no-energy --no-memory-check --checkpoint ckpt.h5 \
  >first.txt 2>&1 &
first=$!
for _ in $(seq 600); do grep -q "^step " first.txt && break; sleep 0.1; done
grep -q "^step " first.txt || fail "the first job never got to a step: $(tail -3 first.txt)"
rc=0
"$joule" "${train[@]}" --checkpoint ckpt.h5 >out.txt 2>&1 || rc=$?
kill $first 2>/dev/null; wait $first 2>/dev/null || true
[ $rc = 1 ] || fail "a second job on the same checkpoint: exit status $rc: $(tail -3 out.txt)"
grep -q "is being written by another job (process $first on " out.txt ||
  fail "the second job does not name the first's process ($first): $(cat out.txt)"
grep -qE "^(step|training:)" out.txt && fail "the second job trained before it was refused: $(cat out.txt)"
echo "ok: a second job on ckpt.h5 is refused at once: $(grep -m1 'being written' out.txt)"
# The first job was killed (SIGTERM): its lock file names a process that is gone.
[ -e ckpt.h5.lock ] || echo "process 999999 on $(hostname), since then" >ckpt.h5.lock
"$joule" "${train[@]}" --checkpoint ckpt.h5 >out.txt 2>&1 || fail "a stale lock blocks the next job: $(tail -3 out.txt)"
grep -q "taking over the lock left by process" out.txt || fail "the stale lock is not reported: $(cat out.txt)"
[ ! -e ckpt.h5.lock ] || fail "the lock file is left behind after a clean run"
echo "ok: a stale lock is taken over, with a line saying so; a clean run removes its lock"
# Two data synth on one file: the loser is told who holds it, not a guess about permissions.
"$joule" data synth --out big.h5 --count 20000 --image-size 32 --text-len 36 >first.txt 2>&1 &
first=$!
# (However long the first takes to start: under load, in a chroot, 5 s were not always enough.)
for _ in $(seq 1200); do [ -e big.h5.lock ] || ! kill -0 $first 2>/dev/null && break; sleep 0.05; done
[ -e big.h5.lock ] || fail "the first data synth took no lock on big.h5 (still running: $(kill -0 $first 2>/dev/null && echo yes || echo no)): $(cat first.txt)"
rc=0
"$joule" data synth --out big.h5 --count 48 --image-size 32 --text-len 36 >out.txt 2>&1 || rc=$?
wait $first || fail "the first data synth failed: $(cat first.txt)"
[ $rc = 1 ] && grep -q "being written by another job (process $first" out.txt ||
  fail "a second data synth on one file: status $rc: $(cat out.txt)"
echo "ok: a second data synth on one file names the first"

# --- a dataset swapped under a running job -------------------------------------------------------
"$joule" data synth --out larger.h5 --count 48 --image-size 64 --text-len 36 >/dev/null
"$joule" data synth --out smaller.h5 --count 48 --image-size 16 --text-len 36 >/dev/null
# Replaced (mv: another inode) by a larger and a smaller one, and rewritten in place (the same
# inode, other shapes: the read re-checks the shapes it copies).
for case in "larger mv" "smaller mv" "larger in-place"; do
  set -- $case
  other=$1 how=$2
  cp data.h5 swapped.h5
  # A log of its own per case, made before the job starts: the job's `>` truncates it only once
  # the background shell runs, and the wait below must not see the previous case's "step" lines
  # (it then swapped the file before this job opened it).
  log=run-$other-$how.txt
  : >"$log"
  "$joule" train --config "$config" --data swapped.h5 --steps 100000 --no-energy --no-memory-check >"$log" 2>&1 &
  job=$!
  for _ in $(seq 600); do grep -q "^step " "$log" && break; sleep 0.1; done
  grep -q "^step " "$log" || fail "the run never got to a step: $(tail -3 "$log")"
  if [ $how = mv ]; then cp $other.h5 swapped.h5.new && mv swapped.h5.new swapped.h5; else cat $other.h5 >swapped.h5; fi
  for _ in $(seq 600); do kill -0 $job 2>/dev/null || break; sleep 0.1; done  # it stops at its next step
  rc=0
  kill -0 $job 2>/dev/null && { kill $job; rc=running; }
  wait $job 2>/dev/null || rc=${rc/0/$?}
  [ "$rc" = 1 ] || fail "a dataset replaced ($how) by a $other one under a running job: status $rc: $(tail -3 "$log")"
  grep -q "swapped.h5: the dataset changed while this run was reading it" "$log" ||
    fail "the swapped dataset ($other, $how) is not named: $(tail -3 "$log")"
  echo "ok: a dataset replaced ($how) by a $other one stops the run: $(grep -m1 -i changed "$log")"
done
echo PASS
