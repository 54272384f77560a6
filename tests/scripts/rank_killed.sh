#!/usr/bin/env bash
# One rank of an mpirun -np 2 training job killed from outside (SIGKILL: nothing it can say; SIGSEGV
# standing for a crash): the whole job must end within a bounded time, never hang, and the output
# must name the rank and why: joule's own line for a signal it can catch, the launcher's for SIGKILL.
# usage: rank_killed.sh JOULE SMALL_MODEL_CONFIG WORK_DIR MPIEXEC NUMPROC_FLAG [PREFLAGS...]
set -euo pipefail
joule="$1" config="$2" work="$3" mpiexec="$4" np_flag="$5"
shift 5
rm -rf "$work" && mkdir -p "$work" && cd "$work"
fail() { echo "FAIL: $*" >&2; exit 1; }
"$joule" data synth --out data.h5 --count 64 --image-size 32 --text-len 36 >/dev/null
for sig in SEGV KILL; do
  # Emptied here, before the job starts: the job's own `>` truncates it only once the background shell
  # runs, and the wait below must not take the previous signal's "step" lines for this job's (under
  # load it did, then found the file empty).
  : >job.txt
  "$mpiexec" "$np_flag" 2 "$@" "$joule" train --config "$config" --data data.h5 --steps 100000 --micro-batch 4 \
    --no-energy --no-memory-check >job.txt 2>&1 &
  job=$!
  for _ in $(seq 600); do grep -q "^step " job.txt && break; sleep 0.1; done
  grep -q "^step " job.txt || { kill $job; fail "the job never got to a step: $(tail -5 job.txt)"; }
  victim=""
  for p in $(pgrep -f "joule train --config $config"); do
    grep -qx "OMPI_COMM_WORLD_RANK=1" <<<"$(tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null)" && victim=$p
  done
  [ -n "$victim" ] || { kill $job; fail "cannot find rank 1 (is the launcher OpenMPI's mpirun?)"; }
  kill -$sig "$victim"
  t0=$SECONDS rc=0
  for _ in $(seq 300); do kill -0 $job 2>/dev/null || break; sleep 0.1; done
  if kill -0 $job 2>/dev/null; then kill -9 $job; fail "SIG$sig: the job still ran 30 s after rank 1 was killed"; fi
  wait $job || rc=$?
  [ $rc != 0 ] || fail "SIG$sig: mpirun reported success although rank 1 was killed"
  if [ $sig = KILL ]; then
    # (OpenMPI 5's prterun wraps its sentence: "... process rank 1 with PID N on node X exited on\nsignal 9 (Killed).")
    grep -qE "rank 1 .*(signal 9|Killed)" <<<"$(tr '\n' ' ' <job.txt)" || fail "SIGKILL: no line names rank 1 and the signal: $(tail -8 job.txt)"
  else
    grep -q "^joule: rank 1 of 2 (process $victim on .*) ended by SIGSEGV (a crash)" job.txt ||
      fail "SIG$sig: rank 1 did not say why it ended: $(tail -8 job.txt)"
  fi
  echo "ok: SIG$sig to rank 1 ended the job in $((SECONDS - t0)) s (status $rc): $(grep -m1 -E 'joule: rank 1|rank 1 .*(signal|exited)' job.txt)"
done
echo PASS
