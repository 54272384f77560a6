#!/usr/bin/env bash
# What plot_run.py draws reads right (issue 65), on a run log made here (no joule needed): an in-flight
# run with a MODEL energy source whose configuration changes are pauses where the model says 20 W
# (its idle floor), near-optimal trials whose 95% intervals are wider than their cluster, and
# evaluations on the loss curve with accuracies that rounding to whole percent would change. From
# the script's --describe summary:
#   power_trace.png  no model sample is drawn in a pause between steps (the line breaks there, and
#                    the legend says how many were left out); every other sample is drawn as logged;
#   pareto.png       the enlarged box is drawn over the trials, and the inset's view holds the whole
#                    95% interval of every trial it shows;
#   loss.png         each accuracy label reads as joule's report prints it (61.5%, not 62%), and no
#                    label crosses the loss or the learning-rate curve; the title's held-out loss too (0.0645, 4 decimals).
#   plot_run_reads_right.sh PYTHON SCRIPT
set -euo pipefail
py="${1:?usage: $0 PYTHON SCRIPT}" script="${2:?usage: $0 PYTHON SCRIPT}"
fail() { echo "plot_run_reads_right: $*" >&2; exit 1; }
work="$(mktemp -d)"; trap 'rm -rf "$work"' EXIT
"$py" - "$work/run.h5" <<'PY'
import sys

import h5py
import numpy as np

rng = np.random.default_rng(7)
path = sys.argv[1]
str_t = h5py.string_dtype()
with h5py.File(path, "w") as f:
    f.attrs["format"] = "joule-run-log-v1"
    f.attrs["energy_kind"] = "model"
    f.attrs["energy_source"] = "model (CPU-time estimate: nothing could be measured)"
    f.attrs["objective"] = "edp"
    trials = f.create_group("trials")
    # A tight cluster of near-optimal trials (0-5) whose 95% intervals are wider than the cluster,
    # and slow, costly trials (6-11) far from it.
    centres = [(1.00, 10.0), (1.01, 9.95), (0.99, 10.08), (1.02, 10.02), (1.005, 10.1), (0.995, 9.9),
               (2.0, 20.0), (2.3, 23.0), (2.6, 21.0), (3.0, 26.0), (2.8, 28.0), (3.2, 30.0)]
    for i, (tm, en) in enumerate(centres):
        g = trials.create_group(f"{i:04d}")
        spread = 0.06 if i < 6 else 0.02
        times = tm * (1 + spread * rng.standard_normal(8))
        energies = en * (1 + spread * rng.standard_normal(8))
        g["step_time_s"] = times
        g["step_energy_j"] = energies
        g.attrs.update(status="ok", reason="", complete=1, time_per_step_s=float(np.median(times)),
                       energy_per_step_j=float(np.median(energies)),
                       objective=float(np.median(times) * np.median(energies)),
                       offload_ratio=0.25 * (i % 5), recompute_depth=i // 5, seq_shards=1)
        g["power_time_s"] = np.arange(1, 11) * 0.01
        g["power_w"] = np.full((10, 1), 33.0)
        g["power_domains"] = np.array(["model (model)"], dtype=object).astype(str_t)
    best = f.create_group("best")
    best.attrs.update(trial=0, baseline=0, baseline_is="the configuration's own settings", complete=1,
                      verdict="kept the configuration's own settings (trial 0): it has the best objective measured")
    pareto = f.create_group("pareto")
    pareto["trials"] = np.array([5, 0, 1], dtype=np.int64)
    pareto.attrs["complete"] = 1
    # An in-flight run: 300 steps of 10 ms; the search (steps 1-200) changes configuration every 20
    # steps, each change a 40 ms pause in which the model says the process idled (20 W, its floor).
    train = f.create_group("train")
    steps = np.arange(1, 301)
    trial = np.where(steps <= 200, ((steps - 1) // 20) % 6, 0)
    secs = np.full(300, 0.010)
    end, t, evals = [], 0.0, {110, 210, 300}
    for i in range(300):
        if i > 0 and trial[i] != trial[i - 1]:
            t += 0.040
        if i > 0 and steps[i - 1] in evals:
            t += 0.050  # the evaluation
        t += secs[i]
        end.append(t)
    end = np.array(end)
    train["step"] = steps.astype(np.int64)
    train["trial"] = trial.astype(np.int64)
    train["seconds"] = secs
    train["step_end_s"] = end
    train["measured"] = np.ones(300, dtype=np.int8)
    loss = 5.0 * np.exp(-steps / 60.0) + 0.05 + 0.02 * rng.standard_normal(300)
    loss = np.abs(loss)
    loss[210:226] = loss[209] * 1.18  # just after the evaluation at step 210: where a label above-right of it sits
    train["loss"] = loss
    train["lr"] = 0.005 * np.minimum(1, steps / 20) * (0.5 + 0.5 * np.cos(np.pi * steps / 300))
    train["eval_step"] = np.array([110, 210, 300], dtype=np.int64)
    train["eval_loss"] = np.array([loss[109], loss[209], loss[299]])  # on the curve: a naive label crosses it
    train["eval_accuracy"] = np.array([0.125, 0.615, 0.8125])  # 12.5%, 61.5%, 81.25%: .0f rounds them otherwise
    train["eval_samples"] = np.array([64, 64, 64], dtype=np.int64)
    pt = np.arange(0.01, end[-1] + 1e-9, 0.01)
    starts = end - secs
    # Busy in a step or an evaluation (the 50 ms after steps 110 and 210), idle in the pauses.
    runs = list(zip(starts, end)) + [(end[i], end[i] + 0.050) for i in (109, 209)]
    busy = np.array([sum(max(0.0, min(p, e) - max(p - 0.01, a)) for a, e in runs) > 0.005 for p in pt])
    train["power_time_s"] = pt
    train["power_w"] = np.where(busy, 34.0 + rng.standard_normal(pt.size), 20.0).reshape(-1, 1)
    train["power_domains"] = np.array(["model (model)"], dtype=object).astype(str_t)
    train.attrs.update(complete=1, in_flight=1, search_steps=200, total_seconds=float(end[-1]),
                       total_energy_j=100.0, offload_ratio=0.0, recompute_depth=0, seq_shards=1)
PY
"$py" "$script" "$work/run.h5" --out "$work/plots" --describe "$work/describe.json" >"$work/out" 2>"$work/err" ||
  { cat "$work/out" "$work/err" >&2; fail "plot_run.py failed"; }
"$py" - "$work/run.h5" "$work/describe.json" <<'PY'
import json
import math
import sys

import h5py
import numpy as np

T975_7 = 2.364624  # Student t, 0.975, 7 degrees of freedom: 8 steps per trial
log, describe = sys.argv[1], sys.argv[2]
plots = {p["plot"]: p for p in json.load(open(describe))["plots"]}
bad, said = [], []
with h5py.File(log, "r") as f:
    tr = f["train"]
    step, end, secs = tr["step"][()], tr["step_end_s"][()], tr["seconds"][()]
    evals = set(tr["eval_step"][()].tolist())
    pt, pw = tr["power_time_s"][()], tr["power_w"][()][:, 0]
    acc, eval_loss = tr["eval_accuracy"][()], tr["eval_loss"][()]
    trials = {int(name): (float(np.median(g["step_time_s"][()])), float(np.median(g["step_energy_j"][()])),
                          T975_7 * np.std(g["step_time_s"][()], ddof=1) / math.sqrt(8),
                          T975_7 * np.std(g["step_energy_j"][()], ddof=1) / math.sqrt(8))
              for name, g in f["trials"].items()}

# power_trace.png: pauses between steps (none after an evaluation) and each sample's share in them.
spans = [(end[i], end[i + 1] - secs[i + 1]) for i in range(step.size - 1)
         if end[i + 1] - secs[i + 1] > end[i] and step[i] not in evals]
starts = np.concatenate(([pt[0] - (pt[1] - pt[0])], pt[:-1]))
share = sum(np.clip(np.minimum(pt, b) - np.maximum(starts, a), 0, None) for a, b in spans) / (pt - starts)
in_pause = share >= 0.5
floor_in_pause = int(((pw <= 20.5) & in_pause).sum())
if floor_in_pause < 10:  # the log itself must hold what is tested
    bad.append(f"the test's log has only {floor_in_pause} samples at the idle floor in pauses")
train_axes = [a for a in plots["power_trace.png"]["axes"] if a["title"].startswith("train run")]
line = next((l for a in train_axes for l in a["lines"] if l["label"].startswith("model estimate")), None)
if line is None:
    bad.append("power_trace.png: no model line on the train run's axes")
else:
    y = np.array(line["y"], dtype=float)
    drawn_in_pause = int((np.isfinite(y) & in_pause).sum())
    drawn_floor = int((np.isfinite(y) & (y <= 20.5) & in_pause).sum())
    if drawn_in_pause:
        bad.append(f"power_trace.png: {drawn_in_pause} model samples drawn in pauses between steps "
                   f"({drawn_floor} of them at the 20 W idle floor)")
    if not np.array_equal(y[~in_pause], pw[~in_pause]):
        bad.append("power_trace.png: samples outside the pauses are not drawn as logged")
    legend = [e for a in train_axes for e in a["legend"]]
    want = f"{int(in_pause.sum())} model samples not drawn"
    if not any(want in e for e in legend):
        bad.append(f"power_trace.png: no legend entry saying {want!r}: {legend}")
    said.append(f"power: {int(in_pause.sum())} samples in pauses ({floor_in_pause} at the idle floor) not drawn")

# pareto.png: the box over the trials, the inset's view holding the intervals it shows.
axes = plots["pareto.png"]["axes"]
main = axes[0]
inset = next((a for a in axes if a["title"].startswith("enlarged")), None)
box = next((b for b in main["boxes"] if b["label"].startswith("enlarged")), None)
if inset is None or box is None:
    bad.append("pareto.png: no enlarged part (the test's log crowds the front and the choice)")
else:
    if box["zorder"] <= main["data_zorder"]:
        bad.append(f"pareto.png: the enlarged box (zorder {box['zorder']}) is under the trials ({main['data_zorder']})")
    (x0, x1), (y0, y1) = inset["xlim"], inset["ylim"]
    shown = 0
    for i, (t, e, tci, eci) in sorted(trials.items()):
        if x0 <= t <= x1 and y0 <= e <= y1:
            shown += 1
            if not (x0 <= t - tci and t + tci <= x1 and y0 <= e - eci and e + eci <= y1):
                bad.append(f"pareto.png: trial {i}'s interval [{t - tci:.4g}, {t + tci:.4g}] x "
                           f"[{e - eci:.4g}, {e + eci:.4g}] leaves the inset's view [{x0:.4g}, {x1:.4g}] x "
                           f"[{y0:.4g}, {y1:.4g}]")
    if shown < 3:
        bad.append(f"pareto.png: the inset shows {shown} trials")
    said.append(f"pareto: the box over the trials, the inset's {shown} trials' intervals whole")

# loss.png: the labels as the log rounds them, clear of the loss curve.
ax = plots["loss.png"]["axes"][0]
labels = [b for b in ax["label_boxes"] if b["text"].endswith("%")]
want = sorted(f"{100 * a:.1f}%" for a in acc)
if sorted(b["text"] for b in labels) != want:
    bad.append(f"loss.png: accuracy labels {[b['text'] for b in labels]}, the log's {want}")
curves = [l for a in plots["loss.png"]["axes"] for l in a["lines"] if l["label"] in ("training loss", "learning rate")]
if len(curves) != 2:
    bad.append(f"loss.png: {len(curves)} of the loss and learning-rate curves found")


def crosses(box, a, b):
    """Whether segment a-b passes through the box (sampled at a quarter pixel)."""
    n = int(max(abs(b[0] - a[0]), abs(b[1] - a[1])) * 4) + 2
    for s in np.linspace(0, 1, n):
        x, y = a[0] + s * (b[0] - a[0]), a[1] + s * (b[1] - a[1])
        if box[0] <= x <= box[2] and box[1] <= y <= box[3]:
            return True
    return False


for curve in curves:
    page = np.array(curve["page"], dtype=float)
    for b in labels:
        hit = [i for i in range(len(page) - 1)
               if np.isfinite(page[i:i + 2]).all() and crosses(b["box"], page[i], page[i + 1])]
        if hit:
            bad.append(f"loss.png: the label {b['text']!r} is crossed by the {curve['label']} curve (near step "
                       f"{curve['x'][hit[0]]:.0f})")
title = ax["title"]
if f"final held-out loss {eval_loss[-1]:.4f})" not in title:
    bad.append(f"loss.png: title {title!r}, want the held-out loss as the log's report rounds it, {eval_loss[-1]:.4f}")
said.append(f"loss: labels {', '.join(b['text'] for b in labels)}, clear of both curves")
for line in bad:
    print(f"plot_run_reads_right: {line}", file=sys.stderr)
if bad:
    sys.exit(1)
print("; ".join(said))
PY
echo PASS
