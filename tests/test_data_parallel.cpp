// Data-parallel training under mpirun (1, 2, 4 processes): the losses and the parameters after
// several steps equal a single-process run's within 1e-5 relative. Every rank also computes that
// single-process reference itself.
#define CATCH_CONFIG_RUNNER
#include "core/data/synth.hpp"
#include "core/train/trainer.hpp"
#include "parallel/mpi_communicator.hpp"
#include "support/tiny_config.hpp"

#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>

using namespace joule;

namespace {
parallel::Communicator* g_world = nullptr;

struct Result {
  std::vector<double> losses;
  std::vector<float> params;
};

Result train(Config const& cfg, DataParallel dp, int steps) {
  Trainer t(cfg, nullptr, std::move(dp));
  Result r;
  for (auto const& s : t.run(steps).steps) r.losses.push_back(s.loss);
  t.model().params.for_each_group([&](std::string const&, auto const& g) {
    auto h = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), g);
    r.params.insert(r.params.end(), h.data(), h.data() + h.span());
  });
  return r;
}
}  // namespace

TEST_CASE("data parallel: losses and parameters equal the single-process run", "[parallel][train]") {
  auto& w = *g_world;
  // Each rank writes its own copy of the same synthetic data (same seed): no shared file.
  test::TempFile data(".rank" + std::to_string(w.rank()) + ".h5");
  auto j = test::tiny_config_json(data.path());
  j["train"]["batch"] = 12;  // 4 micro-batches of 3: dealt to 1, 2 or 4 processes
  SECTION("without offload") { j["train"]["offload_ratio"] = 0.0; }
  SECTION("with half of the optimizer state on the host") { j["train"]["offload_ratio"] = 0.5; }
  auto const cfg = parse_config(j.dump(), "test config");
  write_synthetic(data.path(), SynthOptions::for_model(cfg.model, 48, 5));

  auto const reference = train(cfg, {}, 4);
  DataParallel dp;
  dp.rank = w.rank();
  dp.size = w.size();
  dp.allreduce_sum = [&](float* p, std::size_t n) { w.allreduce_sum(p, n); };
  dp.allreduce_sum_double = [&](double* p, std::size_t n) { w.allreduce_sum(p, n); };
  auto const distributed = train(cfg, dp, 4);

  REQUIRE(distributed.losses.size() == reference.losses.size());
  for (std::size_t i = 0; i < reference.losses.size(); ++i) {
    INFO("step " << i + 1 << " on rank " << w.rank() << " of " << w.size());
    REQUIRE(distributed.losses[i] == Approx(reference.losses[i]).epsilon(1e-5));
  }
  REQUIRE(distributed.params.size() == reference.params.size());
  // As vectors: ||distributed - reference|| <= 1e-5 ||reference||. Element by element is no
  // measure here: AdamW divides each gradient by its own running RMS, so a bias whose gradient is
  // pure summation-order noise (~1e-9) still moves by ~lr, one way or the other.
  double diff = 0, norm = 0, worst = 0;
  for (std::size_t i = 0; i < reference.params.size(); ++i) {
    double const d = double(distributed.params[i]) - reference.params[i];
    diff += d * d;
    norm += double(reference.params[i]) * reference.params[i];
    worst = std::max(worst, std::abs(d));
  }
  INFO("relative difference " << std::sqrt(diff / norm) << ", largest element difference " << worst);
  REQUIRE(std::sqrt(diff / norm) <= 1e-5);
  REQUIRE(worst <= 1e-4);
}

TEST_CASE("data parallel: micro-batches that cannot be dealt evenly are refused", "[parallel][train]") {
  auto& w = *g_world;
  if (w.size() < 3) return;
  test::TempFile data(".rank" + std::to_string(w.rank()) + ".h5");
  auto const cfg = parse_config(test::tiny_config_json(data.path()).dump());  // 2 micro-batches
  write_synthetic(data.path(), SynthOptions::for_model(cfg.model, 8, 1));
  DataParallel dp;
  dp.rank = w.rank();
  dp.size = w.size();
  dp.allreduce_sum = [&](float* p, std::size_t n) { w.allreduce_sum(p, n); };
  dp.allreduce_sum_double = [&](double* p, std::size_t n) { w.allreduce_sum(p, n); };
  REQUIRE_THROWS_WITH(Trainer(cfg, nullptr, dp), Catch::Contains("must be a multiple of the number of processes"));
}

int main(int argc, char* argv[]) {
  parallel::MpiSession mpi(&argc, &argv);
  setenv("OMP_NUM_THREADS", "1", 0);  // several ranks share the 2 cores
  setenv("OMP_PROC_BIND", "false", 0);
  int rc = 0;
  {
    Kokkos::ScopeGuard kokkos(argc, argv);
    auto world = mpi.world();
    g_world = world.get();
    Catch::Session session;
    rc = session.applyCommandLine(argc, argv);
    if (rc == 0) rc = session.run();
  }
  return rc;
}
