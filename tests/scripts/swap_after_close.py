#!/usr/bin/env python3
"""The attack of issue 64 on an input checked in a child and then used by name, as the input's
owner would run it: watch FOLDER with inotify; the COUNT-th time a process closes NAME, rename
FOLDER/REPLACEMENT over it (atomic: the next open by name gets the replacement). Writes .watching
when it is ready; exits after the swap, or after SECONDS. Prints what it did. Standard library only.

usage: swap_after_close.py FOLDER NAME REPLACEMENT COUNT [SECONDS]
"""
import ctypes
import os
import select
import struct
import sys
import time

IN_CLOSE_WRITE, IN_CLOSE_NOWRITE = 0x8, 0x10


def main():
    folder, name, replacement, count = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
    deadline = time.monotonic() + (float(sys.argv[5]) if len(sys.argv) > 5 else 120)
    libc = ctypes.CDLL(None, use_errno=True)
    fd = libc.inotify_init1(os.O_NONBLOCK)
    if fd < 0 or libc.inotify_add_watch(fd, folder.encode(), IN_CLOSE_WRITE | IN_CLOSE_NOWRITE) < 0:
        print("swap_after_close: inotify failed: errno", ctypes.get_errno())
        return 2
    with open(os.path.join(folder, ".watching"), "w"):
        pass
    closes = 0
    while time.monotonic() < deadline:
        ready, _, _ = select.select([fd], [], [], 0.05)
        if not ready:
            continue
        try:
            data = os.read(fd, 65536)
        except BlockingIOError:
            continue
        at = 0
        while at + 16 <= len(data):
            _wd, _mask, _cookie, length = struct.unpack_from("iIII", data, at)
            entry = data[at + 16:at + 16 + length].rstrip(b"\0").decode(errors="replace")
            at += 16 + length
            if entry != name:
                continue
            closes += 1
            if closes == count:
                os.rename(os.path.join(folder, replacement), os.path.join(folder, name))
                print("swap_after_close: swapped after close %d" % closes)
                return 0
    print("swap_after_close: %d closes seen, no swap" % closes)
    return 0


if __name__ == "__main__":
    sys.exit(main())
