#!/usr/bin/env bash
# Damaged image files get a clear error (issue 27). Good images of every format joule reads are
# made with PIL, and damaged ones from them: each format truncated, PNGs with a flipped CRC byte
# (in IDAT, in IEND), without IEND and with bytes after it, and (issue 51) PNGs whose chunks are
# whole with their CRCs right but whose image data is not: its zlib stream cut short (before its
# Adler-32 check only, or halfway), with a wrong check, with bytes after its end, or inflating to
# half the rows; also a text file, an empty file, a dangling symlink, a symlink loop, a folder, a
# FIFO and (unless run as root) an unreadable file, all with image extensions.
#   - image_probe (apps/image_files.cpp's decoder) accepts every good file and refuses each damaged
#     one with a message naming it and the reason (the exact figures, computed here, for BMP, TGA,
#     PPM, PGM and the PNG's CRC);
#   - joule caption --images on the mixed folder stops (exit 1), names every bad file with its
#     reason and writes nothing; with --skip-bad-images it captions the good files, as it does a
#     folder of only those, and lists the bad ones with their count (with --limit, those up to the
#     last good file captioned); a folder of only bad files is an error with the flag too.
# usage: damaged_images.sh JOULE IMAGE_PROBE SMALL_MODEL_CONFIG
set -euo pipefail
joule="$1" probe="$2" small_config="$3"
work="$(mktemp -d)"; trap 'rm -rf "$work"' EXIT
# A checkpoint of the small model (32x32 RGB) after one step: what it predicts does not matter.
"$joule" data synth --out "$work/data.h5" --count 8 --image-size 32 --text-len 36 --frames 1 >/dev/null
"$joule" train --config "$small_config" --data "$work/data.h5" --steps 1 --no-energy --checkpoint "$work/ck.h5" \
  >"$work/train.out" 2>&1 || { cat "$work/train.out"; exit 1; }

PYTHONPATH="$(cd "$(dirname "$0")" && pwd)" /usr/bin/python3 - "$joule" "$probe" "$work" <<'PY'
import io, os, struct, subprocess, sys, zlib
import numpy as np
from PIL import Image
joule, probe, work = sys.argv[1:]
mixed, good_only, bad_only = f"{work}/mixed", f"{work}/good", f"{work}/bad"
for d in (mixed, good_only, bad_only):
    os.mkdir(d)
rng = np.random.RandomState(27)
W, H = 13, 9
rgb = Image.fromarray(rng.randint(0, 256, size=(H, W, 3), dtype=np.uint8), "RGB")
grey = Image.fromarray(rng.randint(0, 256, size=(H, W), dtype=np.uint8), "L")
rgba = Image.fromarray(rng.randint(0, 256, size=(H, W, 4), dtype=np.uint8), "RGBA")


def encoded(img, fmt, **options):
    buf = io.BytesIO()
    img.save(buf, fmt, **options)
    return buf.getvalue()


good = {
    "rgb.png": encoded(rgb, "PNG"), "grey.png": encoded(grey, "PNG"), "alpha.png": encoded(rgba, "PNG"),
    "palette.png": encoded(rgb.convert("P"), "PNG"),
    "photo.jpg": encoded(rgb, "JPEG", quality=90), "progressive.jpeg": encoded(rgb, "JPEG", progressive=True),
    "rgb.bmp": encoded(rgb, "BMP"), "grey.bmp": encoded(grey, "BMP"),
    "anim.gif": encoded(rgb.convert("P"), "GIF", save_all=True, append_images=[grey.convert("P")]),
    "rgb.tga": encoded(rgb, "TGA"), "rle.tga": encoded(rgb, "TGA", compression="tga_rle"),
    "rgb.ppm": encoded(rgb, "PPM"), "grey.pgm": encoded(grey, "PPM"),
}


def half(data, header):  # cut in the middle of the pixel data
    return data[: header + (len(data) - header) // 2]


def ppm_header_length(data):  # "P6\n13 9\n255\n" as PIL writes it: three lines
    return len(b"\n".join(data.split(b"\n")[:3])) + 1


bmp_row = (24 * W + 31) // 32 * 4
png = good["rgb.png"]
idat = png.find(b"IDAT") - 4
idat_crc = idat + 8 + int.from_bytes(png[idat:idat + 4], "big")
flipped = bytearray(png)
flipped[idat_crc + 3] ^= 0x01
ppm, pgm = good["rgb.ppm"], good["grey.pgm"]


from png_chunks import chunks, with_idat  # tests/scripts/png_chunks.py (PYTHONPATH)


stream = b"".join(body for kind, body in chunks(png) if kind == b"IDAT")
rows = zlib.decompress(stream)
assert len(rows) == H * (1 + 3 * W)
fewer = zlib.compress(rows[:len(rows) // 2])
bad_check = stream[:-4] + bytes(b ^ 0x01 for b in stream[-4:])
iend_crc = bytearray(png)
iend_crc[-1] ^= 0x01
zstream = f"the zlib stream of its image data ({{}} bytes in 1 IDAT chunk(s) from byte {idat})"
pixels = f"its {W}x{H} pixels (colour type 2, 8 bits)"
# name: (bytes, what image_probe must say after "NAME: ")
damaged = {
    "cut.png": (png[: idat + 20], f"truncated PNG: chunk IDAT at byte {idat} needs"),
    "crc.png": (bytes(flipped), f"PNG chunk IDAT at byte {idat} is damaged: its CRC-32 is"),
    "noend.png": (png[:-12], f"truncated PNG: no IEND chunk (the file ends after chunk IDAT at byte {idat})"),
    "trailing.png": (png + b"junk", f"4 bytes after the IEND chunk (from byte {len(png)}): a PNG ends with IEND"),
    "noadler.png": (with_idat(png, stream[:-4]),
                    f"truncated PNG: {zstream.format(len(stream) - 4)} is cut short: it ends before the stream's end and "
                    f"Adler-32 check, after {len(rows)} of the {len(rows)} bytes of rows {pixels} need"),
    "halfstream.png": (with_idat(png, stream[:len(stream) // 2]),
                       f"truncated PNG: {zstream.format(len(stream) // 2)} is cut short: it ends before the stream's "
                       f"end and Adler-32 check, after "),
    "fewrows.png": (with_idat(png, fewer), f"truncated PNG: {zstream.format(len(fewer))} inflates to {len(rows) // 2} "
                    f"bytes, and {pixels} need {len(rows)} (each row with its filter byte)"),
    "adler.png": (with_idat(png, bad_check),
                  f"PNG image data is damaged: {zstream.format(len(stream))} does not inflate (zlib: incorrect data check)"),
    "after.png": (with_idat(png, stream + b"\0\0\0"),
                  f"PNG image data is damaged: 3 bytes follow the end of {zstream.format(len(stream) + 3)}"),
    "iendcrc.png": (bytes(iend_crc), f"PNG chunk IEND at byte {len(png) - 12} is damaged: its CRC-32 is"),
    "cut.jpg": (good["photo.jpg"][:-20], "truncated JPEG: no end-of-image marker (FFD9); the file ends inside the "
                "entropy-coded data of scan 1 "),
    "cutprogressive.jpeg": (good["progressive.jpeg"][:-20], "truncated JPEG: no end-of-image marker (FFD9); the "
                            "file ends inside the entropy-coded data of scan "),
    "cut.bmp": (half(good["rgb.bmp"], 54),
                f"truncated BMP: {W}x{H} pixels of 24 bits need {bmp_row * H} bytes of pixel data from byte 54, "
                f"the file has {(len(good['rgb.bmp']) - 54) // 2}"),
    "cut.gif": (half(good["anim.gif"], 0), "truncated GIF: in the image at byte "),
    "notrailer.gif": (good["anim.gif"][:-1], "truncated GIF: no trailer (3B); the file ends after 2 image(s)"),
    "cut.tga": (half(good["rgb.tga"], 18),
                f"truncated TGA: {W}x{H} pixels of 24 bits need {W * H * 3} bytes of pixel data from byte 18"),
    "cutrle.tga": (good["rle.tga"][:18 + 40], "truncated TGA: the run-length"),
    "cut.ppm": (half(ppm, ppm_header_length(ppm)),
                f"truncated PPM: {W}x{H} pixels of 3 sample(s) of 1 byte(s) need {W * H * 3} bytes of pixel data "
                f"from byte {ppm_header_length(ppm)}"),
    "cut.pgm": (half(pgm, ppm_header_length(pgm)),
                f"truncated PGM: {W}x{H} pixels of 1 sample(s) of 1 byte(s) need {W * H} bytes of pixel data "
                f"from byte {ppm_header_length(pgm)}"),
    "notes.png": (b"not an image\n", "cannot decode it as an image (stb_image: unknown image type)"),
    "empty.jpg": (b"", "an empty file, not an image"),
}
if os.geteuid() != 0:  # root reads any file
    damaged["unreadable.jpg"] = (good["photo.jpg"], "cannot open it (Permission denied)")
for folder in (mixed, good_only):
    for name, data in good.items():
        open(f"{folder}/{name}", "wb").write(data)
    os.symlink("rgb.png", f"{folder}/link-to-rgb.png")  # a link to an image is that image
for folder in (mixed, bad_only):
    for name, (data, _) in damaged.items():
        open(f"{folder}/{name}", "wb").write(data)
    if "unreadable.jpg" in damaged:
        os.chmod(f"{folder}/unreadable.jpg", 0)
    os.symlink("no-such-file.png", f"{folder}/dangling.png")
    os.symlink("loop.png", f"{folder}/loop.png")
    os.mkdir(f"{folder}/folder.gif")
    os.mkfifo(f"{folder}/pipe.bmp")  # never opened: reading it would wait for a writer
    open(f"{folder}/readme.txt", "w").write("not an image extension: not listed\n")
# What the folder listing says of the entries that are no files (image_probe only opens files).
listed = {"dangling.png": "a symbolic link to no-such-file.png, which does not exist",
          "loop.png": "a symbolic link to loop.png that cannot be followed (Too many levels of symbolic links)",
          "folder.gif": "a folder, not an image file", "pipe.bmp": "a FIFO (named pipe), not a regular file"}


def probe_file(path):
    return subprocess.run([probe, path, "3", "8", "bilinear", f"{work}/out.bin"], capture_output=True, text=True)


for name in sorted(good) + ["link-to-rgb.png"]:
    r = probe_file(f"{mixed}/{name}")
    assert r.returncode == 0, f"image_probe refused the good {name}: {r.stderr}"
for name, (_, reason) in sorted(damaged.items()):
    r = probe_file(f"{mixed}/{name}")
    assert r.returncode == 1, f"image_probe accepted the damaged {name} (exit {r.returncode})"
    assert f"{mixed}/{name}: {reason}" in r.stderr, f"{name}: expected '{reason}', got: {r.stderr}"
r = probe_file(f"{mixed}/dangling.png")
assert r.returncode == 1 and "dangling.png: cannot open it (No such file or directory)" in r.stderr, r.stderr
print(f"image_probe: {len(good) + 1} good files read, {len(damaged) + 1} damaged ones refused with the reason")

bad_names = sorted(list(damaged) + list(listed))
reasons = {**{n: r for n, (_, r) in damaged.items()}, **listed}


def caption(folder, *flags):
    out = f"{work}/captions.csv"
    if os.path.exists(out):
        os.remove(out)
    r = subprocess.run([joule, "caption", "--checkpoint", f"{work}/ck.h5", "--images", folder, "--out", out, *flags],
                       capture_output=True, text=True)
    return r, os.path.exists(out)


def lists_bad(stderr, folder, names):
    for name in names:
        assert f"{folder}/{name}: {reasons[name]}" in stderr, f"{name} ({reasons[name]}) not named in: {stderr}"


# By default: stop before captioning anything, naming every bad file with its reason.
r, wrote = caption(mixed)
assert r.returncode == 1, f"caption of a folder with damaged images exited {r.returncode}: {r.stderr}"
assert r.stdout == "" and not wrote, f"a refused caption wrote output: {r.stdout}"
assert f"{len(bad_names)} image file(s) damaged or unreadable" in r.stderr and "--skip-bad-images" in r.stderr, r.stderr
lists_bad(r.stderr, mixed, bad_names)

# --skip-bad-images: the good files captioned as in a folder of only them, the bad ones listed.
r, wrote = caption(mixed, "--skip-bad-images")
assert r.returncode == 0, f"caption --skip-bad-images failed: {r.stderr}"
captioned = [line.split("\t")[0] for line in r.stdout.splitlines()]
good_names = sorted(list(good) + ["link-to-rgb.png"])
assert captioned == good_names, f"captioned {captioned}, expected the good files {good_names}"
assert wrote, "no --out file with --skip-bad-images"
assert f"skipped {len(bad_names)} damaged or unreadable image file(s) of {len(bad_names) + len(good_names)} in {mixed}" \
    in r.stderr, r.stderr
lists_bad(r.stderr.split("skipped ", 1)[1], mixed, bad_names)  # in the list at the end
clean, _ = caption(good_only)
assert clean.returncode == 0 and "skipped" not in clean.stderr, clean.stderr
assert clean.stdout == r.stdout, f"the good files' captions differ with bad ones beside them:\n{clean.stdout}\n{r.stdout}"

# --limit N: the files up to the N-th good one are looked at, no further.
r, _ = caption(mixed, "--skip-bad-images", "--limit", "3")
assert r.returncode == 0, r.stderr
assert [line.split("\t")[0] for line in r.stdout.splitlines()] == good_names[:3], r.stdout
seen_bad = [n for n in bad_names if n < good_names[2]]
assert seen_bad and f"skipped {len(seen_bad)} damaged or unreadable image file(s) of {len(seen_bad) + 3} in {mixed}" \
    in r.stderr, r.stderr
lists_bad(r.stderr, mixed, seen_bad)
assert not any(f"{mixed}/{n}:" in r.stderr for n in bad_names if n > good_names[2]), r.stderr

# Nothing to caption is an error, with the flag or without; the flag is for folders only.
for flags in ([], ["--skip-bad-images"]):
    r, wrote = caption(bad_only, *flags)
    assert r.returncode == 1 and r.stdout == "" and not wrote, f"{flags}: exit {r.returncode}, {r.stdout}"
    assert f"no image to caption: all {len(bad_names)} image file(s) are damaged or unreadable" in r.stderr, r.stderr
    lists_bad(r.stderr, bad_only, bad_names)
r = subprocess.run([joule, "caption", "--checkpoint", f"{work}/ck.h5", "--data", f"{work}/data.h5", "--skip-bad-images"],
                   capture_output=True, text=True)
assert r.returncode != 0 and "--skip-bad-images requires --images" in r.stderr, r.stderr
print(f"joule caption: stops at {len(bad_names)} bad files by default; --skip-bad-images captions the "
      f"{len(good_names)} good ones and lists the bad")
PY
echo "damaged images: ok"
