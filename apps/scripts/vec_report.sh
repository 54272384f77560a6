#!/usr/bin/env bash
# Are the host AdamW loops (core/ops/adamw_host.cpp: in place, and out of place for a speculative
# step) vectorised? GCC's own report (-fopt-info-vec)
# for this machine (the build's -march=native) and, with Debian's cross compiler
# (g++-aarch64-linux-gnu), for Grace: SVE (-mcpu=neoverse-n2, the same features as Grace's Neoverse V2,
# which GCC 12 knows as -mcpu=demeter) and plain NEON (-march=armv8-a). Fails if a target leaves the loop
# scalar. `make vec-report` runs it with the build's include folders.
# usage: vec_report.sh REPO_DIR KOKKOS_INCLUDE_DIRS GENERATED_INCLUDE_DIR
#   KOKKOS_INCLUDE_DIRS: one folder, or several separated by ';' (a CMake list)
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
       "${kokkos_includes[@]}" -c "$source_file" -o /dev/null -fopt-info-vec-all)
status=0
report() {  # report LABEL COMPILER FLAGS...
  local label="$1" compiler="$2"
  shift 2
  local out
  out=$("$compiler" "$@" "${flags[@]}" 2>&1) || { echo "$label: the compiler failed:"; echo "$out" | head -5; status=1; return; }
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
}
report "host ($(uname -m), -march=native)" "${CXX:-c++}" -march=native
if [ "${JOULE_VEC_REPORT_HOST_ONLY:-0}" = 1 ]; then
  :
elif command -v aarch64-linux-gnu-g++ >/dev/null; then
  report "aarch64 SVE (-mcpu=neoverse-n2)" aarch64-linux-gnu-g++ -mcpu=neoverse-n2
  report "aarch64 NEON (-march=armv8-a)" aarch64-linux-gnu-g++ -march=armv8-a
else
  echo "aarch64: skipped: no aarch64-linux-gnu-g++ (apt-get install g++-aarch64-linux-gnu)"
fi
exit $status
