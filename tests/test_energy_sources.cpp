// Which GPU the NVML source reads and the power limiter changes (this process's, found from the
// CUDA device: its PCI bus id, or its ordinal through CUDA_VISIBLE_DEVICES; never another job's),
// and what discovery says it looked for when a source is not usable. The selection rule is tested
// as a pure function, then through the fake NVML library (4 fake GPUs with distinct UUIDs and bus
// ids) loaded by joule's real dlopen path.
#include "energy/detail/bounded_read.hpp"
#include "energy/detail/nvml_select.hpp"
#include "energy/power_limit.hpp"
#include "energy/probe.hpp"
#include "energy/sampler.hpp"
#include "support/test_support.hpp"
#include "support/test_paths.hpp"

#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <set>

using namespace joule::energy;
using namespace joule::test;
namespace fs = std::filesystem;

namespace {

// Sets environment variables for one scope and restores what was there before.
class EnvGuard {
 public:
  ~EnvGuard() {
    for (auto const& [name, old] : saved_) {
      if (old) setenv(name.c_str(), old->c_str(), 1);
      else unsetenv(name.c_str());
    }
  }
  void set(std::string const& name, std::string const& value) {
    remember(name);
    setenv(name.c_str(), value.c_str(), 1);
  }
  void unset(std::string const& name) {
    remember(name);
    unsetenv(name.c_str());
  }

 private:
  void remember(std::string const& name) {
    if (saved_.count(name)) return;
    char const* v = std::getenv(name.c_str());
    saved_[name] = v ? std::optional<std::string>(v) : std::nullopt;
  }
  std::map<std::string, std::optional<std::string>> saved_;
};

struct TempDir {
  fs::path root;
  TempDir() {
    char name[] = "/tmp/joule-energy-sources-XXXXXX";
    root = mkdtemp(name);
  }
  ~TempDir() {
    std::error_code ec;
    fs::permissions(root, fs::perms::owner_all, fs::perm_options::add, ec);
    fs::remove_all(root, ec);
  }
  void write(fs::path const& rel, std::string const& text) const {
    fs::create_directories((root / rel).parent_path());
    std::ofstream(root / rel) << text << "\n";
  }
  std::string str(char const* sub) const { return (root / sub).string(); }
};

// The fake's four GPUs as NVML would list them (tests/fake_nvml/fake_nvml.cpp).
std::vector<detail::NvmlDeviceInfo> fake_devices() {
  std::vector<detail::NvmlDeviceInfo> d(4);
  char const* bus[] = {"00000009:0A:00.0", "00000009:0B:00.0", "00000009:0C:00.0", "00000009:0D:00.0"};
  for (unsigned i = 0; i < 4; ++i) {
    d[i].index = i;
    d[i].uuid = "GPU-fake-000" + std::to_string(i);
    d[i].bus_id = bus[i];
  }
  d[1].mig_uuids = {"MIG-fake-0001"};
  return d;
}

// Options that find nothing but NVML (empty sensor folders) and read the fake library.
SourceOptions nvml_options(TempDir const& t) {
  SourceOptions o;
  o.nvml_library = joule::test::fake_nvml_library();
  o.hwmon_root = t.str("hwmon");
  o.powercap_root = t.str("powercap");
  fs::create_directories(t.root / "hwmon");
  fs::create_directories(t.root / "powercap");
  o.local_rank = 0;
  o.local_size = 1;
  return o;
}

// from_environment(), made to use Kokkos' rule here: on CUDA builds it names the real GPU's bus
// id, which no fake GPU has.
SourceOptions options_from_environment() {
  auto o = SourceOptions::from_environment();
  o.cuda_pci_bus_id.clear();
  o.cuda_device_by_local_rank = true;
  return o;
}

// The NVML indices whose channels were opened ("nvml gpu N ..." sensors), and the notes.
std::set<int> opened_gpus(SourceOptions const& o, std::vector<std::string>* notes = nullptr,
                          std::vector<SourceAttempt>* attempts = nullptr) {
  std::set<int> gpus;
  for (auto const& s : discover_sources(o, notes, attempts)) {
    if (s->name() != "nvml") continue;
    for (auto const& c : s->channels()) {
      REQUIRE(c.sensor.rfind("nvml gpu ", 0) == 0);
      gpus.insert(std::atoi(c.sensor.c_str() + 9));
    }
  }
  return gpus;
}

bool any_contains(std::vector<std::string> const& texts, std::string const& what) {
  for (auto const& t : texts)
    if (t.find(what) != std::string::npos) return true;
  return false;
}

std::vector<std::string> lines_of(fs::path const& file) {
  std::vector<std::string> lines;
  std::ifstream in(file);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

SourceAttempt attempt_of(std::vector<SourceAttempt> const& attempts, std::string const& source) {
  for (auto const& a : attempts)
    if (a.source == source) return a;
  FAIL("no attempt recorded for " << source);
  return {};
}

}  // namespace

TEST_CASE("energy sources: PCI bus ids compare whatever the domain width and case", "[energy][nvml][select]") {
  REQUIRE(detail::normalize_pci_bus_id("00000009:0A:00.0") == "00000009:0a:00.0");
  REQUIRE(detail::normalize_pci_bus_id("0009:0a:00.0") == "00000009:0a:00.0");
  REQUIRE(detail::normalize_pci_bus_id("0a:00.0") == "00000000:0a:00.0");  // no domain: 0
  REQUIRE(detail::normalize_pci_bus_id(" 0000:3B:1f.7 ") == "00000000:3b:1f.7");
  for (char const* bad : {"", "GPU-fake-0001", "0009:0a:00", "0009:100:00.0", "0009:0a:20.0", "x:0a:00.0", "1:2:3:4.0"})
    REQUIRE(detail::normalize_pci_bus_id(bad).empty());
}

TEST_CASE("energy sources: the CUDA device maps to its NVML device through CUDA_VISIBLE_DEVICES",
          "[energy][nvml][select]") {
  auto const devices = fake_devices();
  auto select = [&](std::optional<std::string> visible, int ordinal, std::string const& bus = "") {
    return detail::select_nvml_device(visible, ordinal, devices, bus);
  };
  SECTION("no CUDA_VISIBLE_DEVICES: the ordinal is the NVML index") {
    REQUIRE(select(std::nullopt, 0).index == 0);
    REQUIRE(select(std::nullopt, 3).index == 3);
    auto const none = select(std::nullopt, 4);
    REQUIRE(none.index == -1);
    REQUIRE_THAT(none.error, Contains("CUDA device 4 does not exist: NVML sees 4 GPU(s)"));
    REQUIRE(detail::visible_cuda_devices(std::nullopt, devices) == 4);
  }
  SECTION("indices are remapped") {
    REQUIRE(select(std::string("2,0"), 0).index == 2);
    REQUIRE(select(std::string("2,0"), 1).index == 0);
    REQUIRE_THAT(select(std::string("2,0"), 2).error, Contains("CUDA device 2 does not exist"));
    REQUIRE(detail::visible_cuda_devices(std::string("2,0"), devices) == 2);
    REQUIRE_THAT(select(std::string("2,0"), 1).how, Contains("entry '0'"));
  }
  SECTION("UUIDs, abbreviated to a unique prefix, any case; MIG instances find their GPU") {
    REQUIRE(select(std::string("GPU-fake-0003, GPU-fake-0001"), 0).index == 3);
    REQUIRE(select(std::string("GPU-fake-0003, GPU-fake-0001"), 1).index == 1);
    REQUIRE(select(std::string("gpu-FAKE-0002"), 0).index == 2);
    REQUIRE(select(std::string("MIG-fake-0001"), 0).index == 1);
    auto const ambiguous = select(std::string("GPU-fake-000"), 0);
    REQUIRE(ambiguous.index == -1);
    REQUIRE_THAT(ambiguous.error, Contains("several GPUs"));
    REQUIRE_THAT(select(std::string("GPU-other-0001"), 0).error, Contains("matches no GPU's UUID"));
  }
  SECTION("an entry that names no GPU: CUDA sees the ones before it only, and nothing is guessed") {
    auto const missing = select(std::string("7"), 0);
    REQUIRE(missing.index == -1);
    REQUIRE_THAT(missing.error, Contains("CUDA_VISIBLE_DEVICES=7: entry '7' names no GPU") && Contains("sees no GPU"));
    REQUIRE(select(std::string("2,9,0"), 0).index == 2);
    auto const after = select(std::string("2,9,0"), 2);
    REQUIRE(after.index == -1);
    REQUIRE_THAT(after.error, Contains("entry '9'") && Contains("only the 1 device(s) before it"));
    REQUIRE(detail::visible_cuda_devices(std::string("2,9,0"), devices) == 1);
    for (char const* hidden : {"", "-1", "NoDevFiles"}) {
      REQUIRE(select(std::string(hidden), 0).index == -1);
      REQUIRE_THAT(select(std::string(hidden), 0).error, Contains("sees no GPU"));
      REQUIRE(detail::visible_cuda_devices(std::string(hidden), devices) == 0);
    }
  }
  SECTION("a PCI bus id names the device itself, whatever CUDA_VISIBLE_DEVICES says") {
    REQUIRE(select(std::string("0"), -1, "0009:0c:00.0").index == 2);
    REQUIRE(select(std::nullopt, -1, "00000009:0D:00.0").index == 3);
    REQUIRE_THAT(select(std::nullopt, -1, "0000:0c:00.0").error, Contains("no GPU NVML knows has"));
    REQUIRE_THAT(select(std::nullopt, -1, "bogus").error, Contains("not a PCI bus id"));
  }
  SECTION("NVML without GPUs") {
    REQUIRE_THAT(detail::select_nvml_device(std::nullopt, 0, {}).error, Contains("NVML sees no GPU"));
  }
}

TEST_CASE("energy sources: the NVML devices the options ask for", "[energy][nvml][select]") {
  auto const devices = fake_devices();
  SourceOptions o;
  auto indices = [&] { return detail::choose_nvml_devices(o, devices).indices; };
  SECTION("Kokkos' rule: local rank mod visible devices") {
    o.cuda_device_by_local_rank = true;
    o.cuda_visible_devices = "2,0";
    for (int rank : {0, 1, 2, 3}) {
      o.local_rank = rank;
      REQUIRE(indices() == std::vector<unsigned>{rank % 2 == 0 ? 2u : 0u});
    }
    o.cuda_visible_devices = "2,7";  // CUDA sees 1 device: every local rank runs on it
    o.local_rank = 1;
    REQUIRE(indices() == std::vector<unsigned>{2});
    o.cuda_visible_devices.reset();
    o.local_rank = 5;
    REQUIRE(indices() == std::vector<unsigned>{1});
  }
  SECTION("the bus id wins over the ordinal, the ordinal over the rule") {
    o.cuda_device_by_local_rank = true;
    o.cuda_visible_devices = "2,0";
    o.cuda_device = 1;
    REQUIRE(indices() == std::vector<unsigned>{0});
    o.cuda_pci_bus_id = "0009:0B:00.0";
    REQUIRE(indices() == std::vector<unsigned>{1});
  }
  SECTION("options built by hand, without a CUDA device: the GPUs of this local rank") {
    o.local_rank = 1;
    o.local_size = 2;
    REQUIRE(indices() == std::vector<unsigned>{1, 3});
  }
}

TEST_CASE("energy sources: from the environment, the local rank is found like Kokkos finds it", "[energy][select]") {
  EnvGuard env;
  for (char const* v : {"JOULE_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_RANK", "MV2_COMM_WORLD_LOCAL_RANK",
                        "MPI_LOCALRANKID", "SLURM_LOCALID", "PMI_LOCAL_RANK", "CUDA_VISIBLE_DEVICES"})
    env.unset(v);
  auto o = SourceOptions::from_environment();
  REQUIRE(o.local_rank == 0);
  REQUIRE_FALSE(o.cuda_visible_devices.has_value());
#if defined(KOKKOS_ENABLE_CUDA)
  // Kokkos runs on a CUDA device (the test main initialised it): its bus id is exact.
  REQUIRE_FALSE(o.cuda_pci_bus_id.empty());
  REQUIRE_FALSE(detail::normalize_pci_bus_id(o.cuda_pci_bus_id).empty());
  REQUIRE_FALSE(o.cuda_device_by_local_rank);
#else
  REQUIRE(kokkos_device_pci_bus_id().empty());
  REQUIRE(o.cuda_pci_bus_id.empty());
  REQUIRE(o.cuda_device_by_local_rank);
#endif
  // Kokkos' order, JOULE_LOCAL_RANK first.
  char const* order[] = {"PMI_LOCAL_RANK", "SLURM_LOCALID", "MPI_LOCALRANKID", "MV2_COMM_WORLD_LOCAL_RANK",
                         "OMPI_COMM_WORLD_LOCAL_RANK", "JOULE_LOCAL_RANK"};
  for (int i = 0; i < 6; ++i) {
    env.set(order[i], std::to_string(i + 1));
    REQUIRE(SourceOptions::from_environment().local_rank == i + 1);
  }
  env.set("CUDA_VISIBLE_DEVICES", "");
  REQUIRE(SourceOptions::from_environment().cuda_visible_devices == std::string(""));  // set, empty: no GPU
}

TEST_CASE("energy sources: NVML reads the GPU of this process only, through CUDA_VISIBLE_DEVICES",
          "[energy][nvml]") {
  TempDir t;
  EnvGuard env;
  env.set("FAKE_NVML_DEVICES", "4");
  env.set("FAKE_NVML_C2C", "0");
  for (char const* v : {"FAKE_NVML_ENERGY", "FAKE_NVML_LOST_AFTER", "FAKE_NVML_INIT_ERROR",
                        "OMPI_COMM_WORLD_LOCAL_RANK", "MV2_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "SLURM_LOCALID",
                        "PMI_LOCAL_RANK"})
    env.unset(v);
  env.set("JOULE_NVML_LIBRARY", joule::test::fake_nvml_library());
  env.set("JOULE_HWMON_ROOT", t.str("hwmon"));
  env.set("JOULE_POWERCAP_ROOT", t.str("powercap"));

  SECTION("'2,0': local rank 0 reads NVML GPU 2, local rank 1 NVML GPU 0") {
    env.set("CUDA_VISIBLE_DEVICES", "2,0");
    env.set("JOULE_LOCAL_RANK", "0");
    REQUIRE(opened_gpus(options_from_environment()) == std::set<int>{2});
    env.set("JOULE_LOCAL_RANK", "1");
    REQUIRE(opened_gpus(options_from_environment()) == std::set<int>{0});
    env.set("JOULE_LOCAL_RANK", "2");  // more ranks than visible GPUs: Kokkos wraps around
    REQUIRE(opened_gpus(options_from_environment()) == std::set<int>{2});
  }
  SECTION("without CUDA_VISIBLE_DEVICES one GPU per process, not every GPU of the node") {
    env.unset("CUDA_VISIBLE_DEVICES");
    env.set("JOULE_LOCAL_RANK", "0");
    REQUIRE(opened_gpus(options_from_environment()) == std::set<int>{0});
    env.set("JOULE_LOCAL_RANK", "3");
    REQUIRE(opened_gpus(options_from_environment()) == std::set<int>{3});
  }
  SECTION("UUID entries, and a MIG instance's GPU") {
    env.set("CUDA_VISIBLE_DEVICES", "GPU-fake-0003,GPU-fake-0001");
    env.set("JOULE_LOCAL_RANK", "1");
    REQUIRE(opened_gpus(options_from_environment()) == std::set<int>{1});
    env.set("JOULE_LOCAL_RANK", "0");
    REQUIRE(opened_gpus(options_from_environment()) == std::set<int>{3});
    env.set("CUDA_VISIBLE_DEVICES", "MIG-fake-0002");
    REQUIRE(opened_gpus(options_from_environment()) == std::set<int>{2});
  }
  SECTION("the CUDA device's bus id, in CUDA's shorter form, names the GPU whatever the rank") {
    auto o = nvml_options(t);
    o.cuda_visible_devices = "2,0";
    o.local_rank = 1;
    o.cuda_pci_bus_id = "0009:0b:00.0";
    std::vector<SourceAttempt> attempts;
    REQUIRE(opened_gpus(o, nullptr, &attempts) == std::set<int>{1});
    auto const a = attempt_of(attempts, "nvml");
    REQUIRE(a.found);
    REQUIRE_THAT(a.outcome, Contains("found: gpu 1") && Contains("PCI bus id 00000009:0B:00.0"));
    o.cuda_pci_bus_id.clear();
    o.cuda_device = 1;  // the CUDA ordinal: entry 1 of "2,0"
    REQUIRE(opened_gpus(o) == std::set<int>{0});
  }
  SECTION("an entry that names no GPU: a clear note, and no GPU read at all") {
    env.set("CUDA_VISIBLE_DEVICES", "7");
    env.set("JOULE_LOCAL_RANK", "0");
    std::vector<std::string> notes;
    std::vector<SourceAttempt> attempts;
    auto const o = options_from_environment();
    REQUIRE(opened_gpus(o, &notes, &attempts).empty());
    REQUIRE(any_contains(notes, "CUDA_VISIBLE_DEVICES=7: entry '7' names no GPU (NVML sees 4)"));
    auto const a = attempt_of(attempts, "nvml");
    REQUIRE_FALSE(a.found);
    REQUIRE_THAT(a.outcome, Contains("no GPU of this process") && Contains("entry '7'"));
    // The same device ordinal the wrong way round: the second entry is missing.
    auto o2 = nvml_options(t);
    o2.cuda_visible_devices = "3,7";
    o2.cuda_device = 1;
    notes.clear();
    REQUIRE(opened_gpus(o2, &notes).empty());
    REQUIRE(any_contains(notes, "only the 1 device(s) before it"));
  }
}

TEST_CASE("energy sources: the power limiter changes the same single GPU and no other",
          "[energy][nvml][power_limit]") {
  TempDir t;
  EnvGuard env;
  env.set("FAKE_NVML_DEVICES", "4");
  env.set("FAKE_NVML_C2C", "0");
  env.set("FAKE_NVML_ENERGY", "0");  // GPU power read from the power field, capped at the limit
  env.set("FAKE_NVML_POWER_MW", "650000");
  env.unset("FAKE_NVML_SET_DENIED");
  env.unset("FAKE_NVML_INIT_ERROR");
  auto const limits = t.root / "limits";
  env.set("FAKE_NVML_LIMIT_FILE", limits.string());
  auto o = nvml_options(t);
  o.cuda_device_by_local_rank = true;
  o.cuda_visible_devices = "2,0";
  auto watts_of = [&](int rank) {  // GPU power now, as the energy source of local rank `rank` reads it
    auto other = o;
    other.local_rank = rank;
    Sampler s(discover_sources(other));
    REQUIRE(s.channels().size() >= 1);
    s.snapshot(0.0);
    return s.snapshot(1.0)[0];
  };
  {
    auto limiter = PowerLimiter::open(o);
    REQUIRE(limiter->gpus() == 1);
    REQUIRE(limiter->nvml_indices() == std::vector<unsigned>{2});
    limiter->set(300);
    REQUIRE(lines_of(limits) == std::vector<std::string>{"2 300000"});
    REQUIRE(watts_of(0) == Approx(300.0));  // the GPU this process reads is the one it limited
    REQUIRE(watts_of(1) == Approx(650.0));  // the other rank's GPU is untouched
  }  // restored on destruction
  REQUIRE(lines_of(limits) == std::vector<std::string>{"2 300000", "2 700000"});
  SECTION("no GPU for this process: an error, and nothing is changed") {
    o.cuda_visible_devices = "7";
    REQUIRE_THROWS_WITH(PowerLimiter::open(o), Contains("no GPU for this process to limit") && Contains("entry '7'"));
    REQUIRE(lines_of(limits).size() == 2);
  }
}

TEST_CASE("energy sources: discovery says what it looked for and why each source is not used",
          "[energy][probe]") {
  TempDir t;
  EnvGuard env;
  env.unset("FAKE_NVML_INIT_ERROR");
  env.set("FAKE_NVML_DEVICES", "1");
  SourceOptions o;
  o.local_rank = 0;
  o.local_size = 1;
  o.nvml_library = "none";
  o.hwmon_root = t.str("no-hwmon");
  o.powercap_root = t.str("no-powercap");
  auto attempts_for = [&] {
    std::vector<SourceAttempt> attempts;
    discover_sources(o, nullptr, &attempts);
    REQUIRE(attempts.size() == 3);
    return attempts;
  };
  SECTION("NVML: disabled, not found, not NVML, init failed, found") {
    REQUIRE_THAT(attempt_of(attempts_for(), "nvml").outcome, Contains("disabled"));
    o.nvml_library = t.str("missing/libnvidia-ml.so.1");
    auto a = attempt_of(attempts_for(), "nvml");
    REQUIRE(a.looked_for == o.nvml_library);
    REQUIRE(a.outcome == "not found (no NVIDIA driver installed?)");
    REQUIRE_FALSE(a.found);
    o.nvml_library = "libc.so.6";  // loads, but is not NVML
    REQUIRE_THAT(attempt_of(attempts_for(), "nvml").outcome, Contains("symbol nvmlInit_v2 missing"));
    o.nvml_library = joule::test::fake_nvml_library();
    env.set("FAKE_NVML_INIT_ERROR", "9");
    REQUIRE(attempt_of(attempts_for(), "nvml").outcome ==
            "nvmlInit_v2 failed: Driver Not Loaded (driver not loaded, or no GPU?)");
    env.unset("FAKE_NVML_INIT_ERROR");
    a = attempt_of(attempts_for(), "nvml");
    REQUIRE(a.found);
    REQUIRE_THAT(a.outcome, StartsWith("found: gpu 0"));
  }
  SECTION("hwmon: no folder, empty, no Grace meter, unknown meter, found") {
    auto a = attempt_of(attempts_for(), "hwmon");
    REQUIRE(a.looked_for == o.hwmon_root);
    REQUIRE(a.outcome == "no such folder");
    fs::create_directories(o.hwmon_root);
    REQUIRE(attempt_of(attempts_for(), "hwmon").outcome == "no hwmon devices in it");
    t.write("no-hwmon/hwmon0/name", "coretemp");
    t.write("no-hwmon/hwmon0/temp1_input", "40000");
    REQUIRE_THAT(attempt_of(attempts_for(), "hwmon").outcome,
                 StartsWith("no Grace power sensor") && Contains("hwmon0 (coretemp)"));
    t.write("no-hwmon/hwmon1/power1_oem_info", "Fan Power");
    REQUIRE_THAT(attempt_of(attempts_for(), "hwmon").outcome, Contains("'Fan Power' (hwmon1)"));
    t.write("no-hwmon/hwmon2/device/power1_oem_info", "Module Power Socket 0");
    t.write("no-hwmon/hwmon2/device/power1_average", "1000000");
    a = attempt_of(attempts_for(), "hwmon");
    REQUIRE(a.found);
    REQUIRE(a.outcome == "found: Module Power Socket 0 (hwmon2)");
  }
  SECTION("RAPL: no folder, no zones, no package zone, found; node sensors belong to local rank 0") {
    auto a = attempt_of(attempts_for(), "rapl");
    REQUIRE(a.outcome == "no such folder");
    REQUIRE_THAT(a.looked_for, StartsWith(o.powercap_root));
    fs::create_directories(o.powercap_root);
    REQUIRE_THAT(attempt_of(attempts_for(), "rapl").outcome, StartsWith("no RAPL zones"));
    t.write("no-powercap/intel-rapl:0:0/name", "core");
    t.write("no-powercap/intel-rapl:0:0/energy_uj", "5");
    REQUIRE_THAT(attempt_of(attempts_for(), "rapl").outcome,
                 Contains("no package or dram zone (found: core (intel-rapl:0:0))"));
    t.write("no-powercap/intel-rapl:0/name", "package-0");
    t.write("no-powercap/intel-rapl:0/energy_uj", "5");
    REQUIRE(attempt_of(attempts_for(), "rapl").outcome == "found: package-0 (intel-rapl:0)");
    o.local_rank = 1;
    REQUIRE_THAT(attempt_of(attempts_for(), "rapl").outcome, Contains("read by local rank 0 (this is local rank 1)"));
    REQUIRE_THAT(attempt_of(attempts_for(), "hwmon").outcome, Contains("read by local rank 0"));
  }
  SECTION("the probe prints one 'looked for' line per source") {
    o.nvml_library = t.str("missing/libnvidia-ml.so.1");
    std::vector<SourceAttempt> attempts;
    Sampler s(discover_sources(o, nullptr, &attempts));
    auto const text = format_probe(s, attempts);
    REQUIRE_THAT(text,
                 Contains("looked for:\n  nvml: " + o.nvml_library + " — not found (no NVIDIA driver installed?)\n"));
    REQUIRE_THAT(text, Contains("\n  hwmon: " + o.hwmon_root + " — no such folder\n"));
    REQUIRE_THAT(text, Contains("\n  rapl: " + o.powercap_root + "/{intel,amd}-rapl:* — no such folder\n"));
    REQUIRE_THAT(text, Contains("source model"));
  }
}

TEST_CASE("energy sources: RAPL readable only by root is reported as permission denied", "[energy][probe][rapl]") {
  TempDir t;
  SourceOptions o;
  o.local_rank = 0;
  o.nvml_library = "none";
  o.hwmon_root = t.str("hwmon");
  o.powercap_root = t.str("powercap");
  t.write("powercap/intel-rapl:0/name", "package-0");
  t.write("powercap/intel-rapl:0/energy_uj", "123");
  fs::permissions(t.root / "powercap/intel-rapl:0/energy_uj", fs::perms::none);
  auto denied = [&] {
    std::vector<SourceAttempt> attempts;
    discover_sources(o, nullptr, &attempts);
    auto const a = attempt_of(attempts, "rapl");
    return !a.found &&
           a.outcome.rfind("permission denied reading " + o.powercap_root + "/intel-rapl:0/energy_uj", 0) == 0 &&
           a.outcome.find("CVE-2020-8694") != std::string::npos;
  };
  if (geteuid() != 0) {
    REQUIRE(denied());
    return;
  }
  // Root reads a file of mode 000: look as an unprivileged user, in a child process.
  for (auto const& p : fs::recursive_directory_iterator(t.root))
    if (p.is_directory())
      fs::permissions(p.path(), fs::perms::others_read | fs::perms::others_exec, fs::perm_options::add);
  fs::permissions(t.root, fs::perms::others_read | fs::perms::others_exec, fs::perm_options::add);
  fs::permissions(t.root / "powercap/intel-rapl:0/name", fs::perms::others_read, fs::perm_options::add);
  pid_t const child = fork();
  if (child == 0) {
    if (setgid(65534) != 0 || setuid(65534) != 0) _exit(2);
    _exit(denied() ? 0 : 1);
  }
  int status = 0;
  waitpid(child, &status, 0);
  REQUIRE(WIFEXITED(status));
  REQUIRE(WEXITSTATUS(status) == 0);
}

TEST_CASE("energy sources: a sensor file that blocks is dropped after the read deadline, with a note naming it",
          "[energy][hwmon][hostile]") {
  // A FIFO with no writer blocks its reader in open(), as a stalled BMC-backed sensor blocks read().
  TempDir t;
  t.write("hwmon/hwmon3/device/power1_oem_info", "Module Power Socket 0");
  REQUIRE(mkfifo(t.str("hwmon/hwmon3/device/power1_average").c_str(), 0600) == 0);
  t.write("hwmon/hwmon4/power1_oem_info", "CPU Power Socket 0");
  t.write("hwmon/hwmon4/power1_average", "80000000");
  fs::create_directories(t.root / "powercap");
  SourceOptions o;
  o.nvml_library = "none";
  o.hwmon_root = t.str("hwmon");
  o.powercap_root = t.str("powercap");
  o.local_rank = 0;
  o.local_size = 1;
  std::vector<std::string> notes;
  auto sources = discover_sources(o, &notes);  // returns: the stalled file cost one deadline
  std::string const stalled = t.str("hwmon/hwmon3/device/power1_average");
  CHECK(detail::read_stalled(stalled));
  CHECK(any_contains(notes, stalled + " did not answer within 2 s (a stalled sensor: no longer read)"));
  std::vector<std::string> sensors;
  for (auto const& s : sources)
    for (auto const& c : s->channels()) sensors.push_back(c.sensor);
  CHECK(any_contains(sensors, "CPU Power Socket 0"));
  CHECK_FALSE(any_contains(sensors, "Module Power Socket 0"));

  // A sensor that stalls during the run: its channel reads NaN from then on, said once.
  std::string const cpu = t.str("hwmon/hwmon4/power1_average");
  Sampler sampler(std::move(sources), 100);
  std::size_t channel = 0;
  for (std::size_t i = 0; i < sampler.channels().size(); ++i)
    if (sampler.channels()[i].channel.sensor.find("CPU Power Socket 0") != std::string::npos) channel = i;
  sampler.snapshot();
  REQUIRE(mkfifo(t.str("fifo").c_str(), 0600) == 0);
  fs::rename(t.root / "fifo", cpu);
  sampler.snapshot();
  sampler.snapshot();  // at once: the stalled file is not read again
  CHECK(detail::read_stalled(cpu));
  auto const trace = sampler.trace();
  REQUIRE(trace.size() == 3);
  CHECK(trace[0].values.at(channel) == 80.0);
  CHECK(std::isnan(trace[1].values.at(channel)));
  CHECK(std::isnan(trace[2].values.at(channel)));
  CHECK(any_contains(sampler.notes(), cpu + " did not answer within 2 s"));
}

TEST_CASE("energy sources: a negative hwmon or RAPL reading is refused, with a note naming the file and the value",
          "[energy][hwmon][rapl][hostile]") {
  // strtoull takes "-3000000" for 2^64 - 3000000: a meter of exawatts, accepted silently.
  TempDir t;
  t.write("hwmon/hwmon3/device/power1_oem_info", "Module Power Socket 0");
  t.write("hwmon/hwmon3/device/power1_average", "-5000000");  // negative from the start: not used
  t.write("hwmon/hwmon4/power1_oem_info", "CPU Power Socket 0");
  t.write("hwmon/hwmon4/power1_average", "80000000");
  t.write("hwmon/hwmon4/power1_average_interval", "-50");
  t.write("powercap/intel-rapl:0/name", "package-0");
  t.write("powercap/intel-rapl:0/energy_uj", "-7");
  t.write("powercap/intel-rapl:1/name", "package-1");
  t.write("powercap/intel-rapl:1/energy_uj", "1000000");
  t.write("powercap/intel-rapl:1/max_energy_range_uj", "262143328850");
  SourceOptions o;
  o.nvml_library = "none";
  o.hwmon_root = t.str("hwmon");
  o.powercap_root = t.str("powercap");
  o.local_rank = 0;
  o.local_size = 1;
  std::vector<std::string> notes;
  std::vector<SourceAttempt> attempts;
  auto sources = discover_sources(o, &notes, &attempts);
  std::string const module = t.str("hwmon/hwmon3/device/power1_average");
  std::string const package0 = t.str("powercap/intel-rapl:0/energy_uj");
  CHECK(any_contains(notes, "hwmon: " + module + " holds a negative reading (-5000000); 'Module Power Socket 0' not used"));
  CHECK(any_contains(notes, t.str("hwmon/hwmon4/power1_average_interval") +
                                " holds a negative reading (-50): not an interval; taken as 50 ms"));
  CHECK(any_contains(notes, "rapl: " + package0 + ": holds a negative reading (-7); zone intel-rapl:0 not used"));
  std::vector<std::string> sensors;
  for (auto const& s : sources)
    for (auto const& c : s->channels()) sensors.push_back(c.sensor);
  CHECK_FALSE(any_contains(sensors, "Module Power Socket 0"));
  CHECK_FALSE(any_contains(sensors, "intel-rapl:0 "));
  REQUIRE(any_contains(sensors, "CPU Power Socket 0"));
  REQUIRE(any_contains(sensors, "intel-rapl:1 "));

  // During the run: a negative reading is dropped (NaN, no energy across it), said once, and the
  // sensor is read again.
  Sampler sampler(std::move(sources), 100);
  std::size_t cpu = 0, package1 = 0;
  for (std::size_t i = 0; i < sampler.channels().size(); ++i) {
    auto const& sensor = sampler.channels()[i].channel.sensor;
    if (sensor.find("CPU Power Socket 0") != std::string::npos) cpu = i;
    if (sensor.find("intel-rapl:1 ") != std::string::npos) package1 = i;
  }
  CHECK(sampler.resolution_s(cpu) == Approx(0.05));  // the negative interval was not taken
  std::string const cpu_file = t.str("hwmon/hwmon4/power1_average");
  std::string const package1_file = t.str("powercap/intel-rapl:1/energy_uj");
  sampler.snapshot(1.0);
  t.write("hwmon/hwmon4/power1_average", "-3000000");
  t.write("powercap/intel-rapl:1/energy_uj", "-2");
  sampler.snapshot(2.0);
  sampler.snapshot(3.0);
  t.write("hwmon/hwmon4/power1_average", "90000000");
  t.write("powercap/intel-rapl:1/energy_uj", "4000000");
  sampler.snapshot(4.0);
  auto const energy = sampler.snapshot(5.0);
  auto const trace = sampler.trace();
  REQUIRE(trace.size() == 5);
  CHECK(trace[0].values.at(cpu) == 80.0);
  CHECK(std::isnan(trace[1].values.at(cpu)));
  CHECK(std::isnan(trace[2].values.at(cpu)));
  CHECK(trace[3].values.at(cpu) == 90.0);
  CHECK(energy.at(cpu) == Approx(90.0));       // 4 s to 5 s at 90 W; nothing across the dropped readings
  CHECK(energy.at(package1) == Approx(3.0));   // 1 J to 4 J; the negative counter reading dropped
  auto const run_notes = sampler.notes();
  CHECK(any_contains(run_notes, "hwmon: " + cpu_file + " holds a negative reading (-3000000 µW) during the run: "
                                "readings below zero are dropped"));
  CHECK(any_contains(run_notes, "rapl: " + package1_file + " holds a negative reading (-2 µJ) during the run"));
  std::size_t said = 0;
  for (auto const& n : run_notes) said += n.find(cpu_file + " holds a negative") != std::string::npos;
  CHECK(said == 1);
}

namespace {
// The hardware a counted channel covers on a Grace Hopper node, superchip s: "gpu s", "cpu s"
// (Grace and its memory), "sysio s". NVML device N is superchip N's GPU; hwmon names its socket.
std::vector<std::string> hardware_of(Sampler::ChannelInfo const& c) {
  auto const& sensor = c.channel.sensor;
  auto const& domain = c.channel.domain;
  auto const number_after = [&](std::string const& what) {
    auto const at = sensor.find(what);
    REQUIRE(at != std::string::npos);
    return std::to_string(std::atoi(sensor.c_str() + at + what.size()));
  };
  std::string const s = c.source == "nvml" ? number_after("nvml gpu ") : number_after("Socket ");
  if (domain == kDomainModule) return {"gpu " + s, "cpu " + s, "sysio " + s};
  if (domain == kDomainGpu) return {"gpu " + s};
  if (domain == kDomainPackage || domain == kDomainCpu) return {"cpu " + s};
  if (domain == kDomainSysio) return {"sysio " + s};
  FAIL("a total counts " << domain << " (" << sensor << ")");
  return {};
}
}  // namespace

// Every process of a node sums into the job's energy (the trial runner adds the ranks' totals),
// so across the node's ranks each piece of hardware must be in exactly one total: with NVML's
// module scope or without it, with hwmon's module meters, its Grace/CPU/SysIO meters only, or
// none, for 1, 2 and 4 GH200s and one rank per GPU. Without NVML's module scope local rank 0
// used to count every Module Power Socket while ranks 1-3 counted their GPU again.
TEST_CASE("energy sources: no rail is counted twice on a node, whatever the NVML scopes, hwmon meters and ranks",
          "[energy][node]") {
  EnvGuard env;
  for (char const* v : {"FAKE_NVML_ENERGY", "FAKE_NVML_LOST_AFTER", "FAKE_NVML_INIT_ERROR", "FAKE_NVML_POWER_MW"})
    env.unset(v);
  env.set("FAKE_NVML_C2C", "1");
  enum class Meters { none, grace_only, modules };
  for (int const gpus : {1, 2, 4})
    for (bool const nvml_module : {false, true})
      for (Meters const meters : {Meters::none, Meters::grace_only, Meters::modules}) {
        TempDir t;
        auto o = nvml_options(t);
        o.local_size = gpus;
        o.cuda_device_by_local_rank = true;
        int hwmon = 0;
        auto const meter = [&](std::string const& label, char const* microwatts) {
          std::string const dir = "hwmon/hwmon" + std::to_string(hwmon++) + "/device/";
          t.write(dir + "power1_oem_info", label);
          t.write(dir + "power1_average", microwatts);
        };
        for (int s = 0; s < gpus && meters != Meters::none; ++s) {
          std::string const socket = " Power Socket " + std::to_string(s);
          if (meters == Meters::modules) meter("Module" + socket, "500000000");
          meter("Grace" + socket, "150000000");
          meter("CPU" + socket, "100000000");
          meter("SysIO" + socket, "20000000");
        }
        env.set("FAKE_NVML_DEVICES", std::to_string(gpus));
        if (nvml_module) env.set("FAKE_NVML_MODULE_MW", "480000");
        else env.unset("FAKE_NVML_MODULE_MW");
        std::map<std::string, int> counted;
        std::string totals;
        for (int rank = 0; rank < gpus; ++rank) {
          o.local_rank = rank;
          std::vector<Sampler::ChannelInfo> channels;
          for (auto const& s : discover_sources(o))
            for (auto const& c : s->channels()) channels.push_back({s->name(), c});
          auto const rule = total_rule(channels);
          totals += "\n  rank " + std::to_string(rank) + ": " + rule.description;
          INFO(gpus << " GPU(s), NVML module scope " << nvml_module << ", hwmon meters " << int(meters) << totals);
          REQUIRE(rule.measured);
          for (auto const i : rule.channels)
            for (auto const& hardware : hardware_of(channels[i])) ++counted[hardware];
        }
        INFO(gpus << " GPU(s), NVML module scope " << nvml_module << ", hwmon meters " << int(meters) << totals);
        for (auto const& [hardware, times] : counted) {
          INFO(hardware);
          CHECK(times == 1);
        }
        // Nothing measured is left out: every rank's GPU, and with module power (NVML's or
        // hwmon's) or Grace meters, each superchip's CPU.
        for (int s = 0; s < gpus; ++s) {
          CHECK(counted.count("gpu " + std::to_string(s)) == 1);
          if (nvml_module || meters != Meters::none) CHECK(counted.count("cpu " + std::to_string(s)) == 1);
        }
      }
}
