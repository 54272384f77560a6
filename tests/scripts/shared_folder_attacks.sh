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
#              put in its place holding NAME as a link: nothing is written through the link
#   renamed    a folder of the user's files renamed by a third party to a temporary's shape: kept
#   locks      a lock file that another user made in advance, and one another user holds: the
#              victim (an unprivileged user) still runs; a holder's text is printed escaped
#   mode       a 0600 output rewritten stays 0600 and keeps its owner
# usage: shared_folder_attacks.sh JOULE SOURCE_DIR
set -euo pipefail
joule="$1" src="$2"
fail() { echo "FAIL: $*" >&2; exit 1; }
if [ "$(id -u)" != 0 ] || ! command -v setpriv >/dev/null; then
  echo "SKIP: needs root and setpriv to act as other users"; exit 0
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
case_swap() {
  export JOULE_ACCEPT_SHARED_FOLDER=1  # the attack needs a folder where others may rename
  echo "root's other file" >"$base/other" && chmod 644 "$base/other"
  as $attacker_uid $python "$base/swap_temporary.py" "$open" s.h5 "$base/other" "$base/stop" 300 \
    >"$base/watcher.txt" 2>&1 </dev/null &
  watcher=$!
  for _ in $(seq 600); do [ -e "$open/.watching" ] && break; sleep 0.1; done
  [ -e "$open/.watching" ] || fail "swap: the watcher did not start: $(cat "$base/watcher.txt")"
  ok=0 refused=0
  for run in 1 2 3 4 5; do
    rc=0; synth "$open/s.h5" >out.txt 2>&1 </dev/null || rc=$?
    if [ $rc = 0 ]; then ok=$((ok + 1));
    elif grep -q "was replaced by another" out.txt; then refused=$((refused + 1));
    else fail "swap: run $run: exit $rc: $(tail -3 out.txt)"; fi
  done
  touch "$base/stop"; wait "$watcher" || true
  [ "$(cat "$base/other")" = "root's other file" ] || fail "swap: root's file was written through the planted link"
  [ ! -L "$open/s.h5" ] || fail "swap: the output is the attacker's link"
  [ $ok = 0 ] || [ -f "$open/s.h5" ] || fail "swap: $ok runs wrote, but no s.h5 is there"
  grep -q "swaps" "$base/watcher.txt" || fail "swap: the watcher did not report: $(cat "$base/watcher.txt")"
  echo "ok: swap: $(cat "$base/watcher.txt" | tail -1); $ok runs wrote, $refused refused the replaced folder; root's file unchanged"
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
# --- mode: a 0600 output rewritten keeps its mode and owner --------------------------------------
case_mode() {
  local lockdir="$base/sticky-mode"
  mkdir -m 1777 "$lockdir"
  as $victim_uid "$joule" data synth --count 2 --image-size 8 --text-len 32 --out "$lockdir/p.h5" >out.txt 2>&1 </dev/null ||
    fail "mode: the first write failed: $(tail -3 out.txt)"
  as $victim_uid bash -c 'chmod 600 "$1/p.h5"' _ "$lockdir"
  as $victim_uid "$joule" data synth --count 2 --image-size 8 --text-len 32 --out "$lockdir/p.h5" >out.txt 2>&1 </dev/null ||
    fail "mode: the rewrite failed: $(tail -3 out.txt)"
  [ "$(stat -c %a:%u "$lockdir/p.h5")" = "600:$victim_uid" ] || fail "mode: rewritten as $(stat -c %a:%u "$lockdir/p.h5")"
  synth "$lockdir/p.h5" >out.txt 2>&1 </dev/null || fail "mode: root's rewrite failed: $(tail -3 out.txt)"
  [ "$(stat -c %a:%u:%g "$lockdir/p.h5")" = "600:$victim_uid:$victim_uid" ] ||
    fail "mode: rewritten by root as $(stat -c %a:%u:%g "$lockdir/p.h5")"
  echo "ok: mode: 0600 kept, by the owner and by root (owner and group kept)"
}

# Each case in a subshell: a failure ends its case only, and every case is reported. (set -e does
# not hold inside `( ... ) ||`: every step that matters is checked by its own `|| fail`.)
failed=()
for name in probe dir_link refused swap renamed locks mode; do
  ( case_$name ) || failed+=("$name")
  stop_users
done
[ ${#failed[@]} = 0 ] || { echo "FAIL: ${failed[*]}" >&2; exit 1; }
echo PASS
