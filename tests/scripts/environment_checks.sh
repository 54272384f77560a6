#!/usr/bin/env bash
# Environment variables and Kokkos flags are checked like configuration values, before Kokkos
# starts (apps/environment.hpp, docs/configuration.md "Environment variables"): each bad value ends
# `joule info` with exit status 1 (not a signal, not 0) and one line naming the variable or flag,
# its value and what is allowed; good values are still accepted, and take effect.
# usage: environment_checks.sh JOULE [all|host-threads]
set -euo pipefail
joule="$1" part="${2:-all}"
work="$(mktemp -d)"
spinner=""
trap '[ -z "$spinner" ] || kill $spinner 2>/dev/null; rm -rf "$work"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
# The cases set what they check; none inherits a thread count from outside (nproc reads
# OMP_NUM_THREADS too).
unset KOKKOS_NUM_THREADS OMP_NUM_THREADS JOULE_HOST_CORES
checked=0
launch=()  # what joule runs under (taskset for the one-CPU case)

# refused 'EXPECTED LINE' [VAR=VALUE...] [-- joule-args...]: joule info fails with status 1 and
# prints exactly EXPECTED LINE on stderr.
refused() {
  local expected="$1" rc=0
  shift
  local vars=()
  while [ $# -gt 0 ] && [ "$1" != -- ]; do vars+=("$1"); shift; done
  [ $# -gt 0 ] && shift
  env "${vars[@]}" "${launch[@]}" "$joule" info "$@" >"$work/out" 2>"$work/err" || rc=$?
  [ $rc = 1 ] || fail "${vars[*]} joule info $*: exit status $rc (expected 1): $(cat "$work/err" "$work/out")"
  grep -qxF -- "$expected" "$work/err" || fail "${vars[*]} joule info $*: expected '$expected', got: $(cat "$work/err")"
  checked=$((checked + 1))
}
# accepted REGEX [VAR=VALUE...] [-- joule-args...]: joule info succeeds and prints REGEX (grep -E).
accepted() {
  local pattern="$1" rc=0
  shift
  local vars=()
  while [ $# -gt 0 ] && [ "$1" != -- ]; do vars+=("$1"); shift; done
  [ $# -gt 0 ] && shift
  env "${vars[@]}" "$joule" info "$@" >"$work/out" 2>&1 || rc=$?
  [ $rc = 0 ] || fail "${vars[*]} joule info $*: exit status $rc: $(cat "$work/out")"
  grep -qE -- "$pattern" "$work/out" || fail "${vars[*]} joule info $*: expected /$pattern/, got: $(cat "$work/out")"
  checked=$((checked + 1))
}

# A Kokkos whose host backend is Serial (Debian sid's trilinos Kokkos 4.5) takes the thread
# settings and runs one thread: the cases of threads taking effect expect 1 there; the part
# host-threads (below) is skipped there.
serial=0
[[ "$("$joule" info 2>/dev/null)" == *"default execution space Serial"* ]] && serial=1  # not | grep -q: SIGPIPE under pipefail
took() { if [ "$serial" = 1 ]; then echo 1; else echo "$1"; fi; }  # the threads Kokkos runs for N asked

# The part host-threads (its own ctest entry): OpenMP's own threads on this machine's CPUs. It needs
# host threads (an OpenMP backend, not Serial's one), at least 2 CPUs and taskset; where one is
# missing the part is skipped (exit 77, ctest's SKIP_RETURN_CODE) saying which, never passed.
host_threads() {
  # With OpenMP binding set, libgomp binds the first thread to one place before main: the CPUs
  # counted are still the process's (the places' union), and joule warns that the places include
  # the CPUs set aside.
  accepted "\($((cpus - 1)) threads/concurrency\)" OMP_PLACES=cores JOULE_HOST_CORES=1
  grep -q "^joule: warning: OMP_PROC_BIND/OMP_PLACES bind OpenMP's threads .* over all $cpus CPUs, the 1 that JOULE_HOST_CORES sets aside" \
    "$work/out" || fail "OMP_PLACES=cores JOULE_HOST_CORES=1: no warning: $(cat "$work/out")"
  checked=$((checked + 1))
  # More host threads than CPUs the process may use: a warning naming both (one CPU by taskset).
  # OpenMP's count (often set for other programs) gives way to the CPUs, with a note; Kokkos' own is kept.
  env -u KOKKOS_NUM_THREADS OMP_NUM_THREADS=3 taskset -c 0 "$joule" info >"$work/out" 2>&1 ||
    fail "taskset joule info: $(cat "$work/out")"
  grep -q "joule: note: OMP_NUM_THREADS=3 asks for more threads than the 1 CPU this process may use: Kokkos gets 1" \
    "$work/out" && grep -q "(1 threads/concurrency)" "$work/out" || fail "OMP_NUM_THREADS=3 on 1 CPU: $(cat "$work/out")"
  ! grep -q "host threads on" "$work/out" || fail "OMP_NUM_THREADS=3 on 1 CPU: a warning: $(cat "$work/out")"
  env -u OMP_NUM_THREADS KOKKOS_NUM_THREADS=3 taskset -c 0 "$joule" info >"$work/out" 2>&1 ||
    fail "taskset joule info: $(cat "$work/out")"
  grep -q "joule: warning: 3 host threads on 1 CPU this process may use (its affinity mask allows 1" "$work/out" &&
    grep -q "(3 threads/concurrency)" "$work/out" || fail "3 threads on 1 CPU: no warning: $(cat "$work/out")"
  # The host BLAS splits a GEMM over OpenMP's count: one thread per CPU at most, whatever Kokkos has.
  grep -q "^host BLAS threads: 1 " "$work/out" || fail "3 threads on 1 CPU: BLAS threads: $(cat "$work/out")"
  env OMP_NUM_THREADS=1 taskset -c 0 "$joule" info >"$work/out" 2>&1 || fail "taskset joule info: $(cat "$work/out")"
  ! grep -q "host threads on" "$work/out" || fail "1 thread on 1 CPU: a warning: $(cat "$work/out")"
  checked=$((checked + 3))
  # A long job leaves the CPUs that other work keeps busy to it (JOULE_SHARE_CPUS, on unless the suite's
  # environment turns it off): on 2 CPUs beside a loop that spins on one of them, Kokkos gets 1 thread
  # and a note says why; with JOULE_SHARE_CPUS=off it gets 2, and says nothing. The loop is always
  # runnable, so at least one CPU is busy with other work whatever else the machine runs.
  taskset -c 0 bash -c 'while :; do :; done' &
  spinner=$!
  bench() { env -u KOKKOS_NUM_THREADS "$@" taskset -c 0,1 "$joule" bench --suite step --step-shapes tiny --repeats 1 >"$work/out" 2>&1 ||
              fail "$* joule bench beside a busy loop: $(cat "$work/out")"; }
  bench -u JOULE_SHARE_CPUS
  grep -qE "^joule: note: other work keeps [0-9]+\.[0-9] of the 2 CPUs this process may use busy \(at least that in every quarter second of [0-9.]+ s\): Kokkos gets 1 thread, one per CPU left" "$work/out" &&
    grep -q "OpenMP 1 thread, " "$work/out" || fail "beside a busy loop: $(cat "$work/out")"
  bench JOULE_SHARE_CPUS=off
  ! grep -q "other work keeps" "$work/out" && grep -q "OpenMP 2 threads, " "$work/out" ||
    fail "JOULE_SHARE_CPUS=off beside a busy loop: $(cat "$work/out")"
  kill $spinner
  wait $spinner 2>/dev/null || true
  spinner=""
  checked=$((checked + 2))
}
if [ "$part" = host-threads ]; then
  cpus="$(nproc)"
  [ "$serial" = 0 ] || { echo "SKIP: host threads: this Kokkos' host backend is Serial (no host threads)"; exit 77; }
  [ "$cpus" -ge 2 ] || { echo "SKIP: host threads: this process may use $cpus CPU (2 needed)"; exit 77; }
  command -v taskset >/dev/null && taskset -c 0,1 true 2>/dev/null && [ "$(taskset -c 0,1 nproc)" = 2 ] ||
    { echo "SKIP: host threads: taskset cannot place this process on CPUs 0 and 1"; exit 77; }
  host_threads
  echo "PASS: host threads: $checked cases"
  exit 0
fi
[ "$part" = all ] || { echo "usage: $0 JOULE [all|host-threads]" >&2; exit 2; }

threads="an integer in [1, 512] (Kokkos' OpenMP backend holds at most 512 threads)"
e="joule: error:"
# Thread counts: text and 0 used to abort or start 0 threads, -1 passed silently, 99999 crashed.
refused "$e KOKKOS_NUM_THREADS is 'abc'; allowed: $threads" KOKKOS_NUM_THREADS=abc
refused "$e KOKKOS_NUM_THREADS is '0'; allowed: $threads" KOKKOS_NUM_THREADS=0
refused "$e KOKKOS_NUM_THREADS is '-1'; allowed: $threads" KOKKOS_NUM_THREADS=-1
refused "$e KOKKOS_NUM_THREADS is '4x'; allowed: $threads" KOKKOS_NUM_THREADS=4x
refused "$e KOKKOS_NUM_THREADS is '513'; allowed: $threads" KOKKOS_NUM_THREADS=513
omp="an integer in [1, 512] or a comma-separated list of them, one per nesting level (Kokkos' OpenMP backend holds at most 512 threads)"
refused "$e OMP_NUM_THREADS is '99999'; allowed: $omp" OMP_NUM_THREADS=99999
refused "$e OMP_NUM_THREADS is 'abc'; allowed: $omp" OMP_NUM_THREADS=abc
refused "$e OMP_NUM_THREADS is '0'; allowed: $omp" OMP_NUM_THREADS=0
refused "$e OMP_NUM_THREADS is '2,0'; allowed: $omp" OMP_NUM_THREADS=2,0
refused "$e --kokkos-threads is 'abc'; allowed: $threads" -- --kokkos-threads=abc
refused "$e --kokkos-threads is '0'; allowed: $threads" -- --kokkos-threads=0
refused "$e --kokkos-num-threads is '0'; allowed: $threads" -- --kokkos-num-threads=0
refused "$e --kokkos-threads is '99999'; allowed: $threads" -- --kokkos-threads=99999
refused "$e --kokkos-threads needs its value after '=' (--kokkos-threads=N, N an integer in [1, 512])" -- --kokkos-threads
# A variable and its flag that disagree: Kokkos threw an uncaught "expecting a match" (terminate).
refused "$e KOKKOS_NUM_THREADS=3 and --kokkos-threads=2 disagree: Kokkos takes both only when they match; set one of them (or the same value in both)" KOKKOS_NUM_THREADS=3 -- --kokkos-threads=2
accepted "\($(took 2) threads/concurrency\)" KOKKOS_NUM_THREADS=2 -- --kokkos-threads=2
refused "$e --kokkos-device-id is '-1'; allowed: an integer in [0, 1023]" -- --kokkos-device-id=-1
refused "$e --kokkos-numa is 'abc'; allowed: an integer in [1, 512]" -- --kokkos-numa=abc
refused "$e --kokkos-ndevices is 'abc'; allowed: N or N,S: N GPUs an integer in [1, 1024], S the one skipped an integer in [0, 1023]" -- --kokkos-ndevices=abc
refused "$e KOKKOS_DEVICE_ID is 'abc'; allowed: an integer in [0, 1023]" KOKKOS_DEVICE_ID=abc
refused "$e --threads is 'abc'; allowed: $threads" -- --threads=abc

# JOULE_HOST_CORES: its range follows the CPUs this process may use; with one there is none.
cpus="$(nproc)"
if [ "$cpus" -ge 2 ]; then
  refused "$e JOULE_HOST_CORES is 'abc'; allowed: an integer in [1, $((cpus - 1))] (this process may use $cpus CPUs, and Kokkos keeps at least one)" JOULE_HOST_CORES=abc
  refused "$e JOULE_HOST_CORES is '$cpus'; allowed: an integer in [1, $((cpus - 1))] (this process may use $cpus CPUs, and Kokkos keeps at least one)" JOULE_HOST_CORES="$cpus"
fi
if command -v taskset >/dev/null; then
  first_cpu="$(taskset -cp $$ | sed 's/.*: //; s/[-,].*//')"
  launch=(taskset -c "$first_cpu")
  refused "$e JOULE_HOST_CORES is '1', but no value can work here: this process may use 1 CPU; JOULE_HOST_CORES needs at least 2 (Kokkos keeps one)" JOULE_HOST_CORES=1
  launch=()
else
  echo "no taskset here: the one-CPU case of JOULE_HOST_CORES is not checked"
fi

# The energy model's watts (atof took NaN, negatives and text as 0) and the reads' guard.
refused "$e JOULE_MODEL_IDLE_W is 'nan'; allowed: a number of watts >= 0 and <= 100000" JOULE_MODEL_IDLE_W=nan
refused "$e JOULE_MODEL_IDLE_W is 'abc'; allowed: a number of watts >= 0 and <= 100000" JOULE_MODEL_IDLE_W=abc
refused "$e JOULE_MODEL_CORE_W is '-3'; allowed: a number of watts >= 0 and <= 100000" JOULE_MODEL_CORE_W=-3
refused "$e JOULE_READ_TIMEOUT is '0'; allowed: a number of seconds > 0 and <= 1000000" JOULE_READ_TIMEOUT=0
refused "$e JOULE_READ_TIMEOUT is 'abc'; allowed: a number of seconds > 0 and <= 1000000" JOULE_READ_TIMEOUT=abc
refused "$e JOULE_READ_GUARD is 'of'; allowed: on or off" JOULE_READ_GUARD=of
# Local rank and size: JOULE_* first, else the launcher's (atoi took text as 0).
refused "$e JOULE_LOCAL_RANK is 'abc'; allowed: an integer in [0, 1048575]" JOULE_LOCAL_RANK=abc
refused "$e JOULE_LOCAL_SIZE is '0'; allowed: an integer in [1, 1048576]" JOULE_LOCAL_SIZE=0
refused "$e OMPI_COMM_WORLD_LOCAL_RANK is '-1'; allowed: an integer in [0, 1048575]" OMPI_COMM_WORLD_LOCAL_RANK=-1
refused "$e SLURM_LOCALID is '1x'; allowed: an integer in [0, 1048575]" SLURM_LOCALID=1x

# Good values are accepted and take effect (Kokkos reports the threads it was given).
accepted "\(1 threads/concurrency\)" KOKKOS_NUM_THREADS=1
accepted "\(1 threads/concurrency\)" OMP_NUM_THREADS=1
accepted "\($(took 2) threads/concurrency\)" OMP_NUM_THREADS=2,1
accepted "\(1 threads/concurrency\)" -- --kokkos-threads=1
accepted "\(1 threads/concurrency\)" -- --kokkos-num-threads=1
accepted "Kokkos [0-9]" KOKKOS_NUM_THREADS= JOULE_MODEL_IDLE_W=0 JOULE_MODEL_CORE_W=2.5 JOULE_READ_TIMEOUT=5 \
  JOULE_READ_GUARD=off JOULE_LOCAL_RANK=0 JOULE_LOCAL_SIZE=1 SLURM_LOCALID=3
if [ "$cpus" -ge 2 ]; then
  accepted "\($(took $((cpus - 1))) threads/concurrency\)" JOULE_HOST_CORES=1
fi
# OpenMP's idle threads: joule's GOMP_SPINCOUNT unless the user chose a wait policy or spin count
# (set before libgomp loads: joule executes itself again once, so the variable is in its environment).
# The suite's environment sets OMP_WAIT_POLICY (JOULE_TEST_ENVIRONMENT): each case sets its own.
openmp_line() { env -u GOMP_SPINCOUNT -u OMP_WAIT_POLICY -u JOULE_OPENMP_WAIT "$@" "$joule" info 2>&1 | grep "^OpenMP waiting: " || true; }
line=$(openmp_line)
[ "$line" = "OpenMP waiting: GOMP_SPINCOUNT=1000 (joule's default: idle threads sleep soon on a shared machine)" ] ||
  fail "no OpenMP variable set: '$line'"
line=$(openmp_line OMP_WAIT_POLICY=passive)
[ "$line" = "OpenMP waiting: OMP_WAIT_POLICY=passive (yours)" ] || fail "OMP_WAIT_POLICY=passive: '$line'"
line=$(openmp_line GOMP_SPINCOUNT=5)
[ "$line" = "OpenMP waiting: GOMP_SPINCOUNT=5 (yours)" ] || fail "GOMP_SPINCOUNT=5: '$line'"
checked=$((checked + 3))
# A binding the user set: libgomp binds joule's first thread before main, and the exec that sets
# GOMP_SPINCOUNT must not leave the new process with that one CPU (it would start one thread).
if [ "$cpus" -ge 2 ]; then
  env -u GOMP_SPINCOUNT -u OMP_WAIT_POLICY -u JOULE_OPENMP_WAIT -u OMP_NUM_THREADS OMP_PROC_BIND=spread \
    OMP_PLACES=threads "$joule" info >"$work/out" 2>&1 || fail "OMP_PROC_BIND=spread joule info: $(cat "$work/out")"
  grep -q "($(took "$cpus") threads/concurrency)" "$work/out" || fail "OMP_PROC_BIND=spread: not $cpus threads: $(cat "$work/out")"
  grep -q "^OpenMP waiting: GOMP_SPINCOUNT=1000 (joule" "$work/out" || fail "OMP_PROC_BIND=spread: $(cat "$work/out")"
  checked=$((checked + 1))
fi
# (A binding, OpenMP's count against the CPUs, and a busy CPU: the part host-threads.)
refused "$e JOULE_SHARE_CPUS is 'maybe'; allowed: on or off" JOULE_SHARE_CPUS=maybe
echo "PASS: $checked cases"
