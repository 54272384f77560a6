#pragma once
// `joule bench --suite roofline`: a MODEL of one training step of a configuration on a named GPU
// (core/perf/roofline.hpp), from the launches of one step recorded on whatever backend runs (a CPU
// suffices): predicted time and MFU, time by kind of work, the costliest kernels, and the
// offloaded optimizer at the configuration's ratio, at 0 and at 1. Nothing it prints is measured.
#include <string>
#include <vector>

namespace joule::apps {

struct RooflineBenchOptions {
  std::string config_path;  // a training configuration (apps/configs/*.json); empty: the embedded default
  std::string target = "gh200";
  std::string precision;  // "fp32" or "bf16" in place of the configuration's train.precision; empty: its own
  std::string json_path;  // if set, the model's figures are written there too
  int top = 12;           // kernels listed
  std::vector<double> power_limits;  // GPU power limits (W) the energy MODEL is also held to
};

int run_roofline_bench(RooflineBenchOptions const& options);

}  // namespace joule::apps
