// How busy the machine was (energy/machine_load.hpp): the arithmetic on two readings, and a real
// reading while a child process spins and this one sleeps (other work counted as other work).
#include "energy/machine_load.hpp"

#include "support/catch.hpp"

#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <cmath>
#include <string>
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

TEST_CASE("machine load: /proc/stat's lines for the whole machine or a set of CPUs", "[energy][load]") {
  using joule::energy::machine_time_from_proc_stat;
  std::string const text =
      "cpu  100 5 50 1000 20 3 2 7 0 0\n"
      "cpu0 60 5 30 400 10 2 1 4 0 0\n"
      "cpu1 40 0 20 600 10 1 1 3 0 0\n"
      "intr 12345 0 0\n"
      "ctxt 999\n";
  LoadReading all, one, both;
  REQUIRE(machine_time_from_proc_stat(text, {}, 0.01, all));
  CHECK(all.busy_s == Approx(1.60));  // user, nice, system, irq, softirq
  CHECK(all.steal_s == Approx(0.07));
  CHECK(all.total_s == Approx(11.87));  // and idle, iowait, steal
  REQUIRE(machine_time_from_proc_stat(text, {1}, 0.01, one));
  CHECK(one.busy_s == Approx(0.62));
  CHECK(one.total_s == Approx(6.75));
  REQUIRE(machine_time_from_proc_stat(text, {0, 1}, 0.01, both));
  CHECK(both.busy_s == Approx(all.busy_s));
  CHECK(both.total_s == Approx(all.total_s));
  LoadReading missing;
  CHECK_FALSE(machine_time_from_proc_stat(text, {0, 2}, 0.01, missing));  // no cpu2: not read
  CHECK_FALSE(missing.machine);
  CHECK_FALSE(machine_time_from_proc_stat("cpu  1 2 3\n", {}, 0.01, missing));  // too few fields
  // The real file: this process's CPUs read as the machine's when they are all of them.
  auto const real = read_load({0});
  CHECK(real.machine);
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
