#include "runlog/profile.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <vector>

namespace joule::scheduler {

namespace {
struct Row {
  char const* kind;
  RegionMeasure const* m;
  int depth = 0;     // regions per call path: how deep it was opened (0: the top level)
  std::string path;  // regions per call path: the names from the top, joined by '/'; else the name
};

double share(double part, double whole) { return whole > 0 ? 100.0 * part / whole : 0.0; }
double mean_watts(RegionMeasure const& m) { return m.seconds > 0 ? m.energy_j / m.seconds : 0.0; }

// The regions per call path in tree order: each path under the one it was opened in, siblings
// by energy (largest first). `keep`: the rows to show (empty: all).
std::vector<Row> path_rows(std::vector<RegionMeasure> const& paths, std::vector<char> const& keep) {
  std::vector<std::vector<int>> children(paths.size() + 1);  // [0]: the top level
  for (std::size_t i = 0; i < paths.size(); ++i)
    if (keep.empty() || keep[i]) children[std::size_t(paths[i].parent_row + 1)].push_back(int(i));
  std::vector<Row> out;
  std::vector<std::string> path(paths.size());
  auto walk = [&](auto const& self, int parent, int depth) -> void {
    auto kids = children[std::size_t(parent + 1)];
    std::stable_sort(kids.begin(), kids.end(), [&](int a, int b) { return paths[std::size_t(a)].energy_j > paths[std::size_t(b)].energy_j; });
    for (int k : kids) {
      auto const& m = paths[std::size_t(k)];
      path[std::size_t(k)] = parent < 0 ? m.name : path[std::size_t(parent)] + "/" + m.name;
      out.push_back({"region", &m, depth, path[std::size_t(k)]});
      self(self, k, depth + 1);
    }
  };
  walk(walk, -1, 0);
  return out;
}

// The rows to show of a path table: the `top` largest by energy (0: all), with the paths they were
// opened in.
std::vector<char> largest_paths(std::vector<RegionMeasure> const& paths, int top) {
  std::vector<char> keep(paths.size(), top > 0 ? 0 : 1);
  if (top <= 0) return keep;
  std::vector<int> order(paths.size());
  for (std::size_t i = 0; i < order.size(); ++i) order[i] = int(i);
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return paths[std::size_t(a)].energy_j > paths[std::size_t(b)].energy_j; });
  for (std::size_t k = 0; k < order.size() && k < std::size_t(top); ++k)
    for (int r = order[k]; r >= 0 && !keep[std::size_t(r)]; r = paths[std::size_t(r)].parent_row) keep[std::size_t(r)] = 1;
  return keep;
}

// Regions first (per call path in tree order where the log has paths, else by name), then the
// rest, each by energy (largest first; ties keep the record's order).
std::vector<Row> rows_of(ProfileRecord const& p, std::vector<char> const& keep = {}) {
  std::vector<Row> regions, kernels;
  auto const by_energy = [](Row const& a, Row const& b) { return a.m->energy_j > b.m->energy_j; };
  if (!p.region_paths.empty()) {
    regions = path_rows(p.region_paths, keep);
  } else {
    for (auto const& r : p.regions) regions.push_back({"region", &r, 0, r.name});
    std::stable_sort(regions.begin(), regions.end(), by_energy);
  }
  for (auto const& k : p.kernels) kernels.push_back({operation_kind_of(k.name), &k, 0, k.name});
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
  // Regions per call path: the `top` largest with the paths they were opened in, indented under
  // them; by name (older logs) and kernels: the `top` largest.
  auto const& region_table = p.region_paths.empty() ? p.regions : p.region_paths;
  auto const keep = p.region_paths.empty() ? std::vector<char>{} : largest_paths(p.region_paths, top);
  int shown_regions = 0, shown_kernels = 0;
  for (auto const& r : rows_of(p, keep)) {
    bool const region = r.m >= region_table.data() && r.m < region_table.data() + region_table.size();
    int& shown = region ? shown_regions : shown_kernels;
    if (top > 0 && shown >= top && !(region && !p.region_paths.empty())) continue;
    ++shown;
    auto const& m = *r.m;
    std::string const indented = std::string(2 * std::size_t(r.depth), ' ') + m.name;
    std::string const name = indented.size() > 44 ? indented.substr(0, 41) + "..." : indented;
    out += fmt::format("  {:<9} {:<44} {:>9} {:>10.4f} {:>6.1f} {:>11.4f} {:>6.1f} {:>8.2f}{}\n", r.kind, name, m.calls,
                       m.seconds, share(m.seconds, p.seconds), m.energy_j, share(m.energy_j, p.energy_j), mean_watts(m),
                       m.below_resolution ? "  (below resolution)" : "");
  }
  std::size_t const hidden = region_table.size() + p.kernels.size() - std::size_t(shown_regions + shown_kernels);
  if (hidden > 0) out += fmt::format("  ... {} more row{} in the file\n", hidden, hidden == 1 ? "" : "s");
  out += fmt::format("  outside any region: {:.4f} s, {:.4f} J ({:.1f}% of the program's energy)\n", p.outside_seconds,
                     p.outside_energy_j, share(p.outside_energy_j, p.energy_j));
  out += fmt::format("  the tool's own time: {} edges, {:.3f} ms inside them ({:.2f}% of the program's time)\n",
                     p.tool_edges, 1e3 * p.tool_seconds, share(p.tool_seconds, p.seconds));
  out += fmt::format("  (below resolution): calls shorter on average than the sensors resolve ({:.3g} s): their energy "
                     "is interpolated from the trace, aggregated {}. Regions and kernels are inclusive and "
                     "overlap, so their energies do not add up{}.\n",
                     p.resolution_s, p.region_paths.empty() ? "by name" : "per call path",
                     p.region_paths.empty() ? "" : "; a region is indented under the region it was opened in, "
                                                   "once for each place it was opened in");
  return out;
}

std::string format_profile_csv(RunHeader const& h, ProfileRecord const& p) {
  std::string const source = csv_field(energy_label(h));
  std::string out = "kind,name,calls,seconds,energy_j,mean_w,below_resolution,source,parent,path\n";
  auto const line = [&](char const* kind, RegionMeasure const& m, std::string const& path) {
    out += fmt::format("{},{},{},{:.9g},{:.9g},{:.9g},{},{},{},{}\n", kind, csv_field(m.name), m.calls, m.seconds,
                       m.energy_j, mean_watts(m), m.below_resolution ? 1 : 0, source, csv_field(m.parent),
                       csv_field(path));
  };
  line("program", RegionMeasure{"(program)", 1, p.seconds, p.energy_j, false, ""}, "");
  line("outside", RegionMeasure{"(outside any region)", 1, p.outside_seconds, p.outside_energy_j, false, ""}, "");
  for (auto const& r : rows_of(p)) line(r.kind, *r.m, r.path);
  return out;
}

}  // namespace joule::scheduler
