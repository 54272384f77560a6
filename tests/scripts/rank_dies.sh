#!/usr/bin/env bash
# A rank that dies, or fails with an error, must make the others exit with an error, not hang in
# the collective they wait in; and it must be that rank's failure that ended the job: its own
# message in the output and the launcher's status the one that rank exited with, so a launch that
# fails (no program, no slots, a bad flag) or a job that fails for another reason does not pass.
# usage: rank_dies.sh STATUS PATTERN LAUNCHER_COMMAND...
#   STATUS   the status the launcher must end with: the dying rank's own exit status (OpenMPI's
#            mpirun returns that of the first rank to fail; for a rank that calls MPI_Abort, its
#            error code)
#   PATTERN  an extended regular expression for the dying rank's line (grep -E)
set -u
[ $# -ge 3 ] || { echo "FAIL: usage: rank_dies.sh STATUS PATTERN LAUNCHER_COMMAND..."; exit 1; }
expected="$1" pattern="$2"
shift 2
out=$(mktemp /tmp/joule-rank-dies.XXXXXX)
timeout 60 "$@" >"$out" 2>&1
rc=$?
cat "$out"
found=0
grep -qE -- "$pattern" "$out" && found=1
rm -f "$out"
if [ $rc = 124 ]; then echo "FAIL: the surviving ranks hung"; exit 1; fi
if [ $rc = 0 ]; then echo "FAIL: the launcher reported success although a rank died"; exit 1; fi
if [ $found = 0 ]; then echo "FAIL: the launcher ended with status $rc, but the dying rank's line (/$pattern/) is not in its output"; exit 1; fi
if [ "$rc" != "$expected" ]; then echo "FAIL: the launcher ended with status $rc, not the dying rank's $expected"; exit 1; fi
echo "ok: mpirun ended with status $rc, the dying rank's, which said why"
