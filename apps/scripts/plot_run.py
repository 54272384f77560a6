#!/usr/bin/python3
"""Plots a joule run log (the HDF5 file `joule tune` writes) as PNG files.

    /usr/bin/python3 apps/scripts/plot_run.py RUN.h5 [--out DIR]

DIR defaults to <stem>-plots/ next to the log. Writes, and prints the path of each:
  pareto.png       time per step vs energy per step of every ok trial with its 95% intervals of
                   the mean, the Pareto front joined, the chosen trial (/best) starred under it
                   and the baseline boxed, the verdict that chose it, infeasible and failed trials
                   listed below; where the front and the choice crowd together, that part is drawn
                   again enlarged beside the plot (its box drawn over the trials; the inset's view
                   holds the whole interval of each trial it shows, else no inset). Each trial is labelled with its index where the
                   label overlaps nothing (the choice, the baseline and the front first); those
                   left without a place are listed below the plot
  power_trace.png  power (W, from 0) over time, one line per domain, for the best trial and /train
                   (an energy tool profile: for /profile, the whole program); for a MODEL source in
                   a run tuned in flight, the pauses between steps (not after an evaluation) are
                   shaded and the model's samples there (its idle floor: joule waiting) not drawn
  regions.png      energy and time per named region, for the best trial and /train (a profile:
                   its regions and its kernels, the MAX_BARS largest by energy each), as a tree:
                   a region opened inside another is indented under it, its parent's bar pale
                   behind its own (figures are inclusive: rows do not add up). Where the log
                   records regions per call path (`region_paths`), each path is a row under the
                   row of the path it was opened in: a region opened in two places is drawn under
                   both, each with that place's calls, time and energy. Older logs store regions
                   by name: the nesting is the log's own where it has one (a `parent` column, the
                   region a name ran in most often, or names that are paths "step/forward"), else
                   (logs written before joule recorded parents) joule's own nesting (JOULE_NESTING)
  loss.png         training loss per step of /train, eval losses marked with their exact caption
                   accuracy as joule's report rounds it (61.5%), placed clear of the curves
A run tuned in flight (`joule train --tune`) gets its configuration changes (dotted, labelled with
the trial in staggered rows above the plot) and the search (shaded) on the loss and the /train
power curves. The run's energy source is named once, in each figure's title.

--describe FILE writes a JSON summary of each plot written (- : stdout, after the paths; a file is
written as the PNGs are): its titles, each axes' title, labels, limits and legend entries, its
labelled lines (their points as drawn, NaN where broken, and their path on the page), labelled
boxes (extent, zorder) and point labels (text, extent on the page), the texts that reach outside
the figure and the pairs of texts that overlap
(tests/scripts/plot_run_check.sh checks them).

A plot whose data is missing (no /train group, no power samples...) is skipped with a one-line
note on stderr; the others are still written. Before anything is written, every PNG path is
checked: it must not be the run log itself (also through a symlink or hard link), a folder, a FIFO
or device, nor another user's file; and DIR (made if missing, mode 0755) must be safe to write in
and writable: it is opened as joule opens an output's folder (every folder on the way root's or
this user's and not writable by others without the sticky bit, unless JOULE_ACCEPT_SHARED_FOLDER=1;
another user's link in a folder others can write not followed), and a private temporary is made
and removed there (no fixed probe name that a link could be planted at). Each PNG is written as
joule writes its files (joule_write.py, docs/outputs.md): into a private folder beside it
(.NAME.joule-XXXXXXXXXXXX/NAME, mode 0700), fsynced, given the mode of the PNG it replaces and
renamed over NAME (a symbolic link there is replaced, not followed): a failed write (a full disk,
an exceeded quota, an I/O error, Ctrl-C) removes the temporary and leaves the previous PNG as it
was, with one line naming the file, the error and the free space; the other plots are still written.
The log may be another user's, forged against whoever plots it (plot_run_log.py): it is read only
from a regular file (a FIFO is refused, not waited on), through the descriptor that was checked;
a link out of the file (external, user-defined; soft links too, which joule never writes) or a
dataset kept outside it (external storage, virtual) refuses the whole file before anything is read;
a dataset that claims more values than the file stores (sparse, or compressed beyond what any
compression reaches, as joule's reader rules) is not read: its plot is skipped. matplotlib draws
with its own defaults: no matplotlibrc (the working folder's, the user's, the system's) is used.
Exit status: 0 when every plot that had data was written; 1 when a plot failed on malformed data
(a dataset refused so included) or could not be written; 2 when the file is not a regular file, not
a joule run log (root attribute format != "joule-run-log-v1"), holds a link out of the file or data
kept outside it, none of the plots has data, an output path is refused, or h5py, matplotlib or
numpy is missing.
Needs h5py, matplotlib and numpy (Debian's python3-h5py, python3-matplotlib and python3-numpy):
a Python without one of them exits 2 with one line naming the missing ones, the Python
(sys.executable) and how to install them (apt, or that Python's pip).

Reads the layout of runlog/run_log.cpp (docs/run-log.md): root attributes
format, energy_kind, energy_source, objective; /trials/NNNN (attributes status, reason,
time_per_step_s, energy_per_step_j, objective and the knobs; datasets power_time_s [n],
power_w [n, domains], power_domains [domains] strings; subgroup regions with datasets name,
calls, seconds, energy_j, parent; subgroup region_paths with those and parent_row); /best (attribute trial); /pareto (dataset trials); /train (datasets
step, loss, lr, eval_step, eval_loss, eval_accuracy, and in flight trial and step_end_s;
attributes total_seconds, total_energy_j, in_flight, search_steps;
regions and power as in a trial); /profile (the energy tool's log: attributes program,
seconds, energy_j; regions, and kernels in the same schema, and power as in a trial). Like joule's reader, groups without the attribute complete = 1
(being written, or left by a run that died) are ignored.
"""
import argparse
import contextlib
import importlib
import json
import math
import os
import sys
import textwrap

# Debian's package of each module this script needs, and pip's.
NEEDED = (("h5py", "python3-h5py", "h5py"), ("matplotlib", "python3-matplotlib", "matplotlib"),
          ("numpy", "python3-numpy", "numpy"))


def missing_packages_message(missing):
    """The one error a Python without h5py, matplotlib or numpy gets instead of a traceback: which
    modules are missing (and why, as Python said it), which Python this is, and how to install them."""
    names = [name for name, _ in missing]
    why = "; ".join(f"{name}: {type(e).__name__}: {e}" for name, e in missing)
    apt = " ".join(deb for name, deb, _ in NEEDED if name in names)
    pip = " ".join(pypi for name, _, pypi in NEEDED if name in names)
    python = sys.executable or "this Python"
    return (f"plot_run.py: this Python ({python}, {sys.version.split()[0]}) lacks {', '.join(names)} ({why}); "
            f"plot_run.py needs h5py, matplotlib and numpy. Install them for the system Python "
            f"(/usr/bin/python3) on Debian or Ubuntu with: sudo apt install {apt}; or for this Python with: "
            f"{python} -m pip install {pip}")


def import_matplotlib():
    """matplotlib, drawing with its own defaults. At import it reads a matplotlibrc from the working
    folder first: one that another user put in theirs could set text.usetex (latex run on the run
    log's texts) or be a FIFO (the import blocks). So it is imported from "/" (root's) and the
    working folder kept by descriptor; rcdefaults() then sets aside the user's and the system's
    matplotlibrc too: the plots read the same wherever, and by whoever, they are made."""
    here = None
    with contextlib.suppress(OSError):
        here = os.open(".", os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        if here is not None:
            os.chdir("/")
        import matplotlib
    finally:
        if here is not None:
            os.fchdir(here)  # the folder the command ran in, even if renamed meanwhile
            os.close(here)
    matplotlib.rcdefaults()
    matplotlib.use("Agg")
    return matplotlib


def import_needed():
    """h5py, numpy and matplotlib (imported as import_matplotlib does), or exit 2 with one line
    naming the missing ones, this Python and how to install them."""
    missing = []
    for name in ("h5py", "numpy"):
        try:
            importlib.import_module(name)
        except ImportError as e:
            missing.append((name, e))
    mpl = None
    try:
        mpl = import_matplotlib()
    except ImportError as e:
        missing.append(("matplotlib", e))
    if missing:
        print(missing_packages_message(sorted(missing, key=lambda m: m[0])), file=sys.stderr)
        sys.exit(2)
    return mpl


matplotlib = import_needed()
import h5py  # noqa: E402
import matplotlib.text  # noqa: E402
import matplotlib.patches  # noqa: E402
import matplotlib.ticker  # noqa: E402
import matplotlib.transforms  # noqa: E402
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import joule_write  # noqa: E402
import plot_run_layout  # noqa: E402
from plot_run_log import (  # noqa: E402
    Skip,
    note,
    text,
    strings,
    number,
    attr,
    floats,
    complete,
    group,
    knobs_text,
    energy_words,
    domain_label,
    wrap,
    read_trials,
    find_best,
    pareto_indices,
    read_trace,
    read_regions,
    read,
    open_log,
    Refused,
    FORMAT,
    PROG)
from plot_run_layout import WriteFailed, save, place_labels, marker_box  # noqa: E402
MAX_LISTED = 14  # failed/infeasible trials listed by name under the Pareto plot
MAX_LABELLED = 40  # ok trials labelled with their index (more: only the front and the best)
MAX_BARS = 30  # rows of a profile's region or kernel table drawn (the largest by energy)


def plot_pareto(f, trials, incomplete, best, best_how, path, written):
    if not trials:
        raise Skip("no complete trial in /trials" +
                   (f" ({len(incomplete)} incomplete)" if incomplete else ""))
    kind = text(attr(f, "energy_kind", "measured"))
    kind_label = "model" if kind == "model" else "measured"
    objective = text(attr(f, "objective", ""))
    front_idx, front_src = pareto_indices(f, trials)
    by_index = {t.index: t for t in trials}
    front = sorted((by_index[i] for i in front_idx if i in by_index and by_index[i].plottable),
                   key=lambda t: t.time)
    ok = [t for t in trials if t.plottable]
    best_group = group(f, "best")
    baseline = by_index.get(int(number(attr(best_group, "baseline"), default=-1)))
    baseline_is = text(attr(best_group, "baseline_is", "")) or "baseline"

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
    verdict = text(attr(best_group, "verdict", ""))
    if verdict:  # how the choice was made: beyond the noise, or the configuration's settings kept
        lines[:0] = textwrap.wrap("choice: " + verdict, 120, subsequent_indent="  ")
    lines = [ln if len(ln) <= 120 else ln[:117] + "..." for ln in lines]

    # The front and the choice often sit in a tight cluster far from the slow trials: that part is
    # drawn again, enlarged, beside the plot, where its trials are labelled.
    zoom = zoom_box(ok, [t for t in front + [best, baseline] if t is not None and t.plottable])

    # Rows for the notes, the head and three spare: the labels left off where the trials crowd.
    note_h = 0.17 * (len(lines) + 4)
    fig = plt.figure(figsize=(11.5 if zoom else 10.5, 5.8 + note_h), layout="constrained")
    gs = fig.add_gridspec(2, 2, height_ratios=[5.8, note_h], width_ratios=[5.0, 2.7 if zoom else 1.7])
    ax = fig.add_subplot(gs[0, 0])
    if zoom:
        right = gs[0, 1].subgridspec(2, 1, height_ratios=[1.0, 2.4])
        lax, zax = fig.add_subplot(right[0]), fig.add_subplot(right[1])
    else:
        lax, zax = fig.add_subplot(gs[0, 1]), None
    lax.axis("off")  # the legend's, beside the plot: it covers no trial

    def draw(a, legend):
        """The trials, their intervals, the front, the choice and the baseline on axes `a`."""
        name = (lambda s: s) if legend else (lambda s: None)
        if ok:
            a.scatter([t.time for t in ok], [t.energy for t in ok], s=28, color="tab:gray",
                      alpha=0.75, label=name(f"ok trials ({len(ok)})"), zorder=2)
            with_ci = [t for t in ok if math.isfinite(t.time_ci) and math.isfinite(t.energy_ci)]
            if with_ci:
                a.errorbar([t.time for t in with_ci], [t.energy for t in with_ci],
                           xerr=[t.time_ci for t in with_ci], yerr=[t.energy_ci for t in with_ci],
                           fmt="none", ecolor="tab:gray", alpha=0.5, lw=1, capsize=2, zorder=1,
                           label=name("95% interval of the mean\n(time and energy per step)"))
        # The choice's star goes under the front and the trials (zorder), so that a chosen trial
        # on the front still shows the front's marker at its centre.
        if best is not None and best.plottable:
            a.scatter([best.time], [best.energy], marker="*", s=360, color="gold", edgecolor="black",
                      lw=0.8, zorder=1.5, label=name(f"{best_how}: #{best.index:04d}"))
        if baseline is not None and baseline.plottable and baseline is not best:
            a.scatter([baseline.time], [baseline.energy], marker="s", s=110, facecolor="none",
                      edgecolor="black", lw=1.2, zorder=1.6,
                      label=name(wrap(f"{baseline_is}: #{baseline.index:04d}", 34)))
        if front:
            a.plot([t.time for t in front], [t.energy for t in front], "-o", color="tab:red",
                   ms=6, lw=1.5, zorder=3, label=name(wrap(f"Pareto front ({front_src}): {len(front)} trial"
                                                          + ("s" if len(front) != 1 else ""), 34)))
        a.grid(True, alpha=0.3)

    draw(ax, True)
    cut = False
    if ok:  # the limits: the trials, with their intervals up to 3/4 of their spread beyond them
        for axis, value, half in ((ax.set_xlim, "time", "time_ci"), (ax.set_ylim, "energy", "energy_ci")):
            v = np.array([getattr(t, value) for t in ok])
            h = np.nan_to_num(np.array([getattr(t, half) for t in ok]))
            lo, hi, span = v.min(), v.max(), np.ptp(v) or (abs(v.max()) * 0.2 or 1.0)
            low = min((v - h).min(), lo - 0.06 * span)
            high = max((v + h).max(), hi + 0.06 * span)
            low2, high2 = max(low, lo - 0.75 * span), min(high, hi + 0.75 * span)
            cut |= low2 > low or high2 < high
            low2, high2 = low2 - 0.02 * (high2 - low2), high2 + 0.02 * (high2 - low2)
            if lo >= 0:
                low2 = max(low2, 0.0)  # no negative time or energy: an interval below 0 is cut at 0
                cut |= low2 > low
            axis(low2, high2)
    if cut:
        for bars in ax.containers:
            if (bars.get_label() or "").startswith("95% interval"):
                bars.set_label(bars.get_label() + ";\nsome cut at the plot's edge")
    if not ok:
        ax.text(0.5, 0.5, "no ok trial with finite time and energy per step",
                ha="center", va="center", transform=ax.transAxes)
    if zoom:
        (x0, x1), (y0, y1) = zoom
        # Over the trials (zorder above their markers, intervals and the front): the near-optimal
        # trials it encloses would otherwise hide it.
        ax.add_patch(matplotlib.patches.Rectangle((x0, y0), x1 - x0, y1 - y0, fill=False, ls="--", lw=1.3,
                                                  edgecolor="tab:blue", zorder=4,
                                                  label="enlarged below right"))
        draw(zax, False)
        zax.set_xlim(x0, x1)
        zax.set_ylim(y0, y1)
        zax.tick_params(labelsize=7)
        zax.xaxis.set_major_locator(matplotlib.ticker.MaxNLocator(4))
        zax.set_title("enlarged: the front and the choice", fontsize=8, color="tab:blue")
        for side in zax.spines.values():
            side.set_edgecolor("tab:blue")
            side.set_linestyle("--")
    ax.set_xlabel("time per step (s)")
    ax.set_ylabel(f"energy per step (J, {kind_label})")
    title = "trials: time vs energy per step" + (f" (objective: {objective})" if objective else "")
    sub = [wrap(energy_words(f), 110)]
    if best is not None:
        choice = f"{best_how}: #{best.index:04d}" + (f" ({best.knobs})" if best.knobs else "")
        if baseline is best:
            choice += f", {baseline_is}"
        sub.append(wrap(choice, 110))
    ax.set_title("\n".join([title] + sub), fontsize=9)
    if ok or front:
        lax.legend(*ax.get_legend_handles_labels(), fontsize=8, loc="upper left", borderaxespad=0)
    tax = fig.add_subplot(gs[1, :])
    tax.axis("off")
    note_text = tax.text(0.0, 1.0, "\n".join([head] + lines), va="top", ha="left", fontsize=7.5,
                         family="monospace", transform=tax.transAxes)

    # Labels: the choice, the baseline and the front first, then the other ok trials (up to
    # MAX_LABELLED), each where it overlaps nothing (in the enlarged part: there); the ones that
    # found no place are listed.
    if ok:
        chosen = [t for t in (best, baseline) if t is not None and t.plottable]
        order = list({t.index: t for t in chosen + front + (ok if len(ok) <= MAX_LABELLED else [])}.values())
        fig.canvas.draw()
        fig.set_layout_engine("none")

        def inside(t):
            return zoom is not None and zoom[0][0] <= t.time <= zoom[0][1] and zoom[1][0] <= t.energy <= zoom[1][1]

        crowded = []
        for a, mine in ((ax, [t for t in order if not inside(t)]), (zax, [t for t in order if inside(t)])):
            if a is None or not mine:
                continue
            markers = [marker_box(a, t.time, t.energy, 28, fig.dpi) for t in ok]
            if best is not None and best.plottable:
                markers.append(marker_box(a, best.time, best.energy, 360, fig.dpi))
            items = []
            for t in mine:
                important = t is best or t is baseline
                colour = "darkred" if t in front else "black" if important else "dimgray"
                items.append((t.time, t.energy, f"{t.index}",
                              dict(fontsize=7.5 if important else 7, color=colour,
                                   fontweight="bold" if important else "normal", zorder=5)))
            crowded += place_labels(a, items, markers)
        if crowded:
            note_text.set_text(note_text.get_text() + "\n" + wrap(
                "not labelled (no free place beside them): " + ", ".join(crowded), 120))
    save(fig, path, written)


def zoom_box(ok, key):
    """((x0, x1), (y0, y1)): the part of the plot around the `key` trials (the front, the choice) and
    the trials crowded near them, worth drawing enlarged: it holds at least 3 trials and spans at
    most a third of the trials' spread each way; None otherwise."""
    if len(ok) < 4 or not key:
        return None
    xs, ys = np.array([t.time for t in ok]), np.array([t.energy for t in ok])
    wx, wy = np.ptp(xs), np.ptp(ys)
    if wx <= 0 or wy <= 0:
        return None
    x0, x1 = min(t.time for t in key), max(t.time for t in key)
    y0, y1 = min(t.energy for t in key), max(t.energy for t in key)
    while True:  # take in every trial within 1/20 of the spread of the box, until none is left
        near = ((xs >= x0 - 0.05 * wx) & (xs <= x1 + 0.05 * wx) & (ys >= y0 - 0.05 * wy) & (ys <= y1 + 0.05 * wy))
        nx0, nx1 = min(x0, xs[near].min()), max(x1, xs[near].max())
        ny0, ny1 = min(y0, ys[near].min()), max(y1, ys[near].max())
        if (nx0, nx1, ny0, ny1) == (x0, x1, y0, y1):
            break
        x0, x1, y0, y1 = nx0, nx1, ny0, ny1
    px, py = max(0.12 * (x1 - x0), 0.01 * wx), max(0.12 * (y1 - y0), 0.01 * wy)
    x0, x1, y0, y1 = x0 - px, x1 + px, y0 - py, y1 + py
    held = ((xs >= x0) & (xs <= x1) & (ys >= y0) & (ys <= y1)).sum()
    if held < 3 or (x1 - x0) > wx / 3 or (y1 - y0) > wy / 3:
        return None
    # The view holds the 95% intervals of the trials it shows, whole: an interval wider than the
    # view would cross it edge to edge and say nothing. Where that widens it beyond half the
    # trials' spread, it would enlarge little: no inset (the trials are then not distinguishable there
    # anyway, which the full plot shows).
    for _ in range(20):
        shown = [t for t in ok if x0 <= t.time <= x1 and y0 <= t.energy <= y1]
        bx = [v for t in shown if math.isfinite(t.time_ci) for v in (t.time - t.time_ci, t.time + t.time_ci)]
        by = [v for t in shown if math.isfinite(t.energy_ci) for v in (t.energy - t.energy_ci, t.energy + t.energy_ci)]
        nx0, nx1 = min([x0] + bx), max([x1] + bx)
        ny0, ny1 = min([y0] + by), max([y1] + by)
        if (nx0, nx1, ny0, ny1) == (x0, x1, y0, y1):
            break
        mx, my = 0.03 * (nx1 - nx0), 0.03 * (ny1 - ny0)  # the bars' caps clear of the frame
        x0, x1 = (nx0 - mx if nx0 < x0 else x0), (nx1 + mx if nx1 > x1 else x1)
        y0, y1 = (ny0 - my if ny0 < y0 else y0), (ny1 + my if ny1 > y1 else y1)
    else:
        return None
    if (x1 - x0) > wx / 2 or (y1 - y0) > wy / 2:
        return None
    return (float(x0), float(x1)), (float(y0), float(y1))


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


def pauses(train):
    """[(t0, t1)]: where an in-flight run (/train in_flight = 1) ran no training step and no
    evaluation, on its power trace's clock: between the end of a step (step_end_s) and the start of
    the next (its end less its seconds), at the configuration changes and at the measurements' edges
    (where joule rebuilds the trainer, or waits for the energy source to cover a window). A pause
    after an evaluation step is left out: the evaluation ran there."""
    if train is None or number(attr(train, "in_flight"), 0) != 1:
        return []
    step, end, secs = floats(train, "step"), floats(train, "step_end_s"), floats(train, "seconds")
    if not step.size or end.size != step.size or secs.size != step.size:
        return []
    evals = set(floats(train, "eval_step").tolist())
    out = []
    for i in range(step.size - 1):
        t0, t1 = end[i], end[i + 1] - secs[i + 1]
        if math.isfinite(t0) and math.isfinite(t1) and t1 > t0 and step[i] not in evals:
            out.append((float(t0), float(t1)))
    return out


def drop_in_pauses(t, w, spans):
    """w with NaN where a sample's window (from the sample before it to its own time) lies mostly in
    `spans`: a model's estimate there is of joule's pause (its process waiting), drawn as the
    model's idle floor; the line is broken there instead. Returns (w, samples dropped)."""
    if not spans or t.size < 2:
        return w, 0
    starts = np.concatenate(([t[0] - (t[1] - t[0])], t[:-1]))
    inside = np.zeros(t.size)
    for t0, t1 in spans:
        inside += np.clip(np.minimum(t, t1) - np.maximum(starts, t0), 0, None)
    drop = inside >= 0.5 * np.maximum(t - starts, 1e-12)
    w = w.copy()
    w[drop, :] = np.nan
    return w, int(drop.sum())


SWITCH_ROWS = 3  # rows of trial labels over a plot's configuration changes (crowded ones left off)
SWITCH_ROW_PT = 8  # their height, points


def mark_switches(ax, points, search_end, x_of, first_x):
    """Dotted lines where the configuration changed, each labelled with its trial above the plot (in
    up to SWITCH_ROWS staggered rows; a label with no free place in any row is left off); the search
    shaded. Returns the rows used, for the title's pad."""
    if search_end is not None:
        ax.axvspan(first_x, x_of(search_end), color="tab:purple", alpha=0.07, label="search (in flight)")
    xs = [(x_of(step) if began is None else began, trial) for step, began, trial in points]
    xs = [(x, trial) for x, trial in xs if math.isfinite(x)]
    # Where each label goes, in the axes' width: the limits as they stand (the data is drawn), the
    # width the axes has before the layout (which widens it: an estimate on the safe side).
    lo, hi = ax.get_xlim()
    width_in = ax.get_position().width * ax.figure.get_figwidth() * 0.9
    ends = [-math.inf] * SWITCH_ROWS  # per row, where its last label ends (fraction of the axes)
    labels, crowded = [], 0
    for x, trial in xs:
        start = (x - lo) / (hi - lo) if hi > lo else 0.0
        end = start + (len(str(trial)) * 0.62 * 6 + 3) / 72 / width_in  # 6 pt digits and a gap
        row = next((r for r in range(SWITCH_ROWS) if ends[r] <= start), None)
        if row is None:
            crowded += 1
            continue
        ends[row] = end
        labels.append((x, trial, row))
    change = "configuration change (trial above)"
    if crowded:
        change += f"; {crowded} label{'s' if crowded != 1 else ''} left off"
    for n, (x, trial) in enumerate(xs):
        ax.axvline(x, color="tab:purple", lw=0.7, ls=":", alpha=0.8, label=change if n == 0 else None)
    for x, trial, row in labels:
        ax.annotate(f"{trial}", (x, 1.0), xycoords=ax.get_xaxis_transform(), xytext=(0.5, 1 + SWITCH_ROW_PT * row),
                    textcoords="offset points", fontsize=6, color="tab:purple", ha="left", va="bottom")
    return 1 + max((row for _, _, row in labels), default=-1)


def plot_power(f, best, best_how, path, written):
    srcs = sources(f, best, best_how)
    if not srcs:
        raise Skip("no best trial, no /train and no /profile group")
    traces = [(label, *read_trace(g)) for label, g in srcs]
    if not any(t.size and np.isfinite(w).any() for _, t, w, _ in traces):
        raise Skip("no power samples (power_time_s/power_w empty or all NaN) in "
                   + " or ".join(g.name for _, g in srcs))
    fig, axes = plt.subplots(len(traces), 1, figsize=(9, 0.4 + 3.6 * len(traces)), squeeze=False,
                             layout="constrained")
    fig.suptitle(wrap("power over time, per domain; " + energy_words(f), 110), fontsize=9)
    kind = text(attr(f, "energy_kind", "measured"))
    for ax, (label, t, w, domains) in zip(axes[:, 0], traces):
        ax.set_xlabel("time (s)")
        ax.set_ylabel("power (W)")
        rows = 0
        if not t.size or not np.isfinite(w).any():
            ax.text(0.5, 0.5, "no power samples", ha="center", va="center", transform=ax.transAxes)
            ax.set_title(wrap(label, 110), fontsize=9)
            continue
        # A model's estimate inside joule's pauses between steps is not drawn (its idle floor would
        # read as a drop in power): the line breaks there, the pauses are shaded and counted. The
        # means are over every sample, as the log's energy is.
        drawn, spans, dropped = w, [], 0
        if kind == "model" and label.startswith("train run"):
            spans = pauses(group(f, "train"))
            drawn, dropped = drop_in_pauses(t, w, spans)
        for j, name in enumerate(domains):
            col = w[:, j]
            fin = np.isfinite(col)
            mean = f", mean {np.mean(col[fin]):.1f} W" if fin.any() else ", no finite samples"
            ax.plot(t, drawn[:, j], lw=1.1, marker="." if t.size < 50 else None, label=f"{domain_label(name)}{mean}")
        if dropped:
            for n, (t0, t1) in enumerate(spans):
                # Only the first span is named in the legend; the others keep matplotlib's default
                # label (label=None would make it None on newer matplotlib, not "_child…").
                named = {"label": f"no step running (configuration change, measurement edge): "
                                  f"{dropped} model sample{'s' if dropped != 1 else ''} not drawn"} if n == 0 else {}
                ax.axvspan(t0, t1, color="0.6", alpha=0.35, lw=0, zorder=0.5, **named)
        fin = w[np.isfinite(w)]
        if fin.size and fin.min() >= 0:  # power from 0: the swings at their true size
            ax.set_ylim(0, max(fin.max() * 1.08, 1e-9))
        if label.startswith("train run"):  # in flight: where the run switched, on its time axis
            points, search_end = switch_points(group(f, "train"))
            end = floats(group(f, "train"), "step_end_s")
            step = floats(group(f, "train"), "step")
            if points and end.size == step.size:
                def time_of(s):
                    return float(end[np.searchsorted(step, s)])
                rows = mark_switches(ax, points, search_end, time_of, 0.0)
        ax.set_title(wrap(label, 110), fontsize=9, pad=6 + SWITCH_ROW_PT * rows)
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=8, loc="best")
    save(fig, path, written)


def largest(rows, label, parent_rows=None):
    """A table cut to its MAX_BARS largest rows by energy (a note says how many are left out). With
    parent_rows (a table per call path), the rows kept keep the paths they were opened in, and the
    result is (rows, parent_rows) re-indexed."""
    if len(rows) <= MAX_BARS:
        return rows if parent_rows is None else (rows, parent_rows)
    note(f"{label}: drawing the {MAX_BARS} largest of {len(rows)} rows by energy")
    order = sorted(range(len(rows)), key=lambda i: -(rows[i][3] if math.isfinite(rows[i][3]) else -math.inf))
    if parent_rows is None:
        return [rows[i] for i in order[:MAX_BARS]]
    keep = set()
    for i in order[:MAX_BARS]:
        while 0 <= i < len(rows) and i not in keep:
            keep.add(i)
            i = parent_rows[i]
    kept = sorted(keep)
    new_index = {old: k for k, old in enumerate(kept)}
    return [rows[i] for i in kept], [new_index.get(parent_rows[i], -1) for i in kept]


# Where joule's own code opens its regions (core/train/trainer.cpp, core/model/*, captioning.cpp): each
# name's enclosing regions, the usual one first. Logs written before joule recorded each region's
# parent (the `parent` column) store regions by name alone (each inclusive of what it holds, a
# name's calls summed wherever they were opened), so this is how plot_regions nests them there. d2h, h2d and optimizer_host run on other lanes beside the step: top-level.
JOULE_NESTING = {
    "joule::block_forward": ("forward",),
    "joule::block_backward": ("backward",),
    "ulysses_all_to_all": ("joule::block_forward", "joule::block_backward"),
    "forward": ("step", "greedy_captions", "evaluate"),
    "backward": ("step",),
    "optimizer_device": ("step",),
    "comm": ("step",),
    "greedy_captions": ("evaluate",),
}


def read_parents(g, table, names):
    """Each region's parent by the log itself: a `parent` string column ("" = top level), or names
    that are paths ("step/forward": inside "step"); None when the log has neither."""
    r = g.get(table) if g is not None else None
    if isinstance(r, h5py.Group) and isinstance(r.get("parent"), h5py.Dataset):
        parents = strings(r["parent"])
        if len(parents) == len(names):
            return parents
    if any("/" in n.strip("/") for n in names):
        return [n.strip("/").rpartition("/")[0] for n in names]
    return None


def read_path_table(g):
    """GROUP/region_paths (logs that record regions per call path): (rows, parent_rows), each row
    (name, calls, seconds, energy_j) of one call path, parent_rows[i] the row of the path it was
    opened in (an earlier row; -1: the top level). None where the log has no usable path table
    (older logs: regions by name); a table whose parent_row is not an earlier row is noted and
    not used."""
    rows = read_regions(g, "region_paths")
    r = g.get("region_paths") if g is not None else None
    if not rows or not isinstance(r, h5py.Group) or not isinstance(r.get("parent_row"), h5py.Dataset):
        return None
    try:
        parent_rows = [int(x) for x in np.asarray(read(r["parent_row"])).reshape(-1)]
    except (TypeError, ValueError, OverflowError):
        parent_rows = []
    if len(parent_rows) != len(rows) or any(not (-1 <= p < i) for i, p in enumerate(parent_rows)):
        note(f"{r.name}: parent_row is not one earlier row (or -1) per path; drawing {g.name}/regions by name")
        return None
    return rows, parent_rows


OPENED_IN = "opened in "  # region_tree's note on a path drawn top-level that was opened inside another


def region_tree(regs, parents, parent_rows=None):
    """The rows of a region table in tree order: [(depth, prefix, row, parent row or None, also)],
    siblings by energy (else time), largest first; `prefix` draws the tree ("├─ ", "│  └─ ");
    `also` names the other enclosing regions a name was opened in too (joule's nesting only).
    parent_rows (a table per call path): each row is drawn under its own parent row, so a region
    opened in two places is drawn under each, with that place's figures. Otherwise rows are by
    name, placed by `parents` (names) or, where None, joule's own nesting. A child must fit in its
    parent (time and energy no larger): one that does not is drawn top-level (a path's `also` then
    says where it was opened: work on another stream, such as a copy, can outlast its parent)."""
    by_name = {r[0]: i for i, r in enumerate(regs)}

    def fits(child, parent):
        return all(not (math.isfinite(child[k]) and math.isfinite(parent[k])) or child[k] <= parent[k] * 1.001 + 1e-12
                   for k in (2, 3))

    parent_of, also = {}, {}  # row index -> parent row index; row index -> other parents' names
    for i, r in enumerate(regs):
        if parent_rows is not None:
            candidates = [parent_rows[i]] if 0 <= parent_rows[i] < i else []
        elif parents is not None:
            name = parents[i]
            while name and name not in by_name:  # a path whose parent is not a row: its nearest row
                name = name.rpartition("/")[0]
            candidates = [by_name[name]] if name else []
        else:
            candidates = [by_name[p] for p in JOULE_NESTING.get(r[0], ()) if p in by_name]
        chosen = next((p for p in candidates if p != i and fits(r, regs[p])), None)
        if chosen is not None:
            parent_of[i] = chosen
            also[i] = [regs[p][0] for p in candidates if p != chosen]
        elif parent_rows is not None and candidates:  # its work outlasted the region it was opened in
            also[i] = [f"{OPENED_IN}{regs[candidates[0]][0]}, outlasting it"]
    # A cycle (only from a malformed parent column) is broken: its members go top-level.
    for i in list(parent_of):
        seen, p = {i}, parent_of.get(i)
        while p is not None and p not in seen:
            seen.add(p)
            p = parent_of.get(p)
        if p is not None:
            parent_of.pop(i, None)
    children = {}
    for i in range(len(regs)):
        children.setdefault(parent_of.get(i), []).append(i)

    def size(i):
        r = regs[i]
        return (r[3] if math.isfinite(r[3]) else -math.inf, r[2] if math.isfinite(r[2]) else -math.inf)

    out = []

    def walk(parent, depth, lead):
        kids = sorted(children.get(parent, []), key=size, reverse=True)
        for k, i in enumerate(kids):
            last = k == len(kids) - 1
            prefix = "" if depth == 0 else lead + ("└─ " if last else "├─ ")
            out.append((depth, prefix, regs[i], None if parent is None else regs[parent], also.get(i, [])))
            walk(i, depth + 1, "" if depth == 0 else lead + ("   " if last else "│  "))

    walk(None, 0, "")
    return out


def short_name(name, parents):
    """A region's own name: a path's last part."""
    return name.strip("/").rpartition("/")[2] if parents is not None and "/" in name.strip("/") else name


def region_labels(rows, parents):
    """The y labels of region_tree's rows: the tree's prefix, the region's own name, its calls (on
    that path, in a table per call path) and, by joule's nesting, the other regions it ran in (a
    path drawn top-level: the region it was opened in)."""
    names = []
    for depth, prefix, r, parent, also in rows:
        calls = f" ({int(r[1])}x" if math.isfinite(r[1]) else " ("
        notes = [a for a in also if a.startswith(OPENED_IN)]
        extra = f"; {'; '.join(notes)}" if notes else f"; also in {', '.join(also)}" if also else ""
        tag = f"{calls}{extra})" if calls != " (" or extra else ""
        names.append(f"{prefix}{short_name(r[0], parents)}{tag.replace(' (; ', ' (')}")
    return names


def region_tables(f, best, best_how):
    """What regions.png draws: [(label, group name, "region" or "kernel", rows in tree order as
    region_tree gives them, how the nesting is known, parents)], one per table of the best trial,
    /train and /profile (its regions and its kernels). Raises Skip where there is none."""
    srcs = sources(f, best, best_how)
    if not srcs:
        raise Skip("no best trial, no /train and no /profile group")
    data = []
    for label, g in srcs:
        cap = g.name == "/profile"  # the energy tool's: its kernels too, the largest of each
        paths = read_path_table(g)
        if paths is not None:
            regs, parent_rows = largest(paths[0], f"{g.name}/region_paths", paths[1]) if cap else paths
            data.append((label, g.name, "region", regs, None, parent_rows))
        else:
            regs = read_regions(g)
            if cap:
                regs = largest(regs, f"{g.name}/regions")
            data.append((label, g.name, "region", regs, read_parents(g, "regions", [r[0] for r in regs]), None))
        if cap:
            data.append((label, g.name + "/kernels", "kernel", largest(read_regions(g, "kernels"), f"{g.name}/kernels"),
                         None, None))
    data = [d for d in data if d[3]]
    if not data:
        raise Skip("no regions subgroup (or an empty one) in " + " or ".join(g.name for _, g in srcs))
    tables = []
    for label, gname, what, regs, parents, parent_rows in data:
        if what == "kernel":
            rows = [(0, "", r, None, []) for r in sorted(regs, key=lambda r: -(r[3] if math.isfinite(r[3]) else -math.inf))]
            tables.append((label, gname, what, rows, "kernels, largest energy first", None))
            continue
        rows = region_tree(regs, parents, parent_rows)
        if parent_rows is not None:
            how = "per call path as the log records it: a region opened in several places is under each"
        elif parents is not None:
            how = ("nesting as the log records it, by name: a region's calls and figures are summed over every "
                   "region it ran in, drawn under the one it ran in most often")
        elif any(depth for depth, _, _, _, _ in rows):
            how = "nesting as joule's code opens its regions (the log stores names alone)"
        else:
            how = "regions by name (the log does not record how they nest)"
        tables.append((label, gname, what, rows, how, parents))
    return tables


def plot_regions(f, best, best_how, path, written):
    tables = region_tables(f, best, best_how)
    kind = "model" if text(attr(f, "energy_kind", "")) == "model" else "measured"
    trees = [(rows, how) for _, _, _, rows, how, _ in tables]
    nested = any(depth for rows, _ in trees for depth, _, _, _, _ in rows)
    heights = [max(2.4, 0.3 * len(rows) + 1.5) for rows, _ in trees]
    fig = plt.figure(figsize=(11, sum(heights) + 0.9), layout="constrained")
    head = "energy and time per region"
    if nested:
        head += ("; indented: opened inside the region above it (a region's figures include those of "
                 "the regions inside it, so rows do not add up; regions on other threads or streams "
                 "overlap in time); the pale bar behind a row is its parent's")
    fig.suptitle(wrap(head + "; " + energy_words(f), 150), fontsize=8.5)
    subfigs = fig.subfigures(len(tables), 1, height_ratios=heights, squeeze=False)[:, 0]
    for sub, (label, gname, what, rows, how, parents) in zip(subfigs, tables):
        sub.suptitle(wrap(f"{label} ({gname}): {how}", 150), fontsize=9)
        ax_e, ax_t = sub.subplots(1, 2, sharey=True)
        y = np.arange(len(rows))
        names = region_labels(rows, parents)
        for ax, col, xlabel, cmap in ((ax_e, 3, f"energy (J, {kind})", plt.cm.Oranges),
                                      (ax_t, 2, "time (s)", plt.cm.Blues)):
            vals = np.array([r[col] for _, _, r, _, _ in rows], dtype=float)
            fin = np.isfinite(vals)
            pvals = np.array([p[col] if p is not None and math.isfinite(p[col]) else 0.0
                              for _, _, _, p, _ in rows], dtype=float)
            depths = np.array([d for d, _, _, _, _ in rows])
            ax.barh(y, pvals, height=0.8, color="0.88", zorder=1)  # the parent's extent, behind
            ax.barh(y, np.where(fin, vals, 0.0), height=0.62,
                    color=[cmap(0.75 - 0.17 * min(int(d), 3)) for d in depths], zorder=2)
            ax.set_xlabel(xlabel)
            ax.grid(True, axis="x", alpha=0.3)
            # At most 5 ticks: half the figure's width holds 9 labels like '0.0125' only
            # overlapping (small regions' times gave matplotlib's default that many).
            ax.xaxis.set_major_locator(matplotlib.ticker.MaxNLocator(4))
            top = np.max(vals[fin]) if fin.any() else 0.0
            for yi, v, good in zip(y, vals, fin):
                ax.text(v if good else 0.0, yi, f" {v:.3g}" if good and abs(v) < 1000 else
                        f" {v:.0f}" if good else " n/a", va="center", fontsize=7, zorder=3)
            ax.set_xlim(0, top * 1.2 if top > 0 else 1.0)
            if not fin.any():
                ax.text(0.5, 0.5, f"no {xlabel.split()[0]} recorded", ha="center", va="center",
                        transform=ax.transAxes)
        # Left-aligned (monospace) so that the tree's indentation lines up: the labels start a
        # fixed distance left of the axis, as wide as the longest.
        ax_e.set_yticks(y)
        ax_e.set_yticklabels(names, fontsize=8, family="monospace", ha="left")
        ax_e.tick_params(axis="y", length=0, pad=4 + 0.61 * 8 * max(len(n) for n in names))
        ax_t.tick_params(axis="y", left=False, labelleft=False)
        ax_e.invert_yaxis()
        ax_e.set_title(f"energy per {what}", fontsize=9)
        ax_t.set_title(f"time per {what}", fontsize=9)
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
    fig, ax = plt.subplots(figsize=(8.5, 5), layout="constrained")
    ax.plot(step, loss, lw=1.2, marker="." if loss.size < 60 else None, color="tab:blue",
            label="training loss")
    points, search_end = switch_points(tr)
    rows = 0
    if points:  # in flight: the switch points, each at the first step of its configuration
        rows = mark_switches(ax, [(p, None, t) for p, _, t in points], search_end, lambda s: s, step[0])
    eval_step, eval_loss = floats(tr, "eval_step"), floats(tr, "eval_loss")
    n = min(eval_step.size, eval_loss.size)
    if n:
        acc = floats(tr, "eval_accuracy")
        ax.scatter(eval_step[:n], eval_loss[:n], marker="D", s=45, color="tab:red", zorder=3,
                   label="held-out loss")
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
    if n and math.isfinite(eval_loss[n - 1]):  # as joule's report rounds it
        title += f" (final held-out loss {eval_loss[n - 1]:.4f})"
    ax.set_title(title, pad=6 + SWITCH_ROW_PT * rows)
    ax.grid(True, alpha=0.3)
    if n and acc.size >= n:
        label_accuracies(fig, ax, [(s, l, a) for s, l, a in zip(eval_step[:n], eval_loss[:n], acc[:n])
                                   if math.isfinite(a) and math.isfinite(l)])
    save(fig, path, written)


def label_accuracies(fig, ax, evals):
    """Each evaluation's exact caption accuracy beside its marker, rounded as joule's report and log
    print it (61.5%), where the label crosses neither curve (loss, learning rate), a marker nor the
    legend; those with no free place are named in the legend instead."""
    fig.canvas.draw()
    fig.set_layout_engine("none")  # the final layout: the curves' pixels are where they will be drawn
    obstacles = []
    for a in fig.axes:
        for line in a.lines:
            if (line.get_label() or "_").startswith("_") or line.get_linestyle() in (":", "None"):
                continue  # configuration changes (dotted) are crossed by design
            x, y = (np.asarray(v, dtype=float) for v in line.get_data())
            pts = line.get_transform().transform(np.column_stack([x, y])) if x.size else np.zeros((0, 2))
            for (x0, y0), (x1, y1) in zip(pts[:-1], pts[1:]):
                if np.isfinite([x0, y0, x1, y1]).all():
                    obstacles.append(matplotlib.transforms.Bbox([[min(x0, x1) - 1, min(y0, y1) - 1],
                                                                 [max(x0, x1) + 1, max(y0, y1) + 1]]))
    obstacles += [marker_box(ax, s, l, 45, fig.dpi) for s, l, _ in evals]
    items = [(s, l, f"{100 * a:.1f}%", dict(fontsize=7, color="tab:red", zorder=5)) for s, l, a in evals]
    crowded = place_labels(ax, items, obstacles)
    if crowded:
        legend = ax.get_legend()
        for t in legend.get_texts() if legend is not None else []:
            if t.get_text() == "held-out loss":
                t.set_text("held-out loss (exact captions, no free place\nbeside the marker: "
                           + ", ".join(crowded) + ")")


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
    """Makes `out` (if missing) and proves it safe to write in and writable by making and removing a
    private temporary there (joule_write: a random name, so nobody can plant a link at it), and each
    plot's path one that may be replaced (not another user's file, a FIFO...); or says why not."""
    try:
        joule_write.probe_folder(out, create=True)
    except joule_write.WriteError as e:
        return f"{out_role} {out}: cannot write there: {e.why}"
    for name in PLOTS:
        try:
            joule_write.check(os.path.join(out, name))
        except joule_write.WriteError as e:
            return f"{out_role} {out}: {e}"
    return None


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("log", help="the run log (HDF5) written by joule tune")
    ap.add_argument("--out", help="output folder (default: <stem>-plots/ next to the log)")
    ap.add_argument("--describe", metavar="FILE",
                    help="also write a JSON summary of each plot written to FILE (- for stdout, after the "
                         "paths): its titles, each axes' title, labels, limits, legend entries, labelled "
                         "lines, boxes and point labels, the texts that reach outside the figure and the "
                         "pairs of texts that overlap")
    args = ap.parse_args()
    plot_run_layout.DESCRIBE = [] if args.describe else None

    out = args.out or os.path.join(os.path.dirname(os.path.abspath(args.log)),
                                   os.path.splitext(os.path.basename(args.log))[0] + "-plots")
    out_role = "--out" if args.out else "the default output folder"
    try:  # opened once (a regular file), every link and dataset checked before anything is read
        f = open_log(args.log)
    except Refused as e:
        print(f"{PROG}: {e}", file=sys.stderr)
        return 2
    with f:
        problem = output_clash(args.log, out, out_role)
        if problem:
            print(f"{PROG}: {problem}", file=sys.stderr)
            return 2
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
            note(f"cannot read the trials of {args.log}: " + (str(e) if isinstance(e, Refused) else
                                                              f"{type(e).__name__}: {e}"))
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
            except Refused as e:  # a dataset the file does not hold as it claims: the others may still be drawn
                plt.close("all")
                note(f"skipped {name}: {e}")
                failed += 1
            except Exception as e:  # malformed data: report it, still write the other plots
                plt.close("all")
                note(f"skipped {name}: could not plot {args.log}: {type(e).__name__}: {e}")
                failed += 1
    for p in written:
        print(p)
    if args.describe:
        summary = json.dumps({"log": args.log, "plots": plot_run_layout.DESCRIBE}, indent=1)
        try:
            if args.describe == "-":
                print(summary)
            else:  # as the PNGs: a link planted at FILE is replaced, never written through
                joule_write.write_text(args.describe, summary + "\n")
        except OSError as e:
            note(f"--describe {args.describe}: cannot write: {e.strerror or e}")
            failed += 1
        except joule_write.WriteError as e:
            note(f"--describe {args.describe}: cannot write: {e.why}")
            failed += 1
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
