#!/usr/bin/env bash
# What in-flight tuning costs, and how good its choice is (issue 16). Prints figures; asserts
# nothing (the machines are shared and noisy: medians and ratios measured side by side).
#
#   bash apps/scripts/bench_tune.sh [BUILD] [--pairs N] [--skip-regret]   (N runs of each part, default 3)
#
# 1. Overhead on the main job: N pairs, side by side, of
#      tuned:   joule train --tune            (the embedded default: tuned in flight, 600 steps)
#      untuned: joule train --offload-ratio X --recompute-depth Y ...   (the choice the tuned run
#               made, set from the start, the same steps)
#    overhead = (tuned wall time - untuned wall time) / untuned wall time, per pair; the median.
# 2. Regret on the 90-configuration space (apps/configs/tiny-tune-space.json): the offline
#    exhaustive search (joule tune, every configuration measured) gives the optimum; an in-flight
#    run with coordinate descent over the same space chooses; regret = the offline objective of
#    the in-flight choice / the offline optimum - 1. Also: the share of the run's steps spent in
#    configurations other than the chosen one.
set -euo pipefail
build=build
pairs=3
regret=1
while [ "$#" -gt 0 ]; do
  case "$1" in
    --pairs) pairs="$2"; shift 2 ;;
    --skip-regret) regret=0; shift ;;
    -h|--help) sed -n '2,17p' "$0"; exit 0 ;;
    *) build="$1"; shift ;;
  esac
done
joule="$build/apps/joule"
[ -x "$joule" ] || { echo "bench_tune: no $joule (build first: make build)" >&2; exit 2; }
py=/usr/bin/python3
work="$(mktemp -d)"; trap 'rm -rf "$work"' EXIT
now() { date +%s.%N; }
# The chosen knobs of a log as joule train flags, and the run's figures.
chosen_flags() {
  "$py" - "$1" <<'PY'
import sys, h5py
with h5py.File(sys.argv[1], "r") as f:
    b = f["best"].attrs
    flags = [f"--offload-ratio {float(b['offload_ratio'])}", f"--recompute-depth {int(b['recompute_depth'])}"]
    if int(b["micro_batch"]) > 0:
        flags.append(f"--micro-batch {int(b['micro_batch'])}")
    if int(b["host_threads"]) >= 0:
        flags.append(f"--host-threads {int(b['host_threads'])}")
    print(" ".join(flags))
PY
}

calc() { awk "BEGIN { printf \"%.6f\", $1 }"; }

echo "== 1. overhead of in-flight tuning on the main job ($pairs pairs, side by side) =="
overheads=()
for i in $(seq 1 "$pairs"); do
  log="$work/tuned-$i.h5"
  t0=$(now); "$joule" train --tune --make-data --tune-log "$log" >"$work/tuned-$i.out" 2>&1; t1=$(now)
  flags="$(chosen_flags "$log")"
  t2=$(now); "$joule" train $flags >"$work/untuned-$i.out" 2>&1; t3=$(now)
  tuned=$(calc "$t1 - $t0"); untuned=$(calc "$t3 - $t2")
  o=$(calc "100 * ($tuned - $untuned) / $untuned")
  overheads+=("$o")
  acc=$(grep -o "exact caption accuracy [0-9.]*%" "$work/tuned-$i.out" | tail -1)
  est=$(grep -o "tuning overhead, estimated from this run's steps: [-+0-9.]*%" "$work/tuned-$i.out" | grep -o "[-+0-9.]*%$" || true)
  printf "  pair %d: tuned %.1f s, untuned (%s) %.1f s: overhead %+.1f%% (the run's own estimate %s); tuned run's %s\n" \
    "$i" "$tuned" "$flags" "$untuned" "$o" "${est:-n/a}" "$acc"
done
median=$(printf "%s\n" "${overheads[@]}" | sort -g | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}')
printf "  median overhead: %+.1f%% (goal: <= 5%%)\n" "$median"

[ "$regret" = 1 ] || exit 0
echo "== 2. regret of the in-flight choice on the 90-configuration space ($pairs runs of each) =="
space=apps/configs/tiny-tune-space.json
regrets=()
for i in $(seq 1 "$pairs"); do
  t0=$(now); "$joule" tune --config "$space" --no-train --out "$work/offline-$i.h5" >"$work/offline-$i.out" 2>&1; t1=$(now)
  "$joule" train --tune --config "$space" --strategy coordinate_descent --tune-log "$work/inflight-$i.h5" \
    >"$work/inflight-$i.out" 2>&1
  t2=$(now)
  printf "  run %d: offline exhaustive search %.0f s; in-flight run (600 steps, coordinate descent) %.0f s\n" \
    "$i" "$(calc "$t1 - $t0")" "$(calc "$t2 - $t1")"
  r=$("$py" - "$work/offline-$i.h5" "$work/inflight-$i.h5" <<'PY'
import sys, h5py, numpy as np
KNOBS = ("offload_ratio", "recompute_depth", "seq_shards", "micro_batch", "host_threads", "power_limit_w")
def trials(f):
    out = {}
    for name, g in f["trials"].items():
        if g.attrs.get("complete", 0) == 1 and g.attrs["status"] == "ok":
            out[tuple(float(g.attrs[k]) for k in KNOBS)] = (int(name), float(g.attrs["objective"]))
    return out
def text(key):
    return ", ".join(f"{k} {v:g}" for k, v in zip(KNOBS[:5], key[:5]))
with h5py.File(sys.argv[1], "r") as off, h5py.File(sys.argv[2], "r") as inf:
    offline = trials(off)
    best_key = min(offline, key=lambda k: offline[k][1])
    chosen = inf["best"].attrs
    key = tuple(float(chosen[k]) for k in KNOBS)
    regret = offline[key][1] / offline[best_key][1] - 1
    rank = sorted(v[1] for v in offline.values()).index(offline[key][1]) + 1
    tr = inf["train"]
    trial = tr["trial"][()]
    other = float(np.mean(trial != int(chosen["trial"])))
    measured_in_flight = sum(1 for g in inf["trials"].values() if g.attrs["status"] == "ok")
    print(f"    offline optimum: {text(best_key)} (objective {offline[best_key][1]:.5g}); in-flight choice: "
          f"{text(key)} (offline objective {offline[key][1]:.5g}, rank {rank} of {len(offline)})", file=sys.stderr)
    print(f"    regret {100 * regret:+.2f}%; {measured_in_flight} configurations measured in flight over "
          f"{int(tr.attrs['search_steps'])} search steps; {100 * other:.1f}% of the {trial.size} steps in "
          "configurations other than the chosen one", file=sys.stderr)
    print(f"{100 * regret:.4f}")
PY
)
  regrets+=("$r")
done
median=$(printf "%s\n" "${regrets[@]}" | sort -g | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}')
printf "  median regret: %+.2f%% (goal: <= 2%%)\n" "$median"
