#include "energy/monitor.hpp"

#include <algorithm>
#include <cmath>
#include <stdexcept>

namespace joule::energy {

Monitor::Monitor(Sampler& sampler) : sampler_(sampler), total_(total_rule(sampler.channels())) {
  for (auto c : total_.channels) resolution_s_ = std::max(resolution_s_, sampler.resolution_s(c));
}

void Monitor::begin(std::string const& name) {
  if (!open_.emplace(name, sampler_.now()).second)
    throw std::logic_error("joule::energy::Monitor: window '" + name + "' is already open");
}

Window Monitor::close(std::string const& name) {
  double const t1 = sampler_.now();
  auto const it = open_.find(name);
  if (it == open_.end()) throw std::logic_error("joule::energy::Monitor: no open window '" + name + "'");
  Window w{name, it->second, t1};
  open_.erase(it);
  return w;
}

Measurement Monitor::measure(Window const& w, bool with_trace) {
  sampler_.wait_until_covered(w.t1);
  auto const& ch = sampler_.channels();
  Measurement m;
  m.name = w.name;
  m.t0 = w.t0;
  m.t1 = w.t1;
  m.seconds = w.t1 - w.t0;
  m.total_description = total_.description;
  m.measured = total_.measured;
  m.below_resolution = m.seconds < resolution_s_;
  std::vector<double> joules(ch.size(), 0.0);
  for (std::size_t c = 0; c < ch.size(); ++c) {
    if (ch[c].channel.quantity == Quantity::gauge) continue;
    joules[c] = sampler_.energy_between(c, w.t0, w.t1);
    auto const same = [&](DomainEnergy const& d) { return d.domain == ch[c].channel.domain && d.source == ch[c].source; };
    auto it = std::find_if(m.domains.begin(), m.domains.end(), same);
    if (it == m.domains.end()) it = m.domains.insert(m.domains.end(), {ch[c].channel.domain, ch[c].source, true, 0.0});
    it->measured = it->measured && ch[c].channel.measured;
    it->joules += joules[c];
  }
  m.total_j = 0;
  for (auto c : total_.channels) m.total_j += joules[c];
  if (with_trace) {
    std::vector<std::size_t> columns;
    for (std::size_t c = 0; c < ch.size(); ++c) {
      if (ch[c].channel.quantity == Quantity::gauge) continue;
      columns.push_back(c);
      m.trace_columns.push_back(ch[c].channel.domain + " (" + ch[c].source + (ch[c].channel.measured ? ")" : ", model)"));
    }
    for (auto const& p : sampler_.trace(w.t0, w.t1)) {
      m.trace_time_s.push_back(p.t - w.t0);
      for (auto c : columns) m.trace_watts.push_back(p.values[c]);
    }
  }
  return m;
}

}  // namespace joule::energy
