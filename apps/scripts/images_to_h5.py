#!/usr/bin/python3
"""Converts a folder of images plus a captions file into joule's dataset format (HDF5).

    /usr/bin/python3 apps/scripts/images_to_h5.py IMAGE_DIR CAPTIONS.tsv OUT.h5 \\
        --image-size 32 --text-len 36 [--frames 1]

CAPTIONS.tsv: one sample per line, "file<TAB>caption". With --frames F > 1 a sample is a video
clip: "file1,file2,...,fileF<TAB>caption" (exactly F frames). Images are converted to RGB and
resized (bilinear) to image-size x image-size. Captions are UTF-8 bytes; each must fit in
text-len - 2 bytes (BOS and EOS are added, PAD fills the rest).

Writes /images uint8 [N, F, 3, H, W], /tokens int32 [N, T] and the root attributes joule's
reader checks (see the README's dataset format). Needs Debian's python3-h5py and python3-pil.
"""
import argparse
import os
import sys

import h5py
import numpy as np
from PIL import Image

BOS, EOS, PAD = 256, 257, 258


def encode(caption, text_len, where):
    data = caption.encode("utf-8")
    if len(data) + 2 > text_len:
        sys.exit(f"{where}: caption needs {len(data) + 2} tokens with BOS/EOS, more than --text-len {text_len}")
    return [BOS] + list(data) + [EOS] + [PAD] * (text_len - len(data) - 2)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("image_dir")
    ap.add_argument("captions")
    ap.add_argument("out")
    ap.add_argument("--image-size", type=int, required=True)
    ap.add_argument("--text-len", type=int, required=True)
    ap.add_argument("--frames", type=int, default=1)
    args = ap.parse_args()
    if args.image_size < 1 or args.text_len < 3 or args.frames < 1:
        sys.exit("--image-size >= 1, --text-len >= 3 and --frames >= 1 are required")

    images, tokens = [], []
    with open(args.captions, encoding="utf-8") as f:
        for number, line in enumerate(f, 1):
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
            clip = []
            for name in names:
                path = os.path.join(args.image_dir, name)
                try:
                    img = Image.open(path).convert("RGB").resize((args.image_size, args.image_size), Image.BILINEAR)
                except OSError as e:
                    sys.exit(f"{where}: cannot read image {path}: {e}")
                clip.append(np.asarray(img, dtype=np.uint8).transpose(2, 0, 1))  # HWC -> CHW
            images.append(np.stack(clip))
            tokens.append(encode(caption, args.text_len, where))
    if not images:
        sys.exit(f"{args.captions}: no samples")

    with h5py.File(args.out, "w") as out:
        out.create_dataset("images", data=np.stack(images).astype(np.uint8))
        out.create_dataset("tokens", data=np.asarray(tokens, dtype=np.int32))
        n = len(images)
        for key, value in dict(count=n, frames=args.frames, channels=3, height=args.image_size,
                               width=args.image_size, text_len=args.text_len).items():
            out.attrs[key] = np.int64(value)
        out.attrs["format"] = "joule-captions-v1"
    print(f"wrote {len(images)} samples to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
