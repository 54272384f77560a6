#!/usr/bin/env bash
# Your own data end to end: a folder of generated 8x8 gray PNGs of four classes (captions = class
# names, the captions file sorted by class) is converted with --channels 1 --resize none
# --shuffle 1, a tiny model is trained on it with a checkpoint, and `joule caption` captions
#   - the held-out set of the dataset (--held-out, CSV and HDF5 output): exactly the last
#     held_out_count samples, in order; each reference is the dataset's caption; correct is
#     prediction == reference on every row; the printed lines and summary agree with the file; the
#     share exactly right equals the trainer's closing evaluation of the same weights;
#   - a folder of image files (--images DIR --resize none): one line per image file, sorted by
#     name, other files skipped; each prediction equals the one for the same image in the dataset;
#     an image of another size is refused with --resize none.
set -euo pipefail
joule="$1"; repo="$2"
py=/usr/bin/python3
work="$(mktemp -d)"; trap 'rm -rf "$work"' EXIT
img="$work/images"; mkdir "$img" "$work/few" "$work/wrong"

$py - "$img" "$work" <<'PY'
import sys
import numpy as np
from PIL import Image
img, work = sys.argv[1:]
rng = np.random.RandomState(5)
seen = set()
with open(f"{work}/captions.tsv", "w") as f:
    for cls in ["bar", "column", "dot", "empty"]:
        for i in range(12):
            while True:
                a = rng.randint(0, 40, size=(8, 8))
                p = rng.randint(1, 7)
                if cls == "bar":
                    a[p, :] = 230
                elif cls == "column":
                    a[:, p] = 230
                elif cls == "dot":
                    q = rng.randint(1, 6)
                    a[p - 1:p + 1, q:q + 2] = 230
                if a.tobytes() not in seen:  # distinct images: a prediction can be traced to its file
                    break
            seen.add(a.tobytes())
            Image.fromarray(a.astype(np.uint8), "L").save(f"{img}/{cls}{i:02d}.png")
            f.write(f"{cls}{i:02d}.png\t{cls}\n")
Image.new("L", (9, 8)).save(f"{work}/wrong/big.png")
PY

# Convert: gray, sizes kept, shuffled; the held-out report for the configuration's fraction.
$py "$repo/apps/scripts/images_to_h5.py" "$img" "$work/captions.tsv" "$work/data.h5" \
  --image-size 8 --text-len 10 --channels 1 --resize none --shuffle 1 --eval-fraction 0.25 \
  >"$work/convert.out" 2>"$work/convert.err"
cat "$work/convert.out" "$work/convert.err"
grep -qF "the last 12 of the 48 samples (--eval-fraction 0.25) will be the held-out set" "$work/convert.out"
if grep -q "look sorted" "$work/convert.err"; then exit 1; fi

# Train a tiny model a few steps (75% of the held-out captions right on the CPU build); the
# checkpoint is written after the last step, and the closing evaluation covers the whole held-out
# set (eval_samples >= 12).
cat > "$work/cfg.json" <<JSON
{"model": {"layers": 2, "d_model": 32, "heads": 2, "mlp_ratio": 2, "image_size": 8, "patch_size": 4,
           "channels": 1, "frames": 1, "text_len": 10, "tie_embeddings": true},
 "data": {"path": "$work/data.h5", "eval_fraction": 0.25},
 "train": {"batch": 8, "micro_batch": 4, "steps": 100, "lr": 0.005, "min_lr": 0.001, "warmup_steps": 5,
           "weight_decay": 0.0, "beta1": 0.9, "beta2": 0.95, "grad_clip": 1.0, "eval_every": 0,
           "eval_samples": 64, "log_every": 20, "seed": 1, "recompute_depth": 0,
           "checkpoint": "$work/ck.h5"}}
JSON
"$joule" train --config "$work/cfg.json" >"$work/train.out"
cat "$work/train.out"
grep -qF "36 train / 12 held-out samples" "$work/train.out"
trainer_accuracy="$(grep -o 'exact caption accuracy [0-9.]*% (12 samples)' "$work/train.out" | tail -n 1 | grep -o '[0-9.]*%' | tr -d %)"
[ -n "$trainer_accuracy" ] && [ -f "$work/ck.h5" ]

# Caption the held-out set, to CSV and to HDF5.
"$joule" caption --checkpoint "$work/ck.h5" --data "$work/data.h5" --held-out --out "$work/preds.csv" >"$work/caption.out"
"$joule" caption --checkpoint "$work/ck.h5" --data "$work/data.h5" --held-out --out "$work/preds.h5" >/dev/null
$py - "$work" "$trainer_accuracy" <<'PY'
import csv, io, re, sys
import h5py
import numpy as np
work, trainer_accuracy = sys.argv[1], float(sys.argv[2])


def text(b):
    return b.decode("utf-8", "surrogateescape") if isinstance(b, (bytes, np.bytes_)) else str(b)


def decode(tokens):  # the caption: the bytes after BOS until EOS
    assert tokens[0] == 256
    return text(bytes(int(t) for t in tokens[1:list(tokens).index(257)]))


with h5py.File(f"{work}/data.h5", "r") as f:
    tokens = f["tokens"][...]
n = len(tokens)
m = 12  # held_out_count(48, 0.25), as the converter and the trainer said
with open(f"{work}/preds.csv", "rb") as f:
    table = list(csv.reader(io.StringIO(f.read().decode("utf-8", "surrogateescape"), newline="")))
assert table[0] == ["sample", "reference", "prediction", "correct"], table[0]
rows = table[1:]
assert [r[0] for r in rows] == [str(i) for i in range(n - m, n)], \
    f"samples {[r[0] for r in rows]}, expected the held-out set {n - m}..{n - 1}"
right = 0
out = open(f"{work}/caption.out", "rb").read().decode("utf-8", "surrogateescape")
for sample, reference, prediction, correct in rows:
    assert reference == decode(tokens[int(sample)]), f"sample {sample}: reference {reference!r}"
    assert correct in ("0", "1"), f"sample {sample}: correct is {correct!r}"
    assert (correct == "1") == (prediction == reference), f"sample {sample}: correct {correct} for {prediction!r} vs {reference!r}"
    right += correct == "1"
    line = f"{sample}\t{'ok' if correct == '1' else 'WRONG'}\t{prediction}\t{reference}\n"
    assert line in out, f"the printed lines lack {line!r}"
summary = re.search(r"captioned (\d+) samples: (\d+) exactly right \(([0-9.]+)%\)", out)
assert summary, "no summary line"
assert int(summary[1]) == m and int(summary[2]) == right, summary[0]
decimals = len(summary[3].split(".")[1]) if "." in summary[3] else 0
assert abs(float(summary[3]) - 100 * right / m) <= 0.5 * 10 ** -decimals, summary[0]
assert right >= 1, "no caption right: the rows with correct = 1 went unchecked (the model learned nothing)"
# The same weights, the same held-out set, greedy decoding: what the trainer's evaluation reported.
assert abs(100 * right / m - trainer_accuracy) <= 0.05, f"{right}/{m} right, the trainer said {trainer_accuracy}%"

with h5py.File(f"{work}/preds.h5", "r") as f:
    h5_rows = list(zip([text(s) for s in f["sample"][...]], [text(s) for s in f["reference"][...]],
                       [text(s) for s in f["prediction"][...]], [str(int(c)) for c in f["correct"][...]]))
    assert f["correct"].dtype == np.uint8, f["correct"].dtype
    assert "ck.h5" in text(f.attrs["checkpoint"]), f.attrs["checkpoint"]
assert h5_rows == [tuple(r) for r in rows], "the HDF5 output differs from the CSV"
print(f"held-out captions: {right}/{m} exactly right, as the trainer said ({trainer_accuracy}%)")

# Three of the held-out samples' image files (found by their pixels) for the folder check.
from PIL import Image
import os
with h5py.File(f"{work}/data.h5", "r") as f:
    images = f["images"][...]
by_pixels = {np.asarray(Image.open(f"{work}/images/{name}")).tobytes(): name for name in os.listdir(f"{work}/images")}
with open(f"{work}/few_expected.tsv", "w") as out_file:
    for sample, _, prediction, _ in rows[:3]:
        name = by_pixels[images[int(sample), 0, 0].tobytes()]
        os.link(f"{work}/images/{name}", f"{work}/few/{name}")
        out_file.write(f"{name}\t{prediction}\n")
PY

# Caption a folder: its image files (not notes.txt), sorted by name, as in the dataset.
echo "not an image" > "$work/few/notes.txt"
"$joule" caption --checkpoint "$work/ck.h5" --images "$work/few" --resize none --out "$work/few.csv" >"$work/few.out"
cat "$work/few.out"
[ "$(wc -l <"$work/few.out")" -eq 3 ] || { echo "expected 3 lines for 3 image files"; exit 1; }
LC_ALL=C sort "$work/few_expected.tsv" | cmp - "$work/few.out"
$py - "$work" <<'PY'
import csv, sys
work = sys.argv[1]
with open(f"{work}/few.csv", newline="", encoding="utf-8", errors="surrogateescape") as f:
    table = list(csv.reader(f))
expected = sorted(line.rstrip("\n").split("\t", 1) for line in open(f"{work}/few_expected.tsv"))
assert table[0] == ["sample", "reference", "prediction", "correct"], table[0]
assert [(r[0], r[1], r[2]) for r in table[1:]] == [(name, "", p) for name, p in expected], table
PY
# --resize none: an image of another size is refused, naming it.
if "$joule" caption --checkpoint "$work/ck.h5" --images "$work/wrong" --resize none >"$work/out" 2>"$work/err"; then
  echo "a 9x8 image was captioned with --resize none by an 8x8 model"; exit 1
fi
grep -q "big.png" "$work/err" || { cat "$work/err"; exit 1; }
# Resized and converted images are said, once for the folder: the 9x8 one (bilinear, the default)
# and a colour one made here (the model reads grey).
$py -c "from PIL import Image; Image.new('RGB', (8, 8), (200, 30, 30)).save('$work/wrong/colour.png')"
"$joule" caption --checkpoint "$work/ck.h5" --images "$work/wrong" >"$work/out" 2>"$work/err" || { cat "$work/err"; exit 1; }
grep -q "^--images $work/wrong: 1 of [0-9]* image(s) resized to the model's 8x8 (bilinear; --resize none refuses them)\$" \
  "$work/err" || { echo "no note of the resized image:"; cat "$work/err"; exit 1; }
grep -q "^--images $work/wrong: converted to the model's 1 channel(s) (grey): 1 RGB\$" \
  "$work/err" || { echo "no note of the colour image:"; cat "$work/err"; exit 1; }
# A bf16 run's checkpoint (fp32 master weights) captions in bf16, the precision it names, as its
# trainer's evaluation did; --precision fp32 runs the same weights in fp32.
"$joule" train --config "$work/cfg.json" --precision bf16 --checkpoint "$work/ck16.h5" >"$work/train16.out"
grep -qF "bf16 activations and kernel weights" "$work/train16.out"
acc16="$(grep -o 'exact caption accuracy [0-9.]*% (12 samples)' "$work/train16.out" | tail -n 1 | grep -o '[0-9.]*%' | tr -d %)"
"$joule" caption --checkpoint "$work/ck16.h5" --data "$work/data.h5" --held-out >"$work/caption16.out"
got16="$(grep -o 'exactly right ([0-9.]*%)' "$work/caption16.out" | grep -o '[0-9.]*%' | tr -d %)"
$py -c "import sys; a, b = float(sys.argv[1]), float(sys.argv[2]); assert abs(a - b) <= 0.05, (a, b)" "$acc16" "$got16" \
  || { echo "bf16: the trainer said $acc16%, caption found $got16%"; exit 1; }
"$joule" caption --checkpoint "$work/ck16.h5" --data "$work/data.h5" --held-out --precision fp32 >"$work/caption16_fp32.out"
grep -q "exactly right" "$work/caption16_fp32.out"
echo "bf16 checkpoint: $got16% exactly right in bf16, as its trainer said"

echo "caption end to end: ok"
