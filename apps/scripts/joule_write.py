"""Writes a file as joule's C++ writers do (core/io/commit.hpp, docs/outputs.md), so that nothing
another user plants where the scripts write can turn a write against their user:

    with joule_write.output("plots/loss.png") as t:  # refusals: WriteError, before any work
        fig.savefig(t.path)                          # /proc/self/fd/N/loss.png; t.shown in messages
    joule_write.write_text("summary.json", text)

The folder is opened a component at a time (O_NOFOLLOW; a link followed only where the kernel's
protected_symlinks rule would); every folder on the way must be root's or this user's and not
writable by others without the sticky bit (by its mode, or by its access ACL: a mask that lets
write), unless JOULE_ACCEPT_SHARED_FOLDER=1 (then a warning).
The file is written in a private folder beside it (.NAME.joule-XXXXXXXXXXXX, 0700, checked once
made) through that folder's descriptor, synced, given the old file's mode by descriptor and renamed
over NAME relative to the folders' descriptors: a link at NAME is replaced, never followed; a
folder, FIFO, device or socket there is refused, and another user's file unless
JOULE_REPLACE_OTHERS_FILES=1. A failure or Ctrl-C removes the private folder; NAME stays as it was."""
import contextlib
import ctypes
import errno
import grp
import os
import pwd
import secrets
import stat
import sys

MARKER = ".joule-temporary"
TOKEN = secrets.token_hex(16)  # this process's, in each marker (the C++ process_token())
PROG = os.path.basename(sys.argv[0]) if sys.argv and sys.argv[0] else "joule"
NOREPLACE, EXCHANGE = 1, 2  # renameat2's flags
NO_RENAMEAT2 = (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP)  # NFS, some FUSE: the C++ fallbacks
_renameat2 = getattr(ctypes.CDLL(None, use_errno=True), "renameat2", None)  # Python has none
_warned = set()


class WriteError(Exception):
    """A refused or failed write: str() names the path and why; `why` is the reason alone, `errno` the
    system's error where there is one, `temporary` the private file's path where one was made."""

    def __init__(self, why, path=None, code=None, temporary=None):
        super().__init__(f"cannot write {path}: {why}" if path else why)
        self.why, self.path, self.errno, self.temporary = why, path, code, temporary


def reason(e):
    """An OSError as "No space left on device (ENOSPC)"."""
    code = getattr(e, "errno", None)
    return f"{os.strerror(code)} ({errno.errorcode[code]})" if code in errno.errorcode else str(e)


def escaped(text):
    """Control characters as \\xNN: a name may be another user's choice, shown on a terminal."""
    return "".join(c if c.isprintable() else f"\\x{ord(c) & 0xff:02x}" for c in str(text))


def user_text(uid):
    with contextlib.suppress(KeyError):
        return f"user {uid} ({escaped(pwd.getpwuid(uid).pw_name)})"
    return f"user {uid}"


def kind_of(mode):
    for test, name in ((stat.S_ISDIR, "a folder"), (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
                       (stat.S_ISFIFO, "a FIFO (named pipe)"), (stat.S_ISSOCK, "a socket"),
                       (stat.S_ISLNK, "a symbolic link"), (stat.S_ISREG, "a regular file")):
        if test(mode):
            return name
    return "not a regular file"


def _lstat(fd, name):
    with contextlib.suppress(OSError):
        return os.stat(name, dir_fd=fd, follow_symlinks=False)
    return None


def others_file_problem(owner):
    """Why another user's file at an output's name is kept (they chose where this user's data goes), or ""."""
    if owner == os.geteuid() or os.environ.get("JOULE_REPLACE_OTHERS_FILES") == "1":
        return ""
    return (f"is a file of {user_text(owner)}; joule replaces only files of its own user, so that nobody can choose in "
            "advance where this user's data goes (remove it, give another path, or replace it anyway with "
            "JOULE_REPLACE_OTHERS_FILES=1: the new file is then this user's, not theirs)")


def replaceable(fd, name):
    """What is at NAME if it is no regular file nor a link to one or to nothing (a link is itself
    replaced), or "". Stat alone, never open: a FIFO must not block."""
    st = _lstat(fd, name)
    if st is None or stat.S_ISREG(st.st_mode):
        return ""
    if not stat.S_ISLNK(st.st_mode):
        return kind_of(st.st_mode)
    with contextlib.suppress(OSError):
        target = os.stat(name, dir_fd=fd).st_mode
        return "" if stat.S_ISREG(target) else "a symbolic link to " + kind_of(target)
    return ""


def target_problem(fd, name):
    """Why the output NAME may not be replaced, or "" (the C++ output_target_problem)."""
    what, st = replaceable(fd, name), _lstat(fd, name)
    if what:
        return (f"is {what}; joule writes regular files only and replaces nothing else (remove the link, or give "
                "another path)" if what.startswith("a symbolic") else f"is {what}, not a regular file; joule writes "
                "regular files only and replaces nothing else (give the path of a file)")
    return others_file_problem(st.st_uid) if st is not None and stat.S_ISREG(st.st_mode) else ""


def has_access_acl(fd):
    """Whether the folder open at `fd` (O_PATH) has a POSIX access ACL: its xattr, read through /proc
    (an O_PATH descriptor takes no fgetxattr); the C++ has_access_acl()."""
    try:
        os.getxattr(f"/proc/self/fd/{fd}", "system.posix_acl_access")
    except OSError:  # ENODATA: none; ENOTSUP: a file system without ACLs
        return False
    return True


def shared_folder_problem(mode, gid, access_acl=False):
    """Why a folder of this mode and group is unsafe (others may rename in it), or "": group write counts
    unless the group is this user's private one (named as the user, nobody else in it: umask 002). With
    an access ACL the group bits are its mask: a write bit there lets the ACL's named users and groups
    write, whoever the owning group is."""
    if not mode & (stat.S_IWGRP | stat.S_IWOTH) or mode & stat.S_ISVTX:
        return ""
    if access_acl and not mode & stat.S_IWOTH:
        return (f"is writable by other users through its access ACL (mode {stat.S_IMODE(mode):04o}+, the mask lets its "
                "entries write) and has no sticky bit, so another user may rename or remove what is in it, joule's "
                "files included")
    if not mode & stat.S_IWOTH:
        with contextlib.suppress(KeyError):
            user, group = pwd.getpwuid(os.geteuid()), grp.getgrgid(gid)
            if group.gr_name == user.pw_name and user.pw_gid == gid and set(group.gr_mem) <= {user.pw_name}:
                return ""
    return (f"is writable by {'every user' if mode & stat.S_IWOTH else 'its group'} (mode {stat.S_IMODE(mode):04o}) "
            "and has no sticky bit, so another user may rename or remove what is in it, joule's files included")


def folder_trust_problem(st, fd=None):
    """Why nothing may be written through this folder (stat `st`, open at `fd`: its ACL), or "": a folder
    is reached by its name in the one before, which means the same folder only while nobody else can
    rename entries there."""
    if st.st_uid not in (0, os.geteuid()):
        return (f"belongs to {user_text(st.st_uid)}, who may rename, remove or replace what is in it (a link in place "
                "of a folder, joule's files included)")
    return shared_folder_problem(st.st_mode, st.st_gid, fd is not None and has_access_acl(fd))


def open_folder(folder, create=False):
    """An O_PATH descriptor of `folder` (the caller closes it), walked from "/" or "." a component at a
    time, `create`: missing ones made (0755 less the umask); every folder on the way trusted, else
    WriteError, unless JOULE_ACCEPT_SHARED_FOLDER=1 (a warning, once per folder)."""
    folder, flags = folder or ".", os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC

    def fail(why, fd):
        os.close(fd)
        raise WriteError(f"cannot open the folder {escaped(folder)}: {why}")

    def trusted(fd, here):
        problem = folder_trust_problem(os.fstat(fd), fd)
        if problem and os.environ.get("JOULE_ACCEPT_SHARED_FOLDER") != "1":
            os.close(fd)
            raise WriteError((f"the folder {escaped(here)}" if here else "the working directory") +
                             (" " if not here or os.path.normpath(here) == os.path.normpath(folder) else
                              f", on the way to {escaped(folder)}, ") + problem +
                             ": joule writes only in folders that other users cannot change under it (give a folder "
                             "of your own, add the sticky bit: chmod +t, or accept the risk: JOULE_ACCEPT_SHARED_FOLDER=1)")
        if problem and (here or ".") not in _warned:
            _warned.add(here or ".")
            print(f"{PROG}: warning: the folder {escaped(here or '.')} {problem}; writing there anyway "
                  "(JOULE_ACCEPT_SHARED_FOLDER=1): another user may remove or replace what joule writes there",
                  file=sys.stderr)
        return fd

    def start(absolute):
        return trusted(os.open("/" if absolute else ".", flags), "/" if absolute else "")
    fd, walked, links = start(folder.startswith("/")), "/" if folder.startswith("/") else "", 0
    todo = [p for p in reversed(folder.split("/")) if p not in ("", ".")]
    while todo:
        part = todo.pop()
        here = os.path.join(walked, part)
        if create and _lstat(fd, part) is None:
            try:
                os.mkdir(part, 0o755, dir_fd=fd)  # never a folder others may write
            except FileExistsError:
                pass
            except OSError as e:
                fail(f"cannot create {escaped(here)} ({reason(e)})", fd)
            sync_folder(fd)  # its entry reaches the disk with its parent
        try:
            nxt = os.open(part, flags | os.O_NOFOLLOW, dir_fd=fd)
        except OSError as e:
            st = _lstat(fd, part)
            if e.errno not in (errno.ELOOP, errno.ENOTDIR) or st is None or not stat.S_ISLNK(st.st_mode):
                fail(f"{escaped(here)} " + ("does not exist" if e.errno == errno.ENOENT else "is not a folder"
                                            if e.errno == errno.ENOTDIR else f"cannot be opened ({reason(e)})"), fd)
            parent = os.fstat(fd)  # a link: followed where the kernel's protected_symlinks rule would
            if parent.st_mode & (stat.S_IWGRP | stat.S_IWOTH) and st.st_uid not in (os.geteuid(), parent.st_uid):
                fail(f"{escaped(here)} is a symbolic link of {user_text(st.st_uid)} in a folder that others can write "
                     f"(mode {stat.S_IMODE(parent.st_mode):04o}); joule follows no such link (the rule of the "
                     "kernel's protected_symlinks)", fd)
            links += 1
            if links > 40:
                fail("too many symbolic links", fd)
            target = os.readlink(part, dir_fd=fd)
            todo += [p for p in reversed(target.split("/")) if p not in ("", ".")]
            if target.startswith("/"):
                os.close(fd)
                fd = start(True)
            walked = here
            continue
        os.close(fd)
        fd, walked = trusted(nxt, here), here
    return fd


def sync_folder(fd):
    """fsync of a folder's entries, best effort (not every file system syncs a folder)."""
    with contextlib.suppress(OSError):
        d = os.open(".", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC, dir_fd=fd)
        try:
            os.fsync(d)
        finally:
            os.close(d)


def renameat2(src_fd, name, dst_fd, flags):
    if _renameat2 is None:
        raise OSError(errno.ENOSYS, os.strerror(errno.ENOSYS))
    if _renameat2(src_fd, os.fsencode(name), dst_fd, os.fsencode(name), ctypes.c_uint(flags)) != 0:
        raise OSError(ctypes.get_errno(), os.strerror(ctypes.get_errno()))


class Temporary:
    """The private folder .NAME.joule-XXXXXXXXXXXX beside `target` holding the file NAME: `path` for
    the writer (through the folder's descriptor), `shown` for messages. Then commit() or close()."""

    def __init__(self, target, create_folder=False, check=True):
        folder, self.name = os.path.split(target)
        self.target, self.folder, self.dir, self.out, self.shown = target, folder or ".", None, None, None
        if not self.name:
            raise WriteError("it names a folder; give the path of a file", target)
        try:
            self.out = open_folder(self.folder, create_folder)
        except WriteError as e:
            raise WriteError(e.why, target) from None
        try:
            problem = target_problem(self.out, self.name) if check else ""
            if problem:  # refused before any work (and looked at again at the rename)
                raise WriteError("it " + problem, target)
            self._make(folder)
        except BaseException:
            self.close()
            raise

    def _make(self, folder):
        raw = os.fsencode(self.name)  # the folder's name kept under NAME_MAX, as the C++ does
        prefix = f".{self.name}.joule-" if len(raw) <= 100 else f".{os.fsdecode(raw[:100])}~{_fnv1a(raw):016x}.joule-"
        for _ in range(100):
            candidate = prefix + secrets.token_hex(6)
            try:
                os.mkdir(candidate, 0o700, dir_fd=self.out)
            except FileExistsError:
                continue
            except OSError as e:
                raise WriteError(f"cannot create a temporary folder in {escaped(self.folder)} ({reason(e)})",
                                 self.target, e.errno) from None
            # Opened by name once, then checked (this user's, private, empty): the one just made even
            # if another user renamed it and put another in its place meanwhile.
            fd = None
            with contextlib.suppress(OSError):
                fd = os.open(candidate, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=self.out)
            st = os.fstat(fd) if fd is not None else None
            if st is None or st.st_uid != os.geteuid() or stat.S_IMODE(st.st_mode) != 0o700 or os.listdir(fd):
                if fd is not None:  # another's folder: nothing in it is touched
                    os.close(fd)
                raise WriteError(f"the temporary folder {escaped(os.path.join(folder, candidate))} was replaced by "
                                 f"another as it was made (another user can change {escaped(self.folder)}); nothing "
                                 "was written", self.target)
            self.dir, self.dir_name, self.shown = fd, candidate, os.path.join(folder, candidate, self.name)
            break
        else:
            raise WriteError(f"cannot create a temporary folder in {escaped(self.folder)} (names taken)", self.target)
        try:  # the marker, as the C++ writes it: a temporary recognisable as joule's
            m = os.open(MARKER, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600, dir_fd=self.dir)
            try:
                data = memoryview(b"joule temporary\ntarget " + raw + f"\ntoken {TOKEN}\n".encode())
                while data:
                    data = data[os.write(m, data):]
            finally:
                os.close(m)
        except OSError as e:
            raise WriteError(f"cannot write its marker {MARKER}: {reason(e)}", self.target, e.errno, self.shown) from None
        via = f"/proc/self/fd/{self.dir}"
        self.path = os.path.join(via, self.name) if os.path.isdir(via) else self.shown  # no /proc: by path

    def shown_in(self, text):
        """A writer's message with the /proc path replaced by the temporary's own."""
        return str(text).replace(self.path, self.shown) if self.shown else str(text)

    def commit(self, replace=True):
        """Syncs the file, gives it the old file's mode (and group) on its descriptor, renames it to the
        target relative to the folders' descriptors, syncs the folder and removes the private one.
        WriteError, the target left as it was, on failure."""
        def fail(why, code=None):
            raise WriteError(why, self.target, code, self.shown)
        out, d, name = self.out, self.dir, self.name
        try:
            f = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=d)
        except OSError:
            fail(f"the writer left no file in {escaped(self.shown)}")
        try:
            mine, old = os.fstat(f), _lstat(out, name)
            if not stat.S_ISREG(mine.st_mode):
                fail(f"the writer left no regular file in {escaped(self.shown)}")
            if old is not None and not replace:
                fail("a file is already there, and this writer replaces none")
            with contextlib.suppress(OSError):
                if old is not None and stat.S_ISREG(old.st_mode) and old.st_uid != mine.st_uid:
                    if others_file_problem(old.st_uid):
                        fail("it " + others_file_problem(old.st_uid))
                    os.fchmod(f, stat.S_IMODE(old.st_mode) & 0o755)  # stays this user's; nobody else writes it
                elif old is not None and stat.S_ISREG(old.st_mode):
                    os.fchmod(f, stat.S_IMODE(old.st_mode) & 0o777)
                    if old.st_gid != mine.st_gid:
                        os.fchown(f, -1, old.st_gid)
            try:
                os.fsync(f)
            except OSError as e:
                if e.errno != errno.EINVAL:
                    fail(f"cannot sync it to the disk ({reason(e)})", e.errno)
        finally:
            os.close(f)
        try:
            placed = False
            if old is not None:
                if replaceable(out, name):
                    fail(f"it is {replaceable(out, name)}; joule replaces only a regular file or a link, and left it "
                         "as it is")
                try:  # swapped in; what came out is looked at where nobody else can reach it
                    renameat2(d, name, out, EXCHANGE)
                    came, placed = os.stat(name, dir_fd=d, follow_symlinks=False), True
                    if not (stat.S_ISREG(came.st_mode) or stat.S_ISLNK(came.st_mode)):
                        renameat2(d, name, out, EXCHANGE)
                        fail(f"it became {kind_of(came.st_mode)} while it was being written; it is put back as it was")
                    if stat.S_ISREG(came.st_mode) and came.st_uid != mine.st_uid and others_file_problem(came.st_uid):
                        renameat2(d, name, out, EXCHANGE)
                        fail("it became a file of another user while it was being written; it is put back as it was "
                             f"(it {others_file_problem(came.st_uid)})")
                except OSError as e:
                    if e.errno in NO_RENAMEAT2:  # a plain rename, checked just before
                        os.rename(name, name, src_dir_fd=d, dst_dir_fd=out)
                        placed = True
                    elif e.errno != errno.ENOENT:  # ENOENT: the old one went; placed as new below
                        raise
            if not placed:
                try:
                    renameat2(d, name, out, NOREPLACE)
                except OSError as e:
                    if e.errno not in NO_RENAMEAT2:
                        raise
                    try:  # a hard link is as exclusive; where refused (AFS), a rename after a last look
                        os.link(name, name, src_dir_fd=d, dst_dir_fd=out, follow_symlinks=False)
                    except OSError as e2:
                        if e2.errno == errno.EEXIST or _lstat(out, name) is not None:
                            raise OSError(errno.EEXIST, os.strerror(errno.EEXIST)) from None
                        os.rename(name, name, src_dir_fd=d, dst_dir_fd=out)
        except OSError as e:
            fail("something appeared there while it was being written; it is left as it is" if e.errno == errno.EEXIST
                 else f"cannot rename {escaped(self.shown)} to it ({reason(e)})", e.errno)
        sync_folder(out)
        self.close()

    def close(self):
        """Removes the private folder (with the old file swapped out, or the uncommitted new one) and
        closes the output's folder."""
        if self.dir is not None:
            for entry in (self.name, MARKER):
                with contextlib.suppress(OSError):
                    os.unlink(entry, dir_fd=self.dir)
            mine, named = os.fstat(self.dir), _lstat(self.out, self.dir_name)
            # By name only while the name is still this folder's; rmdir removes nothing but an empty one.
            if named is not None and (mine.st_ino, mine.st_dev) == (named.st_ino, named.st_dev):
                with contextlib.suppress(OSError):
                    os.rmdir(self.dir_name, dir_fd=self.out)
            os.close(self.dir)
            self.dir = None
        if self.out is not None:
            os.close(self.out)
            self.out = None


def _fnv1a(data):
    h = 1469598103934665603
    for c in data:
        h = ((h ^ c) * 1099511628211) & (2**64 - 1)
    return h


@contextlib.contextmanager
def output(path, create_folder=False, replace=True):
    """Yields a Temporary for `path`, committed when the block ends and removed on any exception
    (KeyboardInterrupt included; the exception goes on). The writer's own errors pass unchanged."""
    t = Temporary(path, create_folder)
    try:
        yield t
        t.commit(replace)
    finally:
        t.close()


def check(path):
    """The refusals of a write to `path` (its folders, what is at it) before any work: WriteError."""
    folder, name = os.path.split(path)
    try:
        fd = open_folder(folder)
    except WriteError as e:
        raise WriteError(e.why, path) from None
    problem = target_problem(fd, name) if name else "names a folder; give the path of a file"
    os.close(fd)
    if problem:
        raise WriteError(("it " if name else "") + problem, path)


def probe_folder(folder, create=False):
    """Proves `folder` writable by making and removing a private temporary there (a random name: no
    probe file that another user could plant a link at); WriteError naming why not."""
    Temporary(os.path.join(folder or ".", ".joule-write-probe"), create, check=False).close()


def write_text(path, text, create_folder=False):
    """Writes `text` (UTF-8) to `path` through a Temporary; every failure is a WriteError."""
    t = None
    try:
        with output(path, create_folder) as t:
            with open(t.path, "w", encoding="utf-8") as f:
                f.write(text)
    except OSError as e:
        raise WriteError(reason(e), path, e.errno, t.shown if t else None) from None
