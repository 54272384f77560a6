#!/usr/bin/env bash
# Writes a small, real run log (a short `joule tune --no-train` of a 2-layer width-64 model: 2
# offload ratios x 2 recompute depths, one round of two measured steps each; a few seconds on 2
# cores) with a CPU build's joule. The device check's starts step runs `joule inspect` on it from
# the CUDA build with the GPU hidden: what a user does on a login node with a log from a compute
# node. apps/scripts/device_bundle.sh packs it as joule-device/fixtures/run-log.h5.
#   small_run_log.sh JOULE OUT.h5
set -euo pipefail
joule="${1:?usage: $0 JOULE OUT.h5}" out="${2:?usage: $0 JOULE OUT.h5}"
work="$(mktemp -d)"; trap 'rm -rf "$work"' EXIT
cat >"$work/small.json" <<JSON
{
  "model": {"layers": 2, "d_model": 64, "heads": 2, "mlp_ratio": 2, "image_size": 16, "patch_size": 8,
            "channels": 3, "frames": 1, "text_len": 34, "tie_embeddings": true},
  "data": {"path": "$work/shapes.h5", "eval_fraction": 0.1},
  "train": {"batch": 16, "micro_batch": 16, "steps": 8, "lr": 0.005, "min_lr": 0.0003, "warmup_steps": 2,
            "weight_decay": 0.01, "beta1": 0.9, "beta2": 0.95, "grad_clip": 1.0, "eval_every": 8,
            "eval_samples": 16, "log_every": 4, "seed": 1, "recompute_depth": 0},
  "tune": {"strategy": "exhaustive", "offload_ratios": [0, 1], "recompute_depths": [0, 1],
           "seq_shards": [1], "warmup_steps": 1, "measured_steps": 2, "max_repeats": 1, "confirm_rounds": 0}
}
JSON
"$joule" data synth --out "$work/shapes.h5" --count 64 --image-size 16 --text-len 34 --frames 1 >/dev/null
rm -f "$out"; mkdir -p "$(dirname "$out")"
"$joule" tune --config "$work/small.json" --no-train --out "$out" >"$work/tune.out" 2>&1 ||
  { tail -20 "$work/tune.out" >&2; echo "small_run_log.sh: joule tune failed" >&2; exit 1; }
"$joule" inspect "$out" >/dev/null
