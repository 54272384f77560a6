#pragma once
// A small but awkward model/data configuration for model and training tests.
#include "core/config/config.hpp"

#include <nlohmann/json.hpp>

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>

namespace joule::test {

inline nlohmann::json tiny_config_json(std::string const& data_path) {
  auto j = nlohmann::json::parse(R"({
    "model": {"layers": 3, "d_model": 32, "heads": 2, "mlp_ratio": 3, "image_size": 16,
              "patch_size": 8, "channels": 3, "frames": 2, "text_len": 34, "tie_embeddings": true},
    "data": {"path": "", "eval_fraction": 0.25},
    "train": {"batch": 6, "micro_batch": 3, "steps": 12, "lr": 0.003, "min_lr": 0.0003,
              "warmup_steps": 3, "weight_decay": 0.01, "beta1": 0.9, "beta2": 0.95,
              "grad_clip": 1.0, "eval_every": 0, "eval_samples": 5, "log_every": 1, "seed": 7,
              "recompute_depth": 0}
  })");
  j["data"]["path"] = data_path;
  return j;
}

// A unique file name under the system's temporary folder, removed when the object dies.
class TempFile {
 public:
  explicit TempFile(std::string const& suffix) {
    char name[] = "/tmp/joule-test-XXXXXX";
    int const fd = mkstemp(name);
    if (fd >= 0) close(fd);
    std::remove(name);
    path_ = std::string(name) + suffix;
  }
  ~TempFile() {
    std::remove(path_.c_str());
  }
  std::string const& path() const { return path_; }

 private:
  std::string path_;
};

}  // namespace joule::test
