#pragma once
// `joule bench`: forward+backward time of each operator at stated shapes, as GFLOP/s (suite
// ops), and whole training steps next to their GEMM-bound limit (suite step, bench_step.hpp).
#include <string>
#include <vector>

namespace joule::apps {

struct BenchOptions {
  std::string preset = "vit-base";  // one of bench_presets()
  int repeats = 5;                  // timed runs per operator; the median is reported
  std::string json_path;            // if set, results are written there (for bench_torch.py)
  bool ops = true;                  // the operator suite (preset)
  bool steps = false;               // the whole-step suite (step_shapes)
  std::vector<std::string> step_shapes;  // names from bench_step.hpp; empty: the default three
  std::string precision = "fp32";        // the step suite's train.precision: fp32 or bf16
};

int run_bench(BenchOptions const& options);
// The shape presets, as "name: what it is" (the table in bench_ops.cpp).
std::vector<std::string> bench_presets();
// Writes a suite's --json results (`text`) to `path` as every joule output is written
// (io::commit_file: a temporary in a private folder beside it, synced, renamed): a symbolic link
// at `path` is replaced, never written through; a folder, device or FIFO there is refused. Throws
// io::WriteError naming the file.
void write_bench_json(std::string const& path, std::string const& text);

}  // namespace joule::apps
