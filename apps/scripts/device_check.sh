#!/usr/bin/env bash
# The check to run on a machine with an NVIDIA GPU (an H100/H200 or a GH200 node), as one command
# that fits in ten minutes there, network or not:
#   1. builds joule (the library, the joule command, every test) against a CUDA build of Kokkos +
#      Kokkos-Kernels: the one packed by apps/scripts/device_bundle.sh (--deps; it also carries
#      HDF5, Catch2, json, CLI11 and fmt for machines without them), or your own (Kokkos_ROOT);
#   2. runs the test suite on the GPU (operators on Serial, OpenMP and Cuda; model, training,
#      scheduler; the mpirun tests if the machine has MPI);
#   3. benchmarks the operators at GPU size (joule bench --preset vit-large) and, where PyTorch is
#      there, the same shapes through PyTorch (attention: F.scaled_dot_product_attention), and a
#      whole training step of apps/configs/medium.json;
#   4. probes energy (NVML must be found) and runs a short `joule tune` that measures with it;
#   5. writes OUT_DIR/summary.txt (printed last) and one log per step.
# Each step has a time limit within the budget; steps that no longer fit are skipped and say so.
#   apps/scripts/device_check.sh [--deps BUNDLE.tar.gz] [--budget SECONDS] [OUT_DIR]
#   Kokkos_ROOT=/path/to/cuda-kokkos apps/scripts/device_check.sh [OUT_DIR]
# JOULE_DEVICE_CMAKE_ARGS: more configure arguments (e.g. -DMPIEXEC_EXECUTABLE=$(which srun)).
set -uo pipefail
repo="$(cd "$(dirname "$0")/../.." && pwd)"
deps="" budget=570 out=""
while [ $# -gt 0 ]; do
  case "$1" in
    --deps) deps="$2"; shift 2 ;;
    --budget) budget="$2"; shift 2 ;;
    -h|--help) sed -n '2,18p' "$0"; exit 0 ;;
    -*) echo "device_check.sh: unknown option $1 (allowed: --deps FILE, --budget SECONDS)" >&2; exit 2 ;;
    *) out="$1"; shift ;;
  esac
done
out="${out:-$repo/device-check}"
mkdir -p "$out" && out="$(cd "$out" && pwd)"
build="$out/build"
jobs="$(nproc)"
start=$SECONDS
results=()
note() { results+=("$1|$2|$3"); }
left() { echo $((budget - (SECONDS - start))); }
step() {  # step NAME LIMIT_S COMMAND...: runs it (at most LIMIT_S, and never past the budget)
  local name="$1" limit="$2"; shift 2
  local remaining; remaining="$(left)"
  [ "$limit" -gt "$remaining" ] && limit="$remaining"
  if [ "$limit" -lt 15 ]; then note "$name" "SKIPPED (budget spent)" "-"; return 1; fi
  local t0=$SECONDS rc=0
  timeout --kill-after=5 "$limit" "$@" >"$out/$name.log" 2>&1 || rc=$?
  local took="$((SECONDS - t0)) s"
  if [ $rc = 0 ]; then note "$name" ok "$took"
  elif [ $rc = 124 ] || [ $rc = 137 ]; then note "$name" "TIMED OUT after ${limit} s (see $name.log)" "$took"
  else note "$name" "FAILED, exit $rc (see $name.log)" "$took"; fi
  return $rc
}

# --- The machine ------------------------------------------------------------------------------------
command -v nvcc >/dev/null || export PATH="${CUDA_HOME:-/usr/local/cuda}/bin:$PATH"
{
  gpu="$(nvidia-smi --query-gpu=name,driver_version,memory.total,power.limit --format=csv,noheader 2>/dev/null | head -1)"
  echo "gpu: ${gpu:-none found (nvidia-smi did not answer)}"
  echo "nvcc: $(nvcc --version 2>&1 | sed -n 's/.*release \([0-9.]*\).*/\1/p')"
  echo "cmake: $(cmake --version | head -1)"; echo "c++: $(c++ --version | head -1)"
  echo "cores: $jobs; mpi: $(command -v mpiexec || echo none); ninja: $(command -v ninja || echo none)"
  echo "python3 torch: $(python3 -c 'import torch; print(torch.__version__, torch.cuda.is_available())' 2>&1 | tail -1)"
} >"$out/machine.txt" 2>&1

# --- 1. Dependencies and the build ----------------------------------------------------------------
cmake_args=()
if [ -n "$deps" ]; then
  root="$out/deps"; rm -rf "$root"; mkdir -p "$root"
  step unpack 120 tar -xf "$deps" -C "$root" || true
  root="$root/joule-deps"
  export Kokkos_ROOT="$root/kokkos"
  cmake_args+=(-DCMAKE_PREFIX_PATH="$root/usr;$root/hdf5" -DHDF5_ROOT="$root/hdf5" -DHDF5_USE_STATIC_LIBRARIES=ON)
fi
: "${Kokkos_ROOT:?give --deps BUNDLE (apps/scripts/device_bundle.sh) or Kokkos_ROOT (a CUDA + OpenMP Kokkos 4.x/5.x with Kokkos-Kernels)}"
# MPI if the machine has it, else one process per job. (With one GPU the mpirun tests' ranks share
# it, and joule then runs their collectives on MPI, saying so: parallel/backend_choice.hpp.)
if command -v mpicxx >/dev/null && command -v mpiexec >/dev/null; then cmake_args+=(-DJOULE_WITH_MPI=ON)
else cmake_args+=(-DJOULE_WITH_MPI=OFF); fi
command -v ninja >/dev/null && cmake_args+=(-G Ninja)
read -r -a extra <<<"${JOULE_DEVICE_CMAKE_ARGS:-}"
cmake_args+=("${extra[@]}")
step configure 120 cmake --preset gh200 -S "$repo" -B "$build" -DKokkos_ROOT="$Kokkos_ROOT" "${cmake_args[@]}"
step build 420 cmake --build "$build" -j "$jobs"
built=$?
joule="$build/apps/joule"

# --- 2. Tests, operators first (they are what a GPU build changes most) --------------------------
if [ $built = 0 ]; then
  ops="linear|layernorm|gelu|residual|embedding|patch|attention|cross entropy|adamw|block"
  step tests_operators 120 ctest --test-dir "$build" -R "$ops" --output-on-failure --no-tests=error -j 8 --timeout 90
fi

# --- 3. Benchmarks ----------------------------------------------------------------------------------
if [ -x "$joule" ]; then
  step bench 90 "$joule" bench --preset vit-large --repeats 10 --json "$out/bench.json"
  if [ -f "$out/bench.json" ] && python3 -c 'import torch; assert torch.cuda.is_available()' 2>/dev/null; then
    step bench_torch 90 python3 "$repo/apps/scripts/bench_torch.py" --device cuda "$out/bench.json"
  else
    note bench_torch "not run (no bench.json, or no PyTorch with CUDA)" "-"
  fi
  # A whole training step (forward, backward, AdamW) of the medium model, synthetic data.
  step train_medium 120 "$joule" train --config "$repo/apps/configs/medium.json" --make-data \
    --data "$out/shapes-medium.h5" --steps 60
fi

# --- 4. Energy: NVML, and a short tuning run measured with it ---------------------------------------
if [ -x "$joule" ]; then
  step energy_probe 30 "$joule" energy probe
  grep -q "^source nvml" "$out/energy_probe.log" 2>/dev/null || note nvml_found "FAILED: joule energy probe found no NVML" "-"
  step tune 150 "$joule" tune --make-data --data "$out/shapes.h5" --out "$out/tune.h5" --steps 100 \
    --warmup-steps 2 --measured-steps 5 --max-repeats 2
fi

# --- 5. The rest of the test suite, while time is left ----------------------------------------------
if [ $built = 0 ]; then
  step tests_rest 240 ctest --test-dir "$build" -E "$ops" --output-on-failure --no-tests=error -j 8 --timeout 120
fi

# --- Summary ----------------------------------------------------------------------------------------
{
  echo "joule device check: $(grep '^gpu' "$out/machine.txt"), $(grep '^nvcc' "$out/machine.txt"), $jobs cores"
  echo "joule $(git -C "$repo" rev-parse --short HEAD 2>/dev/null || echo '?'); Kokkos: $(sed -n 's/.*joule: Kokkos \(.*\)/\1/p' "$out/configure.log" 2>/dev/null | head -1)"
  [ -n "$deps" ] && sed -n 1,3p "$out/deps/joule-deps/MANIFEST" 2>/dev/null | sed 's/^/  bundle: /'
  for t in tests_operators tests_rest; do
    [ -f "$out/$t.log" ] && grep -h "tests passed" "$out/$t.log" | sed "s/^/  $t: /"
  done
  grep -h "^attention.*TFLOP/s\|^geometric mean" "$out/bench_torch.log" 2>/dev/null | sed 's/^/  bench: /'
  grep -hE "^(block|linear_qkv|attention_causal|attention_prefix) " "$out/bench.log" 2>/dev/null | sed 's/^/  joule bench: /'
  grep -hE "^step time|^final held-out" "$out/train_medium.log" 2>/dev/null | tail -3 | sed 's/^/  medium: /'
  grep -hE "^source" "$out/energy_probe.log" 2>/dev/null | head -3 | sed 's/^/  energy: /'
  grep -hiE "Chosen configuration|Energy:|measured" "$out/tune.log" 2>/dev/null | head -4 | sed 's/^/  tune: /'
  printf '%-16s %-48s %s\n' step result time
  for r in "${results[@]}"; do IFS='|' read -r a b c <<<"$r"; printf '%-16s %-48s %s\n' "$a" "$b" "$c"; done
  echo "total: $((SECONDS - start)) s of a $budget s budget"
} | tee "$out/summary.txt"
! grep -qE "FAILED|TIMED OUT" "$out/summary.txt"
