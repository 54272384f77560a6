#!/usr/bin/env bash
# A rank that dies, or fails with an error, must make the others exit with an error, not hang
# in the collective they wait in. Runs the given mpirun command; passes if mpirun fails within
# the time limit.
set -u
mpirun_cmd=("$@")
timeout 60 "${mpirun_cmd[@]}" >/tmp/joule-rank-dies.$$ 2>&1
rc=$?
cat /tmp/joule-rank-dies.$$; rm -f /tmp/joule-rank-dies.$$
if [ $rc = 124 ]; then echo "FAIL: the surviving ranks hung"; exit 1; fi
if [ $rc = 0 ]; then echo "FAIL: mpirun reported success although a rank died"; exit 1; fi
echo "ok: mpirun ended with status $rc"
