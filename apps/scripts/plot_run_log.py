"""The run log as plot_run.py reads it: HDF5 strings and numbers, the knob table, trials, the
choice, the Pareto front, power traces and region tables (the layout of runlog/run_log.cpp,
docs/run-log.md). Groups without complete = 1 are ignored, as joule's reader does."""
import json
import math
import sys
import textwrap

import h5py
import numpy as np

FORMAT = "joule-run-log-v1"
PROG = "plot_run.py"


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


# Student's t, two-sided 95%, for 1..30 degrees of freedom (1.96 beyond): runlog/statistics.cpp's.
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
    """The knob table joule wrote with the log (root attribute knob_table, see runlog/knobs.hpp):
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


def energy_words(f):
    """The run's energy source, named once: "energy: measured (NVML gpu + RAPL package)" or "energy:
    a model's estimate, not a measurement (CPU-time estimate: nothing could be measured)"."""
    source = text(attr(f, "energy_source", "")).strip()
    if text(attr(f, "energy_kind", "")) != "model":
        return "energy: measured" + (f" ({source})" if source else "")
    if source.startswith("model (") and source.endswith(")"):  # "model (why)": the why alone
        source = source[len("model ("):-1]
    return "energy: a model's estimate, not a measurement" + (
        f" ({source})" if source and source != "model" else "")


def split_top(s):
    """s split at its commas outside parentheses, each part stripped."""
    parts, depth, cur = [], 0, ""
    for c in s:
        depth += (c == "(") - (c == ")")
        if c == "," and depth == 0:
            parts.append(cur.strip())
            cur = ""
        else:
            cur += c
    return parts + [cur.strip()]


def domain_label(column):
    """A power column "domain (source)" with each name once: "model (model, model)" (joule's CPU-time
    model) reads "model estimate", "cpu (rapl, rapl)" reads "cpu (rapl)", "gpu (nvml)" stays."""
    i = column.find(" (")
    if i < 0 or not column.endswith(")"):
        return column
    domain, extras = column[:i], []
    for part in split_top(column[i + 2:-1]):
        if part and part != domain and part not in extras:
            extras.append(part)
    if not extras:
        return f"{domain} estimate" if domain == "model" else domain
    return f"{domain} ({', '.join(extras)})"


def wrap(line, width):
    """A title line wrapped (not cut) at `width` characters."""
    return "\n".join(textwrap.wrap(line, width, break_on_hyphens=False)) if line else ""


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
