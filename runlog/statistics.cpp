#include "runlog/statistics.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <stdexcept>
#include <string>

namespace joule::scheduler {

namespace {

bool all_finite(std::vector<double> const& values) {
  return std::all_of(values.begin(), values.end(), [](double v) { return std::isfinite(v); });
}
}  // namespace

double median(std::vector<double> values) {
  if (values.empty() || !all_finite(values)) return kNaN;
  std::sort(values.begin(), values.end());
  std::size_t const n = values.size();
  return n % 2 == 1 ? values[n / 2] : 0.5 * (values[n / 2 - 1] + values[n / 2]);
}

double mean(std::vector<double> const& values) {
  if (values.empty() || !all_finite(values)) return kNaN;
  return std::accumulate(values.begin(), values.end(), 0.0) / double(values.size());
}

double sample_stddev(std::vector<double> const& values) {
  if (values.size() < 2) return kNaN;
  double const m = mean(values);
  double squares = 0;
  for (double v : values) squares += (v - m) * (v - m);
  return std::sqrt(squares / double(values.size() - 1));  // NaN propagates through m
}

double t_quantile_975(int df) {
  static constexpr double kTable[30] = {
      12.7062, 4.3027, 3.1824, 2.7764, 2.5706, 2.4469, 2.3646, 2.3060, 2.2622, 2.2281,
      2.2010,  2.1788, 2.1604, 2.1448, 2.1314, 2.1199, 2.1098, 2.1009, 2.0930, 2.0860,
      2.0796,  2.0739, 2.0687, 2.0639, 2.0595, 2.0555, 2.0518, 2.0484, 2.0452, 2.0423};
  if (df < 1) throw std::invalid_argument("t_quantile_975: degrees of freedom must be >= 1, got " +
                                          std::to_string(df));
  // Beyond 30 the normal quantile: slightly narrow (t(31) is 2.04) but within the precision
  // a decision to measure again needs.
  return df <= 30 ? kTable[df - 1] : 1.96;
}

ConfidenceInterval mean_ci95(std::vector<double> const& values) {
  ConfidenceInterval ci;
  ci.centre = mean(values);
  if (values.size() < 2) {
    ci.half_width = kNaN;
    return ci;
  }
  double const n = double(values.size());
  ci.half_width = t_quantile_975(int(values.size()) - 1) * sample_stddev(values) / std::sqrt(n);
  return ci;
}

double relative_ci_half_width(std::vector<double> const& values) {
  ConfidenceInterval const ci = mean_ci95(values);
  if (ci.centre == 0) return kNaN;
  return ci.half_width / std::abs(ci.centre);
}

bool clearly_worse(double value, double ci_relative, double best, double best_ci_relative) {
  return value * (1 - ci_relative) > best * (1 + best_ci_relative);  // NaN compares false
}

}  // namespace joule::scheduler
