#!/usr/bin/python3
"""Converts a folder of images plus a captions file into joule's dataset format (HDF5).

    /usr/bin/python3 apps/scripts/images_to_h5.py IMAGE_DIR CAPTIONS.tsv OUT.h5 \\
        --image-size 32 --text-len 36 [--frames 1] [--channels 1|3|4] \\
        [--resize bilinear|nearest|none] [--shuffle SEED] [--eval-fraction F]

CAPTIONS.tsv: one sample per line, "file<TAB>caption". With --frames F > 1 a sample is a video
clip: "file1,file2,...,fileF<TAB>caption" (exactly F frames). Captions are UTF-8 bytes; each
must fit in text-len - 2 bytes (BOS and EOS are added, PAD fills the rest).

Images are converted to --channels (1: grayscale, PIL mode "L"; 3: RGB, the default; 4: RGBA;
set the model's model.channels to the same number) and then brought to image-size x image-size
by --resize: bilinear (the default; smooth, blurs small images when upscaling), nearest (every
output pixel is a source pixel: sharp pixel art and small digits stay exact) or none (no
resizing; every image must already be image-size x image-size, else the file and its size are
named in an error).

joule holds out the LAST data.eval_fraction of the samples (in file order) for evaluation. A
captions file sorted by class would give a held-out set of the last classes only, which the
model never saw in training: --shuffle SEED (0..2^32-1) writes the samples in a random order,
the same for the same seed with any NumPy version. The converter prints how many samples will be
held out, for --eval-fraction F (default: data.eval_fraction of joule's default configuration,
apps/configs/tiny.json; pass your configuration's value), and warns that the captions look
sorted when the held-out samples hold fewer than half as many distinct captions as that many
samples drawn at random would be expected to hold.

Writes /images uint8 [N, F, C, H, W], /tokens int32 [N, T] and the root attributes joule's
reader checks (docs/datasets.md describes the format). Needs Debian's python3-h5py and python3-pil.
"""
import argparse
import json
import math
import os
import sys

import h5py
import numpy as np
from PIL import Image

BOS, EOS, PAD = 256, 257, 258
MODES = {1: "L", 3: "RGB", 4: "RGBA"}
FILTERS = {"bilinear": Image.BILINEAR, "nearest": Image.NEAREST, "none": None}
# joule's default configuration (the one embedded in the binary), for the default --eval-fraction.
DEFAULT_CONFIG = os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir, "configs", "tiny.json")


def encode(caption, text_len, where):
    data = caption.encode("utf-8")
    if len(data) + 2 > text_len:
        sys.exit(f"{where}: caption needs {len(data) + 2} tokens with BOS/EOS, more than --text-len {text_len}")
    return [BOS] + list(data) + [EOS] + [PAD] * (text_len - len(data) - 2)


def held_out_count(n, fraction):
    """The number of samples joule holds out: the same formula as held_out_count in
    core/train/trainer.cpp, clamp(llround(n * fraction), 1, n > 1 ? n - 1 : 1). std::llround
    rounds halves away from zero (Python's round() rounds them to even), so it is spelled out; for
    x >= 0, x - floor(x) is exact in floating point."""
    x = float(n) * fraction
    k = math.floor(x)
    if x - k >= 0.5:
        k += 1
    return min(max(k, 1), n - 1 if n > 1 else 1)


def expected_distinct(counts, n, m):
    """How many distinct captions a random set of m of the n samples holds on average: caption c,
    on counts[c] samples, is missing from it with probability C(n - counts[c], m) / C(n, m)."""
    def log_choose(a, b):
        return math.lgamma(a + 1) - math.lgamma(b + 1) - math.lgamma(a - b + 1)
    expected = 0.0
    for c in counts.values():
        missing = 0.0 if n - c < m else math.exp(log_choose(n - c, m) - log_choose(n, m))
        expected += 1.0 - missing
    return expected


def eval_fraction(text):
    try:
        f = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number")
    # The range joule's configuration parser accepts for data.eval_fraction (core/model/config.cpp).
    if not 0.0 < f <= 0.9:
        raise argparse.ArgumentTypeError(f"{text} is outside (0, 0.9], the range of data.eval_fraction")
    return f


def seed(text):
    try:
        s = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number")
    if not 0 <= s < 2**32:
        raise argparse.ArgumentTypeError(f"{text} is outside 0..{2**32 - 1}")
    return s


def default_eval_fraction():
    try:
        with open(DEFAULT_CONFIG, encoding="utf-8") as f:
            return float(json.load(f)["data"]["eval_fraction"])
    except (OSError, ValueError, KeyError, TypeError) as e:
        sys.exit(f"cannot read data.eval_fraction from joule's default configuration "
                 f"{os.path.normpath(DEFAULT_CONFIG)} ({e}); pass --eval-fraction F")


def read_lines(f, path):
    try:
        yield from f
    except UnicodeDecodeError as e:
        sys.exit(f"{path}: not UTF-8 text ({e})")


def load_image(path, mode, size, resize, where):
    """One frame as uint8 [C, H, W]."""
    try:
        with Image.open(path) as img:
            img = img.convert(mode)  # reads the whole file: a damaged one fails here
    except (OSError, ValueError, Image.DecompressionBombError) as e:
        sys.exit(f"{where}: cannot read image {path}: {e}")
    if resize == "none":
        if img.size != (size, size):
            sys.exit(f"{where}: {path} is {img.size[0]}x{img.size[1]} pixels (width x height); "
                     f"--resize none needs {size}x{size} (--image-size {size}): pass --resize nearest or bilinear")
    else:
        img = img.resize((size, size), FILTERS[resize])
    pixels = np.asarray(img, dtype=np.uint8)
    if pixels.ndim == 2:  # mode "L"
        pixels = pixels[:, :, None]
    return pixels.transpose(2, 0, 1)  # HWC -> CHW


def report_split(captions, fraction, fraction_source):
    """Says which samples joule will hold out, and warns when the captions look sorted."""
    n = len(captions)
    m = held_out_count(n, fraction)
    print(f"the last {m} of the {n} samples ({fraction_source} {fraction:g}) will be the held-out set")
    if n < 2:
        print("note: joule train needs at least 2 samples (one to train on, one held out)")
        return
    counts = {}
    for c in captions:
        counts[c] = counts.get(c, 0) + 1
    tail = set(captions[n - m:])
    expected = expected_distinct(counts, n, m)
    if len(tail) < expected / 2:
        unseen = len(tail - set(captions[:n - m]))
        unseen = f"; {unseen} of them never occur in the {n - m} training samples" if unseen else ""
        print(f"warning: the captions look sorted: the held-out set (the last {m} samples) holds "
              f"{len(tail)} distinct caption(s) of the {len(counts)} in the file, where {m} samples "
              f"drawn at random would hold about {expected:.1f}{unseen}. Pass --shuffle SEED to write "
              f"the samples in a random order.", file=sys.stderr)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("image_dir")
    ap.add_argument("captions")
    ap.add_argument("out")
    ap.add_argument("--image-size", type=int, required=True)
    ap.add_argument("--text-len", type=int, required=True)
    ap.add_argument("--frames", type=int, default=1)
    ap.add_argument("--channels", type=int, choices=sorted(MODES), default=3,
                    help="1 grayscale, 3 RGB, 4 RGBA (default 3); the model's model.channels")
    ap.add_argument("--resize", choices=list(FILTERS), default="bilinear",
                    help="how images get to image-size x image-size (default bilinear); none: they must have it")
    ap.add_argument("--shuffle", type=seed, metavar="SEED",
                    help="write the samples in a random order, the same for the same seed")
    ap.add_argument("--eval-fraction", type=eval_fraction, metavar="F",
                    help="your configuration's data.eval_fraction, for the held-out report "
                         "(default: the default configuration's)")
    args = ap.parse_args()
    if args.image_size < 1 or args.text_len < 3 or args.frames < 1:
        sys.exit("--image-size >= 1, --text-len >= 3 and --frames >= 1 are required")
    if args.eval_fraction is None:
        fraction, fraction_source = default_eval_fraction(), "data.eval_fraction of the default configuration,"
    else:
        fraction, fraction_source = args.eval_fraction, "--eval-fraction"

    images, tokens, captions = [], [], []
    try:
        f = open(args.captions, encoding="utf-8")
    except OSError as e:
        sys.exit(f"cannot read the captions file: {e}")
    with f:
        for number, line in enumerate(read_lines(f, args.captions), 1):
            line = line.rstrip("\n")
            if not line.strip():
                continue
            where = f"{args.captions}:{number}"
            if "\t" not in line:
                sys.exit(f"{where}: expected 'file<TAB>caption'")
            files, caption = line.split("\t", 1)
            names = files.split(",")
            if len(names) != args.frames:
                sys.exit(f"{where}: {len(names)} frame(s) listed, --frames is {args.frames}")
            clip = [load_image(os.path.join(args.image_dir, name), MODES[args.channels], args.image_size,
                               args.resize, where) for name in names]
            images.append(np.stack(clip))
            tokens.append(encode(caption, args.text_len, where))
            captions.append(caption)
    if not images:
        sys.exit(f"{args.captions}: no samples")

    order = np.arange(len(images))
    if args.shuffle is not None:
        # NumPy's legacy generator: its stream is frozen (NEP 19), so a seed gives the same order
        # with every NumPy version.
        order = np.random.RandomState(args.shuffle).permutation(len(images))
    try:
        with h5py.File(args.out, "w") as out:
            out.create_dataset("images", data=np.stack([images[i] for i in order]).astype(np.uint8))
            out.create_dataset("tokens", data=np.asarray([tokens[i] for i in order], dtype=np.int32))
            n = len(images)
            for key, value in dict(count=n, frames=args.frames, channels=args.channels, height=args.image_size,
                                   width=args.image_size, text_len=args.text_len).items():
                out.attrs[key] = np.int64(value)
            out.attrs["format"] = "joule-captions-v1"
    except OSError as e:
        sys.exit(f"cannot write {args.out}: {e}")
    shuffled = "" if args.shuffle is None else f", shuffled with seed {args.shuffle}"
    print(f"wrote {len(images)} samples ({args.frames} frame(s) of {args.channels}x{args.image_size}x{args.image_size}, "
          f"text length {args.text_len}{shuffled}) to {args.out}")
    report_split([captions[i] for i in order], fraction, fraction_source)
    return 0


if __name__ == "__main__":
    sys.exit(main())
