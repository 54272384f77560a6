#!/usr/bin/env bash
# joule caption when standard output cannot take what it prints (issue 51): a file past `ulimit -f`
# (joule ignores SIGXFSZ, so the write fails with EFBIG) and a full disk (/dev/full), with a small
# micro-batch (a flush per few lines) and one batch of all samples (more than stdio's 4 KiB buffer
# at once). Each time: exit status 1, never an abort (134), and one error naming standard output
# and why (for ulimit -f, the limit); --out is not written: a new one does not appear, an old one is
# bitwise unchanged, no temporary is left. With standard error in the same file (2>&1), where the
# error itself cannot be written: still exit 1, --out as it was. A run whose output fits writes
# --out whole (the same rows as without the limit).
# usage: caption_output_faults.sh JOULE SMALL_MODEL_CONFIG
set -euo pipefail
joule="$1" small_config="$2"
work="$(mktemp -d)"; trap 'rm -rf "$work"' EXIT
cd "$work"
fail() { echo "FAIL: $*" >&2; exit 1; }
"$joule" data synth --out data.h5 --count 80 --image-size 32 --text-len 36 --frames 1 >/dev/null
"$joule" train --config "$small_config" --data data.h5 --steps 1 --no-energy --checkpoint ck.h5 >train.out 2>&1 ||
  { cat train.out; fail "training the checkpoint failed"; }
caption=(caption --checkpoint ck.h5 --data data.h5)
"$joule" "${caption[@]}" --out whole.csv >whole.out 2>whole.err || { cat whole.err; fail "captioning failed"; }
# About 4.6 KiB of captions: past a limit of 1 KiB, and past stdio's buffer in one batch of 80.
[ "$(wc -c <whole.out)" -gt 4096 ] || fail "expected more than 4 KiB of captions, got $(wc -c <whole.out) bytes"
echo "previous table" >old.csv
cp old.csv old.csv.before

# limited NAME STDERR ARGS...: joule caption ARGS under ulimit -f 1, standard output to out.txt and
# standard error to err.txt (STDERR=apart) or to out.txt as well (STDERR=same); sets rc.
limited() {
  local name="$1" stderr="$2"
  shift 2
  rm -f out.txt err.txt
  rc=0
  if [ "$stderr" = apart ]; then
    (ulimit -f 1; exec "$joule" "${caption[@]}" "$@" >out.txt 2>err.txt) || rc=$?
  else
    (ulimit -f 1; exec "$joule" "${caption[@]}" "$@" >out.txt 2>&1) || rc=$?
  fi
  [ $rc = 1 ] || fail "$name: exit status $rc, expected 1 (134: aborted; 153: killed by SIGXFSZ): $(cat err.txt 2>/dev/null)"
}
# untouched NAME: new.csv absent, old.csv bitwise as before, no temporary left.
untouched() {
  [ ! -e new.csv ] || fail "$1: --out new.csv was written although standard output failed"
  cmp -s old.csv old.csv.before || fail "$1: the previous old.csv was changed"
  if ls -A | grep -q "\.joule-"; then fail "$1: left behind: $(ls -A)"; fi
}
limit_error="joule: error: cannot write to standard output (File too large; this process's file-size limit (ulimit -f) is 1.0 KiB): the captions printed there are incomplete"
for mb in 4 80; do
  for out in new.csv old.csv; do
    name="micro-batch $mb, --out $out, ulimit -f 1"
    limited "$name" apart --micro-batch "$mb" --out "$out"
    grep -qF -- "$limit_error; --out $out was not written (it is as it was)" err.txt ||
      fail "$name: standard output and the limit not named: $(cat err.txt)"
    untouched "$name"
    echo "ok: $name: exit 1, $(head -c 160 err.txt)"
  done
  name="micro-batch $mb, --out old.csv, ulimit -f 1, 2>&1"
  limited "$name" same --micro-batch "$mb" --out old.csv
  untouched "$name"
  echo "ok: $name: exit 1, old.csv unchanged"
  name="micro-batch $mb, --out old.csv, standard output on a full disk"
  rc=0; "$joule" "${caption[@]}" --micro-batch "$mb" --out old.csv >/dev/full 2>err.txt || rc=$?
  [ $rc = 1 ] || fail "$name: exit status $rc, expected 1: $(cat err.txt)"
  grep -qF "joule: error: cannot write to standard output (No space left on device): the captions printed there are incomplete; --out old.csv was not written" err.txt ||
    fail "$name: standard output not named: $(cat err.txt)"
  untouched "$name"
  echo "ok: $name: exit 1"
done
# Without --out: the same error, without the clause about --out.
limited "no --out, ulimit -f 1" apart
grep -qF -- "$limit_error" err.txt && ! grep -q -- "--out" err.txt ||
  fail "no --out: $(cat err.txt)"
# Output that fits the limit: --out written whole, as without the limit.
rc=0; (ulimit -f 64; exec "$joule" "${caption[@]}" --out fits.csv >out.txt 2>err.txt) || rc=$?
[ $rc = 0 ] && cmp -s fits.csv whole.csv && cmp -s out.txt whole.out || fail "within the limit: exit $rc: $(cat err.txt)"
echo "PASS: caption output faults"
