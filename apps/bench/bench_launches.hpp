#pragma once
// `joule bench --suite launches`: the kernel launches of one training step of a configuration,
// recorded on whatever backend runs (a CPU suffices): each kernel states the CUDA shape of its
// launch (core/detail/launch_shape.hpp), so the table is what an H200 would be given. Per kernel
// label: launches per step, CUDA threads per launch (min, max), the thread block (0: a
// RangePolicy's, Kokkos' choice) and the fraction of a full H200 wave. The JSON feeds the GPU
// audit (cmake/compile-check/gpu_audit.py, `make gpu-audit`).
#include <string>

namespace joule::apps {

struct LaunchBenchOptions {
  std::string config_path;  // a training configuration (apps/configs/*.json); empty: the embedded default
  std::string json_path;    // if set, the table is written there
};

int run_launch_bench(LaunchBenchOptions const& options);

}  // namespace joule::apps
