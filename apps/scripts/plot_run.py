#!/usr/bin/python3
"""Plots a joule run log (the HDF5 file `joule tune` writes) as PNG files.

    /usr/bin/python3 apps/scripts/plot_run.py RUN.h5 [--out DIR]

DIR defaults to <stem>-plots/ next to the log. Writes, and prints the path of each:
  pareto.png       time per step vs energy per step of every ok trial with its 95% intervals of
                   the mean, the Pareto front joined, the chosen trial (/best) starred and the
                   verdict that chose it, infeasible and failed trials listed below
  power_trace.png  power (W) over time, one line per domain, for the best trial and /train
                   (an energy tool profile: for /profile, the whole program)
  regions.png      energy and time per named region, for the best trial and /train (a profile:
                   its regions and its kernels, the MAX_BARS largest by energy each)
  loss.png         training loss per step of /train, eval losses marked
A run tuned in flight (`joule train --tune`) gets its configuration changes (dotted, labelled with
the trial) and the search (shaded) on the loss and the /train power curves.

A plot whose data is missing (no /train group, no power samples...) is skipped with a one-line
note on stderr; the others are still written. Before anything is written, every PNG path is
checked: it must not be the run log itself (also through a symlink or hard link) nor a folder, and
DIR must be writable (a probe file is created and removed there). Each PNG is written to a
temporary in DIR (.NAME.XXXXXX.tmp), fsynced and renamed over NAME: a failed write (a full disk, an
exceeded quota, an I/O error, Ctrl-C) removes the temporary and leaves the previous PNG as it was,
with one line naming the file, the error and the free space; the other plots are still written.
Exit status: 0 when every plot that had data was written; 1 when a plot failed on malformed data or
could not be written; 2 when the file is not a joule
run log (root attribute format != "joule-run-log-v1"), none of the plots has data, or an output
path is refused.
Needs Debian's python3-h5py, python3-matplotlib and python3-numpy.

Reads the layout of scheduler/run_log.cpp (docs/run-log.md): root attributes
format, energy_kind, energy_source, objective; /trials/NNNN (attributes status, reason,
time_per_step_s, energy_per_step_j, objective and the knobs; datasets power_time_s [n],
power_w [n, domains], power_domains [domains] strings; subgroup regions with datasets name,
calls, seconds, energy_j); /best (attribute trial); /pareto (dataset trials); /train (datasets
step, loss, lr, eval_step, eval_loss, eval_accuracy, and in flight trial and step_end_s;
attributes total_seconds, total_energy_j, in_flight, search_steps;
regions and power as in a trial); /profile (the energy tool's log: attributes program,
seconds, energy_j; regions, and kernels in the same schema, and power as in a trial). Like joule's reader, groups without the attribute complete = 1
(being written, or left by a run that died) are ignored.
"""
import argparse
import errno
import json
import math
import os
import shutil
import stat
import sys
import tempfile
import textwrap
import time

import h5py
import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

FORMAT = "joule-run-log-v1"
PROG = "plot_run.py"
MAX_LISTED = 14  # failed/infeasible trials listed by name under the Pareto plot
MAX_LABELLED = 40  # ok trials labelled with their index (more: only the front and the best)
MAX_BARS = 30  # rows of a profile's region or kernel table drawn (the largest by energy)


class Skip(Exception):
    """A plot lacks the data it needs: skipped with a note, the others are still written."""


def note(msg):
    print(f"{PROG}: {msg}", file=sys.stderr)


def text(value):
    """An HDF5 string (str, bytes, 0-d or 1-element array of either) as str."""
    if isinstance(value, np.ndarray):
        if value.size != 1:
            return str(value.tolist())
        value = value.reshape(()).item()
    if isinstance(value, (bytes, np.bytes_)):
        return bytes(value).decode("utf-8", "replace")
    return str(value)


def strings(value):
    """An HDF5 string array (vlen or fixed, dataset or attribute) or one string as a list of str."""
    if isinstance(value, h5py.Dataset):
        value = value[()]
    arr = np.atleast_1d(np.asarray(value, dtype=object))
    return [text(v) for v in arr.ravel()]


def number(value, default=math.nan):
    if value is None:
        return default
    try:
        v = np.asarray(value, dtype=float)
        return float(v.reshape(-1)[0]) if v.size else default
    except (TypeError, ValueError):
        return default


def attr(obj, name, default=None):
    return obj.attrs[name] if obj is not None and name in obj.attrs else default


def floats(group, name):
    """Dataset `name` of `group` as a 1-d float array (empty when absent)."""
    if group is None or name not in group or not isinstance(group[name], h5py.Dataset):
        return np.zeros(0)
    return np.asarray(group[name][()], dtype=float).reshape(-1)


# Student's t, two-sided 95%, for 1..30 degrees of freedom (1.96 beyond): scheduler/statistics.cpp's.
T975 = [12.7062, 4.3027, 3.1824, 2.7764, 2.5706, 2.4469, 2.3646, 2.3060, 2.2622, 2.2281,
        2.2010, 2.1788, 2.1604, 2.1448, 2.1314, 2.1199, 2.1098, 2.1009, 2.0930, 2.0860,
        2.0796, 2.0739, 2.0687, 2.0639, 2.0595, 2.0555, 2.0518, 2.0484, 2.0452, 2.0423]


def ci95(values):
    """Half-width of the 95% interval of the mean (NaN with fewer than 2 finite values)."""
    v = values[np.isfinite(values)] if len(values) else values
    if len(v) < 2:
        return math.nan
    t = T975[len(v) - 2] if len(v) - 1 <= 30 else 1.96
    return float(t * np.std(v, ddof=1) / math.sqrt(len(v)))


def complete(obj):
    """The writer marks each group complete=1 after its contents are flushed; like joule's reader,
    groups without the mark (being written, or left half-written by a run that died) are ignored."""
    return obj is not None and number(attr(obj, "complete"), default=0) == 1


def group(f, name):
    """The complete group `name`, or None."""
    g = f.get(name)
    return g if isinstance(g, h5py.Group) and complete(g) else None


def knob_table(f):
    """The knob table joule wrote with the log (root attribute knob_table, see scheduler/knobs.hpp):
    names, labels and how values read; [] for a log written before it was stored."""
    try:
        rows = json.loads(text(attr(f, "knob_table", "[]")))
    except ValueError:
        return []
    return rows if isinstance(rows, list) else []


def knobs_text(g):
    """Knobs::describe() from the log's own table: "offload 0.50, recompute 2, shards 1" (+ the
    optional knobs that are set)."""
    parts = []
    for k in knob_table(g.file):
        if not isinstance(k, dict) or "name" not in k:
            continue
        v = number(attr(g, k["name"]))
        if math.isnan(v) or (k.get("unset") is not None and v == k["unset"]):
            continue
        names = k.get("value_names") or []
        if k.get("special") is not None and v == k["special"]:
            value = k.get("special_text", "")
        elif names and v == int(v) and 0 <= int(v) < len(names):
            value = names[int(v)]
        else:
            value = k.get("format", "{}").format(v)
        parts.append(f"{k.get('label', k['name'])} {value}{k.get('unit', '')}")
    return ", ".join(parts)


# ---------------------------------------------------------------------------------------------
# reading

class Trial:
    def __init__(self, name, g):
        self.group = g
        index = number(attr(g, "index"), default=int(name) if name.isdigit() else -1)
        self.index = int(index) if math.isfinite(index) else -1
        self.name = name
        self.status = text(attr(g, "status", "ok"))
        self.reason = text(attr(g, "reason", ""))
        self.time = number(attr(g, "time_per_step_s"))
        self.energy = number(attr(g, "energy_per_step_j"))
        self.objective = number(attr(g, "objective"))
        self.knobs = knobs_text(g)
        # 95% half-widths of the mean time and energy per step over the measured steps (NaN with
        # fewer than 2): the interval each trial is drawn with, so +-100% does not look like +-1%.
        self.time_ci = ci95(floats(g, "step_time_s"))
        self.energy_ci = ci95(floats(g, "step_energy_j"))

    @property
    def ok(self):
        return self.status == "ok"

    @property
    def plottable(self):
        return self.ok and math.isfinite(self.time) and math.isfinite(self.energy)


def read_trials(f):
    """(complete trials in index order, names of the incomplete ones)."""
    if "trials" not in f or not isinstance(f["trials"], h5py.Group):
        return [], []
    trials, incomplete = [], []
    for name, g in f["trials"].items():
        if isinstance(g, h5py.Group):
            (trials.append(Trial(name, g)) if complete(g) else incomplete.append(name))
    return sorted(trials, key=lambda t: (t.index, t.name)), sorted(incomplete)


def find_best(f, trials):
    """(trial, how): the trial /best names; without /best the ok trial of lowest objective."""
    best = group(f, "best")
    if best is not None:
        idx = attr(best, "trial")
        if idx is None and isinstance(best, h5py.Dataset):
            idx = best[()]
        if idx is not None:
            idx = int(number(idx, default=-1))
            for t in trials:
                if t.index == idx:
                    return t, "chosen"
            note(f"/best names trial {idx}, which is not in /trials")
    ranked = [t for t in trials if t.ok and math.isfinite(t.objective)]
    if ranked:
        return min(ranked, key=lambda t: t.objective), "lowest objective, no complete /best"
    return None, None


def pareto_indices(f, trials):
    """(indices, source): /pareto/trials, else the front computed from the ok trials."""
    p = group(f, "pareto")
    if p is not None and isinstance(p.get("trials"), h5py.Dataset):
        return [int(i) for i in np.asarray(p["trials"][()]).reshape(-1)], "/pareto"
    pts = sorted((t for t in trials if t.plottable), key=lambda t: (t.time, t.energy))
    front, lowest = [], math.inf
    for t in pts:
        if t.energy < lowest:
            front.append(t.index)
            lowest = t.energy
    return front, "computed: no complete /pareto"


def read_trace(g):
    """(time_s [n], watts [n, d], domain names) of a trial or /train group; n may be 0."""
    if g is None:
        return np.zeros(0), np.zeros((0, 0)), []
    src, tname, wname = g, "power_time_s", "power_w"
    if tname not in g and isinstance(g.get("power"), h5py.Group):  # alternative: a power subgroup
        src, tname = g["power"], "time_s"
        wname = "watts" if "watts" in src else "power_w"
    t = floats(src, tname)
    if wname not in src or not isinstance(src[wname], h5py.Dataset):
        return t[:0], np.zeros((0, 0)), []
    wds = src[wname]
    w = np.asarray(wds[()], dtype=float)
    if w.ndim == 1:
        w = w.reshape(-1, 1)
    elif w.ndim != 2:
        raise ValueError(f"{wds.name} has {w.ndim} dimensions, expected [n, domains]")
    if w.shape[0] != t.size and w.shape[1] == t.size:  # stored [domains, n]
        w = w.T
    domains = []
    for holder, name in ((wds, "domains"), (src, "power_domains"), (src, "domains")):
        if name in holder.attrs:
            domains = strings(holder.attrs[name])
            break
        if holder is src and name in src and isinstance(src[name], h5py.Dataset):
            domains = strings(src[name])
            break
    n = min(t.size, w.shape[0])
    if n != t.size or n != w.shape[0]:
        note(f"{g.name}: {t.size} power times but {w.shape[0]} power rows; plotting {n}")
    d = w.shape[1]
    if len(domains) != d:
        domains = (domains + [f"domain {i}" for i in range(len(domains), d)])[:d]
    return t[:n], w[:n], domains


def read_regions(g, table="regions"):
    """List of (name, calls, seconds, energy_j) from a `regions` subgroup (or another table in the
    region schema: a profile's `kernels`); empty when absent.

    joule writes datasets name (strings), calls, seconds, energy_j; also accepted: those as
    attributes, `names` for `name`, or one child group per region with those attributes."""
    r = g.get(table) if g is not None else None
    if not isinstance(r, h5py.Group):
        return []

    def column(name):
        if name in r and isinstance(r[name], h5py.Dataset):
            return r[name][()]
        return r.attrs.get(name)

    names = column("name")
    if names is None:
        names = column("names")
    if names is not None:
        names = strings(names)
        cols = []
        for key in ("calls", "seconds", "energy_j"):
            v = column(key)
            v = np.full(len(names), np.nan) if v is None else np.asarray(v, dtype=float).reshape(-1)
            if v.size != len(names):
                raise ValueError(f"{r.name}: {len(names)} names but {v.size} values in '{key}'")
            cols.append(v)
        return list(zip(names, *cols))
    out = []
    for name, child in r.items():
        if isinstance(child, h5py.Group):
            out.append((text(attr(child, "name", name)), number(attr(child, "calls")),
                        number(attr(child, "seconds")), number(attr(child, "energy_j"))))
    return out


# ---------------------------------------------------------------------------------------------
# plots

class WriteFailed(Exception):
    """A plot could not be written; the message names the file, the error and the free space."""


def free_space(folder):
    try:
        free = shutil.disk_usage(folder).free
    except OSError as e:
        return f"free space in {folder} unknown ({e.strerror or e})"
    for unit in ("bytes", "KiB", "MiB", "GiB", "TiB"):
        if free < 1024 or unit == "TiB":
            return f"{free} bytes free in {folder}" if unit == "bytes" else f"{free:.1f} {unit} free in {folder}"
        free /= 1024


def save(fig, path, written):
    """Writes the figure to a temporary in the plot's folder, fsyncs it and renames it over `path`:
    a failed write (full disk, quota, I/O error) leaves the previous plot as it was and removes the
    temporary; it raises WriteFailed naming the file, the error and the free space."""
    folder = os.path.dirname(path) or "."
    tmp, previous, renamed = None, False, False
    try:
        os.makedirs(folder, exist_ok=True)
        previous = os.path.exists(path)
        if previous:
            mode = stat.S_IMODE(os.stat(path).st_mode)
        else:
            umask = os.umask(0)
            os.umask(umask)
            mode = 0o666 & ~umask  # what savefig(path) would have created
        fd, tmp = tempfile.mkstemp(prefix=f".{os.path.basename(path)}.", suffix=".tmp", dir=folder)
        with os.fdopen(fd, "wb") as f:
            fig.savefig(f, dpi=110, format="png")
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, path)
        renamed = True
        dfd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(dfd)  # the rename itself reaches the disk
        finally:
            os.close(dfd)
    except (Exception, KeyboardInterrupt) as e:
        if tmp is not None and not renamed:
            try:
                os.remove(tmp)
            except OSError:
                pass
        if isinstance(e, KeyboardInterrupt):
            raise
        if isinstance(e, OSError) and e.errno in errno.errorcode:
            why = f"{os.strerror(e.errno)} ({errno.errorcode[e.errno]})"
        else:
            why = f"{type(e).__name__}: {e}"
        if renamed:
            raise WriteFailed(f"wrote {path} but could not sync its folder: {why}; the new plot may not "
                              f"survive a crash") from None
        kept = f"{path} is left as it was" if previous else f"nothing was written to {path}"
        raise WriteFailed(f"cannot write {path}{f' (temporary {tmp})' if tmp else ''}: {why}; "
                          f"{free_space(folder)}; {kept}") from None
    finally:
        plt.close(fig)
    written.append(path)


def plot_pareto(f, trials, incomplete, best, best_how, path, written):
    if not trials:
        raise Skip("no complete trial in /trials" +
                   (f" ({len(incomplete)} incomplete)" if incomplete else ""))
    kind = text(attr(f, "energy_kind", "measured"))
    kind_label = "model" if kind == "model" else "measured"
    source = text(attr(f, "energy_source", ""))
    objective = text(attr(f, "objective", ""))
    front_idx, front_src = pareto_indices(f, trials)
    by_index = {t.index: t for t in trials}
    front = sorted((by_index[i] for i in front_idx if i in by_index and by_index[i].plottable),
                   key=lambda t: t.time)
    ok = [t for t in trials if t.plottable]

    lines = []
    bad = [t for t in trials if not t.ok]
    for t in bad[:MAX_LISTED]:
        why = f": {t.reason}" if t.reason else ""
        knobs = f"  [{t.knobs}]" if t.knobs else ""
        lines.append(f"#{t.index:04d} {t.status}{why}{knobs}")
    if len(bad) > MAX_LISTED:
        lines.append(f"... and {len(bad) - MAX_LISTED} more not ok")
    unplotted = [t for t in trials if t.ok and not t.plottable]
    if unplotted:
        lines.append("ok but without finite time/energy per step: " +
                     ", ".join(f"#{t.index:04d}" for t in unplotted[:20]) +
                     (" ..." if len(unplotted) > 20 else ""))
    if incomplete:
        lines.append("incomplete (being written, or the run died), ignored: " +
                     ", ".join(incomplete[:20]) + (" ..." if len(incomplete) > 20 else ""))
    head = (f"not plotted: {len(bad)} of {len(trials)} trials infeasible or failed" if bad
            else f"all {len(trials)} trial(s) ran ok")
    verdict = text(attr(group(f, "best"), "verdict", ""))
    if verdict:  # how the choice was made: beyond the noise, or the configuration's settings kept
        lines[:0] = textwrap.wrap("choice: " + verdict, 120, subsequent_indent="  ")
    lines = [ln if len(ln) <= 120 else ln[:117] + "..." for ln in lines]

    note_h = 0.2 * (len(lines) + 2)
    fig = plt.figure(figsize=(8.5, 5.5 + note_h))
    gs = fig.add_gridspec(2, 1, height_ratios=[5.5, note_h], hspace=0.25)
    ax = fig.add_subplot(gs[0])
    if ok:
        ax.scatter([t.time for t in ok], [t.energy for t in ok], s=28, color="tab:gray",
                   alpha=0.75, label=f"ok trials ({len(ok)})", zorder=2)
        with_ci = [t for t in ok if math.isfinite(t.time_ci) and math.isfinite(t.energy_ci)]
        if with_ci:
            ax.errorbar([t.time for t in with_ci], [t.energy for t in with_ci],
                        xerr=[t.time_ci for t in with_ci], yerr=[t.energy_ci for t in with_ci],
                        fmt="none", ecolor="tab:gray", alpha=0.5, lw=1, capsize=2, zorder=1,
                        label="95% intervals of the mean (time, energy)")
    else:
        ax.text(0.5, 0.5, "no ok trial with finite time and energy per step",
                ha="center", va="center", transform=ax.transAxes)
    if front:
        ax.plot([t.time for t in front], [t.energy for t in front], "-o", color="tab:red",
                ms=7, lw=1.5, label=f"Pareto front ({front_src})", zorder=3)
    if best is not None and best.plottable:
        ax.scatter([best.time], [best.energy], marker="*", s=320, color="gold", edgecolor="black",
                   zorder=4, label=f"{best_how}: #{best.index:04d}")
    labelled = ok if len(ok) <= MAX_LABELLED else list({t.index: t for t in front + [best] if t}.values())
    for t in labelled:
        if t.plottable:
            ax.annotate(f"{t.index}", (t.time, t.energy), textcoords="offset points",
                        xytext=(4, 4), fontsize=7, color="dimgray")
    ax.set_xlabel("time per step (s)")
    ax.set_ylabel(f"energy per step (J, {kind_label})")
    title = "trials: time vs energy per step"
    if objective:
        title += f"  (objective: {objective})"
    sub = f"energy {kind_label}" + (f" from {source}" if source else "")
    if best is not None:
        sub += f"; {best_how} #{best.index:04d}: {best.knobs}"
    ax.set_title(f"{title}\n{sub if len(sub) <= 110 else sub[:107] + '...'}", fontsize=9)
    ax.grid(True, alpha=0.3)
    if ok or front:
        ax.legend(fontsize=8, loc="best")
    tax = fig.add_subplot(gs[1])
    tax.axis("off")
    tax.text(0.0, 1.0, "\n".join([head] + lines),
             va="top", ha="left", fontsize=7.5, family="monospace", transform=tax.transAxes)
    fig.subplots_adjust(left=0.1, right=0.97, top=0.9, bottom=0.03)
    save(fig, path, written)


def sources(f, best, best_how):
    """[(label, group)]: the best trial and /train, those present."""
    out = []
    if best is not None:
        knobs = f": {best.knobs}" if best.knobs else ""
        out.append((f"trial #{best.index:04d} ({best_how}){knobs}", best.group))
    train = group(f, "train")
    if train is not None:
        label = "train run"
        knobs = knobs_text(train)
        if knobs:
            label += f": {knobs}"
        secs, joules = number(attr(train, "total_seconds")), number(attr(train, "total_energy_j"))
        if math.isfinite(secs):
            label += f"; {secs:.4g} s" + (f", {joules:.4g} J" if math.isfinite(joules) else "")
        out.append((label, train))
    profile = group(f, "profile")
    if profile is not None:
        label = "profile: " + text(attr(profile, "program", ""))
        secs, joules = number(attr(profile, "seconds")), number(attr(profile, "energy_j"))
        if math.isfinite(secs):
            label += f"; {secs:.4g} s" + (f", {joules:.4g} J" if math.isfinite(joules) else "")
        out.append((label, profile))
    return out


def switch_points(train):
    """A run tuned in flight (/train in_flight = 1): the steps where its configuration changed, as
    [(step, time the step began on the power trace's clock, trial index)], and the last step of
    the search (None when there is no search to show)."""
    if train is None or number(attr(train, "in_flight"), 0) != 1:
        return [], None
    step, trial, end = floats(train, "step"), floats(train, "trial"), floats(train, "step_end_s")
    if not step.size or trial.size != step.size:
        return [], None
    points = []
    for i in range(step.size):
        if i == 0 or trial[i] != trial[i - 1]:
            began = end[i - 1] if 0 < i <= end.size else 0.0
            points.append((step[i], began, int(trial[i])))
    search = int(number(attr(train, "search_steps"), 0))
    return points, (step[search - 1] if 0 < search <= step.size else None)


def mark_switches(ax, points, search_end, x_of, first_x):
    """Dotted lines where the configuration changed, each labelled with its trial; the search shaded."""
    if search_end is not None:
        ax.axvspan(first_x, x_of(search_end), color="tab:purple", alpha=0.07, label="search (in flight)")
    for n, (step, began, trial) in enumerate(points):
        x = x_of(step) if began is None else began
        if not math.isfinite(x):
            continue
        ax.axvline(x, color="tab:purple", lw=0.7, ls=":", alpha=0.8,
                   label="configuration change" if n == 0 else None)
        if len(points) <= 40:
            ax.text(x, 1.0, f"{trial}", transform=ax.get_xaxis_transform(), fontsize=6,
                    color="tab:purple", ha="left", va="bottom")


def plot_power(f, best, best_how, path, written):
    srcs = sources(f, best, best_how)
    if not srcs:
        raise Skip("no best trial, no /train and no /profile group")
    traces = [(label, *read_trace(g)) for label, g in srcs]
    if not any(t.size and np.isfinite(w).any() for _, t, w, _ in traces):
        raise Skip("no power samples (power_time_s/power_w empty or all NaN) in "
                   + " or ".join(g.name for _, g in srcs))
    fig, axes = plt.subplots(len(traces), 1, figsize=(9, 3.6 * len(traces)), squeeze=False)
    for ax, (label, t, w, domains) in zip(axes[:, 0], traces):
        ax.set_title(label if len(label) <= 100 else label[:97] + "...", fontsize=9)
        ax.set_xlabel("time (s)")
        ax.set_ylabel("power (W)")
        if not t.size or not np.isfinite(w).any():
            ax.text(0.5, 0.5, "no power samples", ha="center", va="center", transform=ax.transAxes)
            continue
        for j, name in enumerate(domains):
            col = w[:, j]
            fin = np.isfinite(col)
            mean = f", mean {np.mean(col[fin]):.1f} W" if fin.any() else ", no finite samples"
            ax.plot(t, col, lw=1.1, marker="." if t.size < 50 else None, label=f"{name}{mean}")
        if label.startswith("train run"):  # in flight: where the run switched, on its time axis
            points, search_end = switch_points(group(f, "train"))
            end = floats(group(f, "train"), "step_end_s")
            step = floats(group(f, "train"), "step")
            if points and end.size == step.size:
                def time_of(s):
                    return float(end[np.searchsorted(step, s)])
                mark_switches(ax, points, search_end, time_of, 0.0)
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=8, loc="best")
    fig.tight_layout()
    save(fig, path, written)


def largest(rows, label):
    """A profile's table cut to its MAX_BARS largest rows by energy (a note says how many are left out)."""
    if len(rows) <= MAX_BARS:
        return rows
    note(f"{label}: drawing the {MAX_BARS} largest of {len(rows)} rows by energy")
    return sorted(rows, key=lambda r: -(r[3] if math.isfinite(r[3]) else -math.inf))[:MAX_BARS]


def plot_regions(f, best, best_how, path, written):
    srcs = sources(f, best, best_how)
    if not srcs:
        raise Skip("no best trial, no /train and no /profile group")
    kind = "model" if text(attr(f, "energy_kind", "")) == "model" else "measured"
    data = []
    for label, g in srcs:
        if g.name == "/profile":  # the energy tool's: its kernels too, the largest of each
            data.append((label, g.name, "region", largest(read_regions(g), f"{g.name}/regions")))
            data.append((label, g.name + "/kernels", "kernel", largest(read_regions(g, "kernels"), f"{g.name}/kernels")))
        else:
            data.append((label, g.name, "region", read_regions(g)))
    data = [d for d in data if d[3]]
    if not data:
        raise Skip("no regions subgroup (or an empty one) in " + " or ".join(g.name for _, g in srcs))
    rows = len(data)
    height = max(2.8, 0.32 * max(len(r) for _, _, _, r in data) + 1.4)
    fig, axes = plt.subplots(rows, 2, figsize=(11, height * rows), squeeze=False)
    for (label, gname, what, regs), (ax_e, ax_t) in zip(data, axes):
        names = [r[0] for r in regs]
        calls = [r[1] for r in regs]
        for ax, col, xlabel, colour in ((ax_e, 3, f"energy (J, {kind})", "tab:orange"),
                                        (ax_t, 2, "time (s)", "tab:blue")):
            vals = np.array([r[col] for r in regs], dtype=float)
            fin = np.isfinite(vals)
            y = np.arange(len(regs))
            ax.barh(y, np.where(fin, vals, 0.0), color=colour)
            ax.set_yticks(y)
            ax.set_yticklabels([f"{n} ({int(c)}x)" if math.isfinite(c) else n
                                for n, c in zip(names, calls)], fontsize=8)
            ax.invert_yaxis()
            ax.set_xlabel(xlabel)
            ax.grid(True, axis="x", alpha=0.3)
            top = np.max(vals[fin]) if fin.any() else 0.0
            for yi, v, good in zip(y, vals, fin):
                ax.text(v if good else 0.0, yi, f" {v:.3g}" if good else " n/a", va="center",
                        fontsize=7)
            ax.set_xlim(0, top * 1.18 if top > 0 else 1.0)
            if not fin.any():
                ax.text(0.5, 0.5, f"no {xlabel.split()[0]} recorded", ha="center", va="center",
                        transform=ax.transAxes)
        short = label if len(label) <= 70 else label[:67] + "..."
        ax_e.set_title(f"{short}: energy per {what}", fontsize=9)
        ax_t.set_title(f"{gname}: time per {what}", fontsize=9)
    fig.tight_layout()
    save(fig, path, written)


def plot_loss(f, path, written):
    tr = f.get("train")
    if not isinstance(tr, h5py.Group):
        raise Skip("no /train group in the log (tune without a training run)")
    if not complete(tr):
        raise Skip("/train is incomplete (no complete=1 mark: still being written, or the run died)")
    loss = floats(tr, "loss")
    if not loss.size:
        raise Skip("/train has no loss values")
    step = floats(tr, "step")
    if step.size != loss.size:
        if step.size:
            note(f"/train: {step.size} steps but {loss.size} losses; numbering the losses 1..n")
        step = np.arange(1, loss.size + 1, dtype=float)
    if not np.isfinite(loss).any():
        raise Skip("/train/loss is all NaN")
    fig, ax = plt.subplots(figsize=(8.5, 5))
    ax.plot(step, loss, lw=1.2, marker="." if loss.size < 60 else None, color="tab:blue",
            label="training loss")
    points, search_end = switch_points(tr)
    if points:  # in flight: the switch points, each at the first step of its configuration
        mark_switches(ax, [(p, None, t) for p, _, t in points], search_end, lambda s: s, step[0])
    eval_step, eval_loss = floats(tr, "eval_step"), floats(tr, "eval_loss")
    n = min(eval_step.size, eval_loss.size)
    if n:
        acc = floats(tr, "eval_accuracy")
        ax.scatter(eval_step[:n], eval_loss[:n], marker="D", s=45, color="tab:red", zorder=3,
                   label="held-out loss")
        if acc.size >= n:
            for s, l, a in zip(eval_step[:n], eval_loss[:n], acc[:n]):
                if math.isfinite(a) and math.isfinite(l):
                    ax.annotate(f"{100 * a:.0f}%", (s, l), textcoords="offset points",
                                xytext=(4, 6), fontsize=7, color="tab:red")
    lr = floats(tr, "lr")
    if lr.size == loss.size and np.isfinite(lr).any():
        ax2 = ax.twinx()
        ax2.plot(step, lr, lw=0.8, ls="--", color="tab:gray", label="learning rate")
        ax2.set_ylabel("learning rate", color="tab:gray")
        ax2.tick_params(axis="y", colors="tab:gray")
        h1, l1 = ax.get_legend_handles_labels()
        h2, l2 = ax2.get_legend_handles_labels()
        ax.legend(h1 + h2, l1 + l2, fontsize=8, loc="upper right")
    else:
        ax.legend(fontsize=8, loc="upper right")
    fin = loss[np.isfinite(loss)]
    if fin.size and fin.min() > 0 and fin.max() / fin.min() > 50:
        ax.set_yscale("log")
    ax.set_xlabel("step")
    ax.set_ylabel("loss")
    title = "training loss"
    if n and math.isfinite(eval_loss[n - 1]):
        title += f" (final held-out loss {eval_loss[n - 1]:.4g})"
    ax.set_title(title)
    ax.grid(True, alpha=0.3)
    fig.tight_layout()
    save(fig, path, written)


PLOTS = ("pareto.png", "power_trace.png", "regions.png", "loss.png")


def same_file(a, b):
    """Whether paths a and b name one file: the same inode when both exist (symlinks, hard links),
    else the same path once resolved."""
    if os.path.exists(a) and os.path.exists(b):
        return os.path.samefile(a, b)
    return os.path.realpath(a) == os.path.realpath(b)


def output_clash(log, out, out_role):
    """Why the plots cannot go to `out` without touching the log, or None. Paths only: creates nothing."""
    for name in PLOTS:
        path = os.path.join(out, name)
        if same_file(path, log):
            return (f"{out_role} {out}: {path} and the run log {log} are the same file: the plot would "
                    f"overwrite its input (choose another --out)")
        if os.path.isdir(path):
            return f"{out_role} {out}: {path} is a folder; it cannot be written as a plot"
    if os.path.exists(out) and not os.path.isdir(out):
        return f"{out_role} {out}: not a folder"
    return None


def probe_folder(out, out_role):
    """Makes `out` and proves it writable with a probe file (created and removed), or says why not."""
    try:
        os.makedirs(out, exist_ok=True)
        probe = os.path.join(out, f".joule-write-probe-{os.getpid()}")
        with open(probe, "wb"):
            pass
        os.remove(probe)
    except OSError as e:
        return f"{out_role} {out}: cannot write there: {e.strerror or e}"
    return None


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("log", help="the run log (HDF5) written by joule tune")
    ap.add_argument("--out", help="output folder (default: <stem>-plots/ next to the log)")
    args = ap.parse_args()

    if not os.path.isfile(args.log):
        print(f"{PROG}: {args.log}: no such file", file=sys.stderr)
        return 2
    out = args.out or os.path.join(os.path.dirname(os.path.abspath(args.log)),
                                   os.path.splitext(os.path.basename(args.log))[0] + "-plots")
    out_role = "--out" if args.out else "the default output folder"
    problem = output_clash(args.log, out, out_role)
    if problem:
        print(f"{PROG}: {problem}", file=sys.stderr)
        return 2
    if not h5py.is_hdf5(args.log):
        print(f"{PROG}: {args.log}: not an HDF5 file, so not a joule run log", file=sys.stderr)
        return 2
    f = None
    give_up = time.monotonic() + 2.0
    while f is None:  # `joule tune` holds the file (locked) for a moment while it writes a trial
        try:
            f = h5py.File(args.log, "r")
        except OSError as e:
            if time.monotonic() >= give_up:
                print(f"{PROG}: {args.log}: HDF5 cannot open this file: it is damaged or truncated, "
                      f"or another process holds it open for writing ({e})", file=sys.stderr)
                return 2
            time.sleep(0.05)
    with f:
        fmt = text(attr(f, "format", ""))
        if fmt != FORMAT:
            got = f"'{fmt}'" if fmt else "missing"
            print(f"{PROG}: {args.log}: not a joule run log (root attribute format is {got}, "
                  f"expected '{FORMAT}')", file=sys.stderr)
            return 2
        problem = probe_folder(out, out_role)
        if problem:
            print(f"{PROG}: {problem}", file=sys.stderr)
            return 2

        written, failed = [], 0
        try:
            trials, incomplete = read_trials(f)
            best, best_how = find_best(f, trials)
        except Exception as e:  # malformed /trials or /best: the trial plots go, /train may remain
            note(f"cannot read the trials of {args.log}: {type(e).__name__}: {e}")
            trials, incomplete, best, best_how, failed = [], [], None, None, 1
        jobs = [("pareto.png", lambda p, w: plot_pareto(f, trials, incomplete, best, best_how, p, w)),
                ("power_trace.png", lambda p, w: plot_power(f, best, best_how, p, w)),
                ("regions.png", lambda p, w: plot_regions(f, best, best_how, p, w)),
                ("loss.png", lambda p, w: plot_loss(f, p, w))]
        for name, job in jobs:
            try:
                job(os.path.join(out, name), written)
            except Skip as e:
                note(f"skipped {name}: {e}")
            except WriteFailed as e:  # the others may still fit (a smaller plot, a freed disk)
                note(str(e))
                failed += 1
            except Exception as e:  # malformed data: report it, still write the other plots
                plt.close("all")
                note(f"skipped {name}: could not plot {args.log}: {type(e).__name__}: {e}")
                failed += 1
    for p in written:
        print(p)
    if failed:
        return 1
    if not written:
        print(f"{PROG}: {args.log}: nothing to plot (see the notes above)", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:  # save() has removed its temporary; the plots written so far stay
        note("interrupted")
        sys.exit(1)
