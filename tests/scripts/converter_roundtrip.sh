#!/usr/bin/env bash
# End-to-end check of apps/scripts/images_to_h5.py: make a few PNGs and a captions file, convert,
# and have `joule data info` validate the result against a configuration; then check that a
# caption too long for the text length is refused.
set -euo pipefail
joule="$1"; repo="$2"
work="$(mktemp -d)"; trap 'rm -rf "$work"' EXIT
/usr/bin/python3 - "$work" <<'PY'
import sys
from PIL import Image
d = sys.argv[1]
for i, colour in enumerate([(255, 0, 0), (0, 0, 255), (0, 255, 0)]):
    Image.new("RGB", (40 + i, 30), colour).save(f"{d}/img{i}.png")
with open(f"{d}/captions.tsv", "w") as f:
    f.write("img0.png\tred\nimg1.png\tblue\nimg2.png\tgreen ü\n")
with open(f"{d}/long.tsv", "w") as f:
    f.write("img0.png\t" + "x" * 40 + "\n")
PY
/usr/bin/python3 "$repo/apps/scripts/images_to_h5.py" "$work" "$work/captions.tsv" "$work/out.h5" \
  --image-size 16 --text-len 12
cat > "$work/cfg.json" <<JSON
{"model": {"layers": 1, "d_model": 32, "heads": 2, "mlp_ratio": 2, "image_size": 16, "patch_size": 8,
           "channels": 3, "frames": 1, "text_len": 12, "tie_embeddings": true},
 "data": {"path": "$work/out.h5", "eval_fraction": 0.3},
 "train": {"batch": 1, "micro_batch": 1, "steps": 1, "lr": 0.001, "min_lr": 0.0, "warmup_steps": 0,
           "weight_decay": 0.0, "beta1": 0.9, "beta2": 0.95, "grad_clip": 1.0, "eval_every": 0,
           "eval_samples": 1, "log_every": 1, "seed": 1, "recompute_depth": 0}}
JSON
out="$("$joule" data info "$work/out.h5" --config "$work/cfg.json")"
echo "$out"
grep -q "3 samples, 1 frame(s) of 3x16x16, text length 12, matches the configuration" <<<"$out"
grep -q '"green ü"' <<<"$out"
train_out="$("$joule" train --config "$work/cfg.json")"
grep -q "exact caption accuracy" <<<"$train_out"
if /usr/bin/python3 "$repo/apps/scripts/images_to_h5.py" "$work" "$work/long.tsv" "$work/long.h5" \
     --image-size 16 --text-len 12 2>"$work/err"; then
  echo "a caption longer than the text length was accepted"; exit 1
fi
grep -q "more than --text-len 12" "$work/err"
echo "converter round trip: ok"
