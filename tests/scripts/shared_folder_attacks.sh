#!/usr/bin/env bash
# Issue 51: a folder that other users can write is not a weapon against joule's user. Each case is
# an attack reproduced with a second, unprivileged user (setpriv; the test must run as root, as
# CI does) against the built binary, and must fail to do harm:
#   probe      links planted under guessable names (the old .joule-write-probe-<pid>) in a sticky
#              folder on this machine (fs.protected_symlinks may be 0): no file outside is emptied
#              or created
#   dir-link   the output's folder, still to be made, planted as another user's link to a folder
#              of root's: refused (the kernel's protected_symlinks rule, applied by joule itself)
#   refused    a folder others can write without the sticky bit: refused, naming it and the way to
#              accept it; accepted with JOULE_ACCEPT_SHARED_FOLDER=1, with a warning
#   swap       the private temporary renamed away by inotify the moment it appears, another folder
#              put in its place holding NAME as a link, in each of five writes (each held at its
#              sync until the swap is reported): nothing is written through the link
#   renamed    a folder of the user's files renamed by a third party to a temporary's shape: kept
#   locks      a lock file that another user made in advance, and one another user holds: the
#              victim (an unprivileged user) still runs; a holder's text is printed escaped
#   mode       a 0600 output rewritten stays 0600 and keeps its owner
# issue 64 (what sits around the writers):
#   library-cwd      libraries planted in the working folder: never searched (LD_DEBUG), never run
#   path-one-level   a folder of another user's on the way to the output: refused, naming it
#   sticky-others    a sticky folder that another user owns: refused
#   mid-run          a folder on the path renamed mid-run: the checkpoints stay in the run's folder
#   lock-hardlink    the lock's name a hard link to a root-only file: refused, the file untouched
#   others-file      the output's name made first by another user: refused; accepted, root's file
#   bench-json       bench --json at a link another user planted: refused or the link replaced
#   data-swap        a dataset's owner renames a file that crashes HDF5 over it after a reader closes
#                    it (tests/scripts/swap_after_close.py): the reader never crashes
# usage: shared_folder_attacks.sh JOULE SOURCE_DIR HOLD_SYNC [CASE...]
#   HOLD_SYNC: tests/support/hold_sync.c built (the swap case holds each write until it is swapped)
set -euo pipefail
joule="$1" src="$2" hold_sync="${3:-}"
fail() { echo "FAIL: $*" >&2; exit 1; }
if [ "$(id -u)" != 0 ] || ! command -v setpriv >/dev/null; then
  echo "SKIP: needs root and setpriv to act as other users"; exit 77
fi
victim_uid=4242 attacker_uid=4343
as() { local uid="$1"; shift; setpriv --reuid="$uid" --regid="$uid" --clear-groups -- "$@"; }
python=/usr/bin/python3
[ -x $python ] || python=python3

base=$(mktemp -d /tmp/joule-shared-attacks-XXXXXX)
watcher=""
# Every process of the two test users (they exist only here): the holders' sleeps included.
stop_users() { pkill -KILL -u $victim_uid,$attacker_uid 2>/dev/null || true; }
cleanup() {
  stop_users
  rm -rf "$base"
}
trap cleanup EXIT
chmod 755 "$base"
cd "$base"
# The binary and the watcher where the unprivileged users can reach them (CI's clone may be in a
# private folder); joule links no library of the build tree.
cp "$joule" "$base/joule" && joule="$base/joule"
cp "$src/tests/scripts/swap_temporary.py" "$base/swap_temporary.py"
as $victim_uid "$joule" --version >/dev/null || fail "the copied joule does not run as another user"
sticky="$base/sticky" open="$base/open"
mkdir -m 1777 "$sticky"
mkdir "$open" && chmod 0777 "$open"  # mkdir -m is cut by no umask; chmod is exact
synth() { "$joule" data synth --count 2 --image-size 8 --text-len 32 --out "$@"; }
export HOME="$base"
# The Python scripts' cases (plot_run.py, images_to_h5.py): their inputs made once.
source "$src/tests/scripts/shared_folder_attacks_scripts.sh"
scripts_attack_setup

# --- probe: links under every process id's old probe name, in a sticky folder -------------------
case_probe() {
  echo "root's secret" >"$base/secret" && chmod 600 "$base/secret"
  # One process plants them all, so the process ids it names are the next ones the system hands out.
  cat >"$base/plant.py" <<'PY'
import os, sys
base, folder = sys.argv[1], sys.argv[2]
first = int(open("/proc/sys/kernel/ns_last_pid").read()) + 1
for n in range(first, first + 1500):
    os.symlink(base + "/secret", "%s/.joule-write-probe-%d" % (folder, n))
PY
  as $attacker_uid $python "$base/plant.py" "$base" "$sticky" || fail "probe: the links could not be planted"
  [ "$(ls -A "$sticky" | grep -c '^\.joule-write-probe-')" = 1500 ] || fail "probe: the links are not there"
  synth "$sticky/d.h5" >out.txt 2>&1 </dev/null || fail "probe: data synth failed: $(tail -3 out.txt)"
  [ "$(cat "$base/secret")" = "root's secret" ] || fail "probe: a planted link emptied or changed root's file"
  [ -z "$(ls -A "$sticky" | grep -v '^\.joule-write-probe-' | grep -v '^d\.h5$' || true)" ] ||
    fail "probe: joule left something in the folder: $(ls -A "$sticky" | grep -v '^\.joule-write-probe-')"
  echo "ok: probe: 1500 planted links, root's file unchanged, nothing made"
}
# --- dir-link: the folder to be made is another user's link ---------------------------------------
case_dir_link() {
  mkdir "$base/roots-folder"
  as $attacker_uid ln -s "$base/roots-folder" "$sticky/run1"
  rc=0; synth "$sticky/run1/d.h5" >out.txt 2>&1 </dev/null || rc=$?
  [ $rc = 1 ] || fail "dir-link: exit $rc, expected 1: $(tail -3 out.txt)"
  grep -q "symbolic link of user $attacker_uid" out.txt || fail "dir-link: the link is not named: $(tail -3 out.txt)"
  [ -z "$(ls -A "$base/roots-folder")" ] || fail "dir-link: joule wrote into the folder the link names"
  echo "ok: dir-link: $(grep -m1 -o 'is a symbolic link of user [0-9]*[^;]*' out.txt)"
}
# --- refused: a folder others can write, no sticky bit -------------------------------------------
case_refused() {
  rc=0; synth "$open/x.h5" >out.txt 2>&1 </dev/null || rc=$?
  [ $rc = 1 ] || fail "refused: exit $rc, expected 1: $(tail -3 out.txt)"
  grep -q "$open" out.txt && grep -q "no sticky bit" out.txt && grep -q "JOULE_ACCEPT_SHARED_FOLDER=1" out.txt ||
    fail "refused: the message does not name the folder, the reason and the way out: $(tail -3 out.txt)"
  [ ! -e "$open/x.h5" ] && [ -z "$(ls -A "$open")" ] || fail "refused: something was written: $(ls -A "$open")"
  JOULE_ACCEPT_SHARED_FOLDER=1 synth "$open/x.h5" >out.txt 2>&1 </dev/null || fail "refused: accepted, it failed: $(tail -3 out.txt)"
  grep -q "warning: the folder $open" out.txt || fail "refused: accepted without a warning"
  echo "ok: refused: $(grep -m1 -o 'is writable by every user[^,]*' out.txt), accepted with a warning"
}
# --- swap: the private temporary replaced the moment it appears ----------------------------------
# Every write's temporary is swapped: the writer is held at its temporary's sync (hold_sync.so)
# until the watcher reports the swap, so a watcher slowed by a loaded machine still gets there
# while the temporary exists. A swap before joule opened its folder makes it refuse (exit 1,
# "was replaced by another"); a later one is harmless, as joule writes through its descriptors.
case_swap() {
  export JOULE_ACCEPT_SHARED_FOLDER=1  # the attack needs a folder where others may rename
  [ -r "$hold_sync" ] || fail "swap: no hold_sync.so given (argument 3): $hold_sync"
  echo "root's other file" >"$base/other" && chmod 644 "$base/other"
  as $attacker_uid $python "$base/swap_temporary.py" "$open" s.h5 "$base/other" "$base/stop" 600 \
    >"$base/watcher.txt" 2>&1 </dev/null &
  watcher=$!
  for _ in $(seq 1200); do [ -e "$open/.watching" ] && break; sleep 0.1; done
  [ -e "$open/.watching" ] || fail "swap: the watcher did not start: $(cat "$base/watcher.txt")"
  swaps() { grep -c '^swapped ' "$base/watcher.txt" || true; }
  local ok=0 refused=0 run before writer rc
  for run in 1 2 3 4 5; do
    before=$(swaps)
    rm -f "$base/held" "$base/go"
    # (ASan, in the sanitizer build, refuses a preloaded library ahead of its runtime unless told.)
    ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}verify_asan_link_order=0" \
    LD_PRELOAD="$hold_sync" JOULE_HOLD_PATH="$open/." JOULE_HOLD_READY="$base/held" JOULE_HOLD_UNTIL="$base/go" \
      "$joule" data synth --count 2 --image-size 8 --text-len 32 --out "$open/s.h5" >out.txt 2>&1 </dev/null &
    writer=$!
    # Held, or ended (refused a folder swapped before it opened it); then the watcher's report.
    for _ in $(seq 1200); do { [ -e "$base/held" ] || ! kill -0 $writer 2>/dev/null; } && break; sleep 0.1; done
    for _ in $(seq 1200); do [ "$(swaps)" -gt "$before" ] && break; sleep 0.1; done
    touch "$base/go"
    rc=0; wait $writer || rc=$?
    [ "$(swaps)" -gt "$before" ] || fail "swap: run $run: no temporary of it swapped in 120 s: $(cat "$base/watcher.txt")"
    if [ $rc = 0 ]; then ok=$((ok + 1));
    elif grep -q "was replaced by another" out.txt; then refused=$((refused + 1));
    else fail "swap: run $run: exit $rc: $(tail -3 out.txt)"; fi
  done
  touch "$base/stop"; wait "$watcher" || true
  [ "$(cat "$base/other")" = "root's other file" ] || fail "swap: root's file was written through the planted link"
  [ ! -L "$open/s.h5" ] || fail "swap: the output is the attacker's link"
  [ $ok = 0 ] || [ -f "$open/s.h5" ] || fail "swap: $ok runs wrote, but no s.h5 is there"
  echo "ok: swap: $(tail -1 "$base/watcher.txt"); $ok runs wrote, $refused refused the replaced folder; root's file unchanged"
}
# --- renamed: the user's folder renamed to a temporary's shape -----------------------------------
case_renamed() {
  export JOULE_ACCEPT_SHARED_FOLDER=1
  # Two folders of root's results, renamed by the other user to the shapes of a temporary's name
  # (the random part as long as mkdtemp's, and as joule's own now).
  local shape
  for shape in abcdef abcdefabcdef; do
    mkdir "$open/results-$shape" && echo "root's results" >"$open/results-$shape/c.h5"
    as $attacker_uid mv "$open/results-$shape" "$open/.c.h5.joule-$shape" || fail "renamed: the rename failed"
  done
  echo "process 1 on a node that is gone, since then" >"$open/c.h5.lock"  # a stale lock of root's
  synth "$open/c.h5" >out.txt 2>&1 </dev/null || fail "renamed: data synth failed: $(tail -3 out.txt)"
  for shape in abcdef abcdefabcdef; do
    [ "$(cat "$open/.c.h5.joule-$shape/c.h5" 2>/dev/null)" = "root's results" ] ||
      fail "renamed: a folder of the user's files (.c.h5.joule-$shape) was removed as a temporary"
  done
  echo "ok: renamed: both kept (no marker of a run of root's)"
}
# --- locks: the victim is an unprivileged user in the sticky folder ------------------------------
case_locks() {
  local lockdir="$base/sticky-locks"
  mkdir -m 1777 "$lockdir"
  as $attacker_uid bash -c 'umask 022; echo "I was here" >"$1/l.h5.lock"' _ "$lockdir"
  as $victim_uid "$joule" data synth --count 2 --image-size 8 --text-len 32 --out "$lockdir/l.h5" >out.txt 2>&1 </dev/null ||
    fail "locks: another user's lock file made in advance stops the victim: $(tail -3 out.txt)"
  [ "$(cat "$lockdir/l.h5.lock")" = "I was here" ] || fail "locks: the other user's lock file was changed"
  as $attacker_uid bash -c 'umask 0; echo "held" >"$1/m.h5.lock"; chmod 666 "$1/m.h5.lock"' _ "$lockdir"
  as $attacker_uid flock "$lockdir/m.h5.lock" sleep 300 >/dev/null 2>&1 </dev/null &
  for _ in $(seq 600); do flock -n "$lockdir/m.h5.lock" true 2>/dev/null || break; sleep 0.1; done
  as $victim_uid "$joule" data synth --count 2 --image-size 8 --text-len 32 --out "$lockdir/m.h5" >out.txt 2>&1 </dev/null ||
    fail "locks: a lock another user holds stops the victim: $(tail -3 out.txt)"
  stop_users
  # The victim's own lock, held by another of the victim's jobs, with a terminal escape in its text.
  as $victim_uid bash -c 'printf "\033]0;pwned\007\033[2J job\n" >"$1/e.h5.lock"; chmod 600 "$1/e.h5.lock"' _ "$lockdir"
  as $victim_uid flock "$lockdir/e.h5.lock" sleep 300 >/dev/null 2>&1 </dev/null &
  for _ in $(seq 600); do flock -n "$lockdir/e.h5.lock" true 2>/dev/null || break; sleep 0.1; done
  rc=0; as $victim_uid "$joule" data synth --count 2 --image-size 8 --text-len 32 --out "$lockdir/e.h5" >out.txt 2>&1 </dev/null || rc=$?
  stop_users
  [ $rc = 1 ] && grep -q "being written by another job" out.txt || fail "locks: the victim's held lock did not stop a second job: $(tail -3 out.txt)"
  ! grep -q $'\033' out.txt || fail "locks: a control character in the holder's text reached the terminal raw"
  grep -qF '\x1b]0;pwned' out.txt || fail "locks: the holder's text is not shown escaped: $(cat out.txt)"
  echo "ok: locks: another user's made and held locks skipped; the victim's own held lock refused with its text escaped"
}
# --- mode: a 0600 output rewritten keeps its mode; root does not rewrite another user's file -----
case_mode() {
  local lockdir="$base/sticky-mode"
  mkdir -m 1777 "$lockdir"
  as $victim_uid "$joule" data synth --count 2 --image-size 8 --text-len 32 --out "$lockdir/p.h5" >out.txt 2>&1 </dev/null ||
    fail "mode: the first write failed: $(tail -3 out.txt)"
  as $victim_uid bash -c 'chmod 600 "$1/p.h5"' _ "$lockdir"
  as $victim_uid "$joule" data synth --count 2 --image-size 8 --text-len 32 --out "$lockdir/p.h5" >out.txt 2>&1 </dev/null ||
    fail "mode: the rewrite failed: $(tail -3 out.txt)"
  [ "$(stat -c %a:%u "$lockdir/p.h5")" = "600:$victim_uid" ] || fail "mode: rewritten as $(stat -c %a:%u "$lockdir/p.h5")"
  rc=0; synth "$lockdir/p.h5" >out.txt 2>&1 </dev/null || rc=$?
  [ $rc = 1 ] && grep -q "is a file of user $victim_uid" out.txt || fail "mode: root rewrote the user's file: exit $rc: $(tail -3 out.txt)"
  [ "$(stat -c %a:%u:%g "$lockdir/p.h5")" = "600:$victim_uid:$victim_uid" ] ||
    fail "mode: root's refused rewrite left $(stat -c %a:%u:%g "$lockdir/p.h5")"
  echo "ok: mode: 0600 kept by the owner's rewrite; root's rewrite of the user's file refused, the file as it was"
}

# --- issue 64: what sits around the writers ---------------------------------------------------------
# library-cwd: libraries planted in the folder where a user runs joule (an empty RUNPATH entry is
# that folder). The loader's own trace (LD_DEBUG=libs) must try no file there, and a planted
# library's constructor must never run, for joule and for NVML's probe (dlopen by name).
case_library_cwd() {
  local plant="$sticky/plant" name marker
  mkdir -p "$plant" && chmod 1777 "$plant"
  cat >"$base/planted.c" <<'C'
#include <fcntl.h>
#include <unistd.h>
__attribute__((constructor)) static void planted(void) {
  int fd = open(MARKER, O_WRONLY | O_CREAT | O_TRUNC, 0666);
  if (fd >= 0) { (void)!write(fd, "ran\n", 4); close(fd); }
}
C
  local cc; cc=$(command -v cc || command -v gcc || true)
  for name in libmpi_cxx.so.40 libmpi.so.40 libhdf5_serial.so.103 libnvidia-ml.so.1; do
    [ -n "$cc" ] || break
    marker="$sticky/ran-$name"
    as $attacker_uid "$cc" -shared -fPIC -DMARKER="\"$marker\"" -Wl,-soname,$name -o "$plant/$name" "$base/planted.c" ||
      fail "library-cwd: the planted library $name could not be built"
  done
  local who
  for who in $victim_uid 0; do
    (cd "$plant" && as $who env LD_DEBUG=libs "$joule" --version) >trace.txt 2>&1 </dev/null || true
    ! grep -E "trying file=(\./|[^/])" trace.txt >/dev/null ||
      fail "library-cwd: the loader looks in the working directory for user $who: $(grep -m2 -E 'trying file=(\./|[^/])' trace.txt)"
    grep -q "trying file=/" trace.txt || fail "library-cwd: no loader trace (LD_DEBUG ignored?): $(head -3 trace.txt)"
    (cd "$plant" && as $who "$joule" --version) >out.txt 2>&1 </dev/null || fail "library-cwd: joule --version failed: $(tail -3 out.txt)"
    (cd "$plant" && as $who "$joule" energy probe) >out.txt 2>&1 </dev/null || true
  done
  [ -z "$(ls "$sticky" | grep '^ran-' || true)" ] || fail "library-cwd: a planted library ran: $(ls "$sticky" | grep '^ran-')"
  echo "ok: library-cwd: no file tried in the working directory (LD_DEBUG=libs)${cc:+, 4 planted libraries never ran} (victim and root)"
}
# path-one-level: /tmp/run2 is the attacker's (0755), run2/sub a link to a folder of root's.
case_path_one_level() {
  mkdir -p "$base/roots-data" && echo "root's dataset" >"$base/roots-data/data.h5"
  as $attacker_uid mkdir -m 0755 "$sticky/run2"
  as $attacker_uid ln -s "$base/roots-data" "$sticky/run2/sub"
  rc=0; synth "$sticky/run2/sub/data.h5" >out.txt 2>&1 </dev/null || rc=$?
  [ "$(cat "$base/roots-data/data.h5")" = "root's dataset" ] || fail "path-one-level: root's file was replaced through run2/sub"
  [ $rc = 1 ] && grep -q "$sticky/run2.*belongs to user $attacker_uid" out.txt ||
    fail "path-one-level: exit $rc, the attacker's folder not named: $(tail -3 out.txt)"
  echo "ok: path-one-level: refused: $(grep -m1 -o 'the folder [^ ]*run2, on the way[^,]*, belongs to user [0-9]*' out.txt)"
}
# sticky-others: a sticky folder that another user owns (its owner may remove or rename anything in it).
case_sticky_others() {
  as $attacker_uid mkdir -m 1777 "$sticky/theirs"
  rc=0; as $victim_uid "$joule" data synth --count 2 --image-size 8 --text-len 32 --out "$sticky/theirs/v.h5" >out.txt 2>&1 </dev/null || rc=$?
  [ $rc = 1 ] && grep -q "belongs to user $attacker_uid" out.txt || fail "sticky-others: exit $rc: $(tail -3 out.txt)"
  [ ! -e "$sticky/theirs/v.h5" ] || fail "sticky-others: the victim's dataset was written in the other user's folder"
  echo "ok: sticky-others: the victim's write into another user's 1777 folder refused"
}
# mid-run: root's run writes alice/run/ck.h5 in a group folder (accepted); mid-run another user
# renames alice and puts a new alice/run in its place, a link to another folder of root's.
case_mid_run() {
  export JOULE_ACCEPT_SHARED_FOLDER=1
  local group="$open/group" data="$base/mid-data.h5"
  mkdir -m 0777 "$group" && chmod 0777 "$group"
  mkdir -p "$group/alice/run" "$base/roots-other"
  echo "root's other checkpoint" >"$base/roots-other/ck.h5"
  "$joule" data synth --out "$data" --count 64 --image-size 16 --text-len 34 --frames 1 >/dev/null
  $python - "$src/apps/configs/tiny.json" "$base/mid.json" "$data" "$group/alice/run/ck.h5" <<'PY'
import json, sys
cfg = json.load(open(sys.argv[1]))
cfg["model"].update(layers=1, d_model=32, heads=2, mlp_ratio=2, image_size=16, text_len=34)
cfg["data"]["path"] = sys.argv[3]
cfg["train"].update(batch=16, micro_batch=16, steps=100000, eval_every=0, eval_samples=16, log_every=1,
                    checkpoint=sys.argv[4], checkpoint_every=1)
json.dump(cfg, open(sys.argv[2], "w"), indent=1)
PY
  "$joule" train --config "$base/mid.json" --no-energy >mid.txt 2>&1 </dev/null &
  local pid=$! n
  for _ in $(seq 6000); do grep -qE "^step +2/" mid.txt && [ -e "$group/alice/run/ck.h5" ] && break
    kill -0 $pid 2>/dev/null || fail "mid-run: training ended: $(tail -3 mid.txt)"; sleep 0.02; done
  as $attacker_uid mv "$group/alice" "$group/alice-old" || fail "mid-run: the rename failed"
  as $attacker_uid mkdir "$group/alice"
  as $attacker_uid ln -s "$base/roots-other" "$group/alice/run"
  n=$(grep -cE "^step +[0-9]+/" mid.txt)
  for _ in $(seq 6000); do [ "$(grep -cE "^step +[0-9]+/" mid.txt)" -ge $((n + 3)) ] && break
    kill -0 $pid 2>/dev/null || break; sleep 0.02; done
  kill -TERM $pid; rc=0; wait $pid || rc=$?
  [ "$(cat "$base/roots-other/ck.h5")" = "root's other checkpoint" ] ||
    fail "mid-run: a later checkpoint overwrote the other folder's ck.h5 (exit $rc)"
  [ $rc = 143 ] || fail "mid-run: exit $rc, expected 143 (SIGTERM): $(tail -3 mid.txt)"
  [ -f "$group/alice-old/run/ck.h5" ] && [ ! -e "$group/alice-old/run/ck.h5.lock" ] ||
    fail "mid-run: the checkpoint or its lock is not where the run started: $(ls -a "$group/alice-old/run")"
  unset JOULE_ACCEPT_SHARED_FOLDER
  echo "ok: mid-run: every checkpoint after the rename went to the folder the run started in (alice-old/run)"
}
# lock-hardlink: the lock's name a hard link to a root-only file (where fs.protected_hardlinks is 0).
case_lock_hardlink() {
  local knob=/proc/sys/fs/protected_hardlinks saved how
  echo "root's secret" >"$base/secret2" && chmod 600 "$base/secret2"
  saved=$(cat $knob 2>/dev/null || echo "")
  if [ -n "$saved" ] && echo 0 >$knob 2>/dev/null; then
    how="made by the other user (fs.protected_hardlinks set to 0 for this case, then restored to $saved)"
    rc=0; as $attacker_uid ln "$base/secret2" "$sticky/h.h5.lock" || rc=$?
    echo "$saved" >$knob
    [ $rc = 0 ] || fail "lock-hardlink: the other user could not link with protected_hardlinks=0"
  else
    how="simulated by root (fs.protected_hardlinks cannot be changed here)"
    ln "$base/secret2" "$sticky/h.h5.lock"
  fi
  rc=0; synth "$sticky/h.h5" >out.txt 2>&1 </dev/null || rc=$?
  [ "$(cat "$base/secret2")" = "root's secret" ] && [ "$(stat -c %a "$base/secret2")" = 600 ] ||
    fail "lock-hardlink: root's file was written or chmod'ed through the lock's name: $(stat -c %a "$base/secret2") $(head -c 80 "$base/secret2")"
  [ $rc = 1 ] && grep -q "has 2 names" out.txt || fail "lock-hardlink: exit $rc: $(tail -3 out.txt)"
  echo "ok: lock-hardlink: refused, root's file unchanged; the link $how"
}
# bench-json: root's `bench --json` at a link that another user put in a folder of theirs (no sticky
# bit there, so the kernel's protected_symlinks does not apply) naming a root-only file; and in the
# sticky folder, where the link itself is replaced.
case_bench_json() {
  echo "root's secret" >"$base/secret3" && chmod 600 "$base/secret3"
  as $attacker_uid mkdir -m 0755 "$sticky/attackers"
  as $attacker_uid ln -s "$base/secret3" "$sticky/attackers/b.json"
  as $attacker_uid ln -s "$base/secret3" "$sticky/b.json"
  rc=0; "$joule" bench --suite launches --json "$sticky/attackers/b.json" >out.txt 2>&1 </dev/null || rc=$?
  [ "$(cat "$base/secret3")" = "root's secret" ] && [ "$(stat -c %a "$base/secret3")" = 600 ] ||
    fail "bench-json: root's file was written through the link in the other user's folder (exit $rc)"
  [ $rc = 1 ] && grep -q "belongs to user $attacker_uid" out.txt || fail "bench-json: exit $rc: $(tail -3 out.txt)"
  "$joule" bench --suite launches --json "$sticky/b.json" >out.txt 2>&1 </dev/null || fail "bench-json: sticky: $(tail -3 out.txt)"
  [ "$(cat "$base/secret3")" = "root's secret" ] || fail "bench-json: root's file was written through the link in the sticky folder"
  [ -f "$sticky/b.json" ] && [ ! -L "$sticky/b.json" ] || fail "bench-json: the link in the sticky folder is still there"
  echo "ok: bench-json: refused in the other user's folder; in the sticky folder the link replaced; root's file unchanged"
}
# data-swap: the victim reads a dataset of the attacker's; the attacker renames a file that crashes
# HDF5 (the fuzz corpus's) over it the moment a reader closes it (after the guard's child checked it).
# The victim must never crash: it reads the file it checked, or refuses the changed one.
case_data_swap() {
  local folder="$base/adata" crash="$src/tests/fuzz/corpus/dataset/heap-object-size-overflow.h5" k rc crashes=0 ok=0 refused=0 swaps=0
  [ -f "$crash" ] || fail "data-swap: no crashing file at $crash"
  mkdir -m 0755 "$folder" && chown $attacker_uid:$attacker_uid "$folder"
  cp "$src/tests/scripts/swap_after_close.py" "$base/swap_after_close.py"
  for k in 1 1 2 2 3 3; do
    as $attacker_uid "$joule" data synth --count 4 --image-size 8 --text-len 32 --out "$folder/data.h5" >/dev/null 2>&1 </dev/null ||
      fail "data-swap: the attacker's dataset could not be made"
    as $attacker_uid cp "$crash" "$folder/next.h5"
    rm -f "$folder/.watching"
    as $attacker_uid $python "$base/swap_after_close.py" "$folder" data.h5 next.h5 $k 60 >"$base/swapper.txt" 2>&1 </dev/null &
    local swapper=$!
    for _ in $(seq 600); do [ -e "$folder/.watching" ] && break; sleep 0.1; done
    rc=0; as $victim_uid "$joule" data info "$folder/data.h5" >out.txt 2>&1 </dev/null || rc=$?
    kill $swapper 2>/dev/null || true  # done (it swapped), or too few closes to swap: no wait for its deadline
    wait $swapper 2>/dev/null || true
    grep -q "swapped after close" "$base/swapper.txt" && swaps=$((swaps + 1))
    if [ $rc -ge 128 ]; then crashes=$((crashes + 1)); echo "  crash: close $k: exit $rc: $(tail -1 out.txt)" >&2
    elif [ $rc = 0 ]; then ok=$((ok + 1))
    elif grep -q "changed while joule read it\|changed while this run was reading it\|crashed the HDF5 library\|damaged or forged" out.txt; then refused=$((refused + 1))
    else fail "data-swap: exit $rc without a clear reason: $(tail -3 out.txt)"; fi
  done
  [ $crashes = 0 ] || fail "data-swap: the victim's joule crashed $crashes of 6 times"
  echo "ok: data-swap: 6 runs, $swaps swapped after the n-th close: $ok read the file checked, $refused refused it, none crashed"
}
# others-file: another user makes the output's name first, writable by all.
case_others_file() {
  as $attacker_uid bash -c 'umask 0; echo "mine now" >"$1/o.h5"' _ "$sticky"
  rc=0; synth "$sticky/o.h5" >out.txt 2>&1 </dev/null || rc=$?
  [ $rc = 1 ] && grep -q "is a file of user $attacker_uid" out.txt && grep -q JOULE_REPLACE_OTHERS_FILES=1 out.txt ||
    fail "others-file: exit $rc: $(tail -3 out.txt)"
  [ "$(cat "$sticky/o.h5")" = "mine now" ] || fail "others-file: the refused write changed the file"
  JOULE_REPLACE_OTHERS_FILES=1 synth "$sticky/o.h5" >out.txt 2>&1 </dev/null || fail "others-file: accepted, it failed: $(tail -3 out.txt)"
  [ "$(stat -c %u:%a "$sticky/o.h5")" = "0:644" ] || fail "others-file: root's new file is $(stat -c %u:%a "$sticky/o.h5")"
  echo "ok: others-file: refused naming the owner; accepted, the new file is root's, 0644"
}

# Each case in a subshell: a failure ends its case only, and every case is reported. (set -e does
# not hold inside `( ... ) ||`: every step that matters is checked by its own `|| fail`.)
failed=()
cases=(probe dir_link refused swap renamed locks mode library_cwd path_one_level sticky_others mid_run lock_hardlink
       others_file bench_json data_swap plot_probe plot_chmod converter_link describe_link)
[ $# -gt 3 ] && cases=("${@:4}")  # some cases only, by name
for name in "${cases[@]}"; do
  ( case_$name ) || failed+=("$name")
  stop_users
done
[ ${#failed[@]} = 0 ] || { echo "FAIL: ${failed[*]}" >&2; exit 1; }
echo PASS
