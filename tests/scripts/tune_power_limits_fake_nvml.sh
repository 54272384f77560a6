#!/usr/bin/env bash
# joule tune with GPU power limits, on the fake NVML library (through the real dlopen path): the
# limits listed in the config's tune section are tried (one outside the GPU's range is recorded as
# infeasible), energy is measured from NVML (the fake caps its power at the limit), and the
# original limit is back when joule exits — normally and after SIGINT. Without permission to set
# limits the trials fail with NVML's reason and the limit is untouched.
# usage: tune_power_limits_fake_nvml.sh JOULE FAKE_NVML_SO WORK_DIR
set -euo pipefail
joule="$1" fake="$2" work="$3"
rm -rf "$work" && mkdir -p "$work"
fail() { echo "FAIL: $*" >&2; exit 1; }
export JOULE_NVML_LIBRARY="$fake" JOULE_HWMON_ROOT=/nonexistent JOULE_POWERCAP_ROOT=/nonexistent
export FAKE_NVML_LIMIT_MW=700000 FAKE_NVML_POWER_MW=650000 FAKE_NVML_ENERGY=0 FAKE_NVML_LIMIT_FILE="$work/limits"
"$joule" data synth --out "$work/shapes.h5" --count 256 --image-size 32 --text-len 36 --frames 1 >/dev/null
/usr/bin/python3 - "$work" <<'PY'
import json, sys
work = sys.argv[1]
config = {"model": {"layers": 2, "d_model": 128, "heads": 4, "mlp_ratio": 4, "image_size": 32, "patch_size": 8,
                    "channels": 3, "frames": 1, "text_len": 36, "tie_embeddings": True},
          "data": {"path": work + "/shapes.h5", "eval_fraction": 0.1},
          "train": {"batch": 32, "micro_batch": 32, "steps": 5, "lr": 0.003, "min_lr": 0.0003, "warmup_steps": 2,
                    "weight_decay": 0.01, "beta1": 0.9, "beta2": 0.95, "grad_clip": 1.0, "eval_every": 0,
                    "eval_samples": 8, "log_every": 5, "seed": 1, "recompute_depth": 0},
          "tune": {"offload_ratios": [0], "recompute_depths": [0], "power_limits_w": [200, 400, 50],
                   "warmup_steps": 1, "measured_steps": 2, "max_repeats": 1}}
json.dump(config, open(work + "/config.json", "w"))
PY
"$joule" tune --config "$work/config.json" --out "$work/run.h5" >"$work/run.out" 2>&1 || fail "tune failed: $(tail "$work/run.out")"
grep -q "GPU power limits to try: 200, 400, 50 W" "$work/run.out" || fail "the limits to try are not announced"
grep -q "power limit 50 W is outside what the GPU allows \[100, 700\] W" "$work/run.out" || fail "50 W not infeasible"
grep -q "Energy: measured" "$work/run.out" || fail "NVML energy is not reported as measured"
grep -q "GPU power limit restored to 700 W" "$work/run.out" || fail "no restore message"
"$joule" inspect --csv "$work/run.h5" > "$work/run.csv"
grep -q "power_limit_w" "$work/run.csv" || fail "no power_limit_w column"
[ "$(tail -1 "$work/limits")" = "0 700000" ] || fail "the limit left behind is $(tail -1 "$work/limits"), not the original"
grep -q "^0 200000" "$work/limits" && grep -q "^0 400000" "$work/limits" || fail "the limits were not set: $(cat "$work/limits")"
# The fake caps its 650 W at the limit: the 200 W trial must show less energy per step per second.
/usr/bin/python3 - "$work/run.h5" <<'PY' || fail "energy does not follow the power limit"
import sys, h5py
f = h5py.File(sys.argv[1], "r")
power = {}
for name, t in f["trials"].items():
    a = t.attrs
    if a["status"] == "ok":
        power[int(a["power_limit_w"])] = a["energy_per_step_j"] / a["time_per_step_s"]
print("average power by limit:", power)
assert abs(power[200] - 200) < 20 and abs(power[400] - 400) < 40, power
PY
echo "limits set, energy follows them, original restored"

# SIGINT in the middle: still restored.
: > "$work/limits"
"$joule" tune --config "$work/config.json" --out "$work/int.h5" --steps 100000 >"$work/int.out" 2>&1 &
pid=$!
for _ in $(seq 1 600); do grep -q "training 100000 steps" "$work/int.out" && break; sleep 0.1; done
kill -INT $pid; rc=0; wait $pid || rc=$?
[ $rc = 130 ] || fail "SIGINT: exit $rc"
[ "$(tail -1 "$work/limits")" = "0 700000" ] || fail "after SIGINT the limit left behind is $(tail -1 "$work/limits")"
echo "SIGINT: original restored"

# The limits from the command line (--power-limits) in place of the configuration's; a bad value
# and the flag without --tune are refused before anything runs.
: > "$work/limits"
"$joule" tune --config "$work/config.json" --out "$work/flag.h5" --power-limits 300,150 --no-train >"$work/flag.out" 2>&1 ||
  fail "tune --power-limits failed: $(tail "$work/flag.out")"
grep -q "GPU power limits to try: 300, 150 W" "$work/flag.out" || fail "--power-limits 300,150: $(head "$work/flag.out")"
grep -q "^0 300000" "$work/limits" && grep -q "^0 150000" "$work/limits" || fail "--power-limits not set: $(cat "$work/limits")"
[ "$(tail -1 "$work/limits")" = "0 700000" ] || fail "--power-limits: the limit left behind is $(tail -1 "$work/limits")"
rc=0; "$joule" tune --config "$work/config.json" --out "$work/bad.h5" --power-limits 300,abc >"$work/bad.out" 2>&1 || rc=$?
[ $rc != 0 ] && grep -q "power-limits: 'abc' is not a whole number of watts" "$work/bad.out" || fail "--power-limits abc: $rc $(cat "$work/bad.out")"
rc=0; "$joule" train --config "$work/config.json" --power-limits 300 >"$work/bad.out" 2>&1 || rc=$?
[ $rc != 0 ] && grep -q "\-\-power-limits applies to a tuned run: add --tune" "$work/bad.out" || fail "train --power-limits: $rc $(cat "$work/bad.out")"
echo "--power-limits: the flag's limits tried, bad values refused"

# Without permission: the trials fail with NVML's reason; nothing is changed.
: > "$work/limits"
FAKE_NVML_SET_DENIED=1 "$joule" tune --config "$work/config.json" --out "$work/denied.h5" >"$work/denied.out" 2>&1 && fail "tune succeeded without any possible trial"
grep -q "Insufficient Permissions" "$work/denied.out" || fail "no permission message: $(tail -3 "$work/denied.out")"
[ ! -s "$work/limits" ] || fail "a limit was set without permission"
echo "PASS"
