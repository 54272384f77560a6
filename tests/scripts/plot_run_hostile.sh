#!/usr/bin/env bash
# apps/scripts/plot_run.py on run logs that another user forged against whoever plots them (root
# too), and in a working folder of theirs:
#   plot_run_hostile.sh PYTHON PLOT_RUN_PY
# Each case runs under `timeout 60` and a 4 GB address-space limit, so that a regression fails
# here instead of blocking or swapping:
#   ext_link     /train an external link to a FIFO: refused at once (exit 2), nothing read
#   fifo_log     the run log itself a FIFO: refused as one (exit 2), not waited on
#   soft_link    /train a soft link (joule writes none): refused (exit 2)
#   ext_storage  /train/loss kept in an external file, a FIFO: refused (exit 2)
#   virtual      /train/loss a virtual dataset of a FIFO's data: refused (exit 2)
#   sparse       a 7 KB file whose /train/step and /train/loss claim 200,000,000 values each, none
#                stored: loss.png skipped naming /train/loss (exit 1), no 1.5 GB read
#   gzip_bomb    /train/loss 2 GiB of zeros in 2 MB of gzip chunks: skipped, over the 1 GiB a
#                dataset may make (exit 1)
#   strings      a 1 MiB string that 4000 elements of a region table all name (a 1 MB file read as
#                4 GB): regions.png skipped (exit 1), pareto.png still drawn
#   matplotlibrc the working folder's matplotlibrc sets text.usetex and a red figure.facecolor: not
#                read (loss.png written, its background not red); one that is a FIFO does not block
# Prints an "ok:" line per case and PASS at the end; exits 1 on the first failure.
set -euo pipefail
if [ "$#" -ne 2 ]; then echo "usage: $0 PYTHON PLOT_RUN_PY" >&2; exit 2; fi
py="$1" script="$(cd "$(dirname "$2")" && pwd)/$(basename "$2")"
fail() { echo "FAIL: plot_run_hostile: $*" >&2; exit 1; }
[ -f "$script" ] || fail "no script at $2"
work="$(mktemp -d)"; trap 'rm -rf "$work"' EXIT
mkfifo "$work/fifo" "$work/log-fifo"

"$py" - "$work" <<'PY'
import os
import sys
import zlib

import h5py
import numpy as np

work = sys.argv[1]
fifo = os.path.join(work, "fifo")


def log(name):
    f = h5py.File(os.path.join(work, name), "w")
    f.attrs["format"] = "joule-run-log-v1"
    return f


def train(f, **extra):
    g = f.create_group("train")
    g.attrs["complete"] = 1
    for k, v in extra.items():
        g[k] = v
    return g


with log("ext_link.h5") as f:
    f["train"] = h5py.ExternalLink(fifo, "/train")
with log("soft_link.h5") as f:
    g = f.create_group("real")
    g.attrs["complete"] = 1
    g["loss"] = np.linspace(5.0, 1.0, 40)
    f["train"] = h5py.SoftLink("/real")
with log("ext_storage.h5") as f:
    train(f).create_dataset("loss", shape=(40,), dtype="f8", external=[(fifo, 0, 320)])
with log("virtual.h5") as f:
    layout = h5py.VirtualLayout(shape=(40,), dtype="f8")
    layout[:] = h5py.VirtualSource(fifo, "/loss", shape=(40,))
    train(f).create_virtual_dataset("loss", layout)
with log("sparse.h5") as f:  # chunked, nothing written: HDF5 stores no chunk, claims them all
    g = train(f)
    for name in ("step", "loss"):
        g.create_dataset(name, shape=(200_000_000,), dtype="f8", chunks=(1 << 16,))
with log("gzip_bomb.h5") as f:  # one chunk of zeros (1 MiB, 1 KiB compressed) written 2048 times
    d = train(f).create_dataset("loss", shape=(2048 << 17,), dtype="f8", chunks=(1 << 17,), compression="gzip")
    packed = zlib.compress(bytes(8 << 17), 9)
    for i in range(2048):
        d.id.write_direct_chunk((i << 17,), packed)
with log("strings.h5") as f:  # every element of regions/name is one string's descriptor, copied below
    t = f.create_group("trials/0000")
    t.attrs.update(complete=1, index=0, status="ok", objective=1.0, time_per_step_s=1.0, energy_per_step_j=1.0)
    r = t.create_group("regions")
    names = r.create_dataset("name", data=["x" * (1 << 20)] + ["y"] * 3999, dtype=h5py.string_dtype())
    for column in ("calls", "seconds", "energy_j"):
        r[column] = np.ones(4000)
    at = names.id.get_offset()
with open(os.path.join(work, "strings.h5"), "r+b") as out:  # (length, heap collection, index) x 4000
    out.seek(at)
    first = out.read(16)
    out.seek(at)
    out.write(first * 4000)
with log("good.h5") as f:
    train(f, step=np.arange(1, 41, dtype=np.int64), loss=np.linspace(5.0, 1.0, 40) + 0.1 * np.sin(np.arange(40)))
PY
[ "$(stat -c %s "$work/sparse.h5")" -lt 20000 ] || fail "sparse.h5 is not small: $(stat -c %s "$work/sparse.h5") bytes"

# plot NAME LOG [ARGS...]: plot_run.py LOG --out $work/NAME-plots in the current folder, bounded;
# sets rc and secs, its output in $work/NAME.out and $work/NAME.err.
plot() {
  local name="$1" log="$2" start=$SECONDS
  shift 2
  rc=0
  (ulimit -v 4000000; exec timeout 60 "$py" "$script" "$log" --out "$work/$name-plots" "$@") \
    >"$work/$name.out" 2>"$work/$name.err" </dev/null || rc=$?
  secs=$((SECONDS - start))
  if [ "$rc" -eq 124 ]; then fail "$name: still running after 60 s, killed: $(head -c 600 "$work/$name.err")"; fi
  if grep -q Traceback "$work/$name.err"; then cat "$work/$name.err" >&2; fail "$name: a traceback"; fi
}
# refused NAME LOG PATTERN: exit 2 at once, one line matching PATTERN, no plot written.
refused() {
  plot "$1" "$2"
  [ "$rc" -eq 2 ] || { cat "$work/$1.out" "$work/$1.err" >&2; fail "$1: exit $rc, want 2"; }
  if [ "$(wc -l <"$work/$1.err")" -ne 1 ] || ! grep -qE -- "$3" "$work/$1.err"; then
    cat "$work/$1.err" >&2; fail "$1: want one line matching: $3"
  fi
  [ "$secs" -lt 30 ] || fail "$1: refused only after $secs s"
  if [ -d "$work/$1-plots" ] && [ -n "$(ls -A "$work/$1-plots")" ]; then fail "$1: plots written"; fi
  echo "ok: $1 refused in ${secs}s: $(cat "$work/$1.err")"
}
# skipped NAME LOG PNG PATTERN [DRAWN]: exit 1, PNG skipped with a line matching PATTERN (and DRAWN written).
skipped() {
  plot "$1" "$2"
  [ "$rc" -eq 1 ] || { cat "$work/$1.out" "$work/$1.err" >&2; fail "$1: exit $rc, want 1"; }
  grep -qE -- "^plot_run.py: skipped $3: $4" "$work/$1.err" ||
    { cat "$work/$1.err" >&2; fail "$1: no line 'skipped $3: ' matching: $4"; }
  [ ! -e "$work/$1-plots/$3" ] || fail "$1: $3 written"
  [ -z "${5:-}" ] || [ -s "$work/$1-plots/$5" ] || { cat "$work/$1.err" >&2; fail "$1: $5 not written"; }
  echo "ok: $1: $(grep "skipped $3" "$work/$1.err")"
}

w="$work"
refused ext_link "$w/ext_link.h5" "^plot_run.py: $w/ext_link.h5: /train is an external link \(to /train in the file $w/fifo\); joule reads only objects stored in the file itself, and nothing of it was used\$"
refused fifo_log "$w/log-fifo" "^plot_run.py: $w/log-fifo: is a FIFO \(named pipe\), not a regular file; joule reads run logs only from regular files \(nothing of it was read\)\$"
refused soft_link "$w/soft_link.h5" "^plot_run.py: $w/soft_link.h5: /train is a soft link \(to /real\), which joule never writes; joule reads only objects stored in the file itself"
refused ext_storage "$w/ext_storage.h5" "^plot_run.py: $w/ext_storage.h5: dataset /train/loss keeps its data in external files; joule reads only data stored in the file itself"
refused virtual "$w/virtual.h5" "^plot_run.py: $w/virtual.h5: dataset /train/loss is a virtual dataset"
skipped sparse "$w/sparse.h5" loss.png "$w/sparse.h5: dataset /train/loss claims \[200000000\] values \(1\.5 GiB\) but stores none of them \(a sparse or forged file\)\$"
skipped gzip_bomb "$w/gzip_bomb.h5" loss.png "$w/gzip_bomb.h5: dataset /train/loss claims \[268435456\] values \(2\.0 GiB\), more than plot_run.py reads of one dataset \(1\.0 GiB as doubles\)"
skipped strings "$w/strings.h5" regions.png "$w/strings.h5: dataset /trials/0000/regions/name holds over 64\.0 MiB of strings" pareto.png

# A working folder of another user's: its matplotlibrc is not read (the plot drawn with matplotlib's
# own defaults: no latex run, no red background), nor waited on when it is a FIFO.
mkdir "$work/theirs" "$work/theirs-fifo"
printf 'text.usetex: True\nfigure.facecolor: red\nsavefig.facecolor: red\n' >"$work/theirs/matplotlibrc"
mkfifo "$work/theirs-fifo/matplotlibrc"
for case in theirs theirs-fifo; do
  cd "$work/$case"
  plot "$case" "$work/good.h5"
  cd "$work"
  png="$work/$case-plots/loss.png"
  if [ "$rc" -ne 0 ] || [ ! -s "$png" ]; then cat "$work/$case.err" >&2; fail "$case: exit $rc, loss.png not written"; fi
  pixel="$("$py" -c 'import sys; from PIL import Image; print(*Image.open(sys.argv[1]).convert("RGB").getpixel((2, 2)))' "$png")"
  read -r r g b <<<"$pixel"
  if [ "$r" -gt 200 ] && [ "$g" -lt 100 ] && [ "$b" -lt 100 ]; then fail "$case: loss.png's background is red ($pixel)"; fi
  echo "ok: $case: the working folder's matplotlibrc not read: loss.png written, background ($pixel)"
done
echo PASS
