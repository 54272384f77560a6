#include "runlog/profile.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <vector>

namespace joule::scheduler {

namespace {
struct Row {
  char const* kind;
  RegionMeasure const* m;
};

double share(double part, double whole) { return whole > 0 ? 100.0 * part / whole : 0.0; }
double mean_watts(RegionMeasure const& m) { return m.seconds > 0 ? m.energy_j / m.seconds : 0.0; }

// Regions first, then the rest, each by energy (largest first; ties keep the record's order).
std::vector<Row> rows_of(ProfileRecord const& p) {
  std::vector<Row> regions, kernels;
  for (auto const& r : p.regions) regions.push_back({"region", &r});
  for (auto const& k : p.kernels) kernels.push_back({operation_kind_of(k.name), &k});
  auto const by_energy = [](Row const& a, Row const& b) { return a.m->energy_j > b.m->energy_j; };
  std::stable_sort(regions.begin(), regions.end(), by_energy);
  std::stable_sort(kernels.begin(), kernels.end(), by_energy);
  regions.insert(regions.end(), kernels.begin(), kernels.end());
  return regions;
}
}  // namespace

std::string csv_field(std::string const& text) {
  std::string line = text;
  for (char& c : line)
    if (c == '\n' || c == '\r' || c == '\t') c = ' ';
  if (line.find_first_of(",\"") == std::string::npos) return line;
  std::string quoted = "\"";
  for (char c : line) quoted += c == '"' ? std::string("\"\"") : std::string(1, c);
  return quoted + "\"";
}

char const* operation_kind_of(std::string_view name) {
  for (auto const& k : kOperationKinds)
    if (!k.prefix.empty() && name.substr(0, k.prefix.size()) == k.prefix) return k.kind;
  return operation_kind(Operation::kernel).kind;
}

std::string energy_label(RunHeader const& h) {
  return (h.energy_is_model() ? "MODEL ESTIMATE (no sensor readable): " : "measured: ") + h.energy_source;
}

std::string format_profile_report(RunHeader const& h, ProfileRecord const& p, int top) {
  std::string out = fmt::format("joule energy tool{}: {:.3f} s, {:.3f} J ({}), sampled at {:g} Hz; {}\n",
                                p.rank >= 0 ? fmt::format(" (rank {})", p.rank) : "", p.seconds, p.energy_j,
                                energy_label(h), p.sample_rate_hz, h.energy_regions);
  out += fmt::format("  {:<9} {:<44} {:>9} {:>10} {:>6} {:>11} {:>6} {:>8}\n", "kind", "name", "calls", "time s", "time%",
                     "energy J", "J%", "mean W");
  int shown_regions = 0, shown_kernels = 0;
  for (auto const& r : rows_of(p)) {
    int& shown = r.m >= p.regions.data() && r.m < p.regions.data() + p.regions.size() ? shown_regions : shown_kernels;
    if (top > 0 && shown >= top) continue;
    ++shown;
    auto const& m = *r.m;
    std::string const name = m.name.size() > 44 ? m.name.substr(0, 41) + "..." : m.name;
    out += fmt::format("  {:<9} {:<44} {:>9} {:>10.4f} {:>6.1f} {:>11.4f} {:>6.1f} {:>8.2f}{}\n", r.kind, name, m.calls,
                       m.seconds, share(m.seconds, p.seconds), m.energy_j, share(m.energy_j, p.energy_j), mean_watts(m),
                       m.below_resolution ? "  (below resolution)" : "");
  }
  std::size_t const hidden = p.regions.size() + p.kernels.size() - std::size_t(shown_regions + shown_kernels);
  if (hidden > 0) out += fmt::format("  ... {} more row{} in the file\n", hidden, hidden == 1 ? "" : "s");
  out += fmt::format("  outside any region: {:.4f} s, {:.4f} J ({:.1f}% of the program's energy)\n", p.outside_seconds,
                     p.outside_energy_j, share(p.outside_energy_j, p.energy_j));
  out += fmt::format("  the tool's own time: {} edges, {:.3f} ms inside them ({:.2f}% of the program's time)\n",
                     p.tool_edges, 1e3 * p.tool_seconds, share(p.tool_seconds, p.seconds));
  out += fmt::format("  (below resolution): calls shorter on average than the sensors resolve ({:.3g} s): their energy "
                     "is interpolated from the trace, aggregated by name. Regions and kernels are inclusive and "
                     "overlap, so their energies do not add up.\n",
                     p.resolution_s);
  return out;
}

std::string format_profile_csv(RunHeader const& h, ProfileRecord const& p) {
  std::string const source = csv_field(energy_label(h));
  std::string out = "kind,name,calls,seconds,energy_j,mean_w,below_resolution,source,parent\n";
  auto const line = [&](char const* kind, RegionMeasure const& m) {
    out += fmt::format("{},{},{},{:.9g},{:.9g},{:.9g},{},{},{}\n", kind, csv_field(m.name), m.calls, m.seconds,
                       m.energy_j, mean_watts(m), m.below_resolution ? 1 : 0, source, csv_field(m.parent));
  };
  line("program", RegionMeasure{"(program)", 1, p.seconds, p.energy_j, false, ""});
  line("outside", RegionMeasure{"(outside any region)", 1, p.outside_seconds, p.outside_energy_j, false, ""});
  for (auto const& r : rows_of(p)) line(r.kind, *r.m);
  return out;
}

}  // namespace joule::scheduler
