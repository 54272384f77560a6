#!/usr/bin/env bash
# joule caption --images reads image files as images_to_h5.py converts them for a dataset:
# random PNGs of awkward sizes and modes, each read by apps/image_files.cpp (through image_probe)
# and by PIL as the converter does, for every channel count and resize filter. Exact where no
# arithmetic is involved (resize none or nearest, channels kept or expanded); within 1 for
# bilinear (PIL rounds after each of its two passes) and 1 more for grey from colour (stb and PIL
# weigh R, G, B in different fixed point). With alpha, bilinear filters premultiplied colours as
# PIL does: alpha and alpha-weighted colour are compared.
# usage: image_files_vs_pil.sh IMAGE_PROBE
set -euo pipefail
probe="$1"
work="$(mktemp -d)"; trap 'rm -rf "$work"' EXIT
/usr/bin/python3 - "$probe" "$work" <<'PY'
import subprocess, sys
import numpy as np
from PIL import Image
probe, work = sys.argv[1], sys.argv[2]
rng = np.random.RandomState(5)
filters = {"bilinear": Image.BILINEAR, "nearest": Image.NEAREST}
modes = {1: "L", 3: "RGB", 4: "RGBA"}
checked = 0
for w, h, size in [(13, 7, 8), (5, 5, 16), (32, 24, 8), (9, 9, 9), (3, 11, 6)]:
    for src_mode, depth in [("RGB", 3), ("L", 1), ("RGBA", 4)]:
        pixels = rng.randint(0, 256, size=(h, w, depth), dtype=np.uint8)
        path = f"{work}/img_{w}x{h}_{src_mode}.png"
        Image.fromarray(pixels[:, :, 0] if depth == 1 else pixels, mode=src_mode).save(path)
        for channels in (1, 3, 4):
            for resize in ("none", "nearest", "bilinear"):
                if resize == "none" and (w, h) != (size, size):
                    continue
                img = Image.open(path).convert(modes[channels])
                if resize != "none":
                    img = img.resize((size, size), filters[resize])
                ref = np.asarray(img, dtype=np.int16).reshape(size, size, channels).transpose(2, 0, 1)
                out = f"{work}/out.bin"
                subprocess.run([probe, path, str(channels), str(size), resize, out], check=True)
                got = np.fromfile(out, dtype=np.uint8).astype(np.int16).reshape(channels, size, size)
                # Rounding: 1 for bilinear (PIL rounds after each pass), 1 for grey from colour.
                allowed = (resize == "bilinear") + (channels == 1 and src_mode != "L")
                worst = int(np.abs(got - ref).max())
                what = f"{path} -> {channels} channel(s) {size}x{size} {resize}"
                if channels == 4 and resize == "bilinear":
                    # Premultiplied filtering: compare alpha, and colour weighted by alpha (PIL's
                    # rounding before dividing by a small alpha is magnified in the plain colour).
                    a_got, a_ref = got[3].astype(float), ref[3].astype(float)
                    worst = max(int(np.abs(got[3] - ref[3]).max()),
                                int(np.ceil(np.abs(got[:3] * a_got - ref[:3] * a_ref).max() / 255.0 - 1e-9)))
                    allowed = 2
                if worst > allowed:
                    sys.exit(f"{what}: differs from PIL by up to {worst}")
                checked += 1
# A 1-pixel image is no special case; an image of the wrong size with resize none is refused.
Image.fromarray(np.zeros((4, 5), np.uint8), mode="L").save(f"{work}/odd.png")
r = subprocess.run([probe, f"{work}/odd.png", "1", "4", "none", f"{work}/out.bin"], capture_output=True, text=True)
if r.returncode == 0 or "odd.png: the image is 5x4" not in r.stderr:
    sys.exit(f"a 5x4 image was not refused with resize none: {r.stderr}")
print(f"image files vs PIL: {checked} conversions agree")
PY
