#!/usr/bin/env bash
# The check to run on a machine with an NVIDIA GPU (an H100/H200 or a GH200 node), as one command,
# network or not. The most important results come first, and every step has its own time limit;
# together they fit in the budget (docs/gh200.md, "The device check", has the table), so nothing
# late is starved by something early. Two ways to get the binaries:
#   --bundle B  prebuilt on a build machine by apps/scripts/device_bundle.sh (make device-bundle)
#               and copied to the GPU node: unpacked, its libraries checked (ldd), nothing
#               configured or compiled on the node; budget 300 s (a job or salloc of 10 minutes
#               holds the check and a rerun)
#   Kokkos_ROOT your own CUDA Kokkos (a GH200 node): configure, then build joule and only the test
#               executables that step 1 runs (ninja if there is one, on all cores, in WORK/build);
#               budget 540 s
#   1 tests_gpu        the GPU tests of ordering and of bitwise offload (JOULE_DEVICE_TESTS)
#   2 step_medium      one whole training step of apps/configs/medium.json's shape, timed
#                      (joule bench --suite step --step-shapes medium)
#   2 step_bf16        the same step in bf16 (cuBLASLt), and apps/configs/gh200-350m.json's bf16
#                      step with its model FLOPs utilisation
#   2 offload_cast     bf16 offload at ratio 1, the cast on the device and on the host: time, NVML
#                      energy and bytes over the link per step (apps/configs/tiny-bf16-cast.json)
#   3 energy_probe     joule energy probe (NVML must be found)
#   4 bench_ops, bench_torch   the operators at GPU size, and the same shapes through PyTorch
#                      (attention against F.scaled_dot_product_attention) where PyTorch has CUDA
#   5 tune             a short joule tune, measured with NVML
#   then, with whatever time is left: build_more + tests_more (the operator tests,
#   JOULE_DEVICE_MORE_TESTS).
# OUT_DIR gets only results: summary.txt (rewritten after every step, so a run killed from outside
# still says what it did), logs.tar.gz (every step's log, also re-packed after every step),
# machine.txt and the benchmarks' JSON. Everything else (the unpacked bundle, the build, logs,
# data) goes to WORK (default: build-device in the checkout; kept, so a rerun builds incrementally).
#   apps/scripts/device_check.sh --bundle BUNDLE.tar.gz [--budget SECONDS] [--work DIR]
#                                [--only STEP,STEP...] [--rehearse] [OUT_DIR]
#   Kokkos_ROOT=/path/to/cuda-kokkos apps/scripts/device_check.sh [OUT_DIR]
# Under Slurm, on one GPU of a compute node (the checkout and the bundle on a shared file system, or
# copied there; add the site's partition and account):
#   srun -N 1 -n 1 --gpus=1 --time=10 apps/scripts/device_check.sh --bundle BUNDLE.tar.gz OUT_DIR
# --rehearse: everything up to the first command that needs the GPU (unpack and the libraries, or
#   configure and build), for a machine without a GPU; the GPU steps say "not run (rehearsal)".
# --only: run just these of the numbered steps (e.g. --only tests_gpu,tune on a warm machine, whose
#   WORK is still there); configure and build always run (incremental: seconds when nothing
#   changed), the bundle is unpacked again only when it changed.
# Environment:
#   JOULE_DEVICE_TESTS        ctest regex of step 1 (default: ordering|offload|bitwise|same bits)
#   JOULE_DEVICE_TEST_TARGETS the test executables to build for it (default: those whose
#                             tests/*.cpp have a TEST_CASE name matching the regex on its first line;
#                             apps/scripts/device_tests.sh, which the bundle uses too)
#   JOULE_DEVICE_MORE_TESTS   ctest regex of tests_more (default: the operator tests); its targets
#                             likewise (JOULE_DEVICE_MORE_TARGETS)
#   JOULE_DEVICE_MPI          auto (default: with MPI if mpicxx and mpiexec are there), on, off
#   JOULE_DEVICE_CMAKE_ARGS   more configure arguments (e.g. -DMPIEXEC_EXECUTABLE=$(which srun))
#   JOULE_DEVICE_BUILD_LIMIT  the build step's limit (default 200 s; a machine with fewer cores
#                             needs more, and a larger --budget with it)
#   JOULE_DEVICE_TESTS_LIMIT  step 1's limit (default 60 s; a rehearsal on a busy CPU needs more)
#   JOULE_DEVICE_PRESET       the CMake preset (default gh200; cpu runs every step on a CPU build
#                             against an OpenMP Kokkos: the script's own rehearsal, no GPU meant)
set -uo pipefail
# The whole script is one compound command, read in full before it starts: editing the file while
# it runs (a checkout updated under a long run) cannot change what it does.
{
repo="$(cd "$(dirname "$0")/../.." && pwd)"
bundle="" budget="" out="" work="" rehearse=0 only=""
while [ $# -gt 0 ]; do
  case "$1" in
    --bundle) bundle="$2"; shift 2 ;;
    --deps) echo "device_check.sh: --deps is gone: the bundle holds the built binaries now (apps/scripts/device_bundle.sh); give it with --bundle" >&2; exit 2 ;;
    --budget) budget="$2"; shift 2 ;;
    --work) work="$2"; shift 2 ;;
    --only) only=",$2,"; shift 2 ;;
    --rehearse|--dry-run) rehearse=1; shift ;;
    -h|--help) awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; exit 0 ;;
    -*) echo "device_check.sh: unknown option $1 (allowed: --bundle FILE, --budget SECONDS, --work DIR, --only STEPS, --rehearse)" >&2; exit 2 ;;
    *) out="$1"; shift ;;
  esac
done
budget="${budget:-$([ -n "$bundle" ] && echo 300 || echo 540)}"
[[ "$budget" =~ ^[0-9]+$ ]] || { echo "device_check.sh: --budget $budget: a number of seconds" >&2; exit 2; }
if [ -n "$bundle" ]; then
  [ -f "$bundle" ] || { echo "device_check.sh: --bundle $bundle: no such file (make it on a build machine with make device-bundle, apps/scripts/device_bundle.sh)" >&2; exit 2; }
  bundle="$(cd "$(dirname "$bundle")" && pwd)/$(basename "$bundle")"
fi
out="${out:-$repo/device-check}"
work="${work:-$repo/build-device}"
mkdir -p "$out" "$work" && out="$(cd "$out" && pwd)" && work="$(cd "$work" && pwd)"
case "$work/" in "$out"/*) echo "device_check.sh: the work folder $work must not be inside OUT_DIR $out (OUT_DIR holds only results)" >&2; exit 2 ;; esac
build="$work/build" logs="$work/logs"
rm -rf "$logs" && mkdir -p "$logs"
rm -f "$out/summary.txt" "$out/logs.tar.gz" "$out/machine.txt" "$out/bench.json" "$out/step.json" "$out/step_bf16.json"
jobs="$(nproc)"
preset="${JOULE_DEVICE_PRESET:-gh200}"
start=$SECONDS
reserve=5          # kept back for the last summary and log archive
machine_limit=15   # the machine's facts: the longest of them, whether python3 has torch with CUDA
results=()
current="" step_pid=""

# shellcheck source=device_tests.sh
. "$repo/apps/scripts/device_tests.sh"
tests_re="$device_tests_re" more_re="$device_more_re"
test_targets() { device_test_targets "$1"; }
targets="${JOULE_DEVICE_TEST_TARGETS:-$(test_targets "$tests_re")}"
more_targets="${JOULE_DEVICE_MORE_TARGETS:-$(test_targets "$more_re")}"

# --- Results: summary.txt and logs.tar.gz, rewritten after every step --------------------------------
publish() {
  {
    echo "joule device check$([ $rehearse = 1 ] && echo " (REHEARSAL: no GPU command run)"): $(sed -n 's/^gpu: //p' "$out/machine.txt" 2>/dev/null), nvcc $(sed -n 's/^nvcc: //p' "$out/machine.txt" 2>/dev/null), $jobs cores"
    echo "joule $(git -C "$repo" rev-parse --short HEAD 2>/dev/null || echo '?')$(git -C "$repo" diff --quiet HEAD 2>/dev/null || echo ' (uncommitted changes)'); Kokkos: $(sed -n 's/.*joule: Kokkos \(.*\)/\1/p' "$logs/configure.log" 2>/dev/null | head -1)"
    [ -n "$bundle" ] && sed -n 1,2p "$work/bundle/joule-device/MANIFEST" 2>/dev/null | sed 's/^/  bundle: /'
    echo "  tests of step 1: /$tests_re/ from: ${targets:-none found}"
    for t in tests_gpu tests_more; do
      [ -f "$logs/$t.log" ] && grep -hE "tests passed|^[[:space:]]*[0-9]+ - .*\((Failed|Timeout|SEGFAULT|Subprocess|Exception|Not Run)" "$logs/$t.log" | head -12 | sed "s/^/  $t: /"
    done
    grep -hE "^medium " "$logs/step_medium.log" 2>/dev/null | sed 's/^/  step (ms, GFLOP\/s ...): /'
    grep -hE "^shape " "$logs/step_medium.log" 2>/dev/null | head -1 | sed 's/^/  step columns:         /'
    grep -hE "^(medium|gh200) |TFLOP/s, .* of the" "$logs/step_bf16.log" 2>/dev/null | sed 's/^/  bf16 step: /'
    grep -hE "^ +trial " "$logs/offload_cast.log" 2>/dev/null | sed 's/^/  cast: /'
    grep -hE "^source" "$logs/energy_probe.log" 2>/dev/null | head -4 | sed 's/^/  energy: /'
    grep -hE "^(block|linear_qkv|attention_causal|attention_prefix) " "$logs/bench_ops.log" 2>/dev/null | sed 's/^/  joule bench: /'
    grep -hE "^attention.*TFLOP/s|^geometric mean|^medium" "$logs/bench_torch.log" 2>/dev/null | sed 's/^/  torch: /'
    grep -hiE "Chosen configuration|^energy" "$logs/tune.log" 2>/dev/null | head -3 | sed 's/^/  tune: /'
    printf '%-14s %-56s %s\n' step result time
    local r a b c
    for r in "${results[@]}"; do IFS=$'\x1f' read -r a b c <<<"$r"; printf '%-14s %-56s %s\n' "$a" "$b" "$c"; done
    if [ -n "$current" ]; then echo "running now: $current (if this is the last line, the run was stopped during it)"
    else echo "total: $((SECONDS - start)) s of a $budget s budget"; fi
  } >"$out/summary.txt.tmp" 2>/dev/null && mv -f "$out/summary.txt.tmp" "$out/summary.txt"
  tar -C "$work" -czf "$out/logs.tar.gz.tmp" logs 2>/dev/null && mv -f "$out/logs.tar.gz.tmp" "$out/logs.tar.gz"
}
note() { results+=("$1"$'\x1f'"$2"$'\x1f'"$3"); publish; }  # (a separator no message holds)
left() { echo $((budget - reserve - (SECONDS - start))); }
wanted() { [ -z "$only" ] || [[ "$only" == *",$1,"* ]]; }
# step NAME LIMIT_S host|gpu|any COMMAND...: runs it for at most LIMIT_S (and never past the budget),
# its output in WORK/logs/NAME.log. host: a step the others need (always run); gpu: not run in a
# rehearsal; gpu and any: only those --only names. Returns the command's status (1: did not run).
step() {
  local name="$1" limit="$2" needs="$3"; shift 3
  if [ "$needs" != host ] && ! wanted "$name"; then note "$name" "not asked (--only)" "-"; return 1; fi
  if [ "$needs" = gpu ] && [ $rehearse = 1 ]; then note "$name" "not run (rehearsal: needs the GPU)" "-"; return 1; fi
  local remaining; remaining="$(left)"
  [ "$limit" -gt "$remaining" ] && limit="$remaining"
  if [ "$limit" -lt 10 ]; then note "$name" "SKIPPED (budget spent)" "-"; return 1; fi
  current="$name (limit $limit s, started at $((SECONDS - start)) s)"; publish
  local t0=$SECONDS rc=0
  { echo "\$ $*"; echo "(limit $limit s)"; } >"$logs/$name.log"
  # timeout puts the command in a process group of its own; in the background here, so that the
  # trap below can end it (a Ctrl-C or a TERM from outside would not reach that group).
  timeout --kill-after=5 "$limit" "$@" >>"$logs/$name.log" 2>&1 &
  step_pid=$!
  wait "$step_pid" || rc=$?
  step_pid=""
  local took="$((SECONDS - t0)) s"
  current=""
  if [ $rc = 0 ]; then note "$name" ok "$took"
  elif [ $rc = 124 ] || [ $rc = 137 ]; then note "$name" "TIMED OUT after $limit s (see logs/$name.log)" "$took"
  else note "$name" "FAILED, exit $rc (see logs/$name.log)" "$took"; fi
  return $rc
}

# Stopped from outside: end the running step's command too, and say where the run stopped.
on_signal() {
  [ -n "$step_pid" ] && kill -TERM "$step_pid" 2>/dev/null
  local name="${current%% *}"; current=""
  note "${name:-?}" "INTERRUPTED (signal $1)" "-"
  exit 130
}
trap 'on_signal INT' INT
trap 'on_signal TERM' TERM

# --- The machine ------------------------------------------------------------------------------------
command -v nvcc >/dev/null || export PATH="${CUDA_HOME:-/usr/local/cuda}/bin:$PATH"
# OpenMPI refuses to start as root (containers and some node images run jobs as root) unless told.
if [ "$(id -u)" = 0 ]; then export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1; fi
torch_cuda="$(timeout "$machine_limit" python3 -c 'import torch; print(torch.__version__, "cuda" if torch.cuda.is_available() else "no-cuda")' 2>&1 | tail -1)"
{
  gpu="$(nvidia-smi --query-gpu=name,driver_version,memory.total,power.limit --format=csv,noheader 2>/dev/null | head -1)"
  echo "gpu: ${gpu:-none found (nvidia-smi did not answer)}"
  echo "nvcc: $(nvcc --version 2>&1 | sed -n 's/.*release \([0-9.]*\).*/\1/p')"
  echo "cmake: $(cmake --version | head -1)"; echo "c++: $(c++ --version 2>&1 | head -1)"
  echo "cores: $jobs; mpi: $(command -v mpiexec || echo none); ninja: $(command -v ninja || echo none); user: $(id -un)"
  echo "python3 torch: $torch_cuda"
  echo "step 1 tests: /$tests_re/ in ${targets:-no test executable}; tests_more: /$more_re/ in $more_targets"
} >"$out/machine.txt" 2>&1
cp "$out/machine.txt" "$logs/"
publish

# --- The binaries: a prebuilt bundle, or configure and build against Kokkos_ROOT ----------------------
joule_cmd=()   # how joule is started (with the bundle's libraries)
test_exes=()   # the bundle's test executables, run without ctest
if [ -n "$bundle" ]; then
  root="$work/bundle"
  stamp="$bundle $(stat -c '%s %Y' "$bundle" 2>/dev/null)"
  if [ "$(cat "$root/.unpacked-from" 2>/dev/null)" != "$stamp" ]; then
    rm -rf "$root"; mkdir -p "$root"
    step unpack 10 host tar -xzf "$bundle" -C "$root" && echo "$stamp" >"$root/.unpacked-from"
  else
    note unpack "already unpacked in $root" "-"
  fi
  p="$root/joule-device"
  # Only joule's binaries see the bundle's libraries (python3 and PyTorch keep their own).
  cuda_lib="${CUDA_HOME:-$(dirname "$(dirname "$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)")")}/lib64"
  bundle_ld="$p/lib:$cuda_lib:/usr/local/nvidia/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  # A rehearsal on a machine without the driver loads the toolkit's stub libcuda (every call fails
  # with CUDA_ERROR_STUB_LIBRARY): the binaries start, and stop at their first GPU call.
  if [ $rehearse = 1 ] && ! ldconfig -p 2>/dev/null | grep 'libcuda\.so\.1 ' >/dev/null && [ -f "$cuda_lib/stubs/libcuda.so" ]; then
    mkdir -p "$work/rehearsal-driver" && ln -sf "$cuda_lib/stubs/libcuda.so" "$work/rehearsal-driver/libcuda.so.1"
    bundle_ld+=":$work/rehearsal-driver"
  fi
  joule_cmd=(env "LD_LIBRARY_PATH=$bundle_ld" "$p/bin/joule")
  for t in $(sed -n 's/^tests: //p' "$p/MANIFEST" 2>/dev/null); do test_exes+=("$p/tests/$t"); done
  targets="${test_exes[*]##*/}"
  # Every library every binary needs, found (a rehearsal has no driver: libcuda is left out there).
  step libraries 10 host bash -c 'rc=0; for b in "${@:3}"; do m="$(env -i LD_LIBRARY_PATH="$1" ldd "$b" | grep "not found" | grep -vE "$2")"; [ -z "$m" ] || { echo "$b: $m"; rc=1; }; done; [ $rc = 1 ] || echo "every library of $(( $# - 2 )) binaries found"; exit $rc' \
    _ "$bundle_ld" "$([ $rehearse = 1 ] && echo '^[[:space:]]*libcuda\.so' || echo '^$')" "$p/bin/joule" "$p/lib/libjoule_energy_tool.so" "${test_exes[@]}"
  # Every binary starts: joule info, each test executable lists its tests. Both initialise Kokkos,
  # the first GPU call: in a rehearsal the stub driver refuses it, which is as far as one can go.
  # Then the commands that need no device run whole with the GPU hidden (CUDA_VISIBLE_DEVICES=):
  # they never start Kokkos (a login node's use), in a rehearsal too.
  built=1
  # (Catch2 v2 exits with the number of tests it lists: listing any is success.)
  step starts 10 host env "LD_LIBRARY_PATH=$bundle_ld" bash -c 'rc=0; for b in "${@:4}"; do
      a=(--list-test-names-only); [ "${b##*/}" = joule ] && a=(info)  # Catch2 v3: --list-tests
      [ "${b##*/}" != joule ] && ! grep -q -- --list-test-names-only <<<"$("$b" --help 2>/dev/null)" && a=(--list-tests --verbosity quiet)
      n="$("$b" "${a[@]}" 2>"$b.err" | wc -l)"
      if [ "$n" -gt 0 ]; then echo "${b##*/} ${a[*]}: ok ($n lines)"
      elif [ "$1" = 1 ] && grep -q cudaErrorStubLibrary "$b.err"; then echo "${b##*/} ${a[*]}: reached the first GPU call (Kokkos::initialize; the stub driver refuses it)"
      else echo "${b##*/} ${a[*]}: FAILED"; cat "$b.err"; rc=1; fi; rm -f "$b.err"; done
      j="$4" d="$2/no-device.h5"; rm -f "$d"
      cmds=("--help" "info --no-device" "data synth --out $d --count 4" "data info $d")
      if [ -f "$3" ]; then cmds+=("inspect $3")  # a run log written by a CPU build (device_bundle.sh)
      else echo "joule inspect, GPU hidden: not run (the bundle has no fixtures/run-log.h5)"; fi
      for c in "${cmds[@]}"; do
        if CUDA_VISIBLE_DEVICES= $j $c >"$2/no-device.out" 2>&1; then echo "joule $c, GPU hidden: ok"
        else echo "joule $c, GPU hidden: FAILED"; cat "$2/no-device.out"; rc=1; fi; done; exit $rc' \
    _ "$rehearse" "$work" "$p/fixtures/run-log.h5" "$p/bin/joule" "${test_exes[@]}" || built=0
else
: "${Kokkos_ROOT:?give --bundle BUNDLE (apps/scripts/device_bundle.sh) or Kokkos_ROOT (a CUDA + OpenMP Kokkos 4.x/5.x with Kokkos-Kernels)}"
cmake_args=()
# MPI if the machine has it (JOULE_DEVICE_MPI=auto), else one process per job. With one GPU the
# mpirun tests' ranks share it, and joule then runs their collectives on MPI, saying so.
mpi="${JOULE_DEVICE_MPI:-auto}"
if [ "$mpi" = auto ]; then
  if command -v mpicxx >/dev/null && command -v mpiexec >/dev/null; then mpi=on; else mpi=off; fi
fi
if [ "$mpi" = on ]; then
  cmake_args+=(-DJOULE_WITH_MPI=ON)
  if [ "$(id -u)" = 0 ] && grep -qi "open mpi\|open-rte\|openrte" <<<"$(mpiexec --version 2>&1)"; then
    cmake_args+=(-DMPIEXEC_PREFLAGS=--allow-run-as-root)
  fi
else
  cmake_args+=(-DJOULE_WITH_MPI=OFF)
fi
command -v ninja >/dev/null && cmake_args+=(-G Ninja)
# CMake 4 (pip's) refuses packages that still ask for policies older than 3.5.
cmake_args+=(-DCMAKE_POLICY_VERSION_MINIMUM=3.5)
read -r -a extra <<<"${JOULE_DEVICE_CMAKE_ARGS:-}"
cmake_args+=("${extra[@]}")
# A build tree made by another generator cannot be reused: start it again.
if [ -f "$build/CMakeCache.txt" ] && ! grep -q "^CMAKE_GENERATOR:INTERNAL=$(command -v ninja >/dev/null && echo Ninja || echo 'Unix Makefiles')$" "$build/CMakeCache.txt"; then
  rm -rf "$build"
fi
configured=1 built=1
step configure 45 host cmake --preset "$preset" -S "$repo" -B "$build" -DKokkos_ROOT="$Kokkos_ROOT" "${cmake_args[@]}" || configured=0
joule="$build/apps/joule"
if [ $configured = 1 ]; then
  # Only what is run: the joule command and step 1's test executables.
  read -r -a build_targets <<<"joule $targets"
  step build "${JOULE_DEVICE_BUILD_LIMIT:-200}" host cmake --build "$build" -j "$jobs" --target "${build_targets[@]}" || built=0
else
  note build "not run (configure failed)" "-"; built=0
fi
[ -x "$joule" ] || built=0
joule_cmd=("$joule")
fi

# --- 1. The GPU tests of ordering and of bitwise offload -------------------------------------------
if [ $built = 1 ] && [ -n "$bundle" ] && [ ${#test_exes[@]} -gt 0 ]; then
  step tests_gpu "${JOULE_DEVICE_TESTS_LIMIT:-60}" gpu env "LD_LIBRARY_PATH=$bundle_ld" bash -c '. "$1"; device_run_tests "$2" "" "${@:3}"' _ \
    "$repo/apps/scripts/device_tests.sh" "$tests_re" "${test_exes[@]}"
elif [ $built = 1 ] && [ -z "$bundle" ] && [ -n "$targets" ]; then
  step tests_gpu "${JOULE_DEVICE_TESTS_LIMIT:-60}" gpu ctest --test-dir "$build" -R "$tests_re" --output-on-failure --no-tests=error -j 4 --timeout 75
else
  note tests_gpu "not run (no build, or no test matches /$tests_re/)" "-"
fi

# --- 2. One training step of medium.json's shape (6 layers, width 384, 128 tokens a sample) ----------
if [ $built = 1 ]; then
  step step_medium 40 gpu "${joule_cmd[@]}" bench --suite step --step-shapes medium --repeats 10 --json "$out/step.json"
else
  note step_medium "not run (no joule)" "-"
fi

# --- 2b. bf16: the medium step and the GH200 configuration's step on tensor cores; the cast placement ---
if [ $built = 1 ]; then
  step step_bf16 35 gpu "${joule_cmd[@]}" bench --suite step --step-shapes medium,gh200 --precision bf16 --repeats 5 --json "$out/step_bf16.json"
  step offload_cast 20 gpu "${joule_cmd[@]}" tune --config "$repo/apps/configs/tiny-bf16-cast.json" --make-data --data "$work/shapes.h5" \
    --out "$work/cast-$(date +%Y%m%d-%H%M%S).h5" --no-train
else
  note step_bf16 "not run (no joule)" "-"
fi

# --- 3. Energy: NVML must be found --------------------------------------------------------------------
if [ $built = 1 ]; then
  if step energy_probe 15 gpu "${joule_cmd[@]}" energy probe; then
    grep -q "^source nvml" "$logs/energy_probe.log" || note nvml_found "FAILED: joule energy probe found no NVML" "-"
  fi
else
  note energy_probe "not run (no joule)" "-"
fi

# --- 4. Operators at GPU size, and next to PyTorch ----------------------------------------------------
if [ $built = 1 ]; then
  step bench_ops 30 gpu "${joule_cmd[@]}" bench --preset vit-large --repeats 5 --json "$out/bench.json"
  if [ $rehearse = 1 ]; then
    note bench_torch "not run (rehearsal: needs the GPU)" "-"
  elif [[ "$torch_cuda" != *" cuda" ]]; then
    note bench_torch "not run: no PyTorch with CUDA here (python3: $torch_cuda)" "-"
  elif [ ! -s "$out/bench.json" ]; then
    note bench_torch "not run (bench_ops wrote no bench.json)" "-"
  else
    # The operators, then (if step_medium wrote it) the same whole step in PyTorch.
    step bench_torch 30 gpu bash -c 'PYTHONUNBUFFERED=1 python3 "$1" --device cuda "$2" && { [ ! -s "$3" ] || PYTHONUNBUFFERED=1 python3 "$1" --device cuda "$3"; } && { [ ! -s "$4" ] || PYTHONUNBUFFERED=1 python3 "$1" --device cuda "$4"; }' \
      _ "$repo/apps/scripts/bench_torch.py" "$out/bench.json" "$out/step.json" "$out/step_bf16.json"
  fi
else
  note bench_ops "not run (no joule)" "-"
fi

# --- 5. A short tune, measured with NVML ---------------------------------------------------------------
if [ $built = 1 ]; then
  step tune 20 gpu "${joule_cmd[@]}" tune --make-data --data "$work/shapes.h5" --out "$work/tune-$(date +%Y%m%d-%H%M%S).h5" \
    --no-train --warmup-steps 1 --measured-steps 2 --max-repeats 1
else
  note tune "not run (no joule)" "-"
fi

# --- With the time left: the operator tests ------------------------------------------------------------
if [ -n "$bundle" ]; then
  # The operator tests run where the bundle holds them (JOULE_BUNDLE_MORE_TESTS=1 when it was made).
  more_exes=()
  for t in $more_targets; do [ -x "$p/tests/$t" ] && more_exes+=("$p/tests/$t"); done
  if [ $built = 1 ] && [ ${#more_exes[@]} -gt 0 ] && [ "$(left)" -ge 30 ]; then
    step tests_more "$(left)" gpu env "LD_LIBRARY_PATH=$bundle_ld" bash -c '. "$1"; device_run_tests "$2" "$3" "${@:4}"' _ \
      "$repo/apps/scripts/device_tests.sh" "$more_re" "$tests_re" "${more_exes[@]}"
  else
    note tests_more "not run ($([ ${#more_exes[@]} = 0 ] && echo "not in the bundle" || echo "under 30 s left"))" "-"
  fi
elif [ $built = 1 ] && [ -n "$more_targets" ] && [ "$(left)" -ge 60 ]; then
  read -r -a more_build <<<"$more_targets"
  if step build_more "$(( $(left) - 30 ))" any cmake --build "$build" -j "$jobs" --target "${more_build[@]}"; then
    step tests_more "$(left)" gpu ctest --test-dir "$build" -R "$more_re" -E "$tests_re" --output-on-failure --no-tests=error -j 4 --timeout 60
  fi
else
  note tests_more "not run ($([ $built = 1 ] && echo "under 60 s left" || echo "no build"))" "-"
fi

current=""; publish
cat "$out/summary.txt"
! grep -qE "FAILED|TIMED OUT" "$out/summary.txt"
exit
}
