#!/usr/bin/python3
"""Converts a folder of images plus a captions file into joule's dataset format (HDF5).

    /usr/bin/python3 apps/scripts/images_to_h5.py IMAGE_DIR CAPTIONS.tsv OUT.h5 \\
        --image-size 32 --text-len 36 [--frames 1] [--channels 1|3|4] \\
        [--resize bilinear|nearest|none] [--shuffle SEED] [--eval-fraction F]

CAPTIONS.tsv: one sample per line, "file<TAB>caption". With --frames F > 1 a sample is a video
clip: "file1,file2,...,fileF<TAB>caption" (exactly F frames). Captions are UTF-8 bytes; each
must fit in text-len - 2 bytes (BOS and EOS are added, PAD fills the rest) and hold no control
character but tab (none of U+0000-U+001F and U+007F: no NUL byte, no escape sequence).

Every listed image must be a regular file (or a symlink to one): a FIFO, a device, a socket or a
folder is refused before any image is read (a FIFO would hang the converter). PIL reads the
image whole: a file it cannot identify, a truncated file (rows missing) or a damaged one stops the
converter naming the file. A PNG is checked as joule's reader checks it (apps/image_files.cpp),
with the same messages, beyond what PIL checks: every chunk whole with its CRC right (IEND's too),
IHDR first, IEND last with nothing after it, and its image data (the IDAT chunks' zlib stream)
whole, ending with its Adler-32 check, inflating to exactly the rows IHDR declares and followed
by nothing; PIL alone takes a stream cut short once the rows are all there. 16-bit images are
brought to 8 bits by their high byte (v >> 8, as PIL does for 16-bit RGB and stb_image, joule's
reader, for all; a grey value of 32896 = 0x8080 becomes 128); greyscale integer images (PIL modes
I and I;16*, e.g. 16-bit PNG and TIFF) must hold values in 0..65535, else they are refused naming
the range found. Floating-point images (PIL mode F, e.g. 32-bit float TIFF) must hold values in
[0, 1], which are scaled by 255 and rounded half up (0.5 becomes 128); other values (or NaN) are
refused naming the range found.

Images are converted to --channels (1: grayscale, PIL mode "L"; 3: RGB, the default; 4: RGBA;
set the model's model.channels to the same number) and then brought to image-size x image-size
by --resize: bilinear (the default; smooth, blurs small images when upscaling), nearest (every
output pixel is a source pixel: sharp pixel art and small digits stay exact) or none (no
resizing; every image must already be image-size x image-size, else the file and its size are
named in an error).

joule holds out the LAST data.eval_fraction of the samples (in file order) for evaluation. A
captions file sorted by class would give a held-out set of the last classes only, which the
model never saw in training: --shuffle SEED (0..2^32-1) writes the samples in a random order,
the same for the same seed with any NumPy version. The converter prints how many samples will be
held out, for --eval-fraction F (default: data.eval_fraction of joule's default configuration,
apps/configs/tiny.json; pass your configuration's value), and warns that the captions look
sorted when the held-out samples hold fewer than half as many distinct captions as that many
samples drawn at random would be expected to hold.

Writes /images uint8 [N, F, C, H, W], /tokens int32 [N, T] and the root attributes joule's
reader checks (docs/datasets.md describes the format). Needs Debian's python3-h5py and python3-pil.

Refused before any image is read or anything written: values joule would refuse (--image-size, --frames,
--text-len, --channels, --eval-fraction outside the ranges of core/model/limits.json, the file
joule's configuration parser reads them from), an empty caption, one too long for --text-len
or one holding a control character (naming its line), a listed image that is missing or not a
regular file (naming it), an OUT that is one of the inputs (the captions file, the image folder or an
image it lists, also through a symlink or hard link), a folder, a FIFO or device (or a link to one)
or another user's file (unless JOULE_REPLACE_OTHERS_FILES=1), an OUT in a folder that is not safe to
write in (below), and an OUT whose folder has less free space than the file needs.

Writing cannot lose the previous OUT, and nothing another user plants can redirect it: as joule
itself writes (joule_write.py beside this script, docs/outputs.md), the file is written into a
private folder made beside OUT (.OUT.joule-XXXXXXXXXXXX/OUT, mode 0700, a random name), read back
(shapes, attributes and every value), fsynced, given the mode of the file it replaces and only then
renamed over OUT (and the folder fsynced). A symbolic link at OUT is itself replaced, never the file
it names; every folder on the way to OUT must be root's or this user's and not writable by others
without the sticky bit, unless JOULE_ACCEPT_SHARED_FOLDER=1. On any failure (a full disk, an
exceeded quota, an I/O error, an HDF5 error, Ctrl-C, SIGTERM) the temporary is removed, OUT is left
as it was, and the script exits 1 with one line naming OUT, the error and the free space there.
"""
import argparse
import errno
import io
import json
import math
import os
import re
import shutil
import signal
import stat
import struct
import sys
import zlib

# numpy, h5py and PIL (half a second to import) are imported by import_libraries() once the
# arguments, the captions file and the output are checked: a refusal comes at once.
h5py = np = Image = None

BOS, EOS, PAD = 256, 257, 258
MODES = {1: "L", 3: "RGB", 4: "RGBA"}
FILTERS = {"bilinear": "BILINEAR", "nearest": "NEAREST", "none": None}  # PIL's names
PROG = "images_to_h5.py"
HERE = os.path.dirname(os.path.abspath(__file__))
if HERE not in sys.path:  # also when run by runpy.run_path (tests/scripts/converter_faults.sh)
    sys.path.insert(0, HERE)
import joule_write  # noqa: E402
# joule's default configuration (the one embedded in the binary), for the default --eval-fraction.
DEFAULT_CONFIG = os.path.join(HERE, os.pardir, "configs", "tiny.json")
# joule's limits (CMake embeds the same file in joule's configuration parser).
LIMITS_FILE = os.path.normpath(os.path.join(HERE, os.pardir, os.pardir, "core", "model", "limits.json"))
# HDF5's own structures (superblock, object headers, attributes) on top of the data: a few KiB.
HDF5_OVERHEAD_BYTES = 1 << 20


def import_libraries():
    global h5py, np, Image
    import h5py as h5py_module
    import numpy as numpy_module
    from PIL import Image as image_module
    from PIL import ImageFile
    # Never decode a truncated file as an image with its missing rows filled in (the default, set
    # here in case anything imported before changed it): PIL raises instead, and the file is named.
    ImageFile.LOAD_TRUNCATED_IMAGES = False
    # The declared size is bounded here (--max-image-pixels, in joule's words), before anything is
    # decoded; PIL's own check (a warning, an error at twice its 89 Mpixel) would only pre-empt it.
    image_module.MAX_IMAGE_PIXELS = None
    h5py, np, Image = h5py_module, numpy_module, image_module


def fail(message):
    """Stops with one line on stderr and exit status 1."""
    print(f"{PROG}: {message}", file=sys.stderr)
    sys.exit(1)


def load_limits():
    """joule's ranges from core/model/limits.json: {name: (min, max)} for the model's shape and
    (min, max, min_open) for data.eval_fraction."""
    try:
        with open(LIMITS_FILE, encoding="utf-8") as f:
            doc = json.load(f)
        model = {}
        for name in ("image_size", "channels", "frames", "text_len"):
            lo, hi = doc["model"][name]["min"], doc["model"][name]["max"]
            if not (isinstance(lo, int) and isinstance(hi, int)):
                raise ValueError(f"model.{name}: min and max must be whole numbers")
            model[name] = (lo, hi)
        ef = doc["data"]["eval_fraction"]
        fraction = (float(ef["min"]), float(ef["max"]), bool(ef.get("min_open", False)))
        max_pixels = doc["images"]["max_pixels_default"]
        if not (isinstance(max_pixels, int) and max_pixels >= 1):
            raise ValueError("images.max_pixels_default must be a whole number >= 1")
    except (OSError, ValueError, KeyError, TypeError) as e:
        fail(f"cannot read joule's limits from {LIMITS_FILE} ({e})")
    return model, fraction, max_pixels


def in_range(option, key, lo, hi):
    """An argparse type: a whole number within joule's range for model.KEY."""
    def parse(text):
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a whole number")
        if not lo <= value <= hi:
            raise argparse.ArgumentTypeError(
                f"{value} is outside [{lo}, {hi}], joule's range of model.{key} ({LIMITS_FILE})")
        return value
    parse.__name__ = option  # argparse names the type in some messages
    return parse


# The C0 control characters' names, for messages.
CONTROL_NAMES = ("NUL SOH STX ETX EOT ENQ ACK BEL BS HT LF VT FF CR SO SI DLE DC1 DC2 DC3 DC4 NAK SYN ETB CAN EM SUB "
                 "ESC FS GS RS US").split()


def control_character(caption):
    """The first control character other than tab in caption, as (its position from 1, its
    description), or None. (Line ends never reach a caption: the file is read in universal
    newlines mode, which ends a line at LF, CR LF and CR.)"""
    for i, c in enumerate(caption):
        code = ord(c)
        if (code < 0x20 and c != "\t") or code == 0x7F:
            name = "DEL" if code == 0x7F else CONTROL_NAMES[code]
            return i + 1, f"U+{code:04X} ({name}{' byte' if code == 0 else ''})"
    return None


def encode(caption, text_len, where):
    data = caption.encode("utf-8")
    if not caption.strip():
        fail(f"{where}: empty caption ({caption!r}); a caption holds 1 to {text_len - 2} bytes "
             f"(--text-len {text_len} less BOS and EOS) and not only spaces")
    control = control_character(caption)
    if control:
        shown = caption if len(caption) <= 60 else caption[:57] + "..."
        fail(f"{where}: the caption {shown!r} holds the control character {control[1]} at character "
             f"{control[0]}; a caption is text, and the only control character it may hold is tab")
    if len(data) + 2 > text_len:
        fail(f"{where}: caption needs {len(data) + 2} tokens with BOS/EOS, more than --text-len {text_len} "
             f"(at most {text_len - 2} bytes)")
    return [BOS] + list(data) + [EOS] + [PAD] * (text_len - len(data) - 2)


def held_out_count(n, fraction):
    """The number of samples joule holds out: the same formula as held_out_count in
    core/train/trainer.cpp, clamp(llround(n * fraction), 1, n > 1 ? n - 1 : 1). std::llround
    rounds halves away from zero (Python's round() rounds them to even), so it is spelled out; for
    x >= 0, x - floor(x) is exact in floating point."""
    x = float(n) * fraction
    k = math.floor(x)
    if x - k >= 0.5:
        k += 1
    return min(max(k, 1), n - 1 if n > 1 else 1)


def expected_distinct(counts, n, m):
    """How many distinct captions a random set of m of the n samples holds on average: caption c,
    on counts[c] samples, is missing from it with probability C(n - counts[c], m) / C(n, m)."""
    def log_choose(a, b):
        return math.lgamma(a + 1) - math.lgamma(b + 1) - math.lgamma(a - b + 1)
    expected = 0.0
    for c in counts.values():
        missing = 0.0 if n - c < m else math.exp(log_choose(n - c, m) - log_choose(n, m))
        expected += 1.0 - missing
    return expected


def eval_fraction_type(lo, hi, lo_open):
    """An argparse type: a number within joule's range for data.eval_fraction."""
    def parse(text):
        try:
            f = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a number")
        if not ((f > lo if lo_open else f >= lo) and f <= hi):
            raise argparse.ArgumentTypeError(f"{text} is outside {'(' if lo_open else '['}{lo:g}, {hi:g}], "
                                             f"the range of data.eval_fraction ({LIMITS_FILE})")
        return f
    return parse


def at_least_one(option):
    """An argparse type: a whole number >= 1."""
    def parse(text):
        try:
            value = int(text, 10)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a whole number")
        if value < 1:
            raise argparse.ArgumentTypeError(f"{value} is less than 1")
        return value
    parse.__name__ = option
    return parse


def seed(text):
    try:
        s = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number")
    if not 0 <= s < 2**32:
        raise argparse.ArgumentTypeError(f"{text} is outside 0..{2**32 - 1}")
    return s


def default_eval_fraction():
    try:
        with open(DEFAULT_CONFIG, encoding="utf-8") as f:
            return float(json.load(f)["data"]["eval_fraction"])
    except (OSError, ValueError, KeyError, TypeError) as e:
        fail(f"cannot read data.eval_fraction from joule's default configuration "
             f"{os.path.normpath(DEFAULT_CONFIG)} ({e}); pass --eval-fraction F")


def read_lines(f, path):
    try:
        yield from f
    except UnicodeDecodeError as e:
        fail(f"{path}: not UTF-8 text ({e})")


def not_regular(path, mode, where):
    """The refusal of a listed image that is not a regular file (mode: its target's st_mode)."""
    via = " is a symbolic link to" if os.path.islink(path) else " is"
    why = (" (reading a FIFO waits for a writer, forever if there is none)" if stat.S_ISFIFO(mode) else
           " (a device can be read without end)" if stat.S_ISCHR(mode) or stat.S_ISBLK(mode) else "")
    fail(f"{where}: the image {path}{via} {file_kind(mode)}, not a regular file; list image files only{why}")


def check_images(samples):
    """Every listed image is there and a regular file, before any image is read: a FIFO would
    block the converter (opening it waits for a writer), a device could be read without end."""
    seen = set()
    for where, paths, _ in samples:
        for path in paths:
            if path in seen:
                continue
            seen.add(path)
            try:
                mode = os.stat(path).st_mode  # follows symlinks
            except ValueError as e:  # a NUL byte in the name
                fail(f"{where}: cannot read image {path!r}: {e}")
            except OSError as e:
                fail(f"{where}: cannot read image {path}: {e.strerror or e}")
            if not stat.S_ISREG(mode):
                not_regular(path, mode, where)


def open_image_file(path, where):
    """The image file, opened for reading. O_NONBLOCK: should the path have become a FIFO since
    check_images, the open returns at once instead of waiting for a writer, and fstat refuses it."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as e:
        fail(f"{where}: cannot read image {path}: {e.strerror or e}")
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):
        os.close(fd)
        not_regular(path, mode, where)
    return os.fdopen(fd, "rb")


PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
ADAM7 = [(0, 0, 8, 8), (4, 0, 8, 8), (0, 4, 4, 8), (2, 0, 4, 4), (0, 2, 2, 4), (1, 0, 2, 2), (0, 1, 1, 2)]
STB_MAX_DIMENSIONS = 1 << 24  # joule's reader (stb_image) refuses larger images itself


def png_raw_bytes(width, height, depth, colour, interlace):
    """The bytes of pixel rows a PNG's image data must inflate to: each row of each (Adam7) pass
    with its filter byte; 0 for an IHDR the decoders refuse themselves."""
    channels = {0: 1, 2: 3, 3: 1, 4: 2, 6: 4}.get(colour, 0)
    if (not channels or depth not in (1, 2, 4, 8, 16) or not 0 < width <= STB_MAX_DIMENSIONS or
            not 0 < height <= STB_MAX_DIMENSIONS or interlace > 1):
        return 0

    def rows(w, h):
        return 0 if w == 0 or h == 0 else h * (1 + (w * channels * depth + 7) // 8)

    if interlace == 0:
        return rows(width, height)
    return sum(rows((width + dx - 1 - x0) // dx, (height + dy - 1 - y0) // dy) for x0, y0, dx, dy in ADAM7)


def png_chunk_name(kind):
    return kind.decode("ascii") if kind.isalpha() else f"0x{int.from_bytes(kind, 'big'):08X}"


def png_problem(data):
    """What is wrong with a PNG file's structure or image data, as joule's reader words it
    (apps/image_files.cpp: png_problem, png_data_problem); "" when nothing is."""
    n, pos, previous, first = len(data), 8, "the signature", True
    ihdr, idat = None, []
    while True:
        if pos == n:
            return f"truncated PNG: no IEND chunk (the file ends after {previous})"
        if n - pos < 12:
            return (f"truncated PNG: the file ends {n - pos} bytes into the chunk after {previous} (at byte {pos}; "
                    f"a chunk takes at least 12)")
        length = int.from_bytes(data[pos:pos + 4], "big")
        kind = data[pos + 4:pos + 8]
        name = png_chunk_name(kind)
        if length > 0x7FFFFFFF:
            return f"PNG chunk {name} at byte {pos} declares {length} bytes of data (at most 2^31 - 1)"
        if n - pos - 12 < length:
            return (f"truncated PNG: chunk {name} at byte {pos} needs {length + 12} bytes ({length} of data), the "
                    f"file ends {n - pos} bytes into it")
        stored = int.from_bytes(data[pos + 8 + length:pos + 12 + length], "big")
        computed = zlib.crc32(data[pos + 4:pos + 8 + length])
        if stored != computed:
            return f"PNG chunk {name} at byte {pos} is damaged: its CRC-32 is 0x{stored:08X}, its bytes give 0x{computed:08X}"
        if first and name != "IHDR":
            return f"the first PNG chunk is {name}, not IHDR"
        first = False
        if name == "IHDR" and length >= 13:
            ihdr = struct.unpack(">IIBBBBB", data[pos + 8:pos + 21])
        if name == "IDAT":
            idat.append((pos, data[pos + 8:pos + 8 + length]))
        previous = f"chunk {name} at byte {pos}"
        pos += 12 + length
        if name == "IEND":
            if pos != n:
                return f"{n - pos} bytes after the IEND chunk (from byte {pos}): a PNG ends with IEND"
            break
    if not idat or ihdr is None:
        return ""  # the decoders refuse it themselves
    width, height, depth, colour, _, _, interlace = ihdr
    expected = png_raw_bytes(width, height, depth, colour, interlace)
    if expected == 0:
        return ""
    stream = b"".join(body for _, body in idat)
    where = f"the zlib stream of its image data ({len(stream)} bytes in {len(idat)} IDAT chunk(s) from byte {idat[0][0]})"
    image = f"{width}x{height} pixels (colour type {colour}, {depth} bits{', interlaced' if interlace else ''})"
    # Inflated a MiB at a time and counted, not kept: a small stream that inflates to far more than
    # the rows (a decompression bomb) costs no memory, and stops one MiB past them.
    inflater, pending, produced = zlib.decompressobj(), stream, 0
    try:
        while not inflater.eof and produced <= expected:
            out = inflater.decompress(pending, 1 << 20)
            pending = inflater.unconsumed_tail
            produced += len(out)
            if not out and not pending:
                break  # every byte given and nothing more comes out: the stream is cut short
    except zlib.error as e:
        detail = re.sub(r"^Error -?\d+ while decompressing data: ", "", str(e))
        return f"PNG image data is damaged: {where} does not inflate (zlib: {detail})"
    if produced > expected:
        return f"PNG image data is damaged: {where} inflates to more than the {expected} bytes of rows its {image} need"
    if not inflater.eof:
        return (f"truncated PNG: {where} is cut short: it ends before the stream's end and Adler-32 check, after "
                f"{produced} of the {expected} bytes of rows its {image} need")
    if produced < expected:
        return (f"truncated PNG: {where} inflates to {produced} bytes, and its {image} need {expected} (each row "
                f"with its filter byte)")
    if inflater.unused_data:
        return f"PNG image data is damaged: {len(inflater.unused_data)} bytes follow the end of {where}"
    return ""


def damaged(e):
    """Whether PIL's exception while decoding says the file's data is cut short or corrupt."""
    return (isinstance(e, (SyntaxError, EOFError, struct.error)) or
            re.search(r"truncat|broken|corrupt|damaged|premature|incomplete", str(e), re.IGNORECASE) is not None)


def to_8_bits(img, path, where):
    """PIL converts integer (modes I, I;16...) and floating-point (mode F) images to 8 bits by
    clipping: 16-bit grey 32896 becomes 255 and a float 0.5 becomes 0. They are scaled here to an
    8-bit greyscale image; other modes are returned as they are."""
    if img.mode == "F":
        a = np.asarray(img, dtype=np.float64)
        if np.isnan(a).any():
            fail(f"{where}: {path} is a floating-point image (PIL mode F) holding NaN (not a number) values; "
                 f"floating-point pixels must lie in [0, 1] (they are scaled by 255)")
        lo, hi = float(a.min()), float(a.max())
        if lo < 0 or hi > 1:
            fail(f"{where}: {path} is a floating-point image (PIL mode F) with values in [{lo:g}, {hi:g}]; "
                 f"floating-point pixels must lie in [0, 1] (they are scaled by 255): rescale the image to "
                 f"[0, 1] or save it with 8 or 16 bits per channel")
        return Image.fromarray(np.floor(a * 255 + 0.5).astype(np.uint8), "L")  # rounded half up: 0.5 -> 128
    if img.mode == "I" or img.mode.startswith("I;"):
        a = np.asarray(img if img.mode == "I" else img.convert("I")).astype(np.int64)
        lo, hi = int(a.min()), int(a.max())
        if lo < 0 or hi > 65535:
            fail(f"{where}: {path} is an integer image (PIL mode {img.mode}) with values in [{lo}, {hi}]; integer "
                 f"greyscale pixels must lie in 0..65535 (16 bits, brought to 8 by their high byte)")
        return Image.fromarray((a >> 8).astype(np.uint8), "L")  # the high byte: 32896 = 0x8080 -> 128
    return img


def declared_size(data):
    """(width, height) as an image's header declares them, nothing decoded; None when it cannot tell
    (PIL then refuses the file below in its own words). A PNG's IHDR is read directly, as joule does."""
    if data.startswith(PNG_SIGNATURE) and len(data) >= 24 and data[12:16] == b"IHDR":
        return struct.unpack(">II", data[16:24])
    try:
        with Image.open(io.BytesIO(data)) as img:  # the header only: decoding waits for load()
            return img.size
    except Exception:
        return None


def load_image(path, mode, size, resize, where, max_pixels):
    """One frame as uint8 [C, H, W]. What an image may cost is bounded as joule caption --images
    bounds it (apps/image_files.hpp, ImageLimits): at most 8 bytes for each pixel allowed + 16 MiB of
    the file are read, and a declared size above max_pixels is refused before anything is decoded."""
    max_bytes = min(2**31 - 1, max_pixels * 8 + (16 << 20))
    with open_image_file(path, where) as f:
        data = f.read(max_bytes + 1)
        if len(data) > max_bytes:
            fail(f"{where}: cannot read image {path}: more than the {max_bytes} bytes joule reads of an image file "
                 f"(8 bytes for each of the {max_pixels} pixels it decodes at most (--max-image-pixels {max_pixels}), "
                 f"+ 16 MiB, and never 2 GiB); nothing of it was decoded")
        declared = declared_size(data)
        if declared is not None and declared[0] * declared[1] > max_pixels:
            width, height = declared
            fail(f"{where}: cannot read image {path}: declares {width} x {height} pixels ({width * height}), more than "
                 f"the {max_pixels} pixels joule decodes (--max-image-pixels {max_pixels}); nothing of it was decoded")
        f = io.BytesIO(data)  # what was read and bounded is what PIL decodes
        if data.startswith(PNG_SIGNATURE):
            problem = png_problem(data)
            if problem:
                fail(f"{where}: cannot read image {path}: the file is truncated or damaged ({problem})")
        f.seek(0)
        try:
            with Image.open(f) as img:
                img.verify()  # PNG: every chunk whole with its CRC right, up to IEND (other formats: nothing)
            f.seek(0)
            with Image.open(f) as img:
                img.load()  # decodes the whole file: a truncated one raises here (LOAD_TRUNCATED_IMAGES is off)
                img = to_8_bits(img, path, where)
                img = img.convert(mode)
        except Image.UnidentifiedImageError:
            fail(f"{where}: cannot read image {path}: PIL cannot identify it as an image (not an image file, a "
                 f"format PIL lacks, or a damaged header)")
        except Image.DecompressionBombError as e:
            fail(f"{where}: cannot read image {path}: {e}")
        except (OSError, ValueError, SyntaxError, EOFError, struct.error, IndexError, KeyError) as e:
            detail = " ".join(str(e).split()) or type(e).__name__
            if damaged(e):
                fail(f"{where}: cannot read image {path}: the file is truncated or damaged (PIL: {detail})")
            fail(f"{where}: cannot read image {path}: {detail}")
    if resize == "none":
        if img.size != (size, size):
            fail(f"{where}: {path} is {img.size[0]}x{img.size[1]} pixels (width x height); "
                 f"--resize none needs {size}x{size} (--image-size {size}): pass --resize nearest or bilinear")
    else:
        img = img.resize((size, size), getattr(Image, FILTERS[resize]))
    pixels = np.asarray(img, dtype=np.uint8)
    if pixels.ndim == 2:  # mode "L"
        pixels = pixels[:, :, None]
    return pixels.transpose(2, 0, 1)  # HWC -> CHW


def report_split(captions, fraction, fraction_source):
    """Says which samples joule will hold out, and warns when the captions look sorted."""
    n = len(captions)
    m = held_out_count(n, fraction)
    print(f"the last {m} of the {n} samples ({fraction_source} {fraction:g}) will be the held-out set")
    if n < 2:
        print("note: joule train needs at least 2 samples (one to train on, one held out)")
        return
    counts = {}
    for c in captions:
        counts[c] = counts.get(c, 0) + 1
    tail = set(captions[n - m:])
    expected = expected_distinct(counts, n, m)
    if len(tail) < expected / 2:
        unseen = len(tail - set(captions[:n - m]))
        unseen = f"; {unseen} of them never occur in the {n - m} training samples" if unseen else ""
        print(f"warning: the captions look sorted: the held-out set (the last {m} samples) holds "
              f"{len(tail)} distinct caption(s) of the {len(counts)} in the file, where {m} samples "
              f"drawn at random would hold about {expected:.1f}{unseen}. Pass --shuffle SEED to write "
              f"the samples in a random order.", file=sys.stderr)


def size_text(n):
    for unit in ("bytes", "KiB", "MiB", "GiB", "TiB"):
        if n < 1024 or unit == "TiB":
            return f"{n} bytes" if unit == "bytes" else f"{n:.1f} {unit}"
        n /= 1024


def free_space(folder):
    try:
        return f"{size_text(shutil.disk_usage(folder).free)} free in {folder}"
    except OSError as e:
        return f"free space in {folder} unknown ({e.strerror or e})"


def same_file(a, b):
    """Whether paths a and b name one file: the same inode when both exist (through symlinks and
    hard links), else the same path once resolved."""
    try:
        if os.path.exists(a) and os.path.exists(b):
            return os.path.samefile(a, b)
    except OSError:
        pass
    return os.path.realpath(a) == os.path.realpath(b)


def file_kind(mode):
    """What a non-regular file is, for messages."""
    for test, name in ((stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
                       (stat.S_ISFIFO, "a FIFO (named pipe)"), (stat.S_ISSOCK, "a socket"), (stat.S_ISDIR, "a folder")):
        if test(mode):
            return name
    return "not a regular file"


def check_output(out, inputs):
    """Refuses an OUT that is one of the inputs [(role, path)] (compared resolved: through links) or a
    folder, or whose folder is not there or not safe to write in; returns OUT's folder, for the
    free space and messages. The write goes to OUT itself: a symbolic link there is replaced."""
    for role, path in inputs:
        if same_file(out, path):
            how = ("" if os.path.realpath(out) == os.path.realpath(path) and not os.path.islink(out) else
                   " (a symlink to it)" if os.path.realpath(out) == os.path.realpath(path) else " (a hard link to it)")
            fail(f"the output {out} is the same file as {role} {path}{how}: writing it would destroy an input "
                 f"(choose another output)")
    if os.path.isdir(out):
        fail(f"the output {out} is a folder; give the path of the .h5 file to write")
    if os.path.lexists(out) and os.path.exists(out) and not stat.S_ISREG(os.stat(out).st_mode):
        kind = file_kind(os.stat(out).st_mode)
        via = " is a symbolic link to" if os.path.islink(out) else " is"
        fail(f"the output {out}{via} {kind}, not a regular file; the converter writes regular files only and "
             f"replaces nothing else (give the path of a file)")
    folder = os.path.dirname(os.path.abspath(out))
    if not os.path.isdir(folder):
        fail(f"cannot write {out}: its folder {folder} does not exist")
    if not os.access(folder, os.W_OK | os.X_OK):
        fail(f"cannot write {out}: its folder {folder} is not writable")
    try:  # as the write will look: the folders on the way (another user's, or others may rename in them), OUT
        joule_write.check(out)
    except joule_write.WriteError as e:
        fail(f"cannot write {out}: {e.why}")
    return folder


def error_text(e):
    """An exception as one line: the errno's name and text when there is one (h5py puts it in its
    message as "errno = 28"), else the exception's own text."""
    if isinstance(e, KeyboardInterrupt):
        return "interrupted"
    if isinstance(e, Terminated):
        return str(e)
    code = getattr(e, "errno", None)
    if not isinstance(code, int):
        m = re.search(r"errno = (\d+)", str(e))
        code = int(m.group(1)) if m else None
    detail = " ".join(str(e).split()) or type(e).__name__
    if isinstance(code, int) and code in errno.errorcode:
        name = f"{os.strerror(code)} ({errno.errorcode[code]})"
        if isinstance(e, OSError) and e.strerror == os.strerror(code):
            return name  # a plain OSError: its text is the errno's
        # HDF5's message: what it was doing, then a long list of the write's details.
        doing = re.sub(r"^\[Errno \d+\] ", "", detail.split(" (")[0])
        return f"{name} (HDF5: {doing})"
    return f"{type(e).__name__}: {detail}"


class Terminated(Exception):
    """SIGTERM, raised where the script is, so that the temporary is removed on the way out."""


def on_sigterm(signum, frame):
    raise Terminated("terminated (SIGTERM)")


UNCLOSABLE = []  # HDF5 files whose write failed, never closed (write_h5_file)


def write_h5(path, images, tokens, attrs):
    # h5py reports an HDF5 error in releasing an object (a dataset's metadata that cannot be
    # written) as tracebacks on stderr (through sys.excepthook and sys.unraisablehook) and goes on;
    # here it fails the write instead.
    ignored = []
    hooks = sys.excepthook, sys.unraisablehook
    sys.excepthook = lambda kind, value, tb: ignored.append(value)
    sys.unraisablehook = lambda unraisable: ignored.append(unraisable.exc_value)
    try:
        write_h5_file(path, images, tokens, attrs)
    except BaseException as e:
        # The first HDF5 error when the one raised does not carry the errno (but not over Ctrl-C).
        raise (ignored[0] if ignored and isinstance(e, Exception) and not re.search(r"errno = \d+", str(e)) else e)
    finally:
        sys.excepthook, sys.unraisablehook = hooks
    if ignored:
        raise ignored[0]


def probe_writable(path):
    """Writes a block to the new file and takes it back before HDF5 creates it: a full disk, a
    quota or an I/O error at the first bytes is an OSError with its reason here. HDF5 2.x built
    with its assertions on (Debian sid's) aborts in H5F__dest when its own create fails that way."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o666)
    try:
        block = memoryview(bytes(4096))
        while block:
            block = block[os.write(fd, block):]
        os.fsync(fd)
        os.ftruncate(fd, 0)
    finally:
        os.close(fd)


def write_h5_file(path, images, tokens, attrs):
    probe_writable(path)
    out = h5py.File(path, "w")
    try:
        out.create_dataset("images", data=images)
        out.create_dataset("tokens", data=tokens)
        for key, value in attrs.items():
            out.attrs[key] = np.int64(value)
        out.attrs["format"] = "joule-captions-v1"
        out.flush()
    except BaseException:
        # A file whose write failed is not closed: closing it fails with a message that hides the
        # cause ("Slist already enabled?"), and HDF5 built with its assertions on (Debian sid's 2.2)
        # aborts in H5F__dest with its cache dirty. It is kept referenced (h5py closes what it
        # frees) until write_atomically has removed its temporary and ends with os._exit.
        UNCLOSABLE.append(out)
        raise
    out.close()


def verify_h5(path, images, tokens, attrs):
    """Reads the written file back: the format, every attribute, both shapes and types, and every
    value (a slice at a time), so that only a complete file is renamed over OUT."""
    with h5py.File(path, "r") as f:
        fmt = f.attrs.get("format")
        fmt = fmt.decode() if isinstance(fmt, bytes) else fmt
        if fmt != "joule-captions-v1":
            raise ValueError(f"read back: root attribute format is {fmt!r}")
        for key, value in attrs.items():
            if key not in f.attrs or int(f.attrs[key]) != value:
                raise ValueError(f"read back: root attribute {key} is {f.attrs.get(key)!r}, wrote {value}")
        for name, want in (("images", images), ("tokens", tokens)):
            d = f[name]
            if d.shape != want.shape or d.dtype != want.dtype:
                raise ValueError(f"read back: /{name} is {d.dtype} {list(d.shape)}, wrote {want.dtype} {list(want.shape)}")
            step = max(1, (64 << 20) // max(1, want[0].nbytes))
            for i in range(0, want.shape[0], step):
                if not np.array_equal(d[i:i + step], want[i:i + step]):
                    raise ValueError(f"read back: /{name}[{i}:{i + step}] differs from what was written")


def write_atomically(out, folder, images, tokens, attrs):
    """Writes the dataset through a private temporary beside OUT (joule_write), reads it back, then
    syncs it and renames it over OUT: OUT is at every moment either the previous file or the complete
    new one. Any failure removes the temporary and stops with exit status 1."""
    previous = os.path.lexists(out)
    t = None
    try:
        with joule_write.output(out) as t:
            write_h5(t.path, images, tokens, attrs)
            verify_h5(t.path, images, tokens, attrs)
    except (Exception, KeyboardInterrupt) as e:
        tmp = getattr(e, "temporary", None) or (t.shown if t is not None else None)
        why = e.why if isinstance(e, joule_write.WriteError) else error_text(e)
        kept = f"{out} is left as it was" if previous else f"nothing was written to {out}"
        print(f"{PROG}: cannot write {out}{f' (temporary {tmp})' if tmp else ''}: "
              f"{t.shown_in(why) if t is not None else why}; {free_space(folder)}; {kept}", file=sys.stderr)
        # Not sys.exit: HDF5 closes its open files at exit, and one whose write failed can crash it
        # there (a segmentation fault instead of exit status 1).
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(1)


def main():
    model_limits, fraction_limits, max_pixels_default = load_limits()
    channel_lo, channel_hi = model_limits["channels"]
    channel_choices = [c for c in sorted(MODES) if channel_lo <= c <= channel_hi]
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("image_dir")
    ap.add_argument("captions")
    ap.add_argument("out")
    ap.add_argument("--image-size", type=in_range("--image-size", "image_size", *model_limits["image_size"]),
                    required=True)
    ap.add_argument("--text-len", type=in_range("--text-len", "text_len", *model_limits["text_len"]), required=True)
    ap.add_argument("--frames", type=in_range("--frames", "frames", *model_limits["frames"]), default=1)
    ap.add_argument("--channels", type=int, choices=channel_choices, default=3,
                    help="1 grayscale, 3 RGB, 4 RGBA (default 3); the model's model.channels")
    ap.add_argument("--resize", choices=list(FILTERS), default="bilinear",
                    help="how images get to image-size x image-size (default bilinear); none: they must have it")
    ap.add_argument("--shuffle", type=seed, metavar="SEED",
                    help="write the samples in a random order, the same for the same seed")
    ap.add_argument("--eval-fraction", type=eval_fraction_type(*fraction_limits), metavar="F",
                    help="your configuration's data.eval_fraction, for the held-out report "
                         "(default: the default configuration's)")
    ap.add_argument("--max-image-pixels", type=at_least_one("--max-image-pixels"), metavar="N",
                    default=max_pixels_default,
                    help=f"the most pixels (width x height) an image may declare; a larger one is refused before it "
                         f"is decoded (default {max_pixels_default}, 8192 x 8192; joule caption --max-image-pixels)")
    args = ap.parse_args()
    if args.eval_fraction is None:
        fraction, fraction_source = default_eval_fraction(), "data.eval_fraction of the default configuration,"
    else:
        fraction, fraction_source = args.eval_fraction, "--eval-fraction"

    # The captions file first (cheap): every check on it, and the list of inputs, before any image is read.
    samples, captions = [], []  # samples: (where, [image paths], tokens)
    try:
        f = open(args.captions, encoding="utf-8")
    except OSError as e:
        fail(f"cannot read the captions file: {e}")
    with f:
        for number, line in enumerate(read_lines(f, args.captions), 1):
            line = line.rstrip("\n")
            if not line.strip():
                continue
            where = f"{args.captions}:{number}"
            if "\t" not in line:
                fail(f"{where}: expected 'file<TAB>caption'")
            files, caption = line.split("\t", 1)
            names = files.split(",")
            if len(names) != args.frames:
                fail(f"{where}: {len(names)} frame(s) listed, --frames is {args.frames}")
            samples.append((where, [os.path.join(args.image_dir, name) for name in names],
                            encode(caption, args.text_len, where)))
            captions.append(caption)
    if not samples:
        fail(f"{args.captions}: no samples")
    check_images(samples)

    inputs = [("the captions file", args.captions), ("the image folder", args.image_dir)]
    inputs += [(f"the image of {where}", path) for where, paths, _ in samples for path in paths]
    folder = check_output(args.out, inputs)
    n, frame_bytes = len(samples), args.channels * args.image_size * args.image_size
    need = n * args.frames * frame_bytes + n * args.text_len * 4
    need += HDF5_OVERHEAD_BYTES + need // 100
    try:
        free = shutil.disk_usage(folder).free
    except OSError:
        free = None
    if free is not None and free < need:
        fail(f"cannot write {args.out}: {n} samples of {args.frames} frame(s) of {args.channels}x{args.image_size}x"
             f"{args.image_size} and {args.text_len} tokens need about {size_text(need)}; {free_space(folder)}")

    import_libraries()
    images = np.empty((n, args.frames, args.channels, args.image_size, args.image_size), dtype=np.uint8)
    tokens = np.asarray([t for _, _, t in samples], dtype=np.int32)
    order = np.arange(n)
    if args.shuffle is not None:
        # NumPy's legacy generator: its stream is frozen (NEP 19), so a seed gives the same order
        # with every NumPy version.
        order = np.random.RandomState(args.shuffle).permutation(n)
    # Sample order[i] goes to row i.
    for row, i in enumerate(order):
        where, paths, _ = samples[i]
        for frame, path in enumerate(paths):
            images[row, frame] = load_image(path, MODES[args.channels], args.image_size, args.resize, where,
                                            args.max_image_pixels)
    tokens = tokens[order]
    attrs = dict(count=n, frames=args.frames, channels=args.channels, height=args.image_size,
                 width=args.image_size, text_len=args.text_len)
    write_atomically(args.out, folder, images, tokens, attrs)
    shuffled = "" if args.shuffle is None else f", shuffled with seed {args.shuffle}"
    print(f"wrote {n} samples ({args.frames} frame(s) of {args.channels}x{args.image_size}x{args.image_size}, "
          f"text length {args.text_len}{shuffled}) to {args.out}")
    report_split([captions[i] for i in order], fraction, fraction_source)
    return 0


if __name__ == "__main__":
    signal.signal(signal.SIGTERM, on_sigterm)
    try:
        sys.exit(main())
    except KeyboardInterrupt:  # before the writing starts (it handles its own)
        fail("interrupted before writing; the output was not touched")
    except Terminated:
        fail("terminated (SIGTERM) before writing; the output was not touched")
