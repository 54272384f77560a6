#!/usr/bin/env python3
"""Closes a terminal around a running command, as a user closing a terminal window does.

usage: terminal_hangup.py OUTPUT PIDFILE COMMAND [ARG...]

An interactive bash (no rc files) runs in a pseudo-terminal and is given COMMAND to run in the
foreground. Once COMMAND's output shows a step has run (a line "step N/..." with N >= 2), the
terminal's master side is closed: the kernel hangs the terminal up, bash gets SIGHUP and re-sends
it to its jobs, and when bash exits the kernel sends SIGHUP to the terminal's foreground group.
This process is a child subreaper, so COMMAND (bash's child) becomes its child when bash exits and
its exit status can be read. Exits 0 when COMMAND exited with status 129 (it stopped on SIGHUP as
joule does: 128 + the signal), or ended before bash and was reaped by it (its status unknown: the
caller checks what it left); else 1, saying why. Everything read from the terminal is in OUTPUT.
Deadlines are minutes (a loaded machine is only slower); every wait is on an event.
Standard library only.
"""
import ctypes
import errno
import os
import pty
import re
import select
import shlex
import signal
import sys
import time

PR_SET_CHILD_SUBREAPER = 36
START_DEADLINE_S = 180
EXIT_DEADLINE_S = 300


def main():
    out_path, pid_path, command = sys.argv[1], sys.argv[2], sys.argv[3:]
    log = open(out_path, "wb")

    def say(text):
        log.write(("\n[terminal_hangup] " + text + "\n").encode())
        log.flush()
        print(text, file=sys.stderr)

    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        say("prctl(PR_SET_CHILD_SUBREAPER) failed: %s" % os.strerror(ctypes.get_errno()))
        return 1
    if os.path.exists(pid_path):
        os.unlink(pid_path)

    env = dict(os.environ, PS1="$ ", TERM="dumb")
    bash, master = pty.fork()
    if bash == 0:
        try:
            os.execvpe("bash", ["bash", "--norc", "--noprofile", "-i"], env)
        finally:
            os._exit(127)

    # The command runs as bash's foreground job: sh writes its own pid and becomes COMMAND (exec).
    line = "sh -c 'echo $$ >\"$0\"; exec \"$@\"' %s %s\n" % (
        shlex.quote(pid_path), " ".join(shlex.quote(a) for a in command))
    os.write(master, line.encode())

    text = b""
    step = re.compile(rb"(?m)^step +([0-9]+)/")
    deadline = time.monotonic() + START_DEADLINE_S
    started = False
    while time.monotonic() < deadline:
        ready, _, _ = select.select([master], [], [], 1.0)
        if not ready:
            continue
        try:
            chunk = os.read(master, 65536)
        except OSError as e:
            if e.errno != errno.EIO:
                raise
            chunk = b""
        if not chunk:
            say("the terminal closed before a step ran")
            break
        text += chunk
        log.write(chunk)
        log.flush()
        if any(int(m.group(1)) >= 2 for m in step.finditer(text)):
            started = True
            break
    if not started:
        say("no step %s after %d s" % ("line" if text else "output", START_DEADLINE_S))
        os.kill(bash, signal.SIGKILL)
        return 1
    with open(pid_path) as f:
        target = int(f.read().strip())

    say("closing the terminal (the command is process %d)" % target)
    os.close(master)

    # Reap bash, then the command once it is re-parented to this process.
    statuses = {}
    deadline = time.monotonic() + EXIT_DEADLINE_S
    while target not in statuses and time.monotonic() < deadline:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            pid, status = 0, 0
        if pid:
            statuses[pid] = status
            continue
        if bash in statuses and not os.path.exists("/proc/%d" % target):
            # Only where bash was kept off the CPU for as long as a step and a checkpoint take: the
            # caller's checks of what the command left (its checkpoint) still decide.
            say("the command ended before bash did, and bash reaped it: its exit status is unknown")
            return 0
        time.sleep(0.05)
    if target not in statuses:
        say("the command did not end within %d s of the hang-up" % EXIT_DEADLINE_S)
        try:
            os.kill(target, signal.SIGKILL)
        except ProcessLookupError:
            pass
        return 1
    status = statuses[target]
    if os.WIFSIGNALED(status):
        say("the command was killed by signal %d (%s)" % (os.WTERMSIG(status), signal.Signals(os.WTERMSIG(status)).name))
        return 1
    code = os.WEXITSTATUS(status)
    if code != 129:
        say("the command exited with %d, expected 129 (128 + SIGHUP)" % code)
        return 1
    say("the command exited with 129 (stopped on SIGHUP)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
