// Sources that read files: Grace / GH200 hwmon power meters and Linux powercap RAPL counters.
#include "energy/detail/sysfs.hpp"
#include "energy/source.hpp"

#include <algorithm>
#include <cmath>
#include <dirent.h>
#include <map>

namespace joule::energy {

namespace {

std::vector<std::string> list_dir(std::string const& dir) {
  std::vector<std::string> names;
  if (DIR* d = opendir(dir.c_str())) {
    while (dirent* e = readdir(d))
      if (e->d_name[0] != '.') names.emplace_back(e->d_name);
    closedir(d);
  }
  std::sort(names.begin(), names.end());
  return names;
}

bool starts_with(std::string const& s, char const* prefix) { return s.rfind(prefix, 0) == 0; }

// --- hwmon -------------------------------------------------------------------------------------
// ACPI power meters of Grace / GH200: power1_oem_info names the sensor, power1_average is its
// power in microwatts, averaged over power1_average_interval ms (the firmware updates every
// 50 ms, so faster polling repeats values; integration treats a repeated value as constant power).
class HwmonSource final : public Source {
 public:
  explicit HwmonSource(std::string const& root) {
    for (auto const& entry : list_dir(root)) {
      if (!starts_with(entry, "hwmon")) continue;
      // The meter's files sit under hwmonN/device/ on older kernels and directly in hwmonN/ on newer.
      for (std::string const& dir : {root + "/" + entry + "/device", root + "/" + entry}) {
        auto const info = detail::read_file(dir + "/power1_oem_info");
        if (!info.ok) continue;
        std::string const domain = domain_of(info.text);
        if (domain.empty()) {
          notes_.push_back("hwmon: " + dir + ": unknown power meter '" + info.text + "', not used");
          break;
        }
        unsigned long long microwatts = 0;
        auto const probe = detail::read_uint(dir + "/power1_average", microwatts);
        if (!probe.ok) {
          notes_.push_back("hwmon: " + dir + "/power1_average " + detail::describe_error(probe.error) +
                           "; '" + info.text + "' not used");
          break;
        }
        unsigned long long interval_ms = 0;
        std::string sensor = "hwmon " + info.text + " (" + dir + ")";
        if (detail::read_uint(dir + "/power1_average_interval", interval_ms).ok)
          sensor += ", averaged over " + std::to_string(interval_ms) + " ms";
        channels_.push_back({domain, sensor, Quantity::power, true});
        files_.push_back(dir + "/power1_average");
        break;
      }
    }
    lost_.assign(files_.size(), false);
  }

  std::string name() const override { return "hwmon"; }

  void read(std::vector<double>& values) override {
    values.resize(files_.size());
    for (std::size_t i = 0; i < files_.size(); ++i) {
      unsigned long long microwatts = 0;
      auto const r = detail::read_uint(files_[i], microwatts);
      if (r.ok) {
        values[i] = double(microwatts) * 1e-6;
      } else {
        values[i] = std::nan("");
        if (!lost_[i]) notes_.push_back("hwmon: " + files_[i] + " " + detail::describe_error(r.error) +
                                        " during the run: its energy stops at the last reading");
        lost_[i] = true;
      }
    }
  }

  static std::string domain_of(std::string const& label) {
    if (starts_with(label, "Module Power Socket")) return kDomainModule;
    if (starts_with(label, "Grace Power Socket")) return kDomainPackage;  // the whole Grace socket
    if (starts_with(label, "CPU Power Socket")) return kDomainCpu;
    if (starts_with(label, "SysIO Power Socket")) return kDomainSysio;
    return "";
  }

 private:
  std::vector<std::string> files_;
  std::vector<bool> lost_;
};

// --- RAPL --------------------------------------------------------------------------------------
// powercap zones intel-rapl:N (package-N) and their subzones (dram; core/uncore are inside the
// package and skipped). energy_uj is a microjoule counter that wraps at max_energy_range_uj.
class RaplSource final : public Source {
 public:
  explicit RaplSource(std::string const& root) {
    for (auto const& zone : list_dir(root)) {
      if (!starts_with(zone, "intel-rapl:") && !starts_with(zone, "amd-rapl:")) continue;
      std::string const dir = root + "/" + zone;
      auto const name = detail::read_file(dir + "/name");
      if (!name.ok) continue;
      std::string domain;
      if (starts_with(name.text, "package")) domain = kDomainPackage;
      else if (name.text == "dram") domain = kDomainDram;
      else continue;  // core, uncore: contained in the package; psys: the whole platform
      Counter c;
      c.file = dir + "/energy_uj";
      auto const probe = detail::read_uint(c.file, c.last);
      if (!probe.ok) {
        std::string why = detail::describe_error(probe.error);
        if (probe.error == EACCES) why += " (root-only since CVE-2020-8694)";
        notes_.push_back("rapl: " + c.file + ": " + why + "; zone " + zone + " not used");
        continue;
      }
      unsigned long long range = 0;
      c.range = detail::read_uint(dir + "/max_energy_range_uj", range).ok && range > 0 ? range : 0;
      if (!c.range) notes_.push_back("rapl: " + dir + "/max_energy_range_uj unreadable: wraparound cannot be undone");
      channels_.push_back({domain, "rapl " + zone + " (" + name.text + ") energy_uj", Quantity::energy_counter, true});
      counters_.push_back(c);
    }
  }

  std::string name() const override { return "rapl"; }

  void read(std::vector<double>& values) override {
    values.resize(counters_.size());
    for (std::size_t i = 0; i < counters_.size(); ++i) {
      Counter& c = counters_[i];
      unsigned long long now = 0;
      auto const r = detail::read_uint(c.file, now);
      if (!r.ok) {
        values[i] = std::nan("");
        if (!c.lost) notes_.push_back("rapl: " + c.file + " " + detail::describe_error(r.error) +
                                      " during the run: its energy stops at the last reading");
        c.lost = true;
        continue;
      }
      // The counter wraps at max_energy_range_uj: a smaller reading means it went round once.
      unsigned long long const delta = now >= c.last ? now - c.last : (c.range ? c.range - c.last + now : 0);
      c.total_uj += delta;
      c.last = now;
      values[i] = double(c.total_uj) * 1e-6;
    }
  }

 private:
  struct Counter {
    std::string file;
    unsigned long long last = 0, range = 0, total_uj = 0;
    bool lost = false;
  };
  std::vector<Counter> counters_;
};

}  // namespace

std::unique_ptr<Source> open_hwmon(SourceOptions const& options) {
  if (options.local_rank > 0) return nullptr;  // node sensor: local rank 0 reads it
  auto s = std::make_unique<HwmonSource>(options.hwmon_root);
  return s->channels().empty() && s->notes().empty() ? nullptr : std::move(s);
}

std::unique_ptr<Source> open_rapl(SourceOptions const& options) {
  if (options.local_rank > 0) return nullptr;
  auto s = std::make_unique<RaplSource>(options.powercap_root);
  return s->channels().empty() && s->notes().empty() ? nullptr : std::move(s);
}

}  // namespace joule::energy
