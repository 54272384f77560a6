// Sources that read files: Grace / GH200 hwmon power meters and Linux powercap RAPL counters.
#include "energy/detail/sysfs.hpp"
#include "energy/source.hpp"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <dirent.h>
#include <map>

namespace joule::energy {

namespace {

// A folder's entries, sorted; error: errno when it cannot be listed (ENOENT, EACCES, ...).
struct Listing {
  std::vector<std::string> names;
  int error = 0;
};

Listing list_dir(std::string const& dir) {
  Listing l;
  DIR* d = opendir(dir.c_str());
  if (!d) {
    l.error = errno;
    return l;
  }
  while (dirent* e = readdir(d))
    if (e->d_name[0] != '.') l.names.emplace_back(e->d_name);
  closedir(d);
  std::sort(l.names.begin(), l.names.end());
  return l;
}

bool starts_with(std::string const& s, char const* prefix) { return s.rfind(prefix, 0) == 0; }

std::string join(std::vector<std::string> const& items) {
  std::string text;
  for (auto const& i : items) text += (text.empty() ? "" : ", ") + i;
  return text;
}

// Why a sysfs folder could not be listed, for the probe's "looked for" line.
std::string folder_problem(int error) {
  if (error == ENOENT) return "no such folder";
  if (error == EACCES) return "permission denied listing it";
  return "cannot be listed (" + detail::describe_error(error) + ")";
}

// What discovery learnt while looking, whatever it found: the probe says it.
struct Diagnosis {
  int root_error = 0;
  std::vector<std::string> found;   // what is used
  std::vector<std::string> denied;  // files that answered EACCES
  std::vector<std::string> broken;  // other unreadable files, with why
  std::vector<std::string> other;   // what was there but is not a sensor joule uses
};

// --- hwmon -------------------------------------------------------------------------------------
// ACPI power meters of Grace / GH200: power1_oem_info names the sensor, power1_average is its
// power in microwatts, averaged over power1_average_interval ms (the firmware updates every
// 50 ms, so faster polling repeats values; integration treats a repeated value as constant power).
class HwmonSource final : public Source {
 public:
  explicit HwmonSource(std::string const& root) {
    auto const listing = list_dir(root);
    diagnosis_.root_error = listing.error;
    for (auto const& entry : listing.names) {
      if (!starts_with(entry, "hwmon")) continue;
      ++devices_;
      bool meter = false;
      // The meter's files sit under hwmonN/device/ on older kernels and directly in hwmonN/ on newer.
      for (std::string const& dir : {root + "/" + entry + "/device", root + "/" + entry}) {
        auto const info = detail::read_file(dir + "/power1_oem_info");
        if (!info.ok) {
          if (info.error == EACCES) diagnosis_.denied.push_back(dir + "/power1_oem_info");
          if (info.error == ETIMEDOUT) {
            notes_.push_back("hwmon: " + dir + "/power1_oem_info " + detail::describe_error(info.error));
            diagnosis_.broken.push_back(dir + "/power1_oem_info " + detail::describe_error(info.error));
          }
          continue;
        }
        meter = true;
        std::string const domain = domain_of(info.text);
        if (domain.empty()) {
          notes_.push_back("hwmon: " + dir + ": unknown power meter '" + info.text + "', not used");
          diagnosis_.other.push_back("'" + info.text + "' (" + entry + ")");
          break;
        }
        unsigned long long microwatts = 0;
        auto const probe = detail::read_uint(dir + "/power1_average", microwatts);
        if (!probe.ok) {
          notes_.push_back("hwmon: " + dir + "/power1_average " + detail::describe_read(probe) + "; '" + info.text +
                           "' not used");
          if (probe.error == EACCES) diagnosis_.denied.push_back(dir + "/power1_average");
          else diagnosis_.broken.push_back(dir + "/power1_average " + detail::describe_read(probe));
          break;
        }
        // The firmware averages over power1_average_interval and updates at that period (50 ms on
        // GH200, also when the file is missing): nothing shorter is resolved.
        unsigned long long interval_ms = 50, declared = 0;
        std::string sensor = "hwmon " + info.text + " (" + dir + ")";
        auto const interval = detail::read_uint(dir + "/power1_average_interval", declared);
        if (interval.ok) {
          interval_ms = declared;
          sensor += ", averaged over " + std::to_string(interval_ms) + " ms";
        } else if (interval.error == detail::kNegativeReading) {
          notes_.push_back("hwmon: " + dir + "/power1_average_interval " + detail::describe_read(interval) +
                           ": not an interval; taken as 50 ms");
        }
        channels_.push_back({domain, sensor, Quantity::power, true, 1e-3 * double(interval_ms)});
        files_.push_back(dir + "/power1_average");
        diagnosis_.found.push_back(info.text + " (" + entry + ")");
        break;
      }
      // Not a power meter: say what it is (its name file: coretemp, nvme, ...), so the probe
      // shows what was there.
      if (!meter) {
        auto const name = detail::read_file(root + "/" + entry + "/name");
        diagnosis_.other.push_back(entry + (name.ok ? " (" + name.text + ")" : ""));
      }
    }
    lost_.assign(files_.size(), false);
    negative_noted_.assign(files_.size(), false);
  }

  // The probe's "looked for" outcome.
  std::string outcome() const {
    auto const& d = diagnosis_;
    if (d.root_error) return folder_problem(d.root_error);
    if (!d.found.empty()) return "found: " + join(d.found);
    if (!d.denied.empty())
      return "permission denied reading " + d.denied.front() + " (run as root, or make it readable: sudo chmod a+r " +
             d.denied.front() + ")";
    if (!d.broken.empty()) return "Grace power meter unreadable: " + d.broken.front();
    if (devices_ == 0) return "no hwmon devices in it";
    return "no Grace power sensor (looked for power1_oem_info naming 'Module/Grace/CPU/SysIO Power Socket N' in "
           "hwmon*/device/ and hwmon*/; found: " + join(d.other) + ")";
  }

  std::string name() const override { return "hwmon"; }

  void read(std::vector<double>& values) override {
    values.resize(files_.size());
    for (std::size_t i = 0; i < files_.size(); ++i) {
      unsigned long long microwatts = 0;
      auto const r = detail::read_uint(files_[i], microwatts);
      if (r.ok) {
        values[i] = double(microwatts) * 1e-6;
      } else if (r.error == detail::kNegativeReading) {
        // A power meter does not read below zero: the reading is dropped (no energy is counted from
        // the reading before it to the one after it), and the sensor is read again next time.
        values[i] = std::nan("");
        if (!negative_noted_[i])
          notes_.push_back("hwmon: " + files_[i] + " " + detail::describe_error(r.error) + " (" + r.text +
                           " µW) during the run: readings below zero are dropped, and no energy is counted "
                           "across them");
        negative_noted_[i] = true;
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
  std::vector<bool> negative_noted_;  // a negative reading of this file has been noted
  Diagnosis diagnosis_;
  int devices_ = 0;  // hwmon* entries seen
};

// --- RAPL --------------------------------------------------------------------------------------
// powercap zones intel-rapl:N (package-N) and their subzones (dram; core/uncore are inside the
// package and skipped). energy_uj is a microjoule counter that wraps at max_energy_range_uj.
class RaplSource final : public Source {
 public:
  explicit RaplSource(std::string const& root) {
    auto const listing = list_dir(root);
    diagnosis_.root_error = listing.error;
    for (auto const& zone : listing.names) {
      if (!starts_with(zone, "intel-rapl:") && !starts_with(zone, "amd-rapl:")) continue;
      ++zones_;
      std::string const dir = root + "/" + zone;
      auto const name = detail::read_file(dir + "/name");
      if (!name.ok) {
        if (name.error == EACCES) diagnosis_.denied.push_back(dir + "/name");
        else diagnosis_.broken.push_back(dir + "/name " + detail::describe_error(name.error));
        continue;
      }
      std::string domain;
      if (starts_with(name.text, "package")) domain = kDomainPackage;
      else if (name.text == "dram") domain = kDomainDram;
      else {  // core, uncore: contained in the package; psys: the whole platform
        diagnosis_.other.push_back(name.text + " (" + zone + ")");
        continue;
      }
      Counter c;
      c.file = dir + "/energy_uj";
      auto const probe = detail::read_uint(c.file, c.last);
      if (!probe.ok) {
        std::string why = detail::describe_read(probe);
        if (probe.error == EACCES) why += " (root-only since CVE-2020-8694)";
        notes_.push_back("rapl: " + c.file + ": " + why + "; zone " + zone + " not used");
        if (probe.error == EACCES) diagnosis_.denied.push_back(c.file);
        else diagnosis_.broken.push_back(c.file + " " + detail::describe_read(probe));
        continue;
      }
      unsigned long long range = 0;
      c.range = detail::read_uint(dir + "/max_energy_range_uj", range).ok && range > 0 ? range : 0;
      if (!c.range) notes_.push_back("rapl: " + dir + "/max_energy_range_uj unreadable: wraparound cannot be undone");
      channels_.push_back({domain, "rapl " + zone + " (" + name.text + ") energy_uj", Quantity::energy_counter, true});
      counters_.push_back(c);
      diagnosis_.found.push_back(name.text + " (" + zone + ")");
    }
  }

  // The probe's "looked for" outcome.
  std::string outcome(std::string const& root) const {
    auto const& d = diagnosis_;
    if (d.root_error) return folder_problem(d.root_error);
    if (!d.found.empty()) return "found: " + join(d.found);
    if (!d.denied.empty())
      return "permission denied reading " + d.denied.front() +
             " (root-only since CVE-2020-8694: run as root, or sudo chmod a+r " + root + "/*-rapl:*/energy_uj)";
    if (!d.broken.empty()) return "RAPL zone unreadable: " + d.broken.front();
    if (zones_ == 0)
      return "no RAPL zones (not an x86 CPU, or the intel_rapl_common / rapl kernel module is not loaded)";
    return "RAPL zones present, but no package or dram zone (found: " + join(d.other) + ")";
  }

  std::string name() const override { return "rapl"; }

  void read(std::vector<double>& values) override {
    values.resize(counters_.size());
    for (std::size_t i = 0; i < counters_.size(); ++i) {
      Counter& c = counters_[i];
      unsigned long long now = 0;
      auto const r = detail::read_uint(c.file, now);
      if (!r.ok && r.error == detail::kNegativeReading) {
        // An energy counter does not go below zero: the reading is dropped; the next good one
        // counts from the last good one.
        values[i] = std::nan("");
        if (!c.negative_noted)
          notes_.push_back("rapl: " + c.file + " " + detail::describe_error(r.error) + " (" + r.text +
                           " µJ) during the run: readings below zero are dropped");
        c.negative_noted = true;
        continue;
      }
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
    bool lost = false, negative_noted = false;
  };
  std::vector<Counter> counters_;
  Diagnosis diagnosis_;
  int zones_ = 0;
};

}  // namespace

namespace {
// Node sensors: local rank 0 reads them, so no sensor is counted twice on a node.
bool node_sensors_elsewhere(SourceOptions const& options, SourceAttempt& a) {
  if (options.local_rank <= 0) return false;
  a.outcome = "not read by this process: node sensors are read by local rank 0 (this is local rank " +
              std::to_string(options.local_rank) + ")";
  return true;
}
}  // namespace

std::unique_ptr<Source> open_hwmon(SourceOptions const& options, SourceAttempt* attempt) {
  SourceAttempt local;
  SourceAttempt& a = attempt ? *attempt : local;
  a = {"hwmon", options.hwmon_root, "", false};
  if (node_sensors_elsewhere(options, a)) return nullptr;
  auto s = std::make_unique<HwmonSource>(options.hwmon_root);
  a.outcome = s->outcome();
  a.found = !s->channels().empty();
  return s->channels().empty() && s->notes().empty() ? nullptr : std::move(s);
}

std::vector<std::string> node_module_meters(SourceOptions const& options) {
  std::vector<std::string> labels;
  HwmonSource const meters(options.hwmon_root);
  for (auto const& c : meters.channels())
    if (c.domain == kDomainModule) labels.push_back(c.sensor.substr(0, c.sensor.find(" (")).substr(6));  // "hwmon "
  return labels;
}

std::unique_ptr<Source> open_rapl(SourceOptions const& options, SourceAttempt* attempt) {
  SourceAttempt local;
  SourceAttempt& a = attempt ? *attempt : local;
  a = {"rapl", options.powercap_root + "/{intel,amd}-rapl:*", "", false};
  if (node_sensors_elsewhere(options, a)) return nullptr;
  auto s = std::make_unique<RaplSource>(options.powercap_root);
  a.outcome = s->outcome(options.powercap_root);
  a.found = !s->channels().empty();
  return s->channels().empty() && s->notes().empty() ? nullptr : std::move(s);
}

}  // namespace joule::energy
