#pragma once
// `joule bench --suite adamw|offload`: the host AdamW's memory bandwidth next to a STREAM-triad
// measured by the same program, and how much of the offload work a training step hides.
namespace joule::apps {

struct OffloadBenchOptions {
  int repeats = 5;
  int steps = 10;   // training steps per ratio and round (rounds: repeats)
};

int run_adamw_bandwidth_bench(OffloadBenchOptions const& options);
int run_offload_overlap_bench(OffloadBenchOptions const& options);

}  // namespace joule::apps
