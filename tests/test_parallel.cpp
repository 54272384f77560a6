// Communicators and the process layout, run under mpirun with 1, 2 and 4 processes (ctest does
// that, through CMake's launcher variables: tests/CMakeLists.txt). Every rank runs every test
// case; a failure on any rank fails mpirun.
#include "parallel/agreement.hpp"
#include "parallel/backend_choice.hpp"
#include "parallel/layout.hpp"
#include "parallel/mpi_communicator.hpp"

#include "support/catch.hpp"
#include "support/catch_runner.hpp"

#include <random>
#include <stdexcept>
#include <string>
#include <vector>

using namespace joule::parallel;
using namespace joule::test;

namespace {
Communicator* g_world = nullptr;
}

TEST_CASE("mpi: allreduce sums random data from every rank, at odd sizes", "[parallel][mpi]") {
  auto& w = *g_world;
  for (std::size_t const n : {std::size_t(1), std::size_t(7), std::size_t(1000003)}) {
    std::vector<float> mine(n);
    std::vector<double> mine_d(n), expected(n, 0.0);
    for (int r = 0; r < w.size(); ++r) {
      std::mt19937 rng(1234 + r);
      std::uniform_real_distribution<double> d(-1, 1);
      for (std::size_t i = 0; i < n; ++i) {
        double const v = d(rng);
        expected[i] += v;
        if (r == w.rank()) mine_d[i] = v, mine[i] = float(v);
      }
    }
    w.allreduce_sum(mine_d.data(), n);
    w.allreduce_sum(mine.data(), n);
    for (std::size_t i = 0; i < n; i += (n > 1000 ? 997 : 1)) {
      REQUIRE(mine_d[i] == Approx(expected[i]).epsilon(1e-12).margin(1e-12));
      REQUIRE(mine[i] == Approx(expected[i]).epsilon(1e-5).margin(1e-5));
    }
  }
}

TEST_CASE("mpi: alltoall delivers block j of rank r to rank j's slot r", "[parallel][mpi]") {
  auto& w = *g_world;
  std::size_t const count = 13;
  std::vector<float> send(count * w.size()), recv(count * w.size(), -1.0f);
  for (int j = 0; j < w.size(); ++j)
    for (std::size_t k = 0; k < count; ++k) send[j * count + k] = float(w.rank() * 1000 + j * 10) + k * 0.5f;
  w.alltoall(send.data(), recv.data(), count);
  for (int r = 0; r < w.size(); ++r)
    for (std::size_t k = 0; k < count; ++k)
      REQUIRE(recv[r * count + k] == float(r * 1000 + w.rank() * 10) + k * 0.5f);
}

TEST_CASE("mpi: broadcast and sub-groups from the layout", "[parallel][mpi][layout]") {
  auto& w = *g_world;
  long long value = w.rank() == 0 ? 424242 : -1;
  w.broadcast(&value, sizeof value, 0);
  REQUIRE(value == 424242);
  int const shards = w.size() % 2 == 0 ? 2 : 1;
  auto const layout = make_layout(w.size(), w.rank(), shards, /*heads=*/4, /*seq_len=*/52);
  REQUIRE(layout.dp * layout.seq_shards == w.size());
  REQUIRE(layout.dp_rank * layout.seq_shards + layout.seq_rank == w.rank());
  // The sequence group (same dp_rank) and the data-parallel group (same seq_rank).
  auto seq = w.split(layout.dp_rank, layout.seq_rank);
  auto dp = w.split(layout.seq_rank, layout.dp_rank);
  REQUIRE(seq->size() == layout.seq_shards);
  REQUIRE(seq->rank() == layout.seq_rank);
  REQUIRE(dp->size() == layout.dp);
  double ranks_in_seq = w.rank();
  seq->allreduce_sum(&ranks_in_seq, 1);
  double expected = 0;
  for (int s = 0; s < layout.seq_shards; ++s) expected += layout.dp_rank * layout.seq_shards + s;
  REQUIRE(ranks_in_seq == expected);
  w.barrier();
}

TEST_CASE("layout: a layout that violates a constraint is rejected, naming it", "[parallel][layout]") {
  REQUIRE_THROWS_WITH(make_layout(4, 0, 3, 12, 48), Contains("must divide the number of processes"));
  REQUIRE_THROWS_WITH(make_layout(4, 0, 4, 6, 48), Contains("divide the number of attention heads (6)"));
  REQUIRE_THROWS_WITH(make_layout(4, 0, 4, 8, 50), Contains("divide the sequence length (50"));
  REQUIRE_THROWS_WITH(make_layout(4, 5, 2, 8, 48), Contains("outside the world"));
  auto const l = make_layout(4, 3, 2, 8, 48);
  REQUIRE((l.seq_rank == 1 && l.dp_rank == 1 && l.dp == 2));
}

TEST_CASE("collectives: NCCL only where every rank has a GPU of its own, MPI otherwise, with the reason",
          "[parallel][backend]") {
  std::vector<std::string> const own{"n0:0000:01:00.0", "n0:0000:02:00.0", "n1:0000:01:00.0"};
  std::vector<std::string> const shared{"n0:0000:01:00.0", "n1:0000:01:00.0", "n0:0000:01:00.0"};
  std::vector<std::string> const none{"n0:0000:01:00.0", "", "n1:0000:01:00.0"};
  auto const a = choose_comm_backend("auto", true, own);
  REQUIRE(a.nccl);
  REQUIRE(a.reason == "every rank has a GPU of its own");
  auto const b = choose_comm_backend("auto", true, shared);  // one GH200 per node, 2 ranks on n0
  REQUIRE_FALSE(b.nccl);
  REQUIRE_THAT(b.reason, StartsWith("ranks 0 and 2 share GPU n0:0000:01:00.0"));
  REQUIRE_FALSE(choose_comm_backend("auto", true, none).nccl);
  REQUIRE(choose_comm_backend("auto", true, none).reason == "rank 1 has no GPU");
  auto const c = choose_comm_backend("auto", false, own);
  REQUIRE_FALSE(c.nccl);
  REQUIRE(c.reason == "this build has no NCCL");
  REQUIRE_FALSE(choose_comm_backend("mpi", true, own).nccl);
  REQUIRE(choose_comm_backend("nccl", true, own).nccl);
  REQUIRE_THROWS_WITH(choose_comm_backend("nccl", true, shared),
                      StartsWith("parallel.backend is \"nccl\", but ranks 0 and 2 share GPU"));
  REQUIRE_THROWS_WITH(choose_comm_backend("nccl", false, own),
                      "parallel.backend is \"nccl\", but this build has no NCCL");
  REQUIRE_THROWS_AS(choose_comm_backend("gloo", true, own), std::invalid_argument);
  // The configuration's section.
  REQUIRE(requested_comm_backend(R"({"model": {}})") == "auto");
  REQUIRE(requested_comm_backend(R"({"parallel": {}})") == "auto");
  REQUIRE(requested_comm_backend(R"({"parallel": {"backend": "mpi"}})") == "mpi");
  REQUIRE_THROWS_WITH(requested_comm_backend(R"({"parallel": {"backend": "gloo"}})", "c.json"),
                      "c.json: parallel.backend is \"gloo\"; allowed: \"auto\", \"mpi\", \"nccl\"");
  REQUIRE_THROWS_WITH(requested_comm_backend(R"({"parallel": {"backand": "mpi"}})", "c.json"),
                      "c.json: parallel.backand: unknown field (allowed in parallel: backend)");
  REQUIRE_THROWS_WITH(requested_comm_backend(R"({"parallel": 3})", "c.json"), "c.json: parallel must be an object");
}

TEST_CASE("first_error: every rank learns whether any failed, and the lowest failing rank's text",
          "[parallel][mpi]") {
  auto& w = *g_world;
  REQUIRE(first_error(w, "").empty());
  // The odd ranks fail, each with a text of its own (of a different length: the broadcast must
  // carry the failing rank's length, not the receiver's).
  std::string const mine = w.rank() % 2 == 1 ? "no data on rank " + std::string(std::size_t(w.rank()), '#') : "";
  auto const got = first_error(w, mine);
  int const failing = w.size() / 2;
  if (failing == 0) {
    REQUIRE(got.empty());
  } else {
    REQUIRE_THAT(got, StartsWith("rank 1: no data on rank #"));
    REQUIRE((failing > 1) == (got.find("failed on " + std::to_string(failing) + " of ") != std::string::npos));
  }
  // Only the last rank fails.
  auto const last = first_error(w, w.rank() == w.size() - 1 ? "out of memory" : "");
  REQUIRE(last == "rank " + std::to_string(w.size() - 1) + ": out of memory");
}

// [needs-2-ranks]: tests/CMakeLists.txt leaves it out of the one-process run (not run, rather than a
// pass that checked nothing).
TEST_CASE("config: ranks given different configurations all stop, naming the ranks",
          "[parallel][config][needs-2-ranks]") {
  auto& w = *g_world;
  REQUIRE(w.size() >= 2);
  REQUIRE_NOTHROW(require_same_config(w, "{\"model\": 1}"));
  std::string const cfg = w.rank() == w.size() - 1 ? "{\"model\": 2}" : "{\"model\": 1}";
  REQUIRE_THROWS_WITH(require_same_config(w, cfg),
                      Contains("rank(s) " + std::to_string(w.size() - 1) + " were given another configuration"));
}

int main(int argc, char* argv[]) {
  MpiSession mpi(&argc, &argv);
  auto world = mpi.world();
  g_world = world.get();
  int rc = joule::test::run_catch_session(argc, argv);
  // Every rank reports; mpirun fails if any rank fails.
  return rc;
}
