"""The run log as plot_run.py reads it: HDF5 strings and numbers, the knob table, trials, the
choice, the Pareto front, power traces and region tables (the layout of runlog/run_log.cpp,
docs/run-log.md). Groups without complete = 1 are ignored, as joule's reader does.

The log may be another user's file, forged to harm whoever plots it (root too): it is opened once,
as joule opens its inputs (a regular file only: a FIFO would block forever), and HDF5 reads that
descriptor; before anything in it is read, a link that leaves the file or a dataset kept outside it
refuses the whole file (HDF5 would open another file by its name: a FIFO there blocks, a device
reads forever); every dataset read first shows that the file holds what it claims (a 7 KB file can
claim gigabytes of values it never stored, which HDF5 makes up as zeros in memory)."""
import errno
import fcntl
import json
import math
import os
import stat
import sys
import textwrap
import time

import h5py
import numpy as np
import joule_write

FORMAT = "joule-run-log-v1"
PROG = "plot_run.py"
# The most one dataset may make in memory (as doubles, what the plots make of its values). The
# largest a run log of joule's holds is a long run's power trace ([samples, domains] doubles: a day
# at 20 samples a second over 8 domains is 110 MiB); a claim of more is a forged file, refused
# before HDF5 allocates it.
MAX_READ = 1 << 30
# The most the strings of one dataset or attribute may make. Each is stored once, elsewhere in the
# file, and any number of elements may name the same one (a 1 MB file read as 2 GB): a run log's
# strings are names (regions, power domains) and a configuration, a few KiB.
MAX_STRINGS = 64 << 20
# Compressed data expands at most this many times (+ COMPRESSION_SLACK): the cap of joule's reader
# (core/io/h5file.cpp, require_stored); gzip's own limit is about 1032 times.
COMPRESSION_RATIO, COMPRESSION_SLACK = 4096, 64 << 20
SIGNATURE = b"\x89HDF\r\n\x1a\n"  # at 0, 512, 1024, 2048, ... (HDF5's superblock may follow a user block)


class Skip(Exception):
    """A plot lacks the data it needs: skipped with a note, the others are still written."""


class Refused(ValueError):
    """The run log, or an object in it, is not read: a forged or foreign file. The message names the
    file and the object."""


_log = {"path": "", "size": 0}  # the run log open_log() opened: its path for messages, its size


def bytes_text(n):
    """A byte count as joule prints it: "512 bytes", "1.5 GiB" (core/detail/bytes_text.hpp)."""
    units = ("bytes", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB")
    u = 0
    while n >= 1024 and u < len(units) - 1:
        n /= 1024
        u += 1
    return f"{n:.1f} {units[u]}" if u else f"{n:.0f} {units[u]}"


def shown(name):
    """An object's name in a message: the forged file's owner chose it (control characters escaped)."""
    return joule_write.escaped(name.decode("utf-8", "replace") if isinstance(name, bytes) else name)


def open_log(path):
    """The run log at `path` as an open read-only h5py.File, read through the one descriptor checked
    here (what was checked is what HDF5 reads); Refused (a one-line message naming the file) when it
    is missing, not a regular file, not HDF5, held by a writer for over 2 s, or holds a link out of
    the file or a dataset stored outside it."""
    _log.update(path=path, size=0)
    try:  # O_NONBLOCK: a FIFO without a writer opens at once (and is refused), instead of blocking
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    except FileNotFoundError:
        raise Refused(f"{path}: no such file") from None
    except OSError as e:
        raise Refused(f"{path}: cannot open it ({joule_write.reason(e)})") from None
    fobj = None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise Refused(f"{path}: is {joule_write.kind_of(st.st_mode)}, not a regular file; joule reads run logs "
                          "only from regular files (nothing of it was read)")
        fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) & ~os.O_NONBLOCK)
        _log["size"] = st.st_size
        if not any(os.pread(fd, len(SIGNATURE), at) == SIGNATURE
                   for at in [0] + [512 << k for k in range(64) if 512 << k < st.st_size]):
            raise Refused(f"{path}: not an HDF5 file, so not a joule run log")
        fobj = os.fdopen(fd, "rb")
        fd = -1
        f = None
        give_up = time.monotonic() + 2.0
        while f is None:  # `joule tune` holds the file (locked) for a moment while it writes a trial
            try:
                shared_lock(fobj.fileno())  # HDF5's own lock (it takes none on a file object)
                f = h5py.File(fobj, "r")
            except OSError as e:
                if time.monotonic() >= give_up:
                    raise Refused(f"{path}: HDF5 cannot open this file: it is damaged or truncated, or another "
                                  f"process holds it open for writing ({e})") from None
                time.sleep(0.05)
        try:
            refuse_outside_data(f)
        except BaseException:
            f.close()
            raise
        return f
    except BaseException:
        if fobj is not None:
            fobj.close()
        elif fd >= 0:
            os.close(fd)
        raise


def shared_lock(fd):
    """The lock HDF5 takes to read (flock, shared; a writer holds it exclusive): BlockingIOError while
    a writer has the file; none where HDF5 takes none (HDF5_USE_FILE_LOCKING=FALSE, or a file system
    without locks, as HDF5 1.10.7+ ignores)."""
    if os.environ.get("HDF5_USE_FILE_LOCKING", "").upper() == "FALSE":
        return
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except OSError as e:
        if e.errno not in (errno.ENOSYS, errno.ENOLCK, errno.EOPNOTSUPP, errno.EINVAL):
            raise


def refuse_outside_data(f):
    """Refused when an object of the file is reached through anything but a hard link (an external or
    user-defined link makes HDF5 open another file by its name; joule writes no soft link either), or
    a dataset keeps its data outside the file (external storage, a virtual dataset's sources): the
    list of links is read without following any, and the datasets checked before any is read."""
    def link(name, info):
        return None if info.type == h5py.h5l.TYPE_HARD else (name, info.type)
    found = f.id.links.visit(link, info=True)
    if found:
        name, kind = found
        target = f.get(name, getlink=True)  # the link itself, not followed
        if kind == h5py.h5l.TYPE_EXTERNAL:
            what = f"an external link (to {shown(target.path)} in the file {shown(target.filename)})"
        elif kind == h5py.h5l.TYPE_SOFT:
            what = f"a soft link (to {shown(target.path)}), which joule never writes"
        else:
            what = "a user-defined link"
        raise Refused(f"{_log['path']}: /{shown(name)} is {what}; joule reads only objects stored in the file itself, "
                      "and nothing of it was used")

    def dataset(name, obj):
        if not isinstance(obj, h5py.Dataset):
            return None
        if obj.is_virtual:
            why = "is a virtual dataset (its data is in other files)"
        elif obj.id.get_create_plist().get_external_count() > 0:
            why = "keeps its data in external files"
        else:
            return None
        raise Refused(f"{_log['path']}: dataset /{shown(name)} {why}; joule reads only data stored in the file itself, "
                      "and nothing of it was used")
    f.visititems(dataset)


def stored_problem(dset):
    """Why the file cannot hold what `dset` claims, or "" (joule's reader's rules, core/io/h5file.cpp
    require_stored): data without compression is stored whole, a compressed dataset stores every chunk
    and expands at most COMPRESSION_RATIO times + COMPRESSION_SLACK, no read makes over MAX_READ."""
    if dset.shape is None:  # no dataspace (h5py.Empty): nothing to read
        return ""
    count = math.prod(dset.shape)
    logical = count * dset.id.get_type().get_size()
    if not logical:
        return ""
    claims = f"claims {list(dset.shape)} values ({bytes_text(logical)})"
    plist = dset.id.get_create_plist()
    stored = min(dset.id.get_storage_size(), _log["size"])  # a forged layout may claim more than the file
    if plist.get_nfilters() > 0:
        chunks = math.prod(-(-n // c) for n, c in zip(dset.shape, dset.chunks or dset.shape))
        have = dset.id.get_num_chunks() if hasattr(dset.id, "get_num_chunks") else chunks
        if not have or not stored:
            return f"{claims} but stores none of them (a sparse or forged file)"
        if have < chunks:
            return f"{claims} but stores only {have} of its {chunks} chunks (a sparse or forged file)"
        if logical > COMPRESSION_RATIO * stored + COMPRESSION_SLACK:
            return f"{claims} from {bytes_text(stored)} of compressed data, more than any compression expands to"
    elif stored < logical:
        return f"{claims} but stores " + (f"only {bytes_text(stored)} of them" if stored else "none of them") + \
            " (a sparse or forged file)"
    if max(logical, 8 * count) > MAX_READ:
        return (f"{claims}, more than plot_run.py reads of one dataset ({bytes_text(MAX_READ)} as doubles): no run "
                "log of joule's holds that much")
    return ""


def read(dset):
    """dset[()], once the file shows it holds what it claims (stored_problem; else Refused naming the
    file and the dataset). Strings and other variable-length values are kept elsewhere in the file,
    each up to the file's size, and one stored copy can be named by every element (a 1 MB file read as
    2 GB): those are read a slice at a time, MAX_STRINGS in all at most."""
    problem = stored_problem(dset)
    if problem:
        raise Refused(f"{_log['path']}: dataset {shown(dset.name)} {problem}")
    if not dset.dtype.hasobject or dset.shape is None or len(dset.shape) == 0:
        return dset[()]
    if len(dset.shape) != 1 or dset.dtype.kind != "O":
        raise Refused(f"{_log['path']}: dataset {shown(dset.name)} holds strings or variable-length values "
                      + (f"in {len(dset.shape)} dimensions" if len(dset.shape) != 1 else "in records")
                      + "; a run log's are 1-d tables of them")
    step, parts, total = max(1, MAX_STRINGS // max(_log["size"], 1)), [], 0
    for at in range(0, dset.shape[0], step):
        part = dset[at:at + step]
        total += sum(len(v) if isinstance(v, (bytes, str)) else getattr(v, "nbytes", 16) for v in part)
        if total > MAX_STRINGS:
            raise Refused(f"{_log['path']}: dataset {shown(dset.name)} holds over {bytes_text(MAX_STRINGS)} of "
                          f"strings or variable-length values in its first {at + len(part)} elements; no run log of "
                          "joule's holds that much")
        parts.append(part)
    return np.concatenate(parts) if parts else dset[()]


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
        value = read(value)
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
    """Attribute `name` of `obj`, or `default`. Strings (and other variable-length values) are kept
    elsewhere in the file, each up to the file's size: an attribute of them is read whole, so only
    while that many could not make over MAX_STRINGS (joule writes one string per attribute)."""
    if obj is None or name not in obj.attrs:
        return default
    a = obj.attrs.get_id(name)
    if a.dtype.hasobject and a.shape and math.prod(a.shape) > max(1, MAX_STRINGS // max(_log["size"], 1)):
        raise Refused(f"{_log['path']}: attribute {shown(name)} of {shown(obj.name)} holds {math.prod(a.shape)} "
                      "strings or variable-length values, each up to the file's size: more than plot_run.py reads "
                      f"({bytes_text(MAX_STRINGS)}); joule writes one string per attribute")
    return obj.attrs[name]


def floats(group, name):
    """Dataset `name` of `group` as a 1-d float array (empty when absent)."""
    if group is None or name not in group or not isinstance(group[name], h5py.Dataset):
        return np.zeros(0)
    return np.asarray(read(group[name]), dtype=float).reshape(-1)


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
            idx = read(best)
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
        return [int(i) for i in np.asarray(read(p["trials"])).reshape(-1)], "/pareto"
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
    w = np.asarray(read(wds), dtype=float)
    if w.ndim == 1:
        w = w.reshape(-1, 1)
    elif w.ndim != 2:
        raise ValueError(f"{wds.name} has {w.ndim} dimensions, expected [n, domains]")
    if w.shape[0] != t.size and w.shape[1] == t.size:  # stored [domains, n]
        w = w.T
    domains = []
    for holder, name in ((wds, "domains"), (src, "power_domains"), (src, "domains")):
        if name in holder.attrs:
            domains = strings(attr(holder, name))
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
            return read(r[name])
        return attr(r, name)

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
