#!/usr/bin/env bash
# Are the host AdamW loops (core/ops/adamw_host.cpp: in place, and out of place for a speculative
# step) vectorised? GCC's own report (-fopt-info-vec) for
#   - this machine's compiler with the build's host target (JOULE_HOST_TARGET; `make vec-report`
#     passes the flags the build resolved, build/joule_host_target_flags.txt; default -march=native);
#   - with Debian's cross compiler (g++-aarch64-linux-gnu), Grace: the flag JOULE_HOST_TARGET=grace
#     takes (-mcpu=neoverse-v2, or -mcpu=demeter, GCC 12's name for the same Neoverse V2 core), and
#     plain NEON (-march=armv8-a).
# Where the target has SVE the object is disassembled too and its SVE instructions on z registers
# counted (whilelo, ld1w, st1w, fsqrt): a loop GCC calls vectorised "using variable length vectors"
# is SVE code. Fails if a target leaves a loop scalar, or an SVE target's object has no SVE loop.
# `make vec-report` runs it with the build's include folders.
# usage: vec_report.sh REPO_DIR KOKKOS_INCLUDE_DIRS GENERATED_INCLUDE_DIR
#   KOKKOS_INCLUDE_DIRS: one folder, or several separated by ';' (a CMake list)
#   JOULE_VEC_REPORT_HOST_FLAGS: the host target's flags (unset: -march=native; empty: none)
#   JOULE_VEC_REPORT_HOST_ONLY=1: this machine's compiler only (the test suite's check)
set -euo pipefail
repo="$1" generated="$3"
kokkos_includes=()
IFS=';' read -r -a kokkos_dirs <<<"$2"
for d in "${kokkos_dirs[@]}"; do  # the compiler's own folders stay where it searches them
  case "$d" in ""|/usr/include|/usr/local/include) ;; *) kokkos_includes+=(-isystem "$d") ;; esac
done
source_file="$repo/core/ops/adamw_host.cpp"
# Each loop by a text on its first line.
loop_names=("AdamW loop" "AdamW loop, out of place")
loop_marks=("for (std::size_t i = begin; i < end; ++i) e.apply" "the same element update, from one buffer into another")
loop_lines=()
for k in "${!loop_marks[@]}"; do
  l=$(grep -nF "${loop_marks[$k]}" "$source_file" | cut -d: -f1)
  [ "$(wc -w <<<"$l")" = 1 ] || { echo "vec_report: the ${loop_names[$k]} is not where this script looks in $source_file" >&2; exit 1; }
  loop_lines+=("$l")
done
# The build's flags for this file (core/CMakeLists.txt): -O3, no errno from math, no contraction, the
# build's C++ standard (JOULE_CXX_STANDARD; Kokkos 5 needs 20).
flags=(-O3 -DNDEBUG -fno-math-errno -ffp-contract=off -fopenmp -std=c++"${JOULE_CXX_STANDARD:-17}" -I"$repo" -I"$generated"
       "${kokkos_includes[@]}" -c "$source_file" -fopt-info-vec-all)
report_flags=("${flags[@]}")
object="$(mktemp --suffix=.o)"
trap 'rm -f "$object"' EXIT
status=0
report() {  # report LABEL COMPILER FLAGS...
  local label="$1" compiler="$2"
  shift 2
  local out
  out=$("$compiler" "$@" "${flags[@]}" -o "$object" 2>&1) || { echo "$label: the compiler failed:"; echo "$out" | head -5; status=1; return; }
  local vectorised k line
  for k in "${!loop_lines[@]}"; do
    line="${loop_lines[$k]}"
    vectorised=$(grep -E "adamw_host.cpp:$line:[0-9]+: optimized: loop vectorized" <<<"$out" | sed 's/.*optimized: //' | sort -u |
      paste -sd ';' - || true)
    if [ -n "$vectorised" ]; then
      echo "$label: ${loop_names[$k]} (line $line): $vectorised"
    else
      echo "$label: ${loop_names[$k]} (line $line) NOT vectorised:"
      grep -E "adamw_host.cpp:$line:" <<<"$out" | grep -i missed | sort -u | head -5
      status=1
    fi
  done
  # SVE: what the compiler enabled for these flags, and what the object holds.
  # Asked of the host compiler itself (through nvcc_wrapper: its NVCC_WRAPPER_DEFAULT_COMPILER),
  # with the target flags (-m...) only.
  local macros probe="$compiler" target_flags=() a
  [ "$(basename "$compiler")" = nvcc_wrapper ] && probe="${NVCC_WRAPPER_DEFAULT_COMPILER:-g++}"
  for a in "$@"; do [[ "$a" == -m* ]] && target_flags+=("$a"); done
  macros="$("$probe" "${target_flags[@]}" -dM -E -x c++ /dev/null 2>/dev/null || true)"
  if grep -q '__ARM_FEATURE_SVE ' <<<"$macros"; then
    local objdump="" asm count
    for objdump in "${compiler%g++}objdump" aarch64-linux-gnu-objdump objdump; do
      command -v "$objdump" >/dev/null && "$objdump" -d "$object" >/dev/null 2>&1 && break
      objdump=""
    done
    if [ -z "$objdump" ]; then
      echo "$label: SVE instructions not counted: no objdump for aarch64 (binutils-aarch64-linux-gnu)"
      return
    fi
    asm="$("$objdump" -d --no-show-raw-insn "$object")"
    count() { grep -cE "^ +[0-9a-f]+:[[:space:]]+$1[[:space:]]+[{]?$2[0-9]+" <<<"$asm" || true; }  # MNEMONIC REGISTER
    local whilelo ld1w st1w fsqrt
    whilelo=$(count whilelo p); ld1w=$(count ld1w z); st1w=$(count st1w z); fsqrt=$(count fsqrt z)
    echo "$label: SVE in the object: $whilelo whilelo (predicates), $ld1w ld1w, $st1w st1w, $fsqrt fsqrt (z registers)"
    if [ "$whilelo" = 0 ] || [ "$fsqrt" = 0 ]; then
      echo "$label: no SVE loop with a square root in the object: the AdamW update is not SVE code"
      status=1
    fi
  fi
}
# The build's own compilation of the file (its compile_commands.json): its compiler (nvcc_wrapper
# on a CUDA build, which hands -fopt-info-vec-all to its host compiler), host target and Kokkos flags.
build_command() {  # prints the build's command for $source_file, one argument a line, -o dropped
  python3 - "$1/compile_commands.json" "$source_file" <<'PY'
import json, shlex, sys, os
entries = [e for e in json.load(open(sys.argv[1])) if os.path.realpath(e["file"]) == os.path.realpath(sys.argv[2])]
if not entries:
    sys.exit("vec_report: %s has no command for %s" % (sys.argv[1], sys.argv[2]))
args = entries[0].get("arguments") or shlex.split(entries[0]["command"])
out, skip = [], False
for a in args:
    if skip: skip = False; continue
    if a == "-o": skip = True; continue
    if a == "-c" or a == entries[0]["file"] or os.path.realpath(a) == os.path.realpath(sys.argv[2]): continue
    out.append(a)
print(entries[0]["directory"])
print("\n".join(out))
PY
}
if [ -n "${JOULE_VEC_REPORT_BUILD_DIR:-}" ]; then
  mapfile -t command < <(build_command "$JOULE_VEC_REPORT_BUILD_DIR")
  [ "${#command[@]}" -ge 2 ] || { echo "vec_report: no build command for $source_file in $JOULE_VEC_REPORT_BUILD_DIR" >&2; exit 1; }
  build_flags="$(cat "$JOULE_VEC_REPORT_BUILD_DIR/joule_host_target_flags.txt" 2>/dev/null || true)"
  # The build's command, its own flags, and only the report's: -fopt-info-vec-all and the file.
  flags=(-c "$source_file" -fopt-info-vec-all)
  (cd "${command[0]}" && report "build ($(uname -m), ${build_flags:-no target flag from joule}; $(basename "${command[1]}"))" \
     "${command[1]}" "${command[@]:2}" && exit "$status") || status=1
else
  host_flags=(-march=native)
  [ -n "${JOULE_VEC_REPORT_HOST_FLAGS+set}" ] && read -r -a host_flags <<<"$JOULE_VEC_REPORT_HOST_FLAGS"
  report "host ($(uname -m), ${host_flags[*]:-no target flag})" "${CXX:-c++}" "${host_flags[@]}"
fi
flags=("${report_flags[@]}")
if [ "${JOULE_VEC_REPORT_HOST_ONLY:-0}" = 1 ]; then
  :
elif command -v aarch64-linux-gnu-g++ >/dev/null; then
  # The flag JOULE_HOST_TARGET=grace takes with this compiler (cmake/JouleHostTarget.cmake).
  grace=""
  for cpu in neoverse-v2 demeter; do
    aarch64-linux-gnu-g++ -mcpu=$cpu -E -x c++ /dev/null >/dev/null 2>&1 && { grace="-mcpu=$cpu"; break; }
  done
  if [ -n "$grace" ]; then
    report "aarch64 Grace ($grace)" aarch64-linux-gnu-g++ "$grace"
  else
    echo "aarch64 Grace: $(aarch64-linux-gnu-g++ -dumpversion) knows neither -mcpu=neoverse-v2 nor -mcpu=demeter"
    status=1
  fi
  report "aarch64 NEON (-march=armv8-a)" aarch64-linux-gnu-g++ -march=armv8-a
else
  echo "aarch64: skipped: no aarch64-linux-gnu-g++ (apt-get install g++-aarch64-linux-gnu)"
fi
exit $status
