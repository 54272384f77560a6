#include "energy/report.hpp"

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

std::string fmt(char const* format, double a) {
  char buf[64];
  std::snprintf(buf, sizeof buf, format, a);
  return buf;
}

// Energy columns: one per domain (channels of one domain summed: distinct sensors, e.g. GPUs),
// then the total.
struct Columns {
  std::vector<std::string> names;
  std::vector<std::vector<std::size_t>> channels;
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

std::string format_probe(Sampler& sampler) {
  std::ostringstream out;
  auto const& ch = sampler.channels();
  sampler.snapshot();
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  sampler.snapshot();
  auto const trace = sampler.trace();
  std::string current;
  for (auto const* s : sampler.sources()) {
    out << "source " << s->name() << (s->name() == "model" ? "  (a model, not a measurement)" : "") << "\n";
    for (std::size_t i = 0; i < ch.size(); ++i) {
      if (ch[i].source != s->name()) continue;
      double const v = trace.empty() ? std::nan("") : trace.back().values[i];
      char const* unit = ch[i].channel.quantity == Quantity::gauge ? "" : " W";
      out << "  " << ch[i].channel.domain << ": " << ch[i].channel.sensor << "  now "
          << (std::isnan(v) ? std::string("n/a") : fmt("%.1f", v) + unit) << "\n";
    }
  }
  for (auto const& n : sampler.notes()) out << "note: " << n << "\n";
  auto const rule = total_rule(ch);
  out << "total used by the scheduler: " << rule.description << "\n";
  if (!rule.measured)
    out << "Only the CPU-time model is available here: energy figures on this machine are estimates, "
           "labelled 'model', not measurements.\n";
  return out.str();
}

std::string format_energy_report(Sampler const& sampler, RegionRecorder const& regions,
                                 double run_seconds, std::vector<double> const& run_energy) {
  auto const c = columns_of(sampler.channels());
  std::ostringstream out;
  out << "energy by region (joules; inclusive: nested and overlapping regions each count their "
         "whole span; total = "
      << c.total.description << (c.total.measured ? ", measured" : ", MODEL ESTIMATE") << ")\n";
  char line[512];
  std::snprintf(line, sizeof line, "  %-34s %7s %10s", "region", "calls", "time s");
  out << line;
  for (auto const& n : c.names) out << " " << std::string(std::max<int>(0, 18 - int(n.size())), ' ') << n;
  out << std::string(13, ' ') << "total\n";
  auto row = [&](std::string const& name, long long calls, double seconds, std::vector<double> const& e) {
    std::snprintf(line, sizeof line, "  %-34s %7lld %10.3f", name.c_str(), calls, seconds);
    out << line;
    for (auto const& idx : c.channels) out << fmt(" %18.2f", sum(e, idx));
    out << fmt(" %17.2f", sum(e, c.total.channels)) << "\n";
  };
  for (auto const& [name, s] : regions.stats()) row(name, s.calls, s.seconds, s.energy);
  row("(whole run)", 1, run_seconds, run_energy);
  unsigned const cores = std::max(1u, std::thread::hardware_concurrency());
  double const hooks = regions.hook_seconds();
  out << "measurement overhead: region hooks " << fmt("%.3f", hooks) << " s over "
      << regions.hook_calls() << " region edges (" << fmt("%.2f", 100.0 * hooks / std::max(run_seconds, 1e-9))
      << "% of the run's time); sampler thread " << fmt("%.3f", sampler.thread_cpu_seconds())
      << " s of CPU at " << fmt("%g", sampler.rate_hz()) << " Hz ("
      << fmt("%.2f", 100.0 * sampler.thread_cpu_seconds() / std::max(run_seconds * cores, 1e-9))
      << "% of " << cores << " cores)\n";
  for (auto const& n : sampler.notes()) out << "note: " << n << "\n";
  return out.str();
}

}  // namespace joule::energy
