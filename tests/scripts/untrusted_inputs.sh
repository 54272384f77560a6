#!/usr/bin/env bash
# Inputs another user may own or control (issue 64), refused at once and never read without end:
#   - a configuration (--config of train, tune, data synth, data info) that is a FIFO nobody writes
#     (it hung train and data synth) or a link to /dev/zero: refused by fstat before any read,
#     naming the file and what it is;
#   - an image that is a FIFO or a link to /dev/zero (image_probe: the decoder joule caption --images
#     uses): refused before any read (the FIFO hung it, /dev/zero grew without bound);
#   - a PNG declaring 20,000 x 20,000 pixels (a valid 1-bit image, 49 KB: decoded, it took 1.6 GB and
#     128 s of CPU): refused from its header, naming the file, its declared size and the limit, by
#     image_probe and by joule caption --images (with --skip-bad-images the other images are
#     captioned); --max-image-pixels moves the limit (checked on a 13 x 9 image: 116 refuses it, 117
#     takes it).
# Every command runs under `timeout 20`, so that a regression fails the test instead of hanging it.
# (That an image or an HDF5 input swapped after its check is never read by name is tested in C++:
# tests/test_inputs.cpp, the [inputs] cases of test_config_data and test_run_log.)
# usage: untrusted_inputs.sh JOULE IMAGE_PROBE SMALL_MODEL_CONFIG
set -euo pipefail
joule="$1" probe="$2" small_config="$3"
work="$(mktemp -d)"; trap 'rm -rf "$work"' EXIT
cd "$work"
fail() { echo "FAIL: $*" >&2; exit 1; }
# A memory limit for the decoder, so that a regression that decodes the huge PNG (or reads /dev/zero)
# fails here instead of taking the machine's memory; not under AddressSanitizer, which maps terabytes.
# Decided once, from ldd's whole output: `ldd | grep -q` under pipefail fails whenever grep exits
# before ldd has written its last line (SIGPIPE), and then limited an ASan binary.
under_asan=0
case "$(ldd "$probe" 2>/dev/null) $(ldd "$joule" 2>/dev/null)" in *libasan*) under_asan=1 ;; esac
limit_memory() { [ "$under_asan" = 1 ] || ulimit -v 1500000; }

# refused TEXT COMMAND...: exits 1 within 20 s, printing TEXT.
refused() {
  local text="$1" rc=0
  shift
  timeout 20 "$@" >out.txt 2>&1 || rc=$?
  [ $rc != 124 ] || fail "$* did not end within 20 s (killed)"
  [ $rc = 1 ] || fail "$*: exit status $rc, expected 1: $(tail -3 out.txt)"
  grep -qF -- "$text" out.txt || fail "$*: expected \"$text\", got: $(tail -3 out.txt)"
  echo "refused: $(basename "$1") ${*:2} -> $(grep -F -- "$text" out.txt | head -1)"
}

# --- configurations -----------------------------------------------------------------------------
"$joule" data synth --out data.h5 --count 8 --image-size 32 --text-len 36 --frames 1 >/dev/null
mkfifo fifo.json
ln -s /dev/zero zero.json
fifo="fifo.json: is a FIFO (named pipe), not a regular file; joule reads configurations only from regular files (nothing of it was read)"
refused "$fifo" "$joule" train --config fifo.json --data data.h5 --steps 1 --no-energy
refused "$fifo" "$joule" tune --config fifo.json --data data.h5 --out t.h5
refused "$fifo" "$joule" data synth --config fifo.json --out x.h5
refused "$fifo" "$joule" data info data.h5 --config fifo.json
refused "zero.json: is a character device, not a regular file; joule reads configurations only from regular files" \
  "$joule" train --config zero.json --data data.h5 --steps 1 --no-energy
[ ! -e x.h5 ] && [ ! -e t.h5 ] || fail "a refused command wrote its output"

# --- images -------------------------------------------------------------------------------------
mkdir small big
mkfifo pipe.png
ln -s /dev/zero zero.png
/usr/bin/python3 - <<'PY'
import struct, zlib
import numpy as np
from PIL import Image

Image.fromarray(np.random.RandomState(64).randint(0, 256, size=(9, 13, 3), dtype=np.uint8), "RGB").save("small/small.png")

def chunk(kind, body):
    return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))

# 20,000 x 20,000 pixels of 1-bit grey: every row its filter byte and 2,500 zero bytes, one whole zlib
# stream (49 KB): a valid PNG that decodes to 400 Mpixel.
width = height = 20000
z = zlib.compressobj(9)
row = bytes(1 + (width + 7) // 8)
data = b"".join(z.compress(row * 1000) for _ in range(height // 1000)) + z.flush()
ihdr = struct.pack(">IIBBBBB", width, height, 1, 0, 0, 0, 0)
with open("big/huge.png", "wb") as f:
    f.write(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", data) + chunk(b"IEND", b""))
PY
cp small/small.png big/
refused "pipe.png: is a FIFO (named pipe), not a regular file; joule reads images only from regular files (nothing of it was read)" \
  "$probe" pipe.png 3 8 bilinear out.bin
refused "zero.png: is a character device, not a regular file; joule reads images only from regular files" \
  "$probe" zero.png 3 8 bilinear out.bin
huge="big/huge.png: declares 20000 x 20000 pixels (400000000), more than the 67108864 pixels joule decodes (--max-image-pixels 67108864); nothing of it was decoded"
(limit_memory; refused "$huge" "$probe" big/huge.png 3 8 bilinear out.bin)
refused "small/small.png: declares 13 x 9 pixels (117), more than the 116 pixels joule decodes (--max-image-pixels 116)" \
  "$probe" small/small.png 3 8 bilinear out.bin 116
timeout 20 "$probe" small/small.png 3 8 bilinear out.bin 117 || fail "image_probe with a limit of 117 pixels refused a 13 x 9 image"
echo "ok: image_probe decodes a 13 x 9 image with a limit of 117 pixels"

# joule caption --images, with a checkpoint of the small model after one step.
"$joule" train --config "$small_config" --data data.h5 --steps 1 --no-energy --checkpoint ck.h5 >train.out 2>&1 ||
  fail "the checkpoint for caption: $(tail -3 train.out)"
grep -q -- "--max-image-pixels" <<<"$("$joule" caption --help)" || fail "caption --help does not list --max-image-pixels"
(limit_memory; refused "$huge" "$joule" caption --checkpoint ck.h5 --images big)
rc=0
(limit_memory; timeout 20 "$joule" caption --checkpoint ck.h5 --images big --skip-bad-images) >out.txt 2>&1 || rc=$?
[ $rc = 0 ] && grep -q "^small.png	" out.txt && grep -qF "$huge" out.txt ||
  fail "caption --skip-bad-images of a folder with the huge PNG: exit $rc: $(tail -3 out.txt)"
echo "ok: caption --skip-bad-images captions small.png and lists huge.png with its declared size"
refused "small/small.png: declares 13 x 9 pixels (117), more than the 116 pixels joule decodes (--max-image-pixels 116)" \
  "$joule" caption --checkpoint ck.h5 --images small --max-image-pixels 116
rc=0
timeout 20 "$joule" caption --checkpoint ck.h5 --images small --max-image-pixels 117 >out.txt 2>&1 || rc=$?
[ $rc = 0 ] && grep -q "^small.png	" out.txt || fail "caption --max-image-pixels 117 of a 13 x 9 image: exit $rc: $(tail -3 out.txt)"
echo "ok: caption --max-image-pixels 117 captions a 13 x 9 image"
echo PASS
