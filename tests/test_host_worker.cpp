// The host worker that runs the offloaded optimizer's jobs off the launching thread: handing a job
// over never waits for it, jobs run in order on the worker (pinned where asked), waiting returns
// after the job and rethrows its error, and parallel() runs every chunk once, at the same time.
#include "core/train/host_worker.hpp"
#include "support/catch.hpp"

#include <atomic>
#include <chrono>
#include <mutex>
#include <set>
#include <stdexcept>
#include <thread>
#include <vector>

#if defined(__linux__)
#include <sched.h>
#endif

using namespace joule;
using namespace joule::test;

namespace {
// Waits (at most a minute, so a broken worker fails the test instead of hanging it) for `flag`.
bool wait_for(std::atomic<bool> const& flag) {
  auto const until = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (!flag.load()) {
    if (std::chrono::steady_clock::now() > until) return false;
    std::this_thread::yield();
  }
  return true;
}
}  // namespace

TEST_CASE("host worker: submit returns while the job runs elsewhere; wait returns after it", "[worker_unit]") {
  std::atomic<bool> started{false}, release{false}, finished{false};
  std::thread::id ran_on;
  HostWorker worker(2, 1, {}, [&](int) {
    ran_on = std::this_thread::get_id();
    started = true;
    wait_for(release);
    finished = true;
  });
  worker.submit(0);  // returns although the job cannot finish until released below
  REQUIRE(wait_for(started));
  REQUIRE(worker.pending(0));
  REQUIRE_FALSE(finished.load());
  REQUIRE_THROWS_AS(worker.submit(0), std::logic_error);  // once per round
  release = true;
  worker.wait(0);
  REQUIRE(finished.load());
  REQUIRE_FALSE(worker.pending(0));
  REQUIRE(ran_on == worker.thread_id());
  REQUIRE(ran_on != std::this_thread::get_id());
  auto const span = worker.last_span(0);
  REQUIRE(span.end >= span.start);
  REQUIRE_THROWS_AS(worker.submit(2), std::out_of_range);
}

TEST_CASE("host worker: jobs run in submission order, each round, and errors reach the waiter", "[worker_unit]") {
  std::mutex m;
  std::vector<int> order;
  HostWorker worker(5, 1, {}, [&](int job) {
    if (job == 3) throw std::runtime_error("job 3 failed");
    std::lock_guard<std::mutex> lock(m);
    order.push_back(job);
  });
  for (int round = 0; round < 3; ++round) {
    for (int job : {4, 0, 2, 1, 3}) worker.submit(job);
    for (int job : {0, 1, 2, 4}) worker.wait(job);
    REQUIRE_THROWS_WITH(worker.wait(3), "job 3 failed");
  }
  REQUIRE(order == std::vector<int>({4, 0, 2, 1, 4, 0, 2, 1, 4, 0, 2, 1}));
}

TEST_CASE("host worker: parallel() runs every chunk exactly once, on as many threads at once", "[worker_unit]") {
  int const threads = 3;
  std::atomic<int> arrived{0};
  std::vector<std::atomic<int>> runs(threads);
  std::mutex m;
  std::set<std::thread::id> ids;
  HostWorker worker(1, threads, {}, [&](int) {
    for (int round = 0; round < 4; ++round) {
      arrived = 0;
      worker.parallel([&](int chunk) {
        ++runs[chunk];
        {
          std::lock_guard<std::mutex> lock(m);
          ids.insert(std::this_thread::get_id());
        }
        // Every chunk waits for all the others: this returns only if they run at the same time.
        ++arrived;
        auto const until = std::chrono::steady_clock::now() + std::chrono::seconds(60);
        while (arrived.load() < threads && std::chrono::steady_clock::now() < until) std::this_thread::yield();
        if (arrived.load() < threads) throw std::runtime_error("chunks did not run at the same time");
      });
    }
  });
  REQUIRE(worker.threads() == threads);
  worker.submit(0);
  worker.wait(0);
  for (int c = 0; c < threads; ++c) REQUIRE(runs[c].load() == 4);
  REQUIRE(int(ids.size()) == threads);
}

#if defined(__linux__)
TEST_CASE("host worker: pinned to the CPU it is given", "[worker_unit]") {
  cpu_set_t mask;
  CPU_ZERO(&mask);
  REQUIRE(sched_getaffinity(0, sizeof(mask), &mask) == 0);
  int last = -1;
  for (int c = 0; c < CPU_SETSIZE; ++c)
    if (CPU_ISSET(c, &mask)) last = c;
  REQUIRE(last >= 0);
  HostWorker worker(1, 1, {last}, [](int) {});
  for (int round = 0; round < 3; ++round) {
    worker.submit(0);
    worker.wait(0);
    REQUIRE(worker.last_span(0).cpu == last);
  }
}
#endif
