// Energy measurement against fake sensor trees (hwmon, powercap) in a temporary folder and a fake
// NVML library loaded through joule's real dlopen path. Synthetic time (snapshot(at)) makes the
// integration checks exact and independent of the machine's load.
#include "energy/power_limit.hpp"
#include "energy/regions.hpp"
#include "energy/sampler.hpp"
#include "support/test_support.hpp"

#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <future>
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
  o.nvml_library = JOULE_FAKE_NVML_PATH;
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
  o.nvml_library = JOULE_FAKE_NVML_PATH;
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
  o.nvml_library = JOULE_FAKE_NVML_PATH;
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
  Sampler s(discover_sources(o));
  REQUIRE(s.channels().size() == 1);
  REQUIRE(s.channels()[0].channel.domain == kDomainModel);
  REQUIRE_FALSE(s.channels()[0].channel.measured);
  auto const rule = total_rule(s.channels());
  REQUIRE_FALSE(rule.measured);
  REQUIRE(rule.description.find("model") == 0);
  // Busy for a while: the model's power rises above idle.
  s.snapshot();
  volatile double x = 0;
  auto const until = std::chrono::steady_clock::now() + std::chrono::milliseconds(100);
  while (std::chrono::steady_clock::now() < until) x = x + 1;
  s.snapshot();
  auto const trace = s.trace();
  REQUIRE(trace.back().values[0] > o.model_idle_watts + 0.5 * o.model_core_watts);
}

TEST_CASE("energy: regions get the energy of their span; nested and overlapping regions are inclusive",
          "[energy][regions]") {
  FakeTree t;
  auto o = empty_options(t);
  t.write("hwmon/hwmon1/power1_oem_info", "Module Power Socket 0");
  t.write("hwmon/hwmon1/power1_average", "100000000");  // 100 W throughout
  Sampler s(discover_sources(o));
  s.snapshot(0.0);
  RegionRecorder r(s);
  r.push("step", 0.0);
  r.push("forward", 1.0);
  std::promise<void> forward_done, optimizer_started;
  std::thread other([&] {  // a host optimizer on another thread, overlapping step and forward
    r.push("optimizer_host", 1.5);
    optimizer_started.set_value();
    forward_done.get_future().wait();
    r.pop(3.5);
  });
  optimizer_started.get_future().wait();
  r.pop(2.0);  // forward: 1 s
  forward_done.set_value();
  other.join();
  r.pop(4.0);  // step: 4 s
  auto const stats = r.stats();
  REQUIRE(stats.at("step").energy[0] == Approx(400.0));
  REQUIRE(stats.at("forward").energy[0] == Approx(100.0));
  REQUIRE(stats.at("optimizer_host").energy[0] == Approx(200.0));
  REQUIRE(stats.at("optimizer_host").seconds == Approx(2.0));
  REQUIRE(stats.at("step").calls == 1);

  // Through Kokkos' own profiling API: the recorder sees regions opened anywhere.
  Kokkos::Profiling::pushRegion("kokkos_region");
  Kokkos::Profiling::pushRegion("inner");
  Kokkos::Profiling::popRegion();
  Kokkos::Profiling::popRegion();
  auto const after = r.stats();
  REQUIRE(after.at("kokkos_region").calls == 1);
  REQUIRE(after.at("inner").calls == 1);
  REQUIRE(r.hook_calls() >= 4);
}
