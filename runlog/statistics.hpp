#pragma once
// The few statistics a trial needs: the median of its measured steps (robust to a slow first
// step or a stray interruption), their mean with a 95% confidence interval (Student t), and
// the interval's half-width relative to the mean, which decides whether to measure again.
// A non-finite value among the inputs makes the result NaN rather than being skipped: a step
// without a reading is the runner's to judge, not something to average over silently.
#include <limits>
#include <vector>

namespace joule::scheduler {

// "No value" throughout the scheduler (a figure not measured, a statistic of no data).
inline constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

double median(std::vector<double> values);  // NaN when empty; mean of the middle two when even
double mean(std::vector<double> const& values);  // NaN when empty
double sample_stddev(std::vector<double> const& values);  // n − 1 denominator; NaN when n < 2

// The 97.5% quantile of Student's t with `df` degrees of freedom (the two-sided 95% factor):
// a table for df 1..30 and the normal 1.96 beyond. df < 1 throws std::invalid_argument.
double t_quantile_975(int df);

// mean ± t(n−1)·s/√n.
struct ConfidenceInterval {
  double centre = 0;
  double half_width = 0;
  double low() const { return centre - half_width; }
  double high() const { return centre + half_width; }
};
// NaN half-width when n < 2 (one sample says nothing about spread).
ConfidenceInterval mean_ci95(std::vector<double> const& values);

// half_width / |mean|: 0.02 means the mean is known to ±2%. NaN when n < 2 or the mean is 0.
double relative_ci_half_width(std::vector<double> const& values);

// Racing: `value` ± its relative interval lies entirely above `best` ± its own (lower is better).
// False when either is NaN (nothing known says so).
bool clearly_worse(double value, double ci_relative, double best, double best_ci_relative);

}  // namespace joule::scheduler
