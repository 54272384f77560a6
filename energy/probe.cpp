// `joule energy probe`'s text: the sources found, what each reads now, and the total used.
#include "energy/probe.hpp"

#include "energy/detail/number_text.hpp"

#include <chrono>
#include <cmath>
#include <cstdio>
#include <sstream>
#include <thread>

namespace joule::energy {

using detail::number_text;

std::string format_probe(Sampler& sampler, std::vector<SourceAttempt> const& attempts) {
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
          << (std::isnan(v) ? std::string("n/a") : number_text("%.1f", v) + unit)
          << (ch[i].channel.counted_elsewhere.empty() ? "" : "  (not in this process's total: " +
                                                                 ch[i].channel.counted_elsewhere + ")")
          << "\n";
    }
  }
  for (auto const& n : sampler.notes()) out << "note: " << n << "\n";
  if (!attempts.empty()) out << "looked for:\n";
  for (auto const& a : attempts) out << "  " << a.source << ": " << a.looked_for << " — " << a.outcome << "\n";
  auto const rule = total_rule(ch);
  out << "total used by the scheduler: " << rule.description << "\n";
  if (!rule.measured)
    out << "Only the CPU-time model is available here: energy figures on this machine are estimates, "
           "labelled 'model', not measurements.\n";
  return out.str();
}

}  // namespace joule::energy
