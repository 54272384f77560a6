#!/usr/bin/env bash
# apps/scripts/images_to_h5.py's options end to end, on generated PNGs (4x4, of several PIL modes):
#   --channels 1|3|4  the pixels in the HDF5 are the source images converted by PIL (L, RGB, RGBA),
#                     the channels attribute follows, `joule data info` accepts the file against a
#                     configuration with that model.channels and refuses it against another;
#   --resize          nearest: 4x4 -> 8x8 repeats every source pixel 2x2; bilinear (the default): PIL's
#                     bilinear filter, not nearest; none: sizes kept when they match, an image of
#                     another size refused naming the file and its size;
#   --shuffle SEED    the same samples (image with its caption) in another order, the same order for
#                     the same seed, another for another seed;
#   held-out report   the count the converter prints is the one `joule train` holds out (checked at
#                     2.5 samples, where rounding half away from zero and Python's round differ), and
#                     the default fraction is the default configuration's;
#   sorted warning    printed for captions sorted by class, not for the same file shuffled, nor for
#                     distinct captions;
#   bad input         unknown --channels/--resize values, a negative seed, an out-of-range fraction
#                     and an unreadable image get one-line errors (no traceback).
set -euo pipefail
joule="$1"; repo="$2"
conv="$repo/apps/scripts/images_to_h5.py"
py=/usr/bin/python3
work="$(mktemp -d)"; trap 'rm -rf "$work"' EXIT
img="$work/img"; mkdir "$img"

$py - "$img" "$work" <<'PY'
import sys
import numpy as np
from PIL import Image
img, work = sys.argv[1:]
rng = np.random.RandomState(7)
# Six 4x4 images of different PIL modes (the converter must convert each to L, RGB or RGBA).
with open(f"{work}/small.tsv", "w") as f:
    for i, mode in enumerate(["RGBA", "RGB", "L", "P", "LA", "RGBA"]):
        bands = len(Image.new(mode, (1, 1)).getbands())
        a = rng.randint(0, 256, size=(4, 4, bands), dtype=np.uint8)
        if mode == "P":
            im = Image.fromarray(a[:, :, 0], "L").convert("P")
            im.putpalette(list(rng.randint(0, 256, size=768, dtype=np.uint8)))
        else:
            im = Image.fromarray(a[:, :, 0] if bands == 1 else a, mode)
        im.save(f"{img}/s{i}.png")
        f.write(f"s{i}.png\tsample {i}\n")
# Twenty distinct gray images of four classes, the captions file sorted by class.
with open(f"{work}/sorted.tsv", "w") as f:
    for k in range(4):
        for i in range(5):
            Image.fromarray(rng.randint(0, 256, size=(4, 4), dtype=np.uint8), "L").save(f"{img}/c{k}_{i}.png")
            f.write(f"c{k}_{i}.png\tclass {k}\n")
Image.new("RGB", (5, 4), (1, 2, 3)).save(f"{img}/odd.png")
with open(f"{work}/odd.tsv", "w") as f:
    f.write("s0.png\tfits\nodd.png\tdoes not fit\n")
with open(f"{img}/broken.png", "wb") as f:
    f.write(b"\x89PNG\r\n\x1a\n not really")
with open(f"{work}/broken.tsv", "w") as f:
    f.write("s0.png\tfine\nbroken.png\tbroken\n")
PY

cat > "$work/check.py" <<'PY'
import sys
import h5py
import numpy as np
from PIL import Image

MODES = {1: "L", 3: "RGB", 4: "RGBA"}


def source(img, name, mode):
    a = np.asarray(Image.open(f"{img}/{name}").convert(mode), dtype=np.uint8)
    return (a[:, :, None] if a.ndim == 2 else a).transpose(2, 0, 1)


def rows(tsv):
    return [line.rstrip("\n").split("\t", 1) for line in open(tsv)]


def captions(tokens):
    out = []
    for t in tokens:
        assert t[0] == 256, f"no BOS: {t}"
        end = list(t).index(257)
        out.append(bytes(int(x) for x in t[1:end]).decode())
    return out


def check_pixels(h5, img, tsv, channels, resize):
    """The file holds the captions file's samples in order; each image is the source converted to
    the mode (and resized as asked)."""
    with h5py.File(h5, "r") as f:
        images, tokens = f["images"][...], f["tokens"][...]
        attrs = {k: int(f.attrs[k]) for k in ("count", "frames", "channels", "height", "width")}
    samples = rows(tsv)
    size = images.shape[-1]
    assert images.shape == (len(samples), 1, channels, size, size), images.shape
    assert attrs == dict(count=len(samples), frames=1, channels=channels, height=size, width=size), attrs
    assert captions(tokens) == [c for _, c in samples], captions(tokens)
    for i, (name, _) in enumerate(samples):
        src = source(img, name, MODES[channels])
        if resize == "none":
            want = src
        elif resize == "nearest":  # every source pixel repeated (size / 4) x (size / 4) times
            r = size // src.shape[1]
            want = np.repeat(np.repeat(src, r, axis=1), r, axis=2)
        else:  # PIL's bilinear filter, which must differ from nearest on these random images
            im = Image.open(f"{img}/{name}").convert(MODES[channels])
            want = np.asarray(im.resize((size, size), Image.BILINEAR), dtype=np.uint8)
            want = (want[:, :, None] if want.ndim == 2 else want).transpose(2, 0, 1)
            near = np.asarray(im.resize((size, size), Image.NEAREST), dtype=np.uint8)
            near = (near[:, :, None] if near.ndim == 2 else near).transpose(2, 0, 1)
            assert not np.array_equal(images[i, 0], near), f"{name}: bilinear gave the nearest-neighbour pixels"
        assert np.array_equal(images[i, 0], want), f"{name}: pixels differ from PIL's {MODES[channels]} {resize}"
    print(f"{h5}: {len(samples)} samples of {channels}x{size}x{size} ({resize}) match the sources")


def same(a, b):
    with h5py.File(a, "r") as f, h5py.File(b, "r") as g:
        assert np.array_equal(f["images"][...], g["images"][...]) and np.array_equal(f["tokens"][...], g["tokens"][...]), \
            f"{a} and {b} differ"


def samples(h5):
    with h5py.File(h5, "r") as f:
        return [(im.tobytes(), tk.tobytes()) for im, tk in zip(f["images"][...], f["tokens"][...])]


def shuffled(plain, s1, s1_again, s2):
    p, a, b, c = samples(plain), samples(s1), samples(s1_again), samples(s2)
    assert len(set(p)) == len(p), "the test's samples must be distinct"
    assert sorted(a) == sorted(p) and sorted(c) == sorted(p), "shuffling changed the samples (or their pairing)"
    assert a != p, "--shuffle 1 kept the file order"
    assert a == b, "--shuffle 1 gave two different orders"
    assert c != a, "--shuffle 2 gave the order of --shuffle 1"
    print("shuffle: same samples, another order, reproducible per seed")


globals()[sys.argv[1]](*[int(x) if x.isdigit() else x for x in sys.argv[2:]])
PY

# A configuration matching a converted file (channels, image size), for `joule data info` and `joule train`.
config() {  # config OUT.json DATA.h5 CHANNELS IMAGE_SIZE EVAL_FRACTION
  cat > "$1" <<JSON
{"model": {"layers": 1, "d_model": 32, "heads": 2, "mlp_ratio": 2, "image_size": $4, "patch_size": 4,
           "channels": $3, "frames": 1, "text_len": 12, "tie_embeddings": true},
 "data": {"path": "$2", "eval_fraction": $5},
 "train": {"batch": 2, "micro_batch": 2, "steps": 1, "lr": 0.001, "min_lr": 0.0, "warmup_steps": 0,
           "weight_decay": 0.0, "beta1": 0.9, "beta2": 0.95, "grad_clip": 1.0, "eval_every": 0,
           "eval_samples": 1, "log_every": 1, "seed": 1, "recompute_depth": 0}}
JSON
}
expect_error() {  # expect_error 'MESSAGE' ARGS...: the converter fails with MESSAGE on stderr, without a traceback
  local want="$1"; shift
  if $py "$conv" "$@" >"$work/out" 2>"$work/err"; then
    echo "accepted: $*"; exit 1
  fi
  grep -qF -- "$want" "$work/err" || { echo "expected '$want', got:"; cat "$work/err"; exit 1; }
  if grep -q Traceback "$work/err"; then cat "$work/err"; exit 1; fi
  return 0
}

# --channels 1|3|4 with --resize none (4x4 images kept as they are).
for c in 1 3 4; do
  $py "$conv" "$img" "$work/small.tsv" "$work/c$c.h5" --image-size 4 --text-len 12 --channels $c --resize none \
    >"$work/out" 2>"$work/err"
  grep -qF "wrote 6 samples (1 frame(s) of ${c}x4x4, text length 12) to $work/c$c.h5" "$work/out"
  $py "$work/check.py" check_pixels "$work/c$c.h5" "$img" "$work/small.tsv" $c none
  config "$work/cfg$c.json" "$work/c$c.h5" $c 4 0.5
  "$joule" data info "$work/c$c.h5" --config "$work/cfg$c.json" >"$work/info"
  grep -qF "6 samples, 1 frame(s) of ${c}x4x4, text length 12, matches the configuration" "$work/info"
  # Distinct captions: no sorted warning.
  if grep -q "look sorted" "$work/err"; then cat "$work/err"; exit 1; fi
done
# ... and a model of other channels refuses it.
if "$joule" data info "$work/c1.h5" --config "$work/cfg3.json" 2>"$work/err"; then
  echo "a 1-channel file was accepted for model.channels 3"; exit 1
fi
grep -qF "channels is 1 but the model's model.channels is 3" "$work/err"
# The default is 3 channels, bilinear (which keeps a 4x4 image at 4x4 unchanged).
$py "$conv" "$img" "$work/small.tsv" "$work/default.h5" --image-size 4 --text-len 12 >/dev/null
$py "$work/check.py" same "$work/default.h5" "$work/c3.h5"

# --resize nearest and bilinear, 4x4 -> 8x8; bilinear is the default.
$py "$conv" "$img" "$work/small.tsv" "$work/nearest.h5" --image-size 8 --text-len 12 --channels 4 --resize nearest >/dev/null
$py "$work/check.py" check_pixels "$work/nearest.h5" "$img" "$work/small.tsv" 4 nearest
$py "$conv" "$img" "$work/small.tsv" "$work/bilinear.h5" --image-size 8 --text-len 12 --channels 1 --resize bilinear >/dev/null
$py "$work/check.py" check_pixels "$work/bilinear.h5" "$img" "$work/small.tsv" 1 bilinear
$py "$conv" "$img" "$work/small.tsv" "$work/default8.h5" --image-size 8 --text-len 12 --channels 1 >/dev/null
$py "$work/check.py" same "$work/default8.h5" "$work/bilinear.h5"

# --resize none refuses an image of another size, naming it; the other options resize it.
expect_error "odd.png is 5x4 pixels (width x height); --resize none needs 4x4" \
  "$img" "$work/odd.tsv" "$work/odd.h5" --image-size 4 --text-len 16 --resize none
$py "$conv" "$img" "$work/odd.tsv" "$work/odd.h5" --image-size 4 --text-len 16 --resize nearest >/dev/null
expect_error "cannot read image $img/broken.png" "$img" "$work/broken.tsv" "$work/b.h5" --image-size 4 --text-len 12
# (Python 3.13 quotes the value: "invalid choice: '2'"; 3.11 does not.)
expect_error "argument --channels: invalid choice: " "$img" "$work/small.tsv" "$work/x.h5" --image-size 4 --text-len 12 --channels 2
expect_error "argument --resize: invalid choice: 'bicubic'" "$img" "$work/small.tsv" "$work/x.h5" --image-size 4 --text-len 12 --resize bicubic
expect_error "argument --shuffle: -1 is outside" "$img" "$work/small.tsv" "$work/x.h5" --image-size 4 --text-len 12 --shuffle -1
expect_error "argument --eval-fraction: 0.95 is outside (0, 0.9]" "$img" "$work/small.tsv" "$work/x.h5" --image-size 4 --text-len 12 --eval-fraction 0.95

# --shuffle: the same samples in another order, reproducible per seed.
opts=(--image-size 4 --text-len 12 --channels 1 --resize none)
$py "$conv" "$img" "$work/sorted.tsv" "$work/plain.h5" "${opts[@]}" --eval-fraction 0.25 >"$work/plain.out" 2>"$work/plain.err"
$py "$conv" "$img" "$work/sorted.tsv" "$work/s1.h5" "${opts[@]}" --eval-fraction 0.25 --shuffle 1 >"$work/s1.out" 2>"$work/s1.err"
$py "$conv" "$img" "$work/sorted.tsv" "$work/s1b.h5" "${opts[@]}" --shuffle 1 >/dev/null 2>&1
$py "$conv" "$img" "$work/sorted.tsv" "$work/s2.h5" "${opts[@]}" --shuffle 2 >/dev/null 2>&1
$py "$work/check.py" shuffled "$work/plain.h5" "$work/s1.h5" "$work/s1b.h5" "$work/s2.h5"
grep -qF "shuffled with seed 1) to $work/s1.h5" "$work/s1.out"

# The sorted warning: the last 5 of 20 samples sorted by class hold 1 caption where a random 5
# would hold about 3.2 of the 4; shuffled, they hold more.
grep -qF "the last 5 of the 20 samples (--eval-fraction 0.25) will be the held-out set" "$work/plain.out"
grep -qF "warning: the captions look sorted: the held-out set (the last 5 samples) holds 1 distinct caption(s) of the 4 in the file, where 5 samples drawn at random would hold about 3.2; 1 of them never occur in the 15 training samples. Pass --shuffle SEED" "$work/plain.err"
grep -qF "the last 5 of the 20 samples (--eval-fraction 0.25) will be the held-out set" "$work/s1.out"
if grep -q "look sorted" "$work/s1.err"; then cat "$work/s1.err"; exit 1; fi

# The held-out count is the trainer's: 20 x 0.125 = 2.5 samples, which joule rounds to 3 (half away
# from zero; Python's round() would say 2).
$py "$conv" "$img" "$work/sorted.tsv" "$work/s3.h5" "${opts[@]}" --shuffle 3 --eval-fraction 0.125 >"$work/out"
grep -qF "the last 3 of the 20 samples (--eval-fraction 0.125) will be the held-out set" "$work/out"
config "$work/cfg_split.json" "$work/s3.h5" 1 4 0.125
"$joule" train --config "$work/cfg_split.json" >"$work/train.out"
grep -qF "17 train / 3 held-out samples" "$work/train.out" || { cat "$work/train.out"; exit 1; }
# Without --eval-fraction the default configuration's data.eval_fraction is used and named.
default_fraction="$($py -c 'import json, sys; print(format(json.load(open(sys.argv[1]))["data"]["eval_fraction"], "g"))' \
  "$repo/apps/configs/tiny.json")"
$py "$conv" "$img" "$work/sorted.tsv" "$work/d.h5" "${opts[@]}" --shuffle 3 >"$work/out"
grep -qF "(data.eval_fraction of the default configuration, $default_fraction) will be the held-out set" "$work/out"
$py "$conv" "$img" "$work/sorted.tsv" "$work/d.h5" "${opts[@]}" --shuffle 3 --eval-fraction "$default_fraction" >"$work/out2"
[ "$(grep -o 'the last [0-9]* of' "$work/out")" = "$(grep -o 'the last [0-9]* of' "$work/out2")" ]
echo "converter options: ok"
