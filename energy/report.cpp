#include "energy/report.hpp"

#include "energy/detail/number_text.hpp"

#include <nlohmann/json.hpp>

#include <cmath>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <map>
#include <set>
#include <sstream>
#include <thread>

namespace joule::energy {

namespace {

using detail::number_text;

// Energy columns: one per domain (channels of one domain summed: distinct sensors, e.g. GPUs),
// then the total.
struct Columns {
  std::vector<std::string> names;
  std::vector<std::vector<std::size_t>> channels;
  std::vector<std::pair<std::string, std::string>> domain_source;  // per column
  TotalRule total;
};

Columns columns_of(std::vector<Sampler::ChannelInfo> const& ch) {
  // One column per (domain, source): two sources of one domain read the same hardware and are
  // shown side by side, never added.
  Columns c;
  std::map<std::string, int> sources_per_domain;
  {
    std::map<std::string, std::set<std::string>> seen;
    for (auto const& x : ch)
      if (x.channel.quantity != Quantity::gauge) seen[x.channel.domain].insert(x.source);
    for (auto const& [d, s] : seen) sources_per_domain[d] = int(s.size());
  }
  std::map<std::string, std::size_t> index;
  for (std::size_t i = 0; i < ch.size(); ++i) {
    if (ch[i].channel.quantity == Quantity::gauge) continue;
    auto const& d = ch[i].channel.domain;
    std::string const key = sources_per_domain[d] > 1 ? d + "/" + ch[i].source : d;
    if (!index.count(key)) {
      index[key] = c.names.size();
      c.names.push_back(key + (ch[i].channel.measured ? " (measured)" : " (estimate)"));
      c.channels.emplace_back();
      c.domain_source.emplace_back(d, ch[i].source);
    }
    c.channels[index[key]].push_back(i);
  }
  c.total = total_rule(ch);
  return c;
}

double sum(std::vector<double> const& e, std::vector<std::size_t> const& idx) {
  double s = 0;
  for (auto i : idx)
    if (i < e.size() && !std::isnan(e[i])) s += e[i];
  return s;
}

}  // namespace

std::string edges_description(RegionTimeline const& regions) {
  return regions.mode() == EdgeMode::fenced
             ? std::string("region edges fenced (exact; the device was serialised at every edge)")
             : std::string("region edges on the timeline where their work ran (") + regions.clock_name() +
                   " clock, never fenced)";
}

std::string format_energy_report(Sampler const& sampler, RegionTimeline& regions, Measurement const& run) {
  auto const c = columns_of(sampler.channels());
  auto const stats = regions.stats(/*settle=*/true);
  std::ostringstream out;
  out << "energy by region (joules; inclusive: nested and overlapping regions each count their "
         "whole span; total = "
      << c.total.description << (c.total.measured ? ", measured" : ", MODEL ESTIMATE") << ")\n"
      << edges_description(regions) << "; energy attributed from the " << number_text("%g", sampler.rate_hz())
      << " Hz power trace\n";
  char line[512];
  std::snprintf(line, sizeof line, "  %-34s %7s %10s", "region", "calls", "time s");
  out << line;
  for (auto const& n : c.names) out << " " << std::string(std::max<int>(0, 18 - int(n.size())), ' ') << n;
  out << std::string(13, ' ') << "total\n";
  bool flagged = false;
  for (auto const& [name, s] : stats) {
    std::string const label = s.below_resolution ? name + " *" : name;
    flagged = flagged || s.below_resolution;
    std::snprintf(line, sizeof line, "  %-34s %7lld %10.3f", label.c_str(), s.calls, s.seconds);
    out << line;
    for (auto const& idx : c.channels) out << number_text(" %18.2f", sum(s.energy, idx));
    out << number_text(" %17.2f", s.total_j) << "\n";
  }
  std::snprintf(line, sizeof line, "  %-34s %7d %10.3f", "(whole run)", 1, run.seconds);
  out << line;
  for (auto const& [domain, source] : c.domain_source) {
    double j = 0;
    for (auto const& d : run.domains)
      if (d.domain == domain && d.source == source) j += d.joules;
    out << number_text(" %18.2f", j);
  }
  out << number_text(" %17.2f", run.total_j) << "\n";
  if (flagged)
    out << "* below the sensors' resolution (" << number_text("%.0f", regions.resolution_s() * 1e3)
        << " ms): the region's calls are shorter on average, so its energy is interpolated from the trace, "
           "not resolved\n";
  unsigned const cores = std::max(1u, std::thread::hardware_concurrency());
  double const hooks = regions.hook_seconds();
  out << "measurement overhead: region hooks " << number_text("%.3f", hooks) << " s over " << regions.hook_calls()
      << " region edges (" << regions.library_regions() << " of them library regions, skipped; "
      << number_text("%.2f", 100.0 * hooks / std::max(run.seconds, 1e-9)) << "% of the run's time); sampler thread "
      << number_text("%.3f", sampler.thread_cpu_seconds()) << " s of CPU at " << number_text("%g", sampler.rate_hz()) << " Hz ("
      << number_text("%.2f", 100.0 * sampler.thread_cpu_seconds() / std::max(run.seconds * cores, 1e-9)) << "% of "
      << cores << " cores)\n";
  for (auto const& n : sampler.notes()) out << "note: " << n << "\n";
  return out.str();
}

std::string RankEnergy::to_json() const {
  nlohmann::json j;
  j["rank"] = rank;
  j["total_description"] = total_description;
  j["measured"] = measured;
  j["run_seconds"] = run_seconds;
  j["run_energy_j"] = run_energy_j;
  j["hook_seconds"] = hook_seconds;
  j["sampler_cpu_seconds"] = sampler_cpu_seconds;
  j["notes"] = notes;
  j["edges"] = edges;
  for (auto const& [name, r] : regions) j["regions"][name] = {r.calls, r.seconds, r.energy_j, r.below_resolution};
  return j.dump();
}

RankEnergy RankEnergy::from_json(std::string const& text) {
  try {
    auto const j = nlohmann::json::parse(text);
    RankEnergy e;
    e.rank = j.at("rank");
    e.total_description = j.at("total_description");
    e.measured = j.at("measured");
    e.run_seconds = j.at("run_seconds");
    e.run_energy_j = j.at("run_energy_j");
    e.hook_seconds = j.at("hook_seconds");
    e.sampler_cpu_seconds = j.at("sampler_cpu_seconds");
    e.notes = j.at("notes").get<std::vector<std::string>>();
    e.edges = j.at("edges");
    if (j.contains("regions"))
      for (auto const& [name, r] : j.at("regions").items()) e.regions[name] = {r.at(0), r.at(1), r.at(2), r.at(3)};
    return e;
  } catch (nlohmann::json::exception const& x) {
    throw std::runtime_error(std::string("a rank's energy figures could not be read: ") + x.what());
  }
}

RankEnergy summarize_rank(Sampler const& sampler, RegionTimeline& regions, int rank, Measurement const& run) {
  RankEnergy e;
  e.rank = rank;
  e.total_description = run.total_description;
  e.measured = run.measured;
  e.run_seconds = run.seconds;
  e.run_energy_j = run.total_j;
  for (auto const& [name, st] : regions.stats(/*settle=*/true))
    e.regions[name] = {st.calls, st.seconds, st.total_j, st.below_resolution};
  e.hook_seconds = regions.hook_seconds();
  e.sampler_cpu_seconds = sampler.thread_cpu_seconds();
  e.notes = sampler.notes();
  e.edges = edges_description(regions);
  return e;
}

std::string format_energy_report_across_ranks(std::vector<RankEnergy> const& ranks) {
  std::ostringstream out;
  if (ranks.empty()) return "";
  std::size_t measured = 0;
  for (auto const& r : ranks) measured += r.measured;
  std::string const kind = measured == ranks.size() ? "measured"
                           : measured == 0          ? "MODEL ESTIMATE"
                                                    : "partly MODEL ESTIMATE (" + std::to_string(ranks.size() - measured) +
                                                          " of " + std::to_string(ranks.size()) + " ranks have no sensor)";
  out << "energy by region over " << ranks.size() << " ranks (joules, " << kind
      << "; time: the longest rank; energy: summed over the ranks; inclusive regions)\n"
      << ranks.front().edges << "\n";
  std::map<std::string, RankEnergy::Region> sums;
  for (auto const& r : ranks)
    for (auto const& [name, x] : r.regions) {
      auto& s = sums[name];
      s.calls += x.calls;
      s.seconds = std::max(s.seconds, x.seconds);
      s.energy_j += x.energy_j;
      s.below_resolution = s.below_resolution || x.below_resolution;
    }
  char line[256];
  std::snprintf(line, sizeof line, "  %-34s %9s %10s %14s\n", "region", "calls", "time s", "energy J");
  out << line;
  bool flagged = false;
  for (auto const& [name, s] : sums) {
    std::string const label = s.below_resolution ? name + " *" : name;
    flagged = flagged || s.below_resolution;
    std::snprintf(line, sizeof line, "  %-34s %9lld %10.3f %14.2f\n", label.c_str(), s.calls, s.seconds, s.energy_j);
    out << line;
  }
  double total = 0, longest = 0, hooks = 0;
  for (auto const& r : ranks) {
    total += r.run_energy_j;
    longest = std::max(longest, r.run_seconds);
    hooks += r.hook_seconds;
  }
  std::snprintf(line, sizeof line, "  %-34s %9d %10.3f %14.2f\n", "(whole run)", int(ranks.size()), longest, total);
  out << line;
  if (flagged) out << "* below the sensors' resolution on some rank: energy interpolated from the trace, not resolved\n";
  out << "per rank:";
  for (auto const& r : ranks)
    out << number_text(" %.2f J", r.run_energy_j) << " (rank " << r.rank << ", " << (r.measured ? "measured" : "model")
        << ")";
  out << "\nmeasurement overhead: region hooks " << number_text("%.3f", hooks) << " s summed over the ranks\n";
  std::set<std::string> notes;
  for (auto const& r : ranks)
    for (auto const& n : r.notes) notes.insert(n);
  for (auto const& n : notes) out << "note: " << n << "\n";
  return out.str();
}

}  // namespace joule::energy
