#!/usr/bin/env bash
# joule train --tune under mpirun with sequence shards in the space: the running job re-forms its
# process groups between steps (2 replicas x 1 shard <-> 1 replica x 2 shards), both layouts are
# measured in flight, and the loss curve is the untuned run's within 1e-3 (relative; the same
# samples per step, other summation order).
# usage: train_tune_shards.sh WORK REPO JOULE LAUNCHER... (the launcher ends with the joule binary)
set -euo pipefail
work="$1" repo="$2" joule="$3"; shift 3
launch=("$@")
rm -rf "$work" && mkdir -p "$work"
fail() { echo "FAIL: $*" >&2; exit 1; }
py=/usr/bin/python3
data="$work/shapes.h5"
"$joule" data synth --out "$data" --count 256 --image-size 32 --text-len 36 --frames 1 >/dev/null
"$py" - "$repo/apps/configs/tiny.json" "$work" "$data" <<'PY'
import json, sys
base = json.load(open(sys.argv[1]))
base["data"]["path"] = sys.argv[3]
base["train"].update(steps=30, micro_batch=16, eval_every=0, eval_samples=16, log_every=1)
for name in ("tuned", "untuned"):
    cfg = json.loads(json.dumps(base))
    cfg["train"]["checkpoint"] = f"{sys.argv[2]}/{name}.ckpt.h5"
    cfg["tune"] = {"offload_ratios": [0], "recompute_depths": [0], "seq_shards": [1, 2],
                   "warmup_steps": 1, "measured_steps": 2, "max_repeats": 1}
    json.dump(cfg, open(f"{sys.argv[2]}/{name}.json", "w"), indent=1)
PY
"${launch[@]}" train --config "$work/untuned.json" --no-energy >"$work/untuned.out" 2>&1 ||
  fail "untuned run: $(tail "$work/untuned.out")"
"${launch[@]}" train --tune --config "$work/tuned.json" --tune-log "$work/tune.h5" >"$work/tuned.out" 2>&1 ||
  fail "tuned run: $(tail -20 "$work/tuned.out")"
"$py" - "$work/tune.h5" "$work/untuned.out" "$work/untuned.ckpt.h5" "$work/tuned.ckpt.h5" <<'PY' || fail "see above"
import re, sys, h5py, numpy as np
log, untuned_out, a, b = sys.argv[1:]
with h5py.File(log, "r") as f:
    trials = {name: g for name, g in f["trials"].items()}
    ok = sorted(int(g.attrs["seq_shards"]) for g in trials.values() if g.attrs["status"] == "ok")
    assert ok == [1, 2], f"ok trials by seq_shards: {ok}; {[(g.attrs['seq_shards'], g.attrs['reason']) for g in trials.values()]}"
    tr = f["train"]
    shards_of_step = [int(trials[f"{t:04d}"].attrs["seq_shards"]) for t in tr["trial"][()]]
    assert set(shards_of_step) == {1, 2}, set(shards_of_step)
    tuned = dict(zip(tr["step"][()].tolist(), tr["loss"][()].tolist()))
untuned = {int(m.group(1)): float(m.group(2))
           for m in re.finditer(r"step +(\d+)/\d+ +loss ([0-9.]+)", open(untuned_out).read())}
assert len(untuned) == 30 and sorted(tuned) == sorted(untuned), (len(untuned), len(tuned))
worst = max(abs(tuned[s] - untuned[s]) - 1e-4 - 1e-3 * abs(untuned[s]) for s in untuned)
diff = max(abs(tuned[s] - untuned[s]) / untuned[s] for s in untuned)
print(f"largest relative loss difference {diff:.2e} over 30 steps; {shards_of_step.count(2)} steps ran with 2 shards")
assert worst <= 0, "the tuned run's losses leave the tolerance (1e-3 relative + the printout's 1e-4)"
with h5py.File(a, "r") as x, h5py.File(b, "r") as y:
    d2 = sum(float(np.sum((x["params"][n][()] - y["params"][n][()]) ** 2)) for n in x["params"])
    n2 = sum(float(np.sum(x["params"][n][()] ** 2)) for n in x["params"])
    print(f"relative parameter difference {np.sqrt(d2 / n2):.2e}")
    assert np.sqrt(d2 / n2) < 1e-2
PY
echo "PASS"
