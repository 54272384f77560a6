// How busy the machine was (energy/machine_load.hpp): the arithmetic on two readings, and a real
// reading while a child process spins and this one sleeps (other work counted as other work).
#include "energy/machine_load.hpp"

#include "support/catch.hpp"

#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <cmath>
#include <thread>

using joule::energy::load_between;
using joule::energy::LoadReading;
using joule::energy::read_load;
using joule::test::Approx;

TEST_CASE("machine load: CPUs of this process and of other work over an interval", "[energy][load]") {
  LoadReading a, b;
  a.wall_s = 100, a.process_cpu_s = 1, a.machine = true, a.busy_s = 10, a.steal_s = 0, a.total_s = 20;
  b.wall_s = 102, b.process_cpu_s = 2, b.machine = true, b.busy_s = 14, b.steal_s = 0.5, b.total_s = 24;
  auto const l = load_between(a, b);
  CHECK(l.process_cpus == Approx(0.5));
  CHECK(l.other_cpus == Approx(1.5));  // 4 s busy, 1 of them this process's, over 2 s
  CHECK(l.steal_share == Approx(0.125));
  b.busy_s = 10.5;  // coarse ticks: less machine time than this process's own counts as none
  CHECK(load_between(a, b).other_cpus == 0);
  b.machine = false;  // no /proc/stat: this process only
  CHECK(std::isnan(load_between(a, b).other_cpus));
  CHECK(load_between(a, b).process_cpus == Approx(0.5));
  CHECK(std::isnan(load_between(b, a).process_cpus));  // no time passed forwards
}

TEST_CASE("machine load: a spinning child is other work, a sleeping process is not busy", "[energy][load]") {
  auto const before = read_load();
  REQUIRE(before.machine);  // Linux
  pid_t const child = ::fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    auto const end = std::chrono::steady_clock::now() + std::chrono::milliseconds(600);
    volatile unsigned long spin = 0;
    while (std::chrono::steady_clock::now() < end) spin = spin + 1;
    ::_exit(0);
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(600));
  int status = 0;
  ::waitpid(child, &status, 0);
  auto const load = load_between(before, read_load());
  INFO("process " << load.process_cpus << " CPUs, others " << load.other_cpus << " CPUs");
  // The child ran at least part of the time whatever else runs (busy loops beside it only add).
  CHECK(load.other_cpus > 0.25);
  CHECK(load.process_cpus < 0.25);  // this process slept
  CHECK(load.steal_share >= 0);
  CHECK(load.steal_share <= 1);
}
