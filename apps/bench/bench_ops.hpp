#pragma once
// `joule bench`: forward+backward time of each operator at stated shapes, as GFLOP/s.
#include <string>

namespace joule::apps {

struct BenchOptions {
  std::string preset = "vit-base";  // "vit-base" (realistic) or "tiny" (seconds, for smoke tests)
  int repeats = 5;                  // timed runs per operator; the median is reported
  std::string json_path;            // if set, results are written there (for bench_torch.py)
};

int run_bench(BenchOptions const& options);

}  // namespace joule::apps
