// The launch contract (core/detail/launch_shape.hpp): every team launch of a training step asks
// for no more level-0 scratch than Kokkos' CUDA backend grants it (48 KiB of shared memory per
// block less Kokkos' own team buffer), so that the first GPU run cannot stop at a launch a CPU
// could have checked. The launches are those the kernels state for CUDA, recorded on the CPU while
// one training step runs: every shipped configuration (apps/configs/*.json) and the embedded tiny
// model at every head size with a kernel (16 to 128), fp32 and bf16, activations recomputed and
// kept. A launch's scratch depends on the kernel, its precision and the head size, not on the depth
// or the batch: each step runs one layer at one sample.
#include "bench/bench_step.hpp"
#include "core/detail/launch_log.hpp"
#include "core/ops/attention.hpp"
#include "core/config/config.hpp"

#include "support/catch.hpp"
#include "support/test_paths.hpp"

#include <algorithm>
#include <filesystem>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

using namespace joule;

namespace {

// The team launches of one training step of `model` (one layer, one sample) that break the
// contract, one line each: "label: N B of level-0 scratch + M B Kokkos' team buffer > 49152 B".
std::vector<std::string> broken_launches(ModelConfig model, Precision precision, int recompute_depth,
                                         int* team_launches) {
  model.layers = 1;
  detail::LaunchLog log;
  apps::run_training_steps(model, /*batch=*/1, recompute_depth, /*steps=*/1, {}, precision);
  std::vector<std::string> broken;
  *team_launches = 0;
  for (auto const& [label, shapes] : log.by_label()) {
    if (shapes.front().block == 0) continue;  // a RangePolicy: no team scratch
    ++*team_launches;
    for (auto const& shape : shapes) {
      if (shape.fits_cuda()) continue;
      std::ostringstream line;
      line << label << ": " << shape.shared << " B of level-0 scratch + "
           << detail::cuda_team_reserved_shared(shape.team_size) << " B Kokkos' team buffer (team size "
           << shape.team_size << ") > " << detail::kCudaSharedMemPerBlock << " B";
      broken.push_back(line.str());
      break;  // one line a kernel
    }
  }
  return broken;
}

std::string joined(std::vector<std::string> const& lines) {
  std::string s;
  for (auto const& l : lines) s += "\n  " + l;
  return s;
}

void check_every_variant(std::string const& what, ModelConfig const& model) {
  for (Precision precision : {Precision::fp32, Precision::bf16})
    for (int recompute : {0, 1}) {
      int team_launches = 0;
      auto const broken = broken_launches(model, precision, recompute, &team_launches);
      INFO(what << " (head size " << model.d_model / model.heads << "), " << precision_name(precision)
                << ", recompute depth " << recompute << ": launches past what Kokkos grants on CUDA:"
                << joined(broken));
      CHECK(team_launches >= 5);  // row kernels, column sums, the embedding's ranks, attention
      CHECK(broken.empty());
    }
}

}  // namespace

TEST_CASE("launch contract: the limit is Kokkos' CUDA check, figures by hand", "[launch][contract]") {
  // 256-thread attention teams: 49152 - 258 * 8; 4-warp row teams of 4 (vector length 32).
  CHECK(detail::cuda_team_scratch_limit(256) == 47088);
  CHECK(detail::cuda_team_scratch_limit(4) == 49104);
  CHECK(detail::scratch_view_bytes<float>(100) == 408);
  CHECK(detail::scratch_view_bytes<double>(100) == 808);
  detail::LaunchShape shape{1, 256, 47088, 256, 0};
  CHECK(shape.fits_cuda());
  shape.shared += 1;
  CHECK_FALSE(shape.fits_cuda());
  shape.block = 0;  // a RangePolicy takes no team scratch
  CHECK(shape.fits_cuda());
}

TEST_CASE("launch contract: every team launch of a training step fits on CUDA, every shipped configuration",
          "[launch][contract]") {
  std::vector<std::filesystem::path> configs;
  for (auto const& e : std::filesystem::directory_iterator(joule::test::source_path("apps/configs")))
    if (e.path().extension() == ".json") configs.push_back(e.path());
  std::sort(configs.begin(), configs.end());
  REQUIRE(configs.size() >= 6);
  for (auto const& path : configs)
    check_every_variant(path.filename().string(), load_config(path.string()).model);
}

TEST_CASE("launch contract: every head size with a kernel fits on CUDA", "[launch][contract]") {
  ModelConfig model = load_config(joule::test::source_path("apps/configs/tiny.json")).model;  // the embedded one
  for (int hd : {16, 32, 64, 128}) {
    REQUIRE(attention_supports_head_dim(hd));
    model.heads = model.d_model / hd;
    check_every_variant("tiny.json", model);
  }
}

TEST_CASE("launch contract: the launch log keeps what is noted while it records", "[launch][contract]") {
  {
    detail::LaunchLog log(/*recording=*/false);
    detail::note_launch("k", detail::KernelWork{}, 1024, 256, 4096, 8);
    CHECK(log.by_label().empty());
    CHECK_THROWS_AS(detail::LaunchLog(), std::logic_error);  // one log at a time
    log.set_recording(true);
    detail::note_launch("k", detail::KernelWork{}, 2048, 256, 8192, 8);
    detail::note_launch("r", detail::KernelWork{}, 77);
    auto const seen = log.by_label();
    REQUIRE(seen.size() == 2);
    REQUIRE(seen.at("k").size() == 1);
    CHECK(seen.at("k")[0].threads == 2048);
    CHECK(seen.at("k")[0].shared == 8192);
    CHECK(seen.at("k")[0].team_size == 8);
    CHECK(seen.at("r")[0].block == 0);
  }
  detail::note_launch("k", detail::KernelWork{}, 1, 256);  // no log: nowhere
  detail::LaunchLog again;           // the first one is gone
  CHECK(again.by_label().empty());
}
