#!/usr/bin/env bash
# `joule --version` and `joule info` name the build's facts (apps/build_facts.cpp), checked against
# what CMake and the compiler say independently: the commit CMake recorded, the host target
# JOULE_HOST_TARGET resolved to, the instruction sets the compiler predefines for the host target's
# flags, HDF5's version as FindHDF5 read it from the headers (H5pubconf.h), MPI or its absence;
# and `joule info --no-device` starts with the same table as `joule --version`.
# usage: build_facts.sh JOULE COMMIT HOST_TARGET_TEXT HDF5_VERSION WITH_MPI(0|1) [CXX [FLAGS...]]
#   CXX: the compiler to ask for its predefined macros (g++/clang++ only; empty: not asked)
set -euo pipefail
joule="$1" commit="$2" target_text="$3" hdf5_version="$4" with_mpi="$5"
cxx="${6:-}"
shift 5; [ $# -gt 0 ] && shift
flags=("$@")
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }

version="$("$joule" --version)" || { echo "FAIL: joule --version: exit $?"; exit 1; }
echo "$version"
fact() { sed -n "s/^  $1: //p" <<<"$version"; }  # fact NAME: its value

first="$(head -1 <<<"$version")"
[[ "$first" =~ ^joule\ [0-9]+\.[0-9]+\.[0-9]+\ \(commit\ (.*)\)$ ]] || fail "first line: '$first'"
[ "${BASH_REMATCH[1]:-}" = "$commit" ] || fail "commit '${BASH_REMATCH[1]:-}', CMake recorded '$commit'"
for name in "host target" compiler Kokkos Kokkos-Kernels MPI NCCL HDF5 CUDA cuDNN; do
  [ "$(grep -c "^  $name: " <<<"$version")" = 1 ] || fail "no single '$name:' line"
done

# The host target: CMake's text, then the instruction sets the compiler enabled for its flags.
host="$(fact "host target")"
[ "${host%%; compiled for *}" = "$target_text" ] || fail "host target '${host%%; compiled for *}', CMake resolved '$target_text'"
if [ -n "$cxx" ]; then
  macros="$("$cxx" "${flags[@]}" -dM -E -x c++ /dev/null)"
  has() { grep -q "^#define $1 " <<<"$macros"; }
  sets=()
  if has __x86_64__; then
    arch=x86-64
    has __AVX512F__ && sets+=(AVX-512F)
    has __AVX2__ && sets+=(AVX2)
    has __FMA__ && sets+=(FMA)
    has __AVX__ && ! has __AVX2__ && sets+=(AVX)
    ! has __AVX__ && has __SSE2__ && sets+=(SSE2)
  elif has __aarch64__; then
    arch=aarch64
    has __ARM_FEATURE_SVE2 && sets+=(SVE2)
    has __ARM_FEATURE_SVE && sets+=(SVE)
    has __ARM_NEON && sets+=(NEON)
  else
    arch="this CPU"
  fi
  expected="$arch with $(IFS=,; echo "${sets[*]:-no vector extension named}" | sed 's/,/, /g')"
  [ "${host#*; compiled for }" = "$expected" ] || fail "compiled for '${host#*; compiled for }'; $cxx ${flags[*]} predefines '$expected'"
fi

# HDF5: the headers' version, as FindHDF5 read it, and a loaded version.
hdf5="$(fact HDF5)"
[[ "$hdf5" =~ ^([0-9.]+)\ \(loaded:\ [0-9]+\.[0-9]+\.[0-9]+\)$ ]] || fail "HDF5 line '$hdf5'"
[ "${BASH_REMATCH[1]:-}" = "$hdf5_version" ] || fail "HDF5 ${BASH_REMATCH[1]:-}, the headers say $hdf5_version"

mpi="$(fact MPI)"
if [ "$with_mpi" = 1 ]; then
  [[ "$mpi" =~ ^(Open\ MPI|MPICH|Intel\ MPI|an\ MPI).*,\ MPI\ [3-9]\.[0-9]\ \(loaded:\ .+\)$ ]] || fail "MPI line '$mpi'"
  [[ "$mpi" != *"loaded: not told"* ]] || fail "MPI: the library did not say its version: '$mpi'"
else
  [[ "$mpi" == none* ]] || fail "MPI line '$mpi' in a build without MPI"
fi

info="$("$joule" info --no-device)" || fail "joule info --no-device: exit $?"
[ "$(head -n "$(wc -l <<<"$version")" <<<"$info")" = "$version" ] || fail "joule info does not start with the --version table: $info"

[ "$failures" = 0 ] || { echo "$failures check(s) failed"; exit 1; }
echo "PASS: build facts"
