#!/usr/bin/env bash
# The check to run on a machine with an NVIDIA GPU (an H100/H200 or a GH200 node) and a CUDA
# build of Kokkos + Kokkos-Kernels (Kokkos_ROOT): builds joule with the gh200 preset's settings,
# runs the operator tests on the GPU, probes energy (NVML must be found), trains the tiny model
# briefly with real energy measurement, and writes everything to one folder. Prints a short
# table last. Meant to finish in under 8 minutes.
#   Kokkos_ROOT=/path/to/kokkos apps/scripts/device_check.sh [OUT_DIR]
set -uo pipefail
repo="$(cd "$(dirname "$0")/../.." && pwd)"
out="${1:-$repo/device-check}"
: "${Kokkos_ROOT:?set Kokkos_ROOT to a CUDA (+ OpenMP) Kokkos 4.x/5.x install with Kokkos-Kernels}"
mkdir -p "$out"
build="$out/build"
jobs="$(nproc)"
results=()
step() {  # step NAME COMMAND...: runs it, logs to OUT/NAME.log, records the outcome and time
  local name="$1"; shift
  local t0=$SECONDS
  if "$@" >"$out/$name.log" 2>&1; then results+=("$name|ok|$((SECONDS - t0)) s")
  else results+=("$name|FAILED (see $name.log)|$((SECONDS - t0)) s"); fi
}
nvidia-smi --query-gpu=name,driver_version,power.limit --format=csv >"$out/gpu.txt" 2>&1 || true

step configure cmake -S "$repo" -B "$build" -DCMAKE_BUILD_TYPE=Release -DKokkos_ROOT="$Kokkos_ROOT" \
  -DCMAKE_CXX_COMPILER="${CXX:-$Kokkos_ROOT/bin/nvcc_wrapper}" -DJOULE_GH200="${JOULE_GH200:-OFF}"
step build cmake --build "$build" -j "$jobs"
# Operator tests (every backend Kokkos has, the GPU included) and the model tests.
step operator_tests ctest --test-dir "$build" -R "linear|layernorm|gelu|residual|embedding|patch|attention|cross entropy|adamw|block" \
  --output-on-failure -j 4
step model_tests ctest --test-dir "$build" -R "model:|training:|offload:" --output-on-failure
step energy_probe "$build/apps/joule" energy probe
grep -q "^source nvml" "$out/energy_probe.log" || results+=("nvml_found|FAILED: joule energy probe found no NVML|-")
step train "$build/apps/joule" train --config "$repo/apps/configs/tiny.json" --make-data \
  --data "$out/shapes.h5" --steps 300 --offload-ratio 0.5
step bench "$build/apps/joule" bench --repeats 5 --json "$out/bench.json"

{
  echo "device check: $(head -2 "$out/gpu.txt" | tail -1)"
  grep -h "final held-out" "$out/train.log" 2>/dev/null | sed 's/^/  /'
  grep -h "^  (whole run)" "$out/train.log" 2>/dev/null | sed 's/^/  energy: /'
  grep -h "^block " "$out/bench.log" 2>/dev/null | sed 's/^/  bench: /'
  printf '%-16s %-40s %s\n' step result time
  for r in "${results[@]}"; do IFS='|' read -r a b c <<<"$r"; printf '%-16s %-40s %s\n' "$a" "$b" "$c"; done
} | tee "$out/summary.txt"
! grep -q FAILED "$out/summary.txt"
