"""plot_run.py's figures on disk and on the page: each PNG written whole and safely (joule_write: a
private temporary, fsynced, renamed over the old one), --describe's summary of a figure's texts,
limits, labelled lines and point labels, and labels placed where they hit nothing."""
import errno
import math
import os
import shutil

import matplotlib
matplotlib.use("Agg")
import matplotlib.patches  # noqa: E402
import matplotlib.text  # noqa: E402
import matplotlib.transforms  # noqa: E402
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import joule_write  # noqa: E402

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


DESCRIBE = None  # --describe: a list that save() adds each written figure's summary to


def describe(fig, name):
    """What a figure shows, as --describe writes it: its titles; each axes' title, labels, limits and
    legend entries; the texts that reach outside the figure; the pairs of texts that overlap."""
    fig.canvas.draw()  # at the figure's own dpi, which fig.bbox is in
    renderer = fig.canvas.get_renderer()
    fb = fig.bbox
    ticks, drawn_ticks = set(), []
    for ax in fig.axes:
        for axis in (ax.xaxis, ax.yaxis):
            for tick in axis.get_major_ticks() + axis.get_minor_ticks():
                ticks.update((id(tick.label1), id(tick.label2)))
        if not ax.axison:
            continue
        for axis in (ax.xaxis, ax.yaxis):  # the ticks drawn: those within the axis' view
            lo, hi = sorted(axis.get_view_interval())
            eps = 1e-9 * (hi - lo)
            for tick in axis.get_major_ticks() + axis.get_minor_ticks():
                if lo - eps <= tick.get_loc() <= hi + eps:
                    drawn_ticks += [lab for lab in (tick.label1, tick.label2) if lab.get_visible()]
    texts = [t for t in fig.findobj(matplotlib.text.Text) if id(t) not in ticks] + drawn_ticks
    boxes = [(t.get_text(), text_box(t, renderer)) for t in texts if t.get_visible() and t.get_text().strip()]
    outside = [f"{s!r} at ({b.x0:.0f}, {b.y0:.0f})-({b.x1:.0f}, {b.y1:.0f}) in a {fb.width:.0f}x{fb.height:.0f} figure"
               for s, b in boxes
               if b.x0 < fb.x0 - 1 or b.y0 < fb.y0 - 1 or b.x1 > fb.x1 + 1 or b.y1 > fb.y1 + 1]
    overlapping = []
    for i, (s1, b1) in enumerate(boxes):
        for s2, b2 in boxes[i + 1:]:
            w = min(b1.x1, b2.x1) - max(b1.x0, b2.x0)
            h = min(b1.y1, b2.y1) - max(b1.y0, b2.y0)
            if w > 1 and h > 1:
                overlapping.append([s1, s2])

    def titles(f):
        own = [f._suptitle.get_text()] if getattr(f, "_suptitle", None) is not None else []
        return own + [t for sub in getattr(f, "subfigs", []) for t in titles(sub)]

    axes = []
    for ax in fig.axes:
        legend = ax.get_legend()
        axes.append({"title": " | ".join(t for t in (ax.get_title("left"), ax.get_title(), ax.get_title("right")) if t),
                     "xlabel": ax.get_xlabel(), "ylabel": ax.get_ylabel(),
                     "xlim": [float(v) for v in ax.get_xlim()], "ylim": [float(v) for v in ax.get_ylim()],
                     "yscale": ax.get_yscale(), "axis_on": bool(ax.axison),
                     "legend": [t.get_text() for t in legend.get_texts()] if legend is not None else [],
                     "lines": [line_data(line) for line in ax.lines if not (line.get_label() or "_").startswith("_")],
                     "boxes": [{"label": b.get_label(), "zorder": float(b.get_zorder()),
                                "bounds": [float(v) for v in b.get_bbox().bounds]}
                               for b in ax.patches if isinstance(b, matplotlib.patches.Rectangle)
                               and not (b.get_label() or "_").startswith("_")],
                     "data_zorder": max([float(a.get_zorder()) for a in ax.collections + ax.lines], default=0.0),
                     "label_boxes": [label_box(t, renderer) for t in ax.texts if t.get_visible() and t.get_text().strip()]})
    return {"plot": name, "size_px": [round(fb.width), round(fb.height)], "titles": titles(fig),
            "axes": axes, "texts_outside_figure": outside, "overlapping_texts": overlapping}


def line_data(line):
    """A labelled line's data as drawn: its label and points (NaN where the line is broken), and
    its path on the page (display pixels), for tests of what it crosses."""
    x, y = (np.asarray(v, dtype=float) for v in line.get_data())
    page = line.get_transform().transform(np.column_stack([x, y])) if x.size else np.zeros((0, 2))
    return {"label": line.get_label(), "x": x.tolist(), "y": y.tolist(), "page": page.tolist()}


def label_box(t, renderer):
    """A text placed on axes (a point's label): its text and extent on the page (display pixels)."""
    b = text_box(t, renderer)
    return {"text": t.get_text(), "box": [float(b.x0), float(b.y0), float(b.x1), float(b.y1)]}


def save(fig, path, written):
    """Writes the figure through a private temporary beside `path` (joule_write: nothing planted in
    the folder can redirect the write or its mode), fsyncs it and renames it over `path`: a failed
    write (full disk, quota, I/O error) leaves the previous plot as it was and removes the
    temporary; it raises WriteFailed naming the file, the error and the free space."""
    folder = os.path.dirname(path) or "."
    previous, t, done = os.path.lexists(path), None, False
    try:
        with joule_write.output(path, create_folder=True) as t:
            fig.savefig(t.path, dpi=110, format="png")
        done = True
    except Exception as e:  # KeyboardInterrupt goes on: joule_write has removed the temporary
        tmp = getattr(e, "temporary", None) or (t.shown if t is not None else None)
        if isinstance(e, joule_write.WriteError):
            why = e.why
        elif isinstance(e, OSError) and e.errno in errno.errorcode:
            why = f"{os.strerror(e.errno)} ({errno.errorcode[e.errno]})"
        else:
            why = f"{type(e).__name__}: {t.shown_in(e) if t is not None else e}"
        kept = f"{path} is left as it was" if previous else f"nothing was written to {path}"
        raise WriteFailed(f"cannot write {path}{f' (temporary {tmp})' if tmp else ''}: {why}; "
                          f"{free_space(folder)}; {kept}") from None
    finally:
        if done and DESCRIBE is not None:
            DESCRIBE.append(describe(fig, os.path.basename(path)))
        plt.close(fig)
    written.append(path)


def text_box(t, renderer):
    """The display extent of a text alone (an annotation's leader line left out)."""
    if isinstance(t, matplotlib.text.Annotation):
        t.update_positions(renderer)
    return matplotlib.text.Text.get_window_extent(t, renderer)


def overlaps(box, others, pad=1.0):
    return any(box.x0 < o.x1 + pad and o.x0 < box.x1 + pad and box.y0 < o.y1 + pad and o.y0 < box.y1 + pad
               for o in others)


def place_labels(ax, items, obstacles):
    """Labels each point of `items` ([(x, y, text, text properties)], most important first) beside it
    where the label overlaps neither a marker, the legend nor a label placed before, trying ever
    farther offsets (a leader line joins a far one); returns the texts that found no free place.
    The figure's layout is fixed first (the labels are placed in its final coordinates)."""
    fig = ax.figure
    fig.canvas.draw()
    fig.set_layout_engine("none")
    renderer = fig.canvas.get_renderer()
    inner = ax.get_window_extent(renderer).padded(-2)
    taken = list(obstacles)
    legend = ax.get_legend()
    if legend is not None:
        taken.append(legend.get_window_extent(renderer))
    directions = [(1, 1), (1, 0), (0, 1), (1, -1), (-1, 1), (-1, 0), (0, -1), (-1, -1)]
    crowded = []
    for x, y, label, props in items:
        probe = ax.annotate(label, (x, y), xytext=(0, 0), textcoords="offset points", **props)
        spot = None
        for r in (3, 8, 14, 22, 32, 44):
            for dx, dy in directions:
                probe.xyann = (dx * r / (1.4 if dx and dy else 1), dy * r / (1.4 if dx and dy else 1))
                probe.set_ha("left" if dx > 0 else "right" if dx < 0 else "center")
                probe.set_va("bottom" if dy > 0 else "top" if dy < 0 else "center")
                box = text_box(probe, renderer)
                if (inner.x0 <= box.x0 and box.x1 <= inner.x1 and inner.y0 <= box.y0 and box.y1 <= inner.y1
                        and not overlaps(box, taken)):
                    spot = (probe.xyann, probe.get_ha(), probe.get_va(), r, box)
                    break
            if spot:
                break
        probe.remove()
        if spot is None:
            crowded.append(label)
            continue
        xy, ha, va, r, box = spot
        arrow = dict(arrowstyle="-", lw=0.5, color="gray", shrinkA=0, shrinkB=3) if r >= 14 else None
        ax.annotate(label, (x, y), xytext=xy, textcoords="offset points", ha=ha, va=va,
                    arrowprops=arrow, **props)
        taken.append(box)
    return crowded


def marker_box(ax, x, y, size_pt2, renderer_dpi):
    """The display extent of a scatter marker of area size_pt2 (points squared) at data (x, y)."""
    px, py = ax.transData.transform((x, y))
    r = math.sqrt(size_pt2) / 2 * renderer_dpi / 72 + 1
    return matplotlib.transforms.Bbox([[px - r, py - r], [px + r, py + r]])
