#!/usr/bin/python3
"""Unit checks of apps/scripts/joule_write.py, the scripts' safe writer (docs/outputs.md):
    joule_write_check.py [APPS_SCRIPTS_DIR]
a link at the target replaced, not followed; a folder, a FIFO and a link to a FIFO refused; the
replaced file's mode kept (set on the new file's descriptor); the private temporary's name, mode and
marker; nothing left after an exception or Ctrl-C, the old file unchanged; a folder others can
write refused, and accepted with JOULE_ACCEPT_SHARED_FOLDER=1 with one warning; so too a folder
that another user may write through its POSIX access ACL (else SKIP, where the file system has no
ACLs), the sticky bit or a mask without write making it safe again. As root (else
SKIP), with os.chown giving things to another user: that user's link in a world-writable folder
not followed, that user's folder on the way refused, that user's file at the target refused and
replaced with JOULE_REPLACE_OTHERS_FILES=1 by a file that stays root's.
Prints PASS at the end; exits 1 on the first failure."""
import contextlib
import io
import os
import re
import shutil
import signal
import stat
import struct
import sys
import tempfile

here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, sys.argv[1] if len(sys.argv) > 1 else os.path.join(here, os.pardir, os.pardir, "apps", "scripts"))
import joule_write  # noqa: E402

OTHER_UID = 4343
signal.alarm(60)  # a writer that opens a FIFO would block forever: fail instead


def check(condition, what):
    if not condition:
        print(f"FAIL: {what}", file=sys.stderr)
        sys.exit(1)
    print(f"ok: {what}")


def refused(call, *words):
    try:
        call()
    except joule_write.WriteError as e:
        missing = [w for w in words if w not in str(e)]
        return str(e) if not missing else f"message lacks {missing}: {e}"
    return None


def read(path):
    with open(path) as f:
        return f.read()


def only(folder, *names):
    return sorted(os.listdir(folder)) == sorted(names)


os.umask(0o022)
work = tempfile.mkdtemp(prefix="joule-write-check-")
os.chmod(work, 0o755)
os.chdir(work)

# A link at the target: the link itself replaced; the file it names untouched.
with open("victim", "w") as f:
    f.write("victim's")
os.symlink(os.path.join(work, "victim"), "out.txt")
joule_write.write_text("out.txt", "new\n")
check(not os.path.islink("out.txt") and read("out.txt") == "new\n" and read("victim") == "victim's",
      "a link at the target is replaced, the file it names unchanged")
check(only(".", "out.txt", "victim"), "nothing left beside the output")

# A folder, a FIFO, a link to a FIFO: refused before any work, left as they are.
os.mkdir("folder")
os.mkfifo("fifo")
os.symlink("fifo", "fifo-link")
for name, kind in (("folder", "is a folder"), ("fifo", "is a FIFO (named pipe)"),
                   ("fifo-link", "is a symbolic link to a FIFO (named pipe)")):
    why = refused(lambda: joule_write.write_text(name, "x"), f"cannot write {name}: it {kind}")
    check(why is not None and "lacks" not in why, f"{name} refused: {why}")
check(os.path.isdir("folder") and stat.S_ISFIFO(os.lstat("fifo").st_mode) and os.readlink("fifo-link") == "fifo",
      "the refused targets are left as they were")

# The mode of the replaced file goes to the new one (by descriptor); as root the owner too.
with open("kept", "w") as f:
    f.write("old")
os.chmod("kept", 0o640)
old_inode = os.stat("kept").st_ino
joule_write.write_text("kept", "new")
st = os.stat("kept")
check(st.st_ino != old_inode and stat.S_IMODE(st.st_mode) == 0o640 and read("kept") == "new",
      "a replaced file's mode 0640 is kept by the new file")

# The temporary: a private folder .NAME.joule-XXXXXXXXXXXX with the marker, the writer behind /proc.
with joule_write.output("fresh.txt") as t:
    inside = [n for n in os.listdir(".") if n.startswith(".fresh.txt.joule-")]
    check(len(inside) == 1 and re.fullmatch(r"\.fresh\.txt\.joule-[0-9a-f]{12}", inside[0]) is not None,
          f"the private folder's name: {inside}")
    st = os.stat(inside[0])
    check(stat.S_IMODE(st.st_mode) == 0o700 and st.st_uid == os.geteuid(), "the private folder is 0700, this user's")
    marker = read(os.path.join(inside[0], ".joule-temporary"))
    check(re.fullmatch(r"joule temporary\ntarget fresh\.txt\ntoken [0-9a-f]{32}\n", marker) is not None,
          "the marker reads as the C++ one")
    check(t.path.startswith("/proc/self/fd/") and t.shown == f"{inside[0]}/fresh.txt", f"path {t.path}, shown {t.shown}")
    with open(t.path, "w") as f:
        f.write("fresh")
check(read("fresh.txt") == "fresh" and not [n for n in os.listdir(".") if ".joule-" in n],
      "committed, the private folder removed")

# An exception, or Ctrl-C, in the writer: the temporary removed, the old file unchanged.
for error in (RuntimeError("the writer failed"), KeyboardInterrupt()):
    try:
        with joule_write.output("kept") as t:
            with open(t.path, "w") as f:
                f.write("half")
            raise error
    except (RuntimeError, KeyboardInterrupt) as e:
        check(e is error, f"{type(error).__name__} passes through")
    check(read("kept") == "new" and not [n for n in os.listdir(".") if ".joule-" in n],
          f"after {type(error).__name__}: the old file unchanged, no temporary left")

# A folder others can write, no sticky bit: refused; accepted with the variable, one warning.
os.mkdir("open")
os.chmod("open", 0o777)
why = refused(lambda: joule_write.write_text("open/x", "x"), "the folder open is writable by every user (mode 0777) and "
              "has no sticky bit", "JOULE_ACCEPT_SHARED_FOLDER=1")
check(why is not None and "lacks" not in why and only("open"), f"a shared folder refused: {why}")
os.environ["JOULE_ACCEPT_SHARED_FOLDER"] = "1"
err = io.StringIO()
with contextlib.redirect_stderr(err):
    joule_write.write_text("open/x", "x")
    joule_write.write_text("open/y", "y")
del os.environ["JOULE_ACCEPT_SHARED_FOLDER"]
warning = err.getvalue()
check(warning.count("\n") == 1 and re.search(
    r"warning: the folder open is writable by every user \(mode 0777\) and has no sticky bit, so another user may "
    r"rename or remove what is in it, joule's files included; writing there anyway \(JOULE_ACCEPT_SHARED_FOLDER=1\): "
    r"another user may remove or replace what joule writes there$", warning.strip()) is not None,
    f"accepted with JOULE_ACCEPT_SHARED_FOLDER=1, one warning: {warning.strip()}")
os.mkdir("sticky")
os.chmod("sticky", 0o1777)
err = io.StringIO()
with contextlib.redirect_stderr(err):
    joule_write.write_text("sticky/x", "x")
check(read("sticky/x") == "x" and not err.getvalue(), "a sticky folder is written without a warning")

# A folder that another user may write through its access ACL (a named user's entry, a mask that
# lets it write): refused, even where its group alone would be this user's private one; accepted
# with JOULE_ACCEPT_SHARED_FOLDER=1, or with the sticky bit. The ACL is written as its xattr (no
# setfacl needed): version 2, then (tag, permissions, id) entries sorted by tag.
os.mkdir("acl")
os.chmod("acl", 0o755)
ACL_USER_OBJ, ACL_USER, ACL_GROUP_OBJ, ACL_MASK, ACL_OTHER, NO_ID = 1, 2, 4, 0x10, 0x20, 0xFFFFFFFF


def set_acl(path, mask):
    entries = [(ACL_USER_OBJ, 7, NO_ID), (ACL_USER, 7, ACL_UID), (ACL_GROUP_OBJ, 5, NO_ID), (ACL_MASK, mask, NO_ID),
               (ACL_OTHER, 5, NO_ID)]
    os.setxattr(path, "system.posix_acl_access",
                struct.pack("<I", 2) + b"".join(struct.pack("<HHI", *e) for e in entries))


ACL_UID = 5151
try:
    set_acl("acl", 7)
except OSError as e:
    print(f"SKIP: a folder writable through its access ACL (this file system takes no POSIX ACL xattr: {e.strerror})")
else:
    check(stat.S_IMODE(os.stat("acl").st_mode) == 0o775, "the ACL's mask rwx is the folder's group bits: mode 0775")
    why = refused(lambda: joule_write.write_text("acl/x", "x"), "the folder acl is writable by other users through its "
                  "access ACL (mode 0775+, the mask lets its entries write) and has no sticky bit, so another user may "
                  "rename or remove what is in it, joule's files included", "JOULE_ACCEPT_SHARED_FOLDER=1")
    check(why is not None and "lacks" not in why and only("acl"), f"a folder writable through its ACL refused: {why}")
    os.environ["JOULE_ACCEPT_SHARED_FOLDER"] = "1"
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        joule_write.write_text("acl/x", "x")
    del os.environ["JOULE_ACCEPT_SHARED_FOLDER"]
    check(read("acl/x") == "x" and err.getvalue().count("\n") == 1 and "through its access ACL" in err.getvalue(),
          f"accepted with JOULE_ACCEPT_SHARED_FOLDER=1, one warning: {err.getvalue().strip()}")
    os.chmod("acl", 0o1775)
    joule_write.write_text("acl/y", "y")
    check(read("acl/y") == "y", "with the sticky bit it is written")
    os.mkdir("acl-read")
    set_acl("acl-read", 5)  # the named user's rwx masked to r-x: nobody else writes (mode 0755)
    joule_write.write_text("acl-read/x", "x")
    check(stat.S_IMODE(os.stat("acl-read").st_mode) == 0o755 and read("acl-read/x") == "x",
          "an ACL whose mask lets nobody write (mode 0755+) is written in")

# Folders made on the way: never writable by others; the probe leaves nothing.
joule_write.write_text("new/deeper/x", "x", create_folder=True)
check(stat.S_IMODE(os.stat("new/deeper").st_mode) == 0o755 and read("new/deeper/x") == "x", "folders made 0755")
joule_write.probe_folder("new")
check(only("new", "deeper"), "the probe leaves nothing")

# A link on the way: followed where the kernel's protected_symlinks rule would, else refused.
os.mkdir("real")
os.symlink(os.path.join(work, "real"), "sticky/mine")
joule_write.write_text("sticky/mine/x", "x")
check(read("real/x") == "x", "this user's link in a world-writable folder is followed")
if os.geteuid() != 0:
    print("SKIP: another user's link (needs root to give a link to another user)")
else:
    os.symlink(os.path.join(work, "real"), "sticky/theirs")
    os.chown("sticky/theirs", OTHER_UID, OTHER_UID, follow_symlinks=False)
    why = refused(lambda: joule_write.write_text("sticky/theirs/y", "y"),
                  f"sticky/theirs is a symbolic link of user {OTHER_UID} in a folder that others can write (mode 1777)",
                  "protected_symlinks")
    check(why is not None and "lacks" not in why and not os.path.exists("real/y"), f"another user's link refused: {why}")
    os.symlink(os.path.join(work, "real"), "theirs-here")  # in this user's own folder: followed, as the kernel does
    os.chown("theirs-here", OTHER_UID, OTHER_UID, follow_symlinks=False)
    joule_write.write_text("theirs-here/z", "z")
    check(read("real/z") == "z", "another user's link in a folder others cannot write is followed")

if os.geteuid() == 0:  # another user's folder on the way, another user's file at the target
    os.makedirs("theirs-folder/inner")
    os.chown("theirs-folder", OTHER_UID, OTHER_UID)
    why = refused(lambda: joule_write.write_text("theirs-folder/inner/x", "x"),
                  f"the folder theirs-folder, on the way to theirs-folder/inner, belongs to user {OTHER_UID}")
    check(why is not None and "lacks" not in why and only("theirs-folder/inner"), f"another user's folder refused: {why}")
    with open("planted", "w") as f:
        f.write("theirs")
    os.chmod("planted", 0o666)
    os.chown("planted", OTHER_UID, OTHER_UID)
    why = refused(lambda: joule_write.write_text("planted", "root's"), f"it is a file of user {OTHER_UID}",
                  "JOULE_REPLACE_OTHERS_FILES=1")
    check(why is not None and "lacks" not in why and read("planted") == "theirs", f"another user's file refused: {why}")
    os.environ["JOULE_REPLACE_OTHERS_FILES"] = "1"
    joule_write.write_text("planted", "root's")
    del os.environ["JOULE_REPLACE_OTHERS_FILES"]
    st = os.stat("planted")
    check(read("planted") == "root's" and (st.st_uid, stat.S_IMODE(st.st_mode)) == (0, 0o644),
          "with JOULE_REPLACE_OTHERS_FILES=1 the new file is root's, 0644 (0666 less others' write bits)")

os.chdir("/")
shutil.rmtree(work)  # links are removed, not followed
print("PASS")
