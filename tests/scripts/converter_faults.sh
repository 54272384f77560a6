#!/usr/bin/env bash
# apps/scripts/images_to_h5.py on bad outputs, bad values and failing writes:
#   an output that is an input   the captions file, a listed image, a symlink and a hard link to one,
#                                the image folder: refused (exit 1, the input named), the input
#                                bitwise unchanged;
#   values joule refuses         --image-size, --frames, --text-len and --eval-fraction just outside
#                                joule's ranges are refused with the range joule itself prints for
#                                the same value in a configuration (core/model/limits.json is the one
#                                source of both); an empty caption is refused naming its line; a
#                                dataset larger than the free space is refused before any work;
#   images and captions          16-bit grey PNGs are brought to 8 bits by the high byte (32896 ->
#                                128) and float TIFFs in [0, 1] scaled by 255 (0.5 -> 128), read back
#                                from /images (PIL alone clips them: 255 and 0); floats outside [0, 1]
#                                and integer images outside 0..65535 are refused naming the range; a
#                                PNG cut to 60 % of its bytes, or without its IEND, is refused as
#                                truncated or damaged, and so (issue 51) are PNGs whose chunks are
#                                whole with their CRCs right but whose image data (zlib stream) is
#                                cut short, has a wrong check, bytes after its end or half the rows,
#                                and one with a wrong CRC in IEND, each in joule's reader's words;
#                                a caption holding NUL or ESC is refused naming its line; a listed
#                                FIFO (under a 60 s timeout: it used to hang), a symlink to
#                                /dev/zero and a folder are refused as not regular files; a PNG
#                                declaring 20,000 x 20,000 pixels is refused from its header, and
#                                --max-image-pixels moves the limit (issue 64);
#   failing writes               a full disk (ENOSPC), an exceeded quota (EDQUOT) and an I/O error
#                                (EIO) injected (tests/support/fault_writes.c) at the first byte, a
#                                few KiB in and at the last byte of the write, over an existing good
#                                output: exit 1 with one line naming the output, the error and the
#                                free space, the previous output bitwise unchanged, no temporary left;
#                                with every byte allowed the same run succeeds.
#   converter_faults.sh JOULE REPO FAULT_WRITES_SO
set -euo pipefail
joule="$1"; repo="$2"; fault_so="$3"
conv="$repo/apps/scripts/images_to_h5.py"
py=/usr/bin/python3
export PYTHONDONTWRITEBYTECODE=1  # no .pyc writes among the bytes counted below
[ -f "$fault_so" ] || { echo "no write-failure injector at $fault_so"; exit 1; }
work="$(mktemp -d)"; trap 'rm -rf "$work"' EXIT
img="$work/img"; mkdir "$img"
fail() { echo "converter_faults: $*" >&2; exit 1; }

$py - "$img" "$work" <<'PY'
import sys
import numpy as np
from PIL import Image
img, work = sys.argv[1:]
rng = np.random.RandomState(3)
with open(f"{work}/caps.tsv", "w") as f:
    for i in range(4):
        Image.fromarray(rng.randint(0, 256, size=(4, 4, 3), dtype=np.uint8), "RGB").save(f"{img}/p{i}.png")
        f.write(f"p{i}.png\tpicture {i}\n")
with open(f"{work}/empty_caption.tsv", "w") as f:
    f.write("p0.png\tfine\n\np1.png\t\n")
# 64 clips of 256 frames of 4096x4096 RGBA: about 1 TiB, more than any test machine's free space.
with open(f"{work}/huge.tsv", "w") as f:
    for i in range(64):
        f.write(",".join(["p0.png"] * 256) + f"\thuge {i}\n")
PY
opts=(--image-size 4 --text-len 12)

# expect_refusal 'MESSAGE' ARGS...: exit status 1 or 2 (argparse) within 60 s, MESSAGE on stderr, no traceback.
expect_refusal() {
  local want="$1"; shift
  local rc=0
  timeout 60 $py "$conv" "$@" >"$work/out" 2>"$work/err" || rc=$?  # a hang fails (exit 124)
  [ "$rc" -eq 1 ] || [ "$rc" -eq 2 ] || { cat "$work/out" "$work/err"; fail "exit $rc (want 1 or 2): $*"; }
  grep -qF -- "$want" "$work/err" || { cat "$work/err"; fail "expected '$want' for: $*"; }
  if grep -q Traceback "$work/err"; then cat "$work/err"; fail "a traceback for: $*"; fi
}

# --- An output that is one of the inputs -------------------------------------------------------
cp "$work/caps.tsv" "$work/caps.copy"; cp "$img/p2.png" "$work/p2.copy"; cp "$img/p3.png" "$work/p3.copy"
ln -s "$img/p1.png" "$work/link.h5"; cp "$img/p1.png" "$work/p1.copy"
ln "$img/p3.png" "$work/hard.h5"
expect_refusal "the output $work/caps.tsv is the same file as the captions file" \
  "$img" "$work/caps.tsv" "$work/caps.tsv" "${opts[@]}"
expect_refusal "the output $img/p2.png is the same file as the image of $work/caps.tsv:3" \
  "$img" "$work/caps.tsv" "$img/p2.png" "${opts[@]}"
expect_refusal "the output $work/link.h5 is the same file as the image of $work/caps.tsv:2 $img/p1.png (a symlink to it)" \
  "$img" "$work/caps.tsv" "$work/link.h5" "${opts[@]}"
expect_refusal "the output $work/hard.h5 is the same file as the image of $work/caps.tsv:4 $img/p3.png (a hard link to it)" \
  "$img" "$work/caps.tsv" "$work/hard.h5" "${opts[@]}"
expect_refusal "is the same file as the image folder" "$img" "$work/caps.tsv" "$img/" "${opts[@]}"
cmp "$work/caps.tsv" "$work/caps.copy" && cmp "$img/p1.png" "$work/p1.copy" && cmp "$img/p2.png" "$work/p2.copy" &&
  cmp "$img/p3.png" "$work/p3.copy" || fail "an input changed"
[ -L "$work/link.h5" ] || fail "the symlink output was replaced"
# An output that is not a regular file (a FIFO; a link to a device) is refused before any work and left as it is.
mkfifo "$work/pipe.h5"; ln -s /dev/null "$work/null.h5"
expect_refusal "the output $work/pipe.h5 is a FIFO (named pipe), not a regular file" \
  "$img" "$work/caps.tsv" "$work/pipe.h5" "${opts[@]}"
expect_refusal "the output $work/null.h5 is a symbolic link to a character device, not a regular file" \
  "$img" "$work/caps.tsv" "$work/null.h5" "${opts[@]}"
[ -p "$work/pipe.h5" ] && [ "$(readlink "$work/null.h5")" = /dev/null ] || fail "a non-regular output was replaced"
rm -f "$work/pipe.h5" "$work/null.h5"
[ "$(ls -A "$img" | grep -c 'tmp\|\.joule-' || true)" -eq 0 ] &&
  [ "$(ls -A "$work" | grep -c '\.tmp$\|\.joule-' || true)" -eq 0 ] || fail "a temporary was left"

# --- Values joule refuses: the range in the converter's message is the one joule prints ---------
cat > "$work/cfg.json" <<JSON
{"model": {"layers": 1, "d_model": 32, "heads": 2, "mlp_ratio": 2, "image_size": 4, "patch_size": 1,
           "channels": 3, "frames": 1, "text_len": 12, "tie_embeddings": true},
 "data": {"path": "$work/good.h5", "eval_fraction": 0.5},
 "train": {"batch": 2, "micro_batch": 2, "steps": 1, "lr": 0.001, "min_lr": 0.0, "warmup_steps": 0,
           "weight_decay": 0.0, "beta1": 0.9, "beta2": 0.95, "grad_clip": 1.0, "eval_every": 0,
           "eval_samples": 1, "log_every": 1, "seed": 1, "recompute_depth": 0}}
JSON
# joule_range SECTION KEY VALUE: the "allowed: ..." range joule's configuration parser prints for it.
joule_range() {
  $py - "$work/cfg.json" "$work/bad.json" "$1" "$2" "$3" <<'PY'
import json, sys
cfg = json.load(open(sys.argv[1]))
cfg[sys.argv[3]][sys.argv[4]] = json.loads(sys.argv[5])
json.dump(cfg, open(sys.argv[2], "w"))
PY
  if "$joule" data info "$work/none.h5" --config "$work/bad.json" >/dev/null 2>"$work/joule.err"; then
    fail "joule accepted $1.$2 = $3"
  fi
  grep -o "$1\.$2 is [^;]*; allowed: [[(][^]]*\]" "$work/joule.err" | sed 's/.*allowed: //' | grep . ||
    { cat "$work/joule.err"; fail "joule's message for $1.$2 = $3 names no range"; }
}
# limit SECTION KEY min|max: the number in core/model/limits.json.
limit() { $py -c 'import json, sys; print(json.load(open(sys.argv[1]))[sys.argv[2]][sys.argv[3]][sys.argv[4]])' \
            "$repo/core/model/limits.json" "$@"; }
for key in image_size frames text_len; do
  option="--${key//_/-}"
  lo="$(limit model $key min)"; hi="$(limit model $key max)"
  range="$(joule_range model $key $((hi + 1)))"
  [ "$range" = "[$lo, $hi]" ] || fail "joule's range of model.$key is $range, core/model/limits.json says [$lo, $hi]"
  for value in $((lo - 1)) $((hi + 1)); do
    expect_refusal "argument $option: $value is outside $range, joule's range of model.$key" \
      "$img" "$work/caps.tsv" "$work/x.h5" "${opts[@]}" "$option" "$value"
  done
done
range="$(joule_range data eval_fraction 0.95)"
expect_refusal "argument --eval-fraction: 0.95 is outside $range, the range of data.eval_fraction" \
  "$img" "$work/caps.tsv" "$work/x.h5" "${opts[@]}" --eval-fraction 0.95
expect_refusal "$work/empty_caption.tsv:3: empty caption (''); a caption holds 1 to 10 bytes (--text-len 12 less BOS and EOS)" \
  "$img" "$work/empty_caption.tsv" "$work/x.h5" "${opts[@]}"
# About 1 TiB: refused at once from the sizes alone (the old script started loading 16 GiB clips).
( ulimit -v 4000000; timeout 20 $py "$conv" "$img" "$work/huge.tsv" "$work/huge.h5" --image-size 4096 --frames 256 \
    --channels 4 --text-len 12 >"$work/out" 2>"$work/err" ) && fail "a 1 TiB dataset was accepted" || true
grep -qF "cannot write $work/huge.h5: 64 samples of 256 frame(s) of 4x4096x4096 and 12 tokens need about 1.0 TiB;" \
  "$work/err" && grep -qF "free in $work" "$work/err" || { cat "$work/err"; fail "no free-space refusal"; }
[ ! -e "$work/huge.h5" ] || fail "the refused dataset left a file"
# The boundary values themselves are accepted (the cheap ones).
$py "$conv" "$img" "$work/caps.tsv" "$work/edge.h5" --image-size 4 --text-len "$(limit model text_len max)" \
  --eval-fraction "$(limit data eval_fraction max)" >/dev/null

# --- Images PIL misreads or hangs on, damaged images, control characters in captions ------------
PYTHONPATH="$(cd "$(dirname "$0")" && pwd)" $py - "$img" "$work" <<'PY'
import sys
import numpy as np
from PIL import Image
img, work = sys.argv[1:]
rng = np.random.RandomState(5)
# PIL brings these to 8 bits by clipping: the 16-bit grey 32896 (0x8080) became 255, the float 0.5 became 0.
Image.fromarray(np.full((4, 4), 32896, dtype=np.uint16)).save(f"{img}/grey16.png")
ramp16 = np.array([0, 255, 256, 257, 32767, 32768, 32896, 65535,
                   65280, 65279, 51400, 1000, 12345, 40000, 60000, 65534], dtype=np.uint16).reshape(4, 4)
Image.fromarray(ramp16).save(f"{img}/ramp16.png")
np.save(f"{work}/ramp16.npy", ramp16)
Image.fromarray(np.full((4, 4), 0.5, dtype=np.float32)).save(f"{img}/half.tiff")
Image.fromarray(np.tile(np.array([0, 0.25, 0.5, 0.75], dtype=np.float32), (4, 1))).save(f"{img}/ramp.tiff")
far = np.full((4, 4), 0.5, dtype=np.float32)
far[0, 0], far[1, 2] = -0.25, 255.0
Image.fromarray(far).save(f"{img}/far.tiff")
Image.fromarray(np.full((4, 4), -5, dtype=np.int32)).save(f"{img}/negative.tiff")  # PIL mode I
# 64x64 noise (it does not compress), then cut to 60 % of its bytes: most rows missing; and the
# same file with only its IEND chunk cut off.
Image.fromarray(rng.randint(0, 256, size=(64, 64, 3), dtype=np.uint8), "RGB").save(f"{img}/whole.png")
data = open(f"{img}/whole.png", "rb").read()
open(f"{img}/cut.png", "wb").write(data[:len(data) * 6 // 10])
open(f"{img}/no_iend.png", "wb").write(data[:-12])
# PNGs whose chunks are whole, their CRCs right, but whose image data is not (issue 51; PIL took
# the first, and one whose IEND's CRC is wrong): its zlib stream cut before its Adler-32 check, or
# halfway, with a wrong check, with bytes after its end, inflating to half the rows. Each is refused
# with the words of joule's reader (damaged_images.sh checks the same files there).
import struct, zlib


from png_chunks import chunks, with_idat  # tests/scripts/png_chunks.py (PYTHONPATH)


idat = data.find(b"IDAT") - 4
stream = b"".join(body for kind, body in chunks(data) if kind == b"IDAT")
rows = zlib.decompress(stream)
assert len(rows) == 64 * (1 + 64 * 3)
fewer = zlib.compress(rows[:len(rows) // 2])
where = f"the zlib stream of its image data ({{}} bytes in 1 IDAT chunk(s) from byte {idat})".format
pixels = "its 64x64 pixels (colour type 2, 8 bits)"
iend = bytearray(data)
iend[-1] ^= 0x01
stored, computed = int.from_bytes(iend[-4:], "big"), zlib.crc32(b"IEND")
png_cases = {
    "noadler": (with_idat(data, stream[:-4]), f"truncated PNG: {where(len(stream) - 4)} is cut short: it ends before "
                f"the stream's end and Adler-32 check, after {len(rows)} of the {len(rows)} bytes of rows {pixels} need)"),
    "halfstream": (with_idat(data, stream[:len(stream) // 2]),
                   f"truncated PNG: {where(len(stream) // 2)} is cut short: it ends before the stream's end and "
                   f"Adler-32 check, after "),
    "fewrows": (with_idat(data, fewer), f"truncated PNG: {where(len(fewer))} inflates to {len(rows) // 2} bytes, and "
                f"{pixels} need {len(rows)} (each row with its filter byte))"),
    "adler": (with_idat(data, stream[:-4] + bytes(b ^ 0x01 for b in stream[-4:])),
              f"PNG image data is damaged: {where(len(stream))} does not inflate (zlib: incorrect data check))"),
    "after": (with_idat(data, stream + b"\0\0\0"),
              f"PNG image data is damaged: 3 bytes follow the end of {where(len(stream) + 3)})"),
    "iendcrc": (bytes(iend), f"PNG chunk IEND at byte {len(data) - 12} is damaged: its CRC-32 is 0x{stored:08X}, its "
                f"bytes give 0x{computed:08X})"),
}
with open(f"{work}/png_cases.txt", "w") as cases:
    for name, (png, reason) in png_cases.items():
        open(f"{img}/{name}.png", "wb").write(png)
        with open(f"{work}/{name}.tsv", "w") as f:
            f.write(f"{name}.png\t{name}\n")
        cases.write(f"{name}\t{reason}\n")
tsv = {"deep": "grey16.png\t16 bits\nhalf.tiff\tfloat half\nramp16.png\tramp 16\nramp.tiff\tramp float\n",
       "far": "p0.png\tfine\nfar.tiff\tfar\n", "negative": "p0.png\tfine\nnegative.tiff\tnegative\n",
       "whole": "whole.png\twhole\n", "cut": "p0.png\tfine\ncut.png\tcut\n", "no_iend": "no_iend.png\tno end\n",
       "nul": "p0.png\tfine\np1.png\tnul\0byte\n", "esc": "p0.png\t\x1b[1mbold\n",
       "pipe": "p0.png\tfine\npipe.png\tpipe\n", "zero": "zero.png\tzero\n", "folder": "p0.png,folder\tclip\n"}
for name, text in tsv.items():
    with open(f"{work}/{name}.tsv", "w") as f:
        f.write(text)
PY
# 16-bit: the high byte (32896 -> 128; v >> 8 for every v); float in [0, 1]: times 255, rounded half up.
$py "$conv" "$img" "$work/deep.tsv" "$work/deep.h5" "${opts[@]}" --resize none >/dev/null
$py - "$work/deep.h5" "$work/ramp16.npy" <<'PY' || fail "16-bit or float images were not scaled to 8 bits"
import sys
import h5py
import numpy as np
with h5py.File(sys.argv[1], "r") as f:
    images = f["images"][...]
assert images.shape == (4, 1, 3, 4, 4), images.shape
want = {"grey16.png (16-bit 32896)": np.full((4, 4), 128),
        "half.tiff (float 0.5)": np.full((4, 4), 128),
        "ramp16.png (16-bit, v >> 8)": np.load(sys.argv[2]).astype(np.int64) >> 8,
        "ramp.tiff (float 0, .25, .5, .75)": np.tile([0, 64, 128, 191], (4, 1))}
bad = [f"{name}: {images[i, 0, 0].tolist()}, want {w.tolist()}" for i, (name, w) in enumerate(want.items())
       if not all(np.array_equal(images[i, 0, c], w) for c in range(3))]
print("\n".join(bad), file=sys.stderr)
sys.exit(1 if bad else 0)
PY
expect_refusal "$work/far.tsv:2: $img/far.tiff is a floating-point image (PIL mode F) with values in [-0.25, 255]; floating-point pixels must lie in [0, 1]" \
  "$img" "$work/far.tsv" "$work/x.h5" "${opts[@]}"
expect_refusal "$work/negative.tsv:2: $img/negative.tiff is an integer image (PIL mode I) with values in [-5, -5]; integer greyscale pixels must lie in 0..65535" \
  "$img" "$work/negative.tsv" "$work/x.h5" "${opts[@]}"
# A truncated PNG: refused, not decoded with its missing rows black (the whole file is accepted).
$py "$conv" "$img" "$work/whole.tsv" "$work/whole.h5" "${opts[@]}" >/dev/null || fail "the whole PNG was refused"
expect_refusal "$work/cut.tsv:2: cannot read image $img/cut.png: the file is truncated or damaged" \
  "$img" "$work/cut.tsv" "$work/x.h5" "${opts[@]}"
expect_refusal "$work/no_iend.tsv:1: cannot read image $img/no_iend.png: the file is truncated or damaged" \
  "$img" "$work/no_iend.tsv" "$work/x.h5" "${opts[@]}"
while IFS=$'\t' read -r name reason; do
  expect_refusal "$work/$name.tsv:1: cannot read image $img/$name.png: the file is truncated or damaged ($reason" \
    "$img" "$work/$name.tsv" "$work/x.h5" "${opts[@]}"
done <"$work/png_cases.txt"
[ "$(wc -l <"$work/png_cases.txt")" = 6 ] || fail "expected 6 damaged PNG cases"
# A valid 49 KB PNG that declares 20,000 x 20,000 pixels (it used to cost GBs and minutes to decode):
# refused from its header, before anything is decoded, in joule caption's words; a limit raised by
# --max-image-pixels lets a small image through that a lower one refuses. Under a memory limit, so
# that a regression that decodes it fails rather than swaps.
$py - "$img/huge.png" <<'PY'
import struct, sys, zlib
def chunk(kind, body):
    return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))
z = zlib.compressobj(9)
row = bytes(1 + 20000 // 8)
data = b"".join(z.compress(row * 1000) for _ in range(20)) + z.flush()
with open(sys.argv[1], "wb") as f:
    f.write(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", 20000, 20000, 1, 0, 0, 0, 0)) +
            chunk(b"IDAT", data) + chunk(b"IEND", b""))
PY
printf 'huge.png\thuge\n' >"$work/huge.tsv"
(ulimit -v 2000000; expect_refusal "$work/huge.tsv:1: cannot read image $img/huge.png: declares 20000 x 20000 pixels (400000000), more than the 67108864 pixels joule decodes (--max-image-pixels 67108864); nothing of it was decoded" \
  "$img" "$work/huge.tsv" "$work/x.h5" "${opts[@]}")
head -1 "$work/whole.tsv" >"$work/one.tsv"
one=$(cut -f1 "$work/one.tsv")
pixels=$($py -c 'import sys; from PIL import Image; w, h = Image.open(sys.argv[1]).size; print(w * h)' "$img/$one")
expect_refusal "more than the $((pixels - 1)) pixels joule decodes (--max-image-pixels $((pixels - 1)))" \
  "$img" "$work/one.tsv" "$work/x.h5" "${opts[@]}" --max-image-pixels $((pixels - 1))
$py "$conv" "$img" "$work/one.tsv" "$work/x.h5" "${opts[@]}" --max-image-pixels "$pixels" >/dev/null ||
  fail "--max-image-pixels $pixels refused an image of $pixels pixels"
rm -f "$work/x.h5"
# Control characters in a caption: refused naming the line (a NUL byte would end the caption in C).
expect_refusal "$work/nul.tsv:2: the caption 'nul\\x00byte' holds the control character U+0000 (NUL byte) at character 4" \
  "$img" "$work/nul.tsv" "$work/x.h5" "${opts[@]}"
expect_refusal "$work/esc.tsv:1: the caption '\\x1b[1mbold' holds the control character U+001B (ESC) at character 1" \
  "$img" "$work/esc.tsv" "$work/x.h5" "${opts[@]}"
# A listed image that is not a regular file: refused before it is opened (a FIFO that nobody writes
# hung the converter in open(); expect_refusal's timeout turns a hang into a failure).
mkfifo "$img/pipe.png"; ln -s /dev/zero "$img/zero.png"; mkdir "$img/folder"
expect_refusal "$work/pipe.tsv:2: the image $img/pipe.png is a FIFO (named pipe), not a regular file" \
  "$img" "$work/pipe.tsv" "$work/x.h5" "${opts[@]}"
expect_refusal "$work/zero.tsv:1: the image $img/zero.png is a symbolic link to a character device, not a regular file" \
  "$img" "$work/zero.tsv" "$work/x.h5" "${opts[@]}"
expect_refusal "$work/folder.tsv:1: the image $img/folder is a folder, not a regular file" \
  "$img" "$work/folder.tsv" "$work/x.h5" "${opts[@]}" --frames 2
[ ! -e "$work/x.h5" ] || fail "a refused conversion wrote $work/x.h5"
rm -f "$img/pipe.png" "$img/zero.png"; rmdir "$img/folder"

# --- Failing writes over a good output ----------------------------------------------------------
out="$work/good.h5"
$py "$conv" "$img" "$work/caps.tsv" "$out" "${opts[@]}" >/dev/null
cp "$out" "$work/good.copy"
new=("$img" "$work/caps.tsv" "$out" "${opts[@]}" --shuffle 1)  # another file: a success would show
# The bytes the converter writes for the new file (all of them to the temporary and its marker): counted
# by the kernel (/proc/self/io wchar), with the script's own output kept in memory. Written under the
# same name as $out (the temporary's marker names it), in a folder of its own.
mkdir "$work/count"
total="$($py - "$conv" "$img" "$work/caps.tsv" "$work/count/good.h5" "${new[@]:3}" <<'PY'
import contextlib, io, os, runpy, sys
import h5py, numpy, PIL.Image  # noqa: F401 (imported, and any of their writes made, before counting)
def written():
    with open("/proc/self/io") as f:
        return int(next(line for line in f if line.startswith("wchar:")).split()[1])
conv = sys.argv[1]
sys.argv = sys.argv[1:]
before = written()
with contextlib.redirect_stdout(io.StringIO()):
    try:
        runpy.run_path(conv, run_name="__main__")
    except SystemExit as e:
        assert not e.code, e.code
print(written() - before)
PY
)"
[ "$total" -gt 4096 ] || fail "counted only $total bytes written"
run_faulty() {  # run_faulty ERRNO BYTES: the new conversion with writes to $out (or its temporary) failing
  local rc=0
  LD_PRELOAD="$fault_so" JOULE_FAULT_PATH="$(basename "$out")" JOULE_FAULT_ERRNO="$1" JOULE_FAULT_AFTER_BYTES="$2" \
    $py "$conv" "${new[@]}" >"$work/out" 2>"$work/err" || rc=$?
  return $rc
}
declare -A errtext=([ENOSPC]="No space left on device (ENOSPC)" [EDQUOT]="Disk quota exceeded (EDQUOT)"
                    [EIO]="Input/output error (EIO)")
for fault in ENOSPC:0 ENOSPC:3000 ENOSPC:$((total - 1)) EDQUOT:3000 EIO:$((total - 1)); do
  e="${fault%:*}"; bytes="${fault#*:}"
  rc=0; run_faulty "$e" "$bytes" || rc=$?
  [ "$rc" -eq 1 ] || { cat "$work/out" "$work/err"; fail "$e after $bytes bytes: exit $rc, want 1"; }
  grep -qF "cannot write $out (temporary $work/.good.h5." "$work/err" && grep -qF "${errtext[$e]}" "$work/err" &&
    grep -qE "; [0-9.]+ ([KMGT]iB|bytes) free in $work; $out is left as it was\$" "$work/err" ||
    { cat "$work/err"; fail "$e after $bytes bytes: the message lacks the file, the error or the free space"; }
  [ "$(wc -l <"$work/err")" -eq 1 ] || { cat "$work/err"; fail "$e after $bytes bytes: more than one line"; }
  cmp "$out" "$work/good.copy" || fail "$e after $bytes bytes: the previous output changed"
  leftover="$(ls -A "$work" | grep '\.tmp$\|\.joule-' || true)"
  [ -z "$leftover" ] || fail "$e after $bytes bytes: temporary $leftover left behind"
  echo "$e after $bytes of $total bytes: refused, $out unchanged"
done
# No previous output: nothing is left either.
rm -r "$work/count"
rc=0; LD_PRELOAD="$fault_so" JOULE_FAULT_PATH=count.h5 JOULE_FAULT_AFTER_BYTES=3000 \
  $py "$conv" "$img" "$work/caps.tsv" "$work/count.h5" "${opts[@]}" >/dev/null 2>"$work/err" || rc=$?
[ "$rc" -eq 1 ] && grep -qF "nothing was written to $work/count.h5" "$work/err" || { cat "$work/err"; fail "fresh output"; }
[ -z "$(ls -A "$work" | grep 'count\.h5' || true)" ] || fail "a failed fresh output left a file"
# Every byte allowed: the same run replaces the output with the new, valid file.
run_faulty ENOSPC "$total" || { cat "$work/err"; fail "the run failed with all its $total bytes allowed"; }
cmp -s "$out" "$work/good.copy" && fail "the shuffled output equals the old one (the test shows nothing)"
"$joule" data info "$out" --config "$work/cfg.json" >"$work/info.out" && grep -qF "4 samples, 1 frame(s) of 3x4x4, text length 12" "$work/info.out" ||
  fail "the new output does not validate"
echo "converter faults: ok"
