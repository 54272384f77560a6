#include "scheduler/objective.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <tuple>

namespace joule::scheduler {

namespace {

char const* const kAllowedObjectives =
    "allowed: edp, ed2p, weighted, weighted:ETA with 0 <= ETA <= 1, energy_under_slowdown, "
    "energy_under_slowdown:X with 0 <= X <= 1 the allowed slowdown as a fraction (0.05 = 5%)";

[[noreturn]] void reject_objective(std::string const& spec, std::string const& why = "") {
  std::string message = (why.empty() ? "unknown objective '" : "invalid objective '") + spec + "'";
  if (!why.empty()) message += " (" + why + ")";
  throw std::invalid_argument(message + "; " + kAllowedObjectives);
}

// The number after "name:", all of it, finite and within [0, 1].
double parse_fraction(std::string const& spec, std::string const& text) {
  double value = kNaN;
  std::size_t used = 0;
  try {
    value = std::stod(text, &used);
  } catch (std::exception const&) {
    reject_objective(spec, "'" + text + "' is not a number");
  }
  if (used != text.size() || !std::isfinite(value))
    reject_objective(spec, "'" + text + "' is not a number");
  if (value < 0 || value > 1) reject_objective(spec, "'" + text + "' is outside [0, 1]");
  return value;
}

// How a trial ranks within a context, smallest first: (group, value, T). Scalar objectives have
// one group; energy_under_slowdown puts the trials within the slowdown bound first, ranked by
// energy, and the rest after them, ranked by time.
using Rank = std::tuple<int, double, double>;

bool within_slowdown(double time_s, double fastest_s, double max_slowdown) {
  return time_s <= fastest_s * (1 + max_slowdown) * (1 + 1e-9);
}

Rank rank(TrialRecord const& trial, Objective const& objective, ObjectiveContext const& context) {
  double const value = objective_in_context(trial, objective, context), t = trial.time_per_step_s;
  bool const too_slow = objective.kind == Objective::Kind::energy_under_slowdown && std::isinf(value);
  if (too_slow) return {1, t, t};
  return {0, value, t};
}

}  // namespace

std::string Objective::name() const {
  switch (kind) {
    case Kind::edp: return "edp";
    case Kind::ed2p: return "ed2p";
    case Kind::weighted: return fmt::format("weighted:{}", eta);
    case Kind::energy_under_slowdown: return fmt::format("energy_under_slowdown:{}", max_slowdown);
  }
  return "?";
}

Objective Objective::parse(std::string const& spec) {
  auto const colon = spec.find(':');
  std::string const head = spec.substr(0, colon);
  bool const has_argument = colon != std::string::npos;
  std::string const argument = has_argument ? spec.substr(colon + 1) : "";

  Objective objective;
  if (head == "edp" || head == "ed2p") {
    if (has_argument) reject_objective(spec, head + " takes no parameter");
    objective.kind = head == "edp" ? Kind::edp : Kind::ed2p;
  } else if (head == "weighted") {
    objective.kind = Kind::weighted;
    if (has_argument) objective.eta = parse_fraction(spec, argument);
  } else if (head == "energy_under_slowdown") {
    objective.kind = Kind::energy_under_slowdown;
    if (has_argument) objective.max_slowdown = parse_fraction(spec, argument);
  } else {
    reject_objective(spec);
  }
  return objective;
}

bool comparable(TrialRecord const& trial) {
  double const e = trial.energy_per_step_j, t = trial.time_per_step_s;
  return trial.ok() && std::isfinite(e) && std::isfinite(t) && t > 0 && e >= 0;
}

ObjectiveContext objective_context(std::vector<TrialRecord> const& trials, Objective const& objective) {
  ObjectiveContext context;
  double largest_power = kNaN;
  for (auto const& trial : trials) {
    if (!comparable(trial)) continue;
    double const t = trial.time_per_step_s, power = trial.energy_per_step_j / t;
    if (!(context.fastest_s <= t)) context.fastest_s = t;  // NaN compares false: first one
    if (!(largest_power >= power)) largest_power = power;
  }
  context.p_max_w = objective.p_max_w > 0 ? objective.p_max_w : largest_power;
  return context;
}

double objective_value(Objective const& objective, double energy_j, double time_s, double p_max_w) {
  switch (objective.kind) {
    case Objective::Kind::edp: return energy_j * time_s;
    case Objective::Kind::ed2p: return energy_j * time_s * time_s;
    case Objective::Kind::weighted: {
      double p_max = p_max_w > 0 ? p_max_w : objective.p_max_w;
      if (!(p_max > 0)) p_max = energy_j / time_s;
      return objective.eta * energy_j + (1 - objective.eta) * p_max * time_s;
    }
    case Objective::Kind::energy_under_slowdown: return energy_j;
  }
  return kNaN;
}

double objective_in_context(TrialRecord const& trial, Objective const& objective,
                            ObjectiveContext const& context) {
  if (!comparable(trial)) return kNaN;
  double const e = trial.energy_per_step_j, t = trial.time_per_step_s;
  if (objective.kind == Objective::Kind::energy_under_slowdown &&
      !within_slowdown(t, context.fastest_s, objective.max_slowdown))
    return std::numeric_limits<double>::infinity();
  return objective_value(objective, e, t, context.p_max_w);
}

int select_best(std::vector<TrialRecord> const& trials, Objective const& objective) {
  std::vector<int> all(trials.size());
  for (std::size_t i = 0; i < trials.size(); ++i) all[i] = int(i);
  return select_best(trials, all, objective);
}

int select_best(std::vector<TrialRecord> const& trials, std::vector<int> const& among,
                Objective const& objective) {
  ObjectiveContext const context = objective_context(trials, objective);
  int best = -1;
  Rank best_rank;
  for (int i : among) {
    if (i < 0 || std::size_t(i) >= trials.size())
      throw std::out_of_range(fmt::format("select_best: index {} outside the {} trials", i, trials.size()));
    if (!comparable(trials[i])) continue;
    Rank const r = rank(trials[i], objective, context);
    if (best < 0 || r < best_rank) best = i, best_rank = r;  // strict: ties keep the earlier
  }
  return best;
}

std::vector<int> pareto_front(std::vector<TrialRecord> const& trials) {
  std::vector<int> order;
  for (std::size_t i = 0; i < trials.size(); ++i)
    if (comparable(trials[i])) order.push_back(int(i));
  auto const key = [&](int i) {
    return std::make_tuple(trials[i].time_per_step_s, trials[i].energy_per_step_j, i);
  };
  std::sort(order.begin(), order.end(), [&](int a, int b) { return key(a) < key(b); });

  // Sweep by increasing T: a point is on the front when its E is below that of every point
  // before it, other than its own duplicates (identical T and E), which come just before it.
  std::vector<int> front;
  double least_energy_before = std::numeric_limits<double>::infinity();
  std::size_t group_start = 0;
  while (group_start < order.size()) {
    double const t = trials[order[group_start]].time_per_step_s;
    double const e = trials[order[group_start]].energy_per_step_j;
    std::size_t group_end = group_start;
    while (group_end < order.size() && trials[order[group_end]].time_per_step_s == t &&
           trials[order[group_end]].energy_per_step_j == e)
      ++group_end;
    if (e < least_energy_before)
      front.insert(front.end(), order.begin() + group_start, order.begin() + group_end);
    least_energy_before = std::min(least_energy_before, e);
    group_start = group_end;
  }
  return front;
}

}  // namespace joule::scheduler
