// Energy measurement against fake sensor trees (hwmon, powercap) in a temporary folder and a fake
// NVML library loaded through joule's real dlopen path. Synthetic time (snapshot(at)) makes the
// integration checks exact and independent of the machine's load.
#include "energy/monitor.hpp"
#include "energy/power_limit.hpp"
#include "energy/regions.hpp"
#include "energy/report.hpp"
#include "energy/sampler.hpp"
#include "support/test_support.hpp"
#include "support/test_paths.hpp"

#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <future>
#include <map>
#include <random>
#include <thread>

using namespace joule::energy;
using namespace joule::test;
namespace fs = std::filesystem;

namespace {

struct FakeTree {
  fs::path root;
  FakeTree() {
    char name[] = "/tmp/joule-energy-XXXXXX";
    root = mkdtemp(name);
  }
  ~FakeTree() { fs::remove_all(root); }
  void write(fs::path const& rel, std::string const& text) const {
    fs::create_directories((root / rel).parent_path());
    std::ofstream(root / rel) << text << "\n";
  }
  std::string str(char const* sub = "") const { return (root / sub).string(); }
};

SourceOptions empty_options(FakeTree const& t) {
  SourceOptions o;
  o.nvml_library = "none";
  o.hwmon_root = t.str("hwmon");
  o.powercap_root = t.str("powercap");
  o.local_rank = 0;
  o.local_size = 1;
  fs::create_directories(t.root / "hwmon");
  fs::create_directories(t.root / "powercap");
  return o;
}

// A Grace Hopper node's meters: one under device/ (older kernels), others directly in hwmonN/.
void write_grace_hwmon(FakeTree const& t) {
  t.write("hwmon/hwmon1/device/power1_oem_info", "Module Power Socket 0");
  t.write("hwmon/hwmon1/device/power1_average", "400000000");  // 400 W in microwatts
  t.write("hwmon/hwmon1/device/power1_average_interval", "50");
  t.write("hwmon/hwmon2/power1_oem_info", "Grace Power Socket 0");
  t.write("hwmon/hwmon2/power1_average", "120000000");
  t.write("hwmon/hwmon3/power1_oem_info", "CPU Power Socket 0");
  t.write("hwmon/hwmon3/power1_average", "90000000");
  t.write("hwmon/hwmon4/power1_oem_info", "SysIO Power Socket 0");
  t.write("hwmon/hwmon4/power1_average", "20000000");
  t.write("hwmon/hwmon5/power1_oem_info", "Fan Power");
  t.write("hwmon/hwmon5/power1_average", "1");
  t.write("hwmon/hwmon0/temp1_input", "40000");  // a hwmon without power meter
}

std::size_t channel_of(Sampler const& s, std::string const& domain) {
  for (std::size_t i = 0; i < s.channels().size(); ++i)
    if (s.channels()[i].channel.domain == domain) return i;
  FAIL("no channel for domain " << domain);
  return 0;
}

}  // namespace

TEST_CASE("energy: Grace hwmon meters are found in both layouts and mapped to domains", "[energy][hwmon]") {
  FakeTree t;
  auto o = empty_options(t);
  write_grace_hwmon(t);
  std::vector<std::string> notes;
  auto sources = discover_sources(o, &notes);
  REQUIRE(sources.size() == 1);  // hwmon only: measured, so no model
  REQUIRE(sources[0]->name() == "hwmon");
  Sampler s(std::move(sources));
  REQUIRE(s.channels().size() == 4);
  for (char const* d : {kDomainModule, kDomainPackage, kDomainCpu, kDomainSysio}) (void)channel_of(s, d);
  REQUIRE(s.channels()[channel_of(s, kDomainModule)].channel.sensor.find("averaged over 50 ms") != std::string::npos);
  bool unknown_noted = false;
  for (auto const& n : notes) unknown_noted = unknown_noted || n.find("unknown power meter 'Fan Power'") != std::string::npos;
  REQUIRE(unknown_noted);
  auto const rule = total_rule(s.channels());
  REQUIRE(rule.channels == std::vector<std::size_t>{channel_of(s, kDomainModule)});  // module, never a sum
  REQUIRE(rule.measured);
}

TEST_CASE("energy: a known power curve integrates to its energy within 1%, repeated 50 ms values included",
          "[energy][hwmon]") {
  FakeTree t;
  auto o = empty_options(t);
  t.write("hwmon/hwmon1/power1_oem_info", "Module Power Socket 0");
  t.write("hwmon/hwmon1/power1_average", "0");
  Sampler s(discover_sources(o));
  auto const module = channel_of(s, kDomainModule);
  // The firmware updates every 50 ms; the sampler polls every 10 ms, so each value repeats.
  auto power = [](double time) { return 300.0 + 100.0 * std::sin(2 * M_PI * time / 2.0); };
  double exact = 0;
  std::vector<double> e;
  for (int k = 0; k <= 400; ++k) {  // 4 s
    double const time = k * 0.01;
    double const firmware_time = std::floor(time / 0.05) * 0.05;
    t.write("hwmon/hwmon1/power1_average", std::to_string((long long)(power(firmware_time) * 1e6)));
    e = s.snapshot(time);
  }
  // The curve the firmware reported (piecewise constant over 50 ms) integrates to:
  for (int k = 0; k < 80; ++k) exact += power(k * 0.05) * 0.05;
  INFO("integrated " << e[module] << " J, exact " << exact << " J");
  REQUIRE(std::abs(e[module] - exact) <= 0.01 * exact);
  // And against the smooth curve itself (1200 J over two periods).
  REQUIRE(std::abs(e[module] - 1200.0) <= 0.01 * 1200.0);
}

TEST_CASE("energy: a sensor that disappears mid-run stops counting and is noted, no crash", "[energy][hwmon]") {
  FakeTree t;
  auto o = empty_options(t);
  write_grace_hwmon(t);
  Sampler s(discover_sources(o));
  auto const module = channel_of(s, kDomainModule);
  s.snapshot(0.0);
  auto const before = s.snapshot(1.0)[module];
  REQUIRE(before == Approx(400.0));
  fs::remove(t.root / "hwmon/hwmon1/device/power1_average");
  auto const after = s.snapshot(2.0);
  REQUIRE(after[module] == before);                                  // frozen at the last reading
  REQUIRE(after[channel_of(s, kDomainSysio)] == Approx(40.0));       // the others go on
  bool noted = false;
  for (auto const& n : s.notes()) noted = noted || n.find("during the run") != std::string::npos;
  REQUIRE(noted);
}

TEST_CASE("energy: RAPL counters are unwrapped and dram/package found; core is skipped", "[energy][rapl]") {
  FakeTree t;
  auto o = empty_options(t);
  t.write("powercap/intel-rapl:0/name", "package-0");
  t.write("powercap/intel-rapl:0/energy_uj", "999000000");
  t.write("powercap/intel-rapl:0/max_energy_range_uj", "1000000000");
  t.write("powercap/intel-rapl:0:0/name", "core");
  t.write("powercap/intel-rapl:0:0/energy_uj", "5");
  t.write("powercap/intel-rapl:0:1/name", "dram");
  t.write("powercap/intel-rapl:0:1/energy_uj", "100");
  t.write("powercap/intel-rapl:0:1/max_energy_range_uj", "65532610987");
  Sampler s(discover_sources(o));
  REQUIRE(s.channels().size() == 2);
  auto const pkg = channel_of(s, kDomainPackage), dram = channel_of(s, kDomainDram);
  s.snapshot(0.0);
  t.write("powercap/intel-rapl:0/energy_uj", "999500000");  // +0.5 J
  t.write("powercap/intel-rapl:0:1/energy_uj", "2000100");   // +2 J
  s.snapshot(1.0);
  t.write("powercap/intel-rapl:0/energy_uj", "300000");      // wrapped: +0.5 J to the top, +0.3 J after
  auto const e = s.snapshot(2.0);
  REQUIRE(e[pkg] == Approx(1.3));
  REQUIRE(e[dram] == Approx(2.0));
  REQUIRE(total_rule(s.channels()).channels == std::vector<std::size_t>{pkg});
  auto const trace = s.trace();
  REQUIRE(trace.back().values[pkg] == Approx(0.8));  // watts over the last second
}

TEST_CASE("energy: RAPL files readable only by root are 'not available' with a note, never a crash",
          "[energy][rapl]") {
  FakeTree t;
  auto o = empty_options(t);
  t.write("powercap/intel-rapl:0/name", "package-0");
  t.write("powercap/intel-rapl:0/energy_uj", "123");
  fs::permissions(t.root / "powercap/intel-rapl:0/energy_uj", fs::perms::owner_read);
  auto check = [&]() -> bool {
    std::vector<std::string> notes;
    auto sources = discover_sources(o, &notes);
    bool noted = false;
    for (auto const& n : notes) noted = noted || n.find("permission denied (root-only since CVE-2020-8694)") != std::string::npos;
    // Nothing measurable is left, so the model steps in.
    return noted && sources.size() == 1 && sources[0]->name() == "model";
  };
  if (geteuid() != 0) {
    REQUIRE(check());
    return;
  }
  // Root reads everything: check as an unprivileged user in a child process.
  fs::permissions(t.root, fs::perms::owner_all | fs::perms::group_read | fs::perms::group_exec |
                              fs::perms::others_read | fs::perms::others_exec);
  for (auto const& p : fs::recursive_directory_iterator(t.root))
    if (p.is_directory()) fs::permissions(p.path(), fs::perms::others_read | fs::perms::others_exec, fs::perm_options::add);
  fs::permissions(t.root / "powercap/intel-rapl:0/name", fs::perms::others_read, fs::perm_options::add);
  pid_t const child = fork();
  if (child == 0) {
    if (setgid(65534) != 0 || setuid(65534) != 0) _exit(2);
    _exit(check() ? 0 : 1);
  }
  int status = 0;
  waitpid(child, &status, 0);
  REQUIRE(WIFEXITED(status));
  REQUIRE(WEXITSTATUS(status) == 0);
}

TEST_CASE("energy: NVML through dlopen of a fake library: energy counter, module scope on C2C, clocks",
          "[energy][nvml]") {
  FakeTree t;
  auto o = empty_options(t);
  o.nvml_library = joule::test::fake_nvml_library();
  setenv("FAKE_NVML_DEVICES", "2", 1);
  setenv("FAKE_NVML_MJ_PER_READ", "250", 1);
  setenv("FAKE_NVML_C2C", "1", 1);
  setenv("FAKE_NVML_MODULE_MW", "600000", 1);
  unsetenv("FAKE_NVML_LOST_AFTER");
  {
    Sampler s(discover_sources(o));
    REQUIRE(s.channels().size() == 2 * 4);  // per GPU: energy, module power, SM clock, memory clock
    auto const gpu = channel_of(s, kDomainGpu), module = channel_of(s, kDomainModule);
    REQUIRE(s.channels()[gpu].channel.quantity == Quantity::energy_counter);
    REQUIRE(s.channels()[gpu].channel.sensor.find("Fake H200") != std::string::npos);
    s.snapshot(0.0);
    auto const e = s.snapshot(2.0);
    REQUIRE(e[gpu] == Approx(0.25));       // one more read of +250 mJ
    REQUIRE(e[module] == Approx(1200.0));  // 600 W for 2 s
    auto const rule = total_rule(s.channels());
    REQUIRE(rule.description.rfind("module", 0) == 0);
    REQUIRE(s.trace().back().values[channel_of(s, "sm_clock_mhz")] == 1980);
  }
  SECTION("module scope NOT_SUPPORTED: noted, GPU still measured; a second rank reads the other GPU") {
    unsetenv("FAKE_NVML_MODULE_MW");
    o.local_rank = 1;
    o.local_size = 2;
    std::vector<std::string> notes;
    Sampler s(discover_sources(o, &notes));
    REQUIRE(s.channels().size() == 3);
    REQUIRE(s.channels()[0].channel.sensor.find("nvml gpu 1") == 0);
    bool noted = false;
    for (auto const& n : notes) noted = noted || n.find("module-scope power Not Supported") != std::string::npos;
    REQUIRE(noted);
  }
  SECTION("no energy counter: GPU power is integrated instead; a lost GPU is noted") {
    setenv("FAKE_NVML_ENERGY", "0", 1);
    setenv("FAKE_NVML_C2C", "0", 1);
    Sampler s(discover_sources(o));
    auto const gpu = channel_of(s, kDomainGpu);
    REQUIRE(s.channels()[gpu].channel.quantity == Quantity::power);
    s.snapshot(0.0);
    REQUIRE(s.snapshot(1.0)[gpu] == Approx(150.0));
    unsetenv("FAKE_NVML_ENERGY");
  }
  unsetenv("FAKE_NVML_DEVICES");
  unsetenv("FAKE_NVML_C2C");
  unsetenv("FAKE_NVML_MODULE_MW");
}

TEST_CASE("energy: GPU power limits through NVML are set, checked against the range, and restored",
          "[energy][nvml][power_limit]") {
  FakeTree t;
  auto o = empty_options(t);
  o.nvml_library = joule::test::fake_nvml_library();
  setenv("FAKE_NVML_DEVICES", "2", 1);
  unsetenv("FAKE_NVML_SET_DENIED");
  unsetenv("FAKE_NVML_ENERGY");
  setenv("FAKE_NVML_C2C", "0", 1);
  setenv("FAKE_NVML_POWER_MW", "650000", 1);
  auto gpu_watts = [&] {  // GPU-scope power now, read through the NVML source (power, not counter)
    setenv("FAKE_NVML_ENERGY", "0", 1);
    Sampler fresh(discover_sources(o));
    unsetenv("FAKE_NVML_ENERGY");
    fresh.snapshot(0.0);
    return fresh.snapshot(1.0)[channel_of(fresh, kDomainGpu)];
  };
  {
    auto limiter = PowerLimiter::open(o);
    REQUIRE(limiter->gpus() == 2);
    double const original = limiter->original_watts();
    REQUIRE(original == Approx(700.0));
    REQUIRE(limiter->min_watts() == Approx(100.0));
    REQUIRE(gpu_watts() == Approx(650.0));
    limiter->set(300);
    REQUIRE(gpu_watts() == Approx(300.0));  // the fake caps its power at the limit
    REQUIRE_THROWS_WITH(limiter->set(50), Contains("outside what the GPU allows [100, 700] W"));
    limiter->set(0);  // back to the original
    REQUIRE(gpu_watts() == Approx(650.0));
    limiter->set(250);
  }  // the destructor restores
  REQUIRE(gpu_watts() == Approx(650.0));
  SECTION("without permission: a clear error, nothing changed") {
    setenv("FAKE_NVML_SET_DENIED", "1", 1);
    auto limiter = PowerLimiter::open(o);
    REQUIRE_THROWS_WITH(limiter->set(300), Contains("Insufficient Permissions") && Contains("root"));
    unsetenv("FAKE_NVML_SET_DENIED");
  }
  SECTION("no NVML: a clear error") {
    o.nvml_library = (t.root / "missing-libnvidia-ml.so").string();
    REQUIRE_THROWS_WITH(PowerLimiter::open(o), Contains("cannot load"));
  }
  unsetenv("FAKE_NVML_DEVICES");
  unsetenv("FAKE_NVML_C2C");
  unsetenv("FAKE_NVML_POWER_MW");
}

TEST_CASE("energy: a domain read by two sources counts once in the total", "[energy][nvml][hwmon]") {
  FakeTree t;
  auto o = empty_options(t);
  o.nvml_library = joule::test::fake_nvml_library();
  setenv("FAKE_NVML_C2C", "1", 1);
  setenv("FAKE_NVML_MODULE_MW", "450000", 1);
  write_grace_hwmon(t);
  Sampler s(discover_sources(o));
  auto const rule = total_rule(s.channels());
  REQUIRE(rule.channels.size() == 1);
  REQUIRE(s.channels()[rule.channels[0]].source == "nvml");  // the preferred source
  s.snapshot(0.0);
  auto const e = s.snapshot(1.0);
  double total = 0;
  for (auto i : rule.channels) total += e[i];
  REQUIRE(total == Approx(450.0));
  unsetenv("FAKE_NVML_C2C");
  unsetenv("FAKE_NVML_MODULE_MW");
}

TEST_CASE("energy: with nothing to read, only the model is used and it is labelled as such", "[energy][model]") {
  FakeTree t;
  auto o = empty_options(t);
  o.nvml_library = "/nonexistent/libnvidia-ml.so.1";
  // Known clocks: 1.5 s of CPU per second of wall time, whatever else the machine is doing.
  double cpu = 0, wall = 0;
  o.model_cpu_clock = [&] { return cpu; };
  o.model_wall_clock = [&] { return wall; };
  Sampler s(discover_sources(o));
  REQUIRE(s.channels().size() == 1);
  REQUIRE(s.channels()[0].channel.domain == kDomainModel);
  REQUIRE_FALSE(s.channels()[0].channel.measured);
  auto const rule = total_rule(s.channels());
  REQUIRE_FALSE(rule.measured);
  REQUIRE(rule.description.find("model") == 0);
  // Busy: the model's power is idle + per-core power x busy cores, from the CPU time used.
  s.snapshot(0.0);
  cpu = 1.5;
  wall = 1.0;
  auto const e = s.snapshot(1.0);
  auto const trace = s.trace();
  REQUIRE(trace.back().values[0] == Approx(o.model_idle_watts + 1.5 * o.model_core_watts));
  cpu = 1.5;  // idle for the next second
  wall = 2.0;
  s.snapshot(2.0);
  REQUIRE(s.trace().back().values[0] == Approx(o.model_idle_watts));
  REQUIRE(e[0] > 0);
}

namespace {

// A source whose power is a known function of time: a base load plus what each active region
// adds. It reads like NVML's energy counter (cumulative joules, exact at every read), at the
// synthetic time the test sets before each sample. The truth for an interval is the exact
// integral of the schedule.
struct Schedule {
  struct Span {
    double t0, t1, watts;
  };
  double base_w = 200;
  std::vector<Span> spans;
  double power(double t) const {
    double p = base_w;
    for (auto const& s : spans)
      if (t >= s.t0 && t < s.t1) p += s.watts;
    return p;
  }
  double energy(double a, double b) const {  // exact integral of power over [a, b]
    double e = base_w * (b - a);
    for (auto const& s : spans) e += s.watts * std::max(0.0, std::min(b, s.t1) - std::max(a, s.t0));
    return e;
  }
};

class ScheduleSource final : public Source {
 public:
  ScheduleSource(Schedule const& s, double const& clock) : schedule_(s), clock_(clock) {
    channels_.push_back({kDomainGpu, "schedule counter", Quantity::energy_counter, true});
  }
  std::string name() const override { return "schedule"; }
  void read(std::vector<double>& values) override { values.assign(1, schedule_.energy(0.0, clock_)); }

 private:
  Schedule const& schedule_;
  double const& clock_;
};

// Samples at `rate` Hz over [0, until] in synthetic time.
void drive(Sampler& s, double& clock, double rate, double until) {
  for (int k = 0; k * (1.0 / rate) <= until + 1e-12; ++k) {
    clock = k / rate;
    s.snapshot(clock);
  }
}

}  // namespace

TEST_CASE("energy: regions stamped on a stand-in device stream get their energy from the trace within 2%",
          "[energy][regions]") {
  // The worker thread stands in for a device stream: it passes its regions' edges with its own
  // timestamps, while the launching thread opens a host region of its own meanwhile. The power
  // depends on which regions are active; attribution happens after the fact, from the trace.
  double const rate = 100;  // 10 ms sampling period
  Schedule sched;
  struct Truth {
    char const* name;
    double t0, t1, watts;
  };
  // Edges at awkward phases of the sampling period; nested (step > forward, backward).
  std::vector<Truth> const device = {{"step", 0.1033, 0.9071, 0}, {"forward", 0.1033, 0.3517, 150},
                                     {"backward", 0.3517, 0.8049, 300}, {"tiny", 0.8511, 0.8547, 400}};
  Truth const host = {"optimizer_host", 0.5023, 0.7391, 60};
  for (auto const& t : device)
    if (t.watts > 0) sched.spans.push_back({t.t0, t.t1, t.watts});
  sched.spans.push_back({host.t0, host.t1, host.watts});

  double clock = 0;
  std::vector<std::unique_ptr<Source>> sources;
  sources.push_back(std::make_unique<ScheduleSource>(sched, clock));
  Sampler s(std::move(sources), rate);
  RegionRecorder r(s);
  std::thread stream([&] {
    r.push("step", device[0].t0);
    r.push("forward", device[1].t0);
    r.pop(device[1].t1);
    r.push("backward", device[2].t0);
    r.pop(device[2].t1);
    r.pop(device[0].t1);
    r.push("tiny", device[3].t0);
    r.pop(device[3].t1);
  });
  r.push(host.name, host.t0);  // the launching thread's own (host) region, overlapping backward
  r.pop(host.t1);
  stream.join();
  REQUIRE(r.stats().empty());  // nothing sampled yet: nothing attributed, nothing lost
  drive(s, clock, rate, 1.0);
  auto const stats = r.stats();
  auto check = [&](Truth const& t) {
    INFO(t.name);
    auto const& st = stats.at(t.name);
    REQUIRE(st.calls == 1);
    REQUIRE(st.seconds == Approx(t.t1 - t.t0));
    double const truth = sched.energy(t.t0, t.t1);  // inclusive: everything drawn during the span
    if (t.t1 - t.t0 >= 10 / rate) REQUIRE(st.total_j == Approx(truth).epsilon(0.02));
    REQUIRE(st.energy.size() == 1);
    REQUIRE(st.below_resolution == (t.t1 - t.t0 < 1.0 / rate));
  };
  for (auto const& t : device) check(t);
  check(host);
  REQUIRE(stats.at("tiny").below_resolution);  // 3.6 ms at 10 ms sampling: flagged
  // Nesting on each thread: forward and backward inside step; the host's region is on its own.
  CHECK(stats.at("step").parent.empty());
  CHECK(stats.at("forward").parent == "step");
  CHECK(stats.at("backward").parent == "step");
  CHECK(stats.at("tiny").parent.empty());
  CHECK(stats.at("optimizer_host").parent.empty());
  REQUIRE_FALSE(stats.at("forward").below_resolution);
  // Overlapping regions are not split: backward and optimizer_host both see the 60 W overlap.
  REQUIRE(stats.at("backward").total_j + stats.at("optimizer_host").total_j >
          sched.energy(device[2].t0, device[2].t1) + 0.9 * sched.energy(host.t0, host.t1));
}

namespace {

// A naive reference for call paths: every interval with the names open around it on its thread.
struct PathTruth {
  long long calls = 0;
  double seconds = 0, joules = 0;
};
using Path = std::vector<std::string>;

// A path's names from the top, by following parent indices through the table.
Path path_of(std::vector<RegionPath> const& table, int row) {
  Path p;
  for (int r = row; r >= 0; r = table[std::size_t(r)].parent) {
    REQUIRE(r < int(table.size()));
    p.insert(p.begin(), table[std::size_t(r)].name);
  }
  return p;
}

// Pushes and pops at explicit times on one thread, recording the truth as it goes.
struct Script {
  RegionTimeline& timeline;
  Schedule const& schedule;
  std::map<Path, PathTruth>& truth;
  std::vector<std::pair<std::string, double>> open;
  void push(std::string const& name, double at) {
    timeline.push(name.c_str(), at);
    open.push_back({name, at});
  }
  void pop(double at) {
    auto const [name, t0] = open.back();
    Path p;
    for (auto const& o : open) p.push_back(o.first);
    open.pop_back();
    timeline.pop(at);
    auto& t = truth[p];
    t.calls += 1;
    t.seconds += at - t0;
    t.joules += schedule.energy(t0, at);
  }
};

}  // namespace

TEST_CASE("energy: regions are recorded per call path: a name opened in two places, and inside itself, is a row "
          "for each path with that path's calls, time and energy",
          "[energy][regions]") {
  double const rate = 100;  // samples every 10 ms; the power changes only on that grid, so the
                            // energy counter's interpolation between samples is exact
  Schedule sched;
  sched.base_w = 50;
  for (int k = 0; k < 400; ++k) sched.spans.push_back({k * 0.01, (k + 1) * 0.01, double((k * 37) % 90)});
  double clock = 0;
  std::vector<std::unique_ptr<Source>> sources;
  sources.push_back(std::make_unique<ScheduleSource>(sched, clock));
  Sampler s(std::move(sources), rate);
  RegionRecorder r(s);
  std::map<Path, PathTruth> truth, truth_first;
  Script main{r, sched, truth, {}};

  // As joule's trainer opens its regions: three training steps, each forward with two blocks and
  // backward with two; then an evaluation that decodes: greedy_captions runs forward (and so
  // block_forward) three times; then a region that opens itself (recursion), three deep.
  double t = 0.0013;
  auto tick = [&](double dt) { return t += dt; };
  for (int step = 0; step < 3; ++step) {
    main.push("step", tick(0.0021));
    main.push("forward", tick(0.0017));
    for (int b = 0; b < 2; ++b) {
      main.push("joule::block_forward", tick(0.0011));
      main.pop(tick(0.0093));
    }
    main.pop(tick(0.0009));
    main.push("backward", tick(0.0013));
    for (int b = 0; b < 2; ++b) {
      main.push("joule::block_backward", tick(0.0007));
      main.pop(tick(0.0131));
    }
    main.pop(tick(0.0017));
    main.pop(tick(0.0023));
  }
  double const half = tick(0.0131);  // a sample falls between the steps' end and evaluate
  truth_first = truth;
  main.push("evaluate", tick(0.0019));
  main.push("greedy_captions", tick(0.0012));
  for (int token = 0; token < 3; ++token) {
    main.push("forward", tick(0.0011));
    main.push("joule::block_forward", tick(0.0007));
    main.pop(tick(0.0041));
    main.pop(tick(0.0005));
  }
  main.pop(tick(0.0014));
  main.pop(tick(0.0016));
  main.push("solve", tick(0.0011));
  main.push("solve", tick(0.0021));
  main.push("solve", tick(0.0031));
  main.pop(tick(0.0047));
  main.pop(tick(0.0029));
  main.pop(tick(0.0013));
  // A second thread has its own stack: its forward is at the top level there, while the main
  // thread's open regions (none now) would not be its parents either way.
  std::map<Path, PathTruth> truth_thread;
  std::thread other([&] {
    Script side{r, sched, truth_thread, {}};
    side.push("forward", 0.2011);
    side.push("joule::block_forward", 0.2033);
    side.pop(0.2191);
    side.pop(0.2203);
  });
  other.join();
  for (auto const& [p, x] : truth_thread) {
    truth[p].calls += x.calls;
    truth[p].seconds += x.seconds;
    truth[p].joules += x.joules;
  }
  // A random walk of pushes and pops over three names, which nest in any order and in themselves.
  std::mt19937 rng(65);
  std::uniform_int_distribution<int> pick(0, 2), coin(0, 2);
  char const* const names[] = {"a", "b", "c"};
  for (int i = 0; i < 300; ++i) {
    bool const can_pop = !main.open.empty();
    if (can_pop && (coin(rng) == 0 || main.open.size() >= 5))
      main.pop(tick(0.0003 + 0.0001 * pick(rng)));
    else
      main.push(names[pick(rng)], tick(0.0002 + 0.0001 * pick(rng)));
  }
  while (!main.open.empty()) main.pop(tick(0.0004));
  REQUIRE(t < 3.9);

  // Before any sample covers them, nothing is attributed; the table holds the paths with no calls.
  for (auto const& p : r.paths()) CHECK(p.stats.calls == 0);
  // Sampled up to `half`: the steps are covered, evaluate is not; this reading is the `before` below.
  int k = 0;
  for (; k / rate <= half; ++k) {
    clock = k / rate;
    s.snapshot(clock);
  }
  auto const before = r.paths();
  for (; k / rate <= t + 0.02; ++k) {
    clock = k / rate;
    s.snapshot(clock);
  }
  auto const paths = r.paths();

  // Every path exactly once, each row's parent an earlier row, figures as the reference's.
  std::map<Path, int> seen;
  for (std::size_t i = 0; i < paths.size(); ++i) {
    INFO("row " << i << ": " << paths[i].name);
    REQUIRE(paths[i].parent < int(i));
    auto const p = path_of(paths, int(i));
    REQUIRE(seen.emplace(p, int(i)).second);
    CHECK(paths[i].stats.parent == (paths[i].parent < 0 ? std::string() : paths[std::size_t(paths[i].parent)].name));
  }
  REQUIRE(seen.size() == truth.size());
  for (auto const& [p, x] : truth) {
    std::string text;
    for (auto const& n : p) text += "/" + n;
    INFO(text);
    REQUIRE(seen.count(p) == 1);
    auto const& st = paths[std::size_t(seen.at(p))].stats;
    CHECK(st.calls == x.calls);
    CHECK(st.seconds == Approx(x.seconds).margin(1e-12));
    CHECK(st.total_j == Approx(x.joules).epsilon(1e-9).margin(1e-9));
    CHECK(st.below_resolution == (x.seconds / double(x.calls) < 1.0 / rate));
  }
  // The places of the example, each with its own count: block_forward under the steps'
  // forward 6 times, under decoding's forward 3 times (and once on the other thread).
  CHECK(truth.at({"step", "forward", "joule::block_forward"}).calls == 6);
  CHECK(paths[std::size_t(seen.at({"step", "forward", "joule::block_forward"}))].stats.calls == 6);
  CHECK(paths[std::size_t(seen.at({"evaluate", "greedy_captions", "forward", "joule::block_forward"}))].stats.calls == 3);
  CHECK(paths[std::size_t(seen.at({"forward", "joule::block_forward"}))].stats.calls == 1);
  CHECK(paths[std::size_t(seen.at({"step", "forward"}))].stats.calls == 3);
  CHECK(paths[std::size_t(seen.at({"solve", "solve", "solve"}))].stats.calls == 1);
  // A child never has more time than its path's parent (inclusive, one thread).
  for (auto const& p : paths)
    if (p.parent >= 0) CHECK(p.stats.seconds <= paths[std::size_t(p.parent)].stats.seconds + 1e-12);

  // By name: the sum over a name's paths, the parent the one it was opened in most often.
  auto const by_name = r.stats();
  std::map<std::string, PathTruth> names_truth;
  std::map<std::string, std::map<std::string, long long>> parents;
  for (auto const& [p, x] : truth) {
    auto& n = names_truth[p.back()];
    n.calls += x.calls;
    n.seconds += x.seconds;
    n.joules += x.joules;
    parents[p.back()][p.size() > 1 ? p[p.size() - 2] : ""] += x.calls;
  }
  REQUIRE(by_name.size() == names_truth.size());
  for (auto const& [name, x] : names_truth) {
    INFO(name);
    auto const& st = by_name.at(name);
    CHECK(st.calls == x.calls);
    CHECK(st.seconds == Approx(x.seconds).margin(1e-12));
    CHECK(st.total_j == Approx(x.joules).epsilon(1e-9).margin(1e-9));
    long long most = 0;
    for (auto const& [parent, calls] : parents[name]) most = std::max(most, calls);
    CHECK(parents[name][st.parent] == most);
  }
  CHECK(by_name.at("joule::block_forward").calls == 10);
  CHECK(by_name.at("joule::block_forward").parent == "forward");
  CHECK(by_name.at("forward").parent == "step");  // 3 in step, 3 in greedy_captions: the first seen

  // Between two readings: the paths with calls since `before`, their figures the difference, with
  // the paths they were opened in, re-indexed.
  auto const delta = path_difference(paths, before, r.resolution_s());
  std::map<Path, PathTruth> truth_second = truth;
  for (auto const& [p, x] : truth_first) {
    auto& d = truth_second.at(p);
    d.calls -= x.calls;
    d.seconds -= x.seconds;
    d.joules -= x.joules;
  }
  std::map<Path, int> delta_seen;
  for (std::size_t i = 0; i < delta.size(); ++i) {
    REQUIRE(delta[i].parent < int(i));
    REQUIRE(delta_seen.emplace(path_of(delta, int(i)), int(i)).second);
  }
  for (auto const& [p, x] : truth_second) {
    std::string text;
    for (auto const& n : p) text += "/" + n;
    INFO(text);
    bool const ancestor = std::any_of(truth_second.begin(), truth_second.end(), [&, &p = p](auto const& longer) {
      return longer.second.calls > 0 && longer.first.size() > p.size() && std::equal(p.begin(), p.end(), longer.first.begin());
    });
    REQUIRE(delta_seen.count(p) == (x.calls > 0 || ancestor ? 1u : 0u));
    if (!delta_seen.count(p)) continue;
    auto const& st = delta[std::size_t(delta_seen.at(p))].stats;
    CHECK(st.calls == x.calls);
    CHECK(st.seconds == Approx(x.seconds).margin(1e-12));
    CHECK(st.total_j == Approx(x.joules).epsilon(1e-9).margin(1e-9));
  }
  CHECK(delta_seen.count({"step"}) == 0);  // all three steps were before
  CHECK(delta_seen.count({"evaluate", "greedy_captions", "forward", "joule::block_forward"}) == 1);
}

TEST_CASE("energy: region edges read no sensor; library regions are skipped; fenced mode stamps too",
          "[energy][regions]") {
  // A source that counts its reads: edges must never cause one.
  struct Counting final : Source {
    int reads = 0;
    Counting() { channels_.push_back({kDomainGpu, "counting", Quantity::power, true}); }
    std::string name() const override { return "counting"; }
    void read(std::vector<double>& v) override {
      ++reads;
      v.assign(1, 100.0);
    }
  };
  auto owned = std::make_unique<Counting>();
  Counting* counting = owned.get();
  std::vector<std::unique_ptr<Source>> sources;
  sources.push_back(std::move(owned));
  Sampler s(std::move(sources));
  s.snapshot();
  for (EdgeMode mode : {EdgeMode::timeline, EdgeMode::fenced}) {
    int const reads = counting->reads;
    RegionRecorder r(s, mode);
    REQUIRE(r.mode() == mode);
    for (int i = 0; i < 100; ++i) {
      Kokkos::Profiling::pushRegion("outer");
      Kokkos::Profiling::pushRegion("KokkosBlas::gemm[ETI]");  // a library's own region
      Kokkos::Profiling::popRegion();
      Kokkos::Profiling::popRegion();
    }
    REQUIRE(counting->reads == reads);  // 400 edges, no sensor read
    REQUIRE(r.library_regions() == 100);
    auto const stats = r.stats(/*settle=*/true);  // settling samples once (no sampler thread)
    REQUIRE(stats.count("KokkosBlas::gemm[ETI]") == 0);
    REQUIRE(stats.at("outer").calls == 100);
    REQUIRE(stats.at("outer").parent.empty());
    REQUIRE(stats.at("outer").seconds >= 0);
    REQUIRE(r.hook_calls() == 400);
  }
  {  // A region inside a library's region is placed in joule's region around both.
    RegionRecorder r(s);
    Kokkos::Profiling::pushRegion("outer");
    Kokkos::Profiling::pushRegion("KokkosBlas::gemm[ETI]");
    Kokkos::Profiling::pushRegion("inner");
    Kokkos::Profiling::popRegion();
    Kokkos::Profiling::popRegion();
    Kokkos::Profiling::popRegion();
    REQUIRE(r.stats(/*settle=*/true).at("inner").parent == "outer");
  }
  {  // Through Kokkos' own callbacks: a name under two parents and inside itself is a path for each
     // place; a library region between two of joule's is not part of the path.
    RegionRecorder r(s);
    for (int i = 0; i < 3; ++i) {
      Kokkos::Profiling::pushRegion("outer");
      Kokkos::Profiling::pushRegion("KokkosBlas::gemm[ETI]");
      Kokkos::Profiling::pushRegion("inner");
      Kokkos::Profiling::popRegion();
      Kokkos::Profiling::popRegion();
      Kokkos::Profiling::popRegion();
    }
    Kokkos::Profiling::pushRegion("other");
    Kokkos::Profiling::pushRegion("inner");
    Kokkos::Profiling::pushRegion("inner");
    Kokkos::Profiling::popRegion();
    Kokkos::Profiling::popRegion();
    Kokkos::Profiling::popRegion();
    auto const paths = r.paths(/*settle=*/true);
    std::map<std::string, long long> calls;
    for (std::size_t i = 0; i < paths.size(); ++i) {
      std::string path;
      for (int p = int(i); p >= 0; p = paths[std::size_t(p)].parent) path = "/" + paths[std::size_t(p)].name + path;
      calls[path] += paths[i].stats.calls;
    }
    CHECK(calls == std::map<std::string, long long>{
                       {"/outer", 3}, {"/outer/inner", 3}, {"/other", 1}, {"/other/inner", 1}, {"/other/inner/inner", 1}});
    CHECK(r.stats().at("inner").calls == 5);
  }
  REQUIRE(to_string(EdgeMode::fenced) == std::string("fenced"));
  REQUIRE(edge_mode_from_string("timeline") == EdgeMode::timeline);
  REQUIRE_THROWS_WITH(edge_mode_from_string("exact"), Contains("'timeline'") && Contains("'fenced'"));
}

TEST_CASE("energy: the sampler thread is the only reader while it runs", "[energy][sampler]") {
  FakeTree t;
  auto o = empty_options(t);
  o.nvml_library = "none";
  Sampler s(discover_sources(o));  // the model
  s.start();
  REQUIRE_THROWS_WITH(s.snapshot(), Contains("only reader"));
  double const t0 = s.now();
  s.wait_until_covered(t0 + 0.05);  // returns once a periodic sample is past t0 + 50 ms
  REQUIRE(s.covered_until() >= t0 + 0.05);
  s.stop();
}

namespace {
// A sensor whose read takes 20 ms and says when it is inside one (the copy a forked child gets).
class SlowSource final : public Source {
 public:
  SlowSource() { channels_.push_back({kDomainGpu, "slow test sensor", Quantity::power, true}); }
  std::string name() const override { return "slow"; }
  void read(std::vector<double>& values) override {
    reading = true;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    values.assign(1, 100.0);
    reading = false;
  }
  static inline std::atomic<bool> reading{false};
};
}  // namespace

// joule forks to read untrusted files (io::read_in_child) while the sampler thread runs: a child
// that inherits a sampler caught mid-sample inherits whatever it held (under GCC 12's ASan, the
// allocator's lock: the child's first allocation waited for ever, and a run log's trial failed
// as "reading this file did not finish within 60 s"). Around every fork the samplers are held
// between samples, so no child sees one inside a read. Without that, a sampler that spends
// nearly all its time in 20 ms reads is caught inside one by almost every fork.
TEST_CASE("energy: a fork never catches the sampler in the middle of a sample", "[energy][sampler]") {
  std::vector<std::unique_ptr<Source>> sources;
  sources.push_back(std::make_unique<SlowSource>());
  Sampler s(std::move(sources), 1000.0);  // asks for a sample every 1 ms: it is always reading
  s.start();
  int caught = 0;
  for (int i = 0; i < 20; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(3));
    pid_t const pid = fork();
    if (pid == 0) _exit(SlowSource::reading ? 1 : 0);
    int status = 0;
    REQUIRE(waitpid(pid, &status, 0) == pid);
    REQUIRE(WIFEXITED(status));
    caught += WEXITSTATUS(status);
  }
  s.stop();
  REQUIRE(caught == 0);
}

TEST_CASE("energy: the monitor's windows: overlapping, per domain, the total's rule, only the window's trace",
          "[energy][monitor]") {
  double const rate = 100;
  Schedule sched;
  sched.spans.push_back({0.2, 0.6, 100});
  double clock = 0;
  std::vector<std::unique_ptr<Source>> sources;
  sources.push_back(std::make_unique<ScheduleSource>(sched, clock));
  Sampler s(std::move(sources), rate);
  Monitor m(s);
  REQUIRE(m.total().measured);
  // Windows on the sampler's clock, given directly (synthetic time).
  drive(s, clock, rate, 1.0);
  auto const a = m.measure({"a", 0.1, 0.5}, /*with_trace=*/true);
  auto const b = m.measure({"b", 0.3, 0.9});
  REQUIRE(a.total_j == Approx(sched.energy(0.1, 0.5)).epsilon(0.005));
  REQUIRE(b.total_j == Approx(sched.energy(0.3, 0.9)).epsilon(0.005));
  REQUIRE(a.seconds == Approx(0.4));
  REQUIRE(a.measured);
  REQUIRE(a.domains.size() == 1);
  REQUIRE(a.domains[0].domain == kDomainGpu);
  REQUIRE(a.domains[0].joules == Approx(a.total_j));
  REQUIRE(a.trace_columns == std::vector<std::string>{"gpu (schedule)"});
  REQUIRE(a.trace_time_s.size() >= 39);
  REQUIRE(a.trace_time_s.size() <= 41);  // the window only, not the whole run
  REQUIRE(a.trace_time_s.front() >= 0);
  REQUIRE(a.trace_time_s.back() <= 0.4 + 1e-9);
  REQUIRE(a.trace_watts.size() == a.trace_time_s.size());
  REQUIRE(b.trace_time_s.empty());  // not asked for
  REQUIRE_FALSE(m.measure({"short", 0.3, 0.305}).measured == false);
  REQUIRE(m.measure({"short", 0.3, 0.305}).below_resolution);
  // begin/end by name, overlapping, with errors for misuse.
  m.begin("x");
  m.begin("y");
  REQUIRE_THROWS_WITH(m.begin("x"), Contains("already open"));
  auto const wx = m.close("x");
  auto const wy = m.close("y");
  REQUIRE(wy.t1 >= wx.t1);
  REQUIRE_THROWS_WITH(m.close("x"), Contains("no open window"));
  // A window whose work threw is discarded: the name can be opened again, and closing it
  // without a new begin is misuse.
  m.begin("step");
  REQUIRE(m.discard("step"));
  REQUIRE_FALSE(m.discard("step"));
  REQUIRE_THROWS_WITH(m.close("step"), Contains("no open window"));
  REQUIRE_NOTHROW(m.begin("step"));
  REQUIRE_NOTHROW(m.close("step"));
}

TEST_CASE("energy: whole-run report: regions settled, mode stated, flagged regions marked", "[energy][report]") {
  FakeTree t;
  auto o = empty_options(t);
  t.write("hwmon/hwmon1/power1_oem_info", "Module Power Socket 0");
  t.write("hwmon/hwmon1/power1_average", "100000000");  // 100 W throughout
  Sampler s(discover_sources(o));
  Monitor m(s);
  RegionRecorder r(s);
  s.snapshot(0.0);
  r.push("long", 0.0);
  r.pop(2.0);
  r.push("short", 2.0);
  r.pop(2.001);
  s.snapshot(2.5);
  auto const run = m.measure({"run", 0.0, 2.5});
  REQUIRE(run.total_j == Approx(250.0));
  auto const text = format_energy_report(s, r, run);
  INFO(text);
  REQUIRE_THAT(text, Contains("region edges on the timeline") && Contains("host clock"));
  REQUIRE_THAT(text, Contains("short *") && Contains("below the sensors' resolution"));
  REQUIRE_THAT(text, Contains("200.00"));  // long: 2 s at 100 W
  REQUIRE_THAT(text, Contains("250.00"));  // the whole run
  auto const rank = summarize_rank(s, r, 0, run);
  REQUIRE(rank.regions.at("short").below_resolution);
  REQUIRE_FALSE(rank.regions.at("long").below_resolution);
  auto const back = RankEnergy::from_json(rank.to_json());
  REQUIRE(back.regions.at("long").energy_j == Approx(200.0));
  REQUIRE(back.edges == rank.edges);
}
