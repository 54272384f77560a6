#!/usr/bin/env bash
# Ranks on one node do not share cores (issue 42). Started unbound, each takes its own share of
# the node's CPUs before Kokkos starts its threads (core/train/host_cores.hpp, take_local_rank_share);
# placed by the launcher on CPUs that overlap, rank 0 warns after MPI_Init, naming the ranks.
# usage: mpirun_core_shares.sh JOULE WORK_DIR MPIEXEC NUMPROC_FLAG [PREFLAGS...]
set -euo pipefail
joule="$1" work="$2" mpiexec="$3" np_flag="$4"
shift 4
preflags=("$@")
launch() { "$mpiexec" "$np_flag" 2 "${preflags[@]}" "$@"; }
mine=$(env -u OMP_NUM_THREADS -u OMP_THREAD_LIMIT nproc)  # the affinity mask (nproc reads OpenMP's variables too)
if [ "$mine" -lt 2 ] || [ "$mine" != "$(getconf _NPROCESSORS_ONLN)" ]; then
  echo "SKIP: this test runs on a machine of at least 2 CPUs, all of them this process's ($mine of $(getconf _NPROCESSORS_ONLN))"
  exit 77
fi
rm -rf "$work" && mkdir -p "$work"
fail() { echo "FAIL: $*"; exit 1; }

# 1. Unbound (Open MPI's binding policy none; other launchers read their own settings).
OMPI_MCA_hwloc_base_binding_policy=none PRTE_MCA_hwloc_default_binding_policy=none \
  launch "$joule" info >"$work/unbound.txt" 2>&1 || { cat "$work/unbound.txt"; fail "joule info under the launcher"; }
cat "$work/unbound.txt"
grep -q "2 processes on this node were started unbound" "$work/unbound.txt" || fail "no note on the split"
mapfile -t lines < <(grep "CPUs of Kokkos' host threads" "$work/unbound.txt")
[ "${#lines[@]}" = 2 ] || fail "expected 2 ranks' CPU lines, got ${#lines[@]}"
for r in 0 1; do
  grep -q "local rank $r of 2 started unbound" <<<"${lines[*]}" || fail "local rank $r did not take a share"
done
cpus_of() { sed -E "s/.*CPUs of Kokkos' host threads: ([0-9,-]+) .*/\1/" <<<"$1"; }
a=$(cpus_of "${lines[0]}") b=$(cpus_of "${lines[1]}")
expand() { tr ',' '\n' <<<"$1" | while IFS=- read -r lo hi; do seq "$lo" "${hi:-$lo}"; done; }
common=$(comm -12 <(expand "$a" | sort) <(expand "$b" | sort))
[ -z "$common" ] || fail "the ranks' CPUs overlap: $a and $b"
echo "ok: unbound ranks on CPUs $a and $b"

# 2. Bound by the launcher onto the same CPU: the ranks keep it, and rank 0 names the overlap.
launch taskset -c 0 "$joule" train --make-data --data "$work/shapes.h5" --steps 1 --micro-batch 16 --no-energy \
  >"$work/overlap.txt" 2>&1 || { cat "$work/overlap.txt"; fail "joule train under the launcher"; }
grep -q "ranks 0,1 on node .* run Kokkos' threads on CPUs that overlap (rank 0: 0; rank 1: 0)" "$work/overlap.txt" ||
  { cat "$work/overlap.txt"; fail "no warning naming the overlap"; }
grep -q "started unbound" "$work/overlap.txt" && { cat "$work/overlap.txt"; fail "bound ranks were split again"; }
echo "ok: the overlap of bound ranks is named"
echo PASS
