#include "scheduler/strategy.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <numeric>
#include <stdexcept>
#include <tuple>

namespace joule::scheduler {

namespace {

// The knobs coordinate descent varies, in the order it takes them: the rows of the knob table
// (knobs.hpp). Every knob is a number, so one double carries any knob's value (the int knobs
// exactly).
using Dimension = std::size_t;
std::vector<Dimension> const& dimensions() {
  static std::vector<Dimension> const all = [] {
    std::vector<Dimension> d(knob_table().size());
    std::iota(d.begin(), d.end(), Dimension(0));
    return d;
  }();
  return all;
}

double value_of(Knobs const& k, Dimension d) { return knob_table()[d].get(k); }

Knobs with_value(Knobs k, Dimension d, double value) {
  knob_table()[d].set(k, value);
  return k;
}

using KnobsKey = std::vector<double>;
KnobsKey key_of(Knobs const& k) {
  KnobsKey key;
  for (Dimension d : dimensions()) key.push_back(value_of(k, d));
  return key;
}

// The candidates (without duplicates), what has been measured so far, and the one place that
// measures: each candidate is handed to `evaluate` at most once.
class Search {
 public:
  Search(std::vector<Knobs> const& candidates, Evaluate const& evaluate) : evaluate_(evaluate) {
    for (auto const& k : candidates)
      if (index_.emplace(key_of(k), int(candidates_.size())).second) candidates_.push_back(k);
    trial_of_.assign(candidates_.size(), -1);
    for (Dimension d : dimensions()) {
      std::vector<double> values;
      for (auto const& k : candidates_) values.push_back(value_of(k, d));
      std::sort(values.begin(), values.end());
      values.erase(std::unique(values.begin(), values.end()), values.end());
      values_.push_back(values);
    }
  }

  int size() const { return int(candidates_.size()); }
  Knobs const& knobs(int candidate) const { return candidates_[candidate]; }
  std::vector<TrialRecord> const& trials() const { return trials_; }
  std::vector<TrialRecord> take_trials() { return std::move(trials_); }
  bool measured(int candidate) const { return trial_of_[candidate] >= 0; }
  int candidate_of(int trial) const { return candidate_of_[trial]; }

  // The candidate with these knobs, or -1.
  int find(Knobs const& k) const {
    auto const it = index_.find(key_of(k));
    return it == index_.end() ? -1 : it->second;
  }

  // The trial of `candidate`, measuring it first if it has not been.
  int measure(int candidate) {
    if (trial_of_[candidate] < 0) {
      TrialRecord record = evaluate_(candidates_[candidate]);
      record.index = int(trials_.size());
      trial_of_[candidate] = record.index;
      candidate_of_.push_back(candidate);
      trials_.push_back(std::move(record));
    }
    return trial_of_[candidate];
  }

  bool usable(int candidate) const { return measured(candidate) && comparable(trials_[trial_of_[candidate]]); }

  // The values next to `here`'s in dimension d (next lower, next higher) among those the
  // candidates take; none, one or two.
  std::vector<double> neighbouring_values(Knobs const& here, Dimension d) const {
    auto const& values = values_[d];
    double const own = value_of(here, d);
    auto const at = std::lower_bound(values.begin(), values.end(), own);
    auto const after = at != values.end() && *at == own ? at + 1 : at;
    std::vector<double> out;
    if (at != values.begin()) out.push_back(*(at - 1));
    if (after != values.end()) out.push_back(*after);
    return out;
  }

 private:
  Evaluate const& evaluate_;
  std::vector<Knobs> candidates_;
  std::map<KnobsKey, int> index_;
  std::vector<std::vector<double>> values_;  // per dimension: the distinct values, sorted
  std::vector<int> trial_of_;      // per candidate: index into trials_, or -1
  std::vector<int> candidate_of_;  // per trial
  std::vector<TrialRecord> trials_;
};

// Measures `candidates` (those not measured yet) and returns the best of them, judged against
// everything measured so far, or -1 if none is usable. Ties go to the earlier in the list, so a
// list that starts with the current point keeps it on a tie and the descent never cycles.
int measure_and_pick(Search& search, std::vector<int> const& candidates, Objective const& objective) {
  std::vector<int> trials;
  for (int c : candidates) trials.push_back(search.measure(c));
  int const best = select_best(search.trials(), trials, objective);
  return best < 0 ? -1 : search.candidate_of(best);
}

// The candidates that agree with `through` in every knob but d, in the space's order. `through`
// need not be a candidate itself.
std::vector<int> line(Search const& search, Knobs const& through, Dimension d) {
  std::vector<int> out;
  for (int i = 0; i < search.size(); ++i)
    if (with_value(search.knobs(i), d, value_of(through, d)) == through) out.push_back(i);
  return out;
}

// The candidates one step away from `here` in two knobs at once.
std::vector<int> diagonal_neighbours(Search const& search, Knobs const& here) {
  std::vector<int> out;
  for (Dimension a : dimensions())
    for (Dimension b = a + 1; b < dimensions().size(); ++b)
      for (double va : search.neighbouring_values(here, a))
        for (double vb : search.neighbouring_values(here, b)) {
          int const c = search.find(with_value(with_value(here, a, va), b, vb));
          if (c >= 0) out.push_back(c);
        }
  return out;
}

int first_unmeasured(Search const& search) {
  for (int i = 0; i < search.size(); ++i)
    if (!search.measured(i)) return i;
  return -1;
}

// The descent proper: lines through the current point, one knob at a time, until a whole cycle
// makes no move; then (if asked) the diagonal neighbours, and on from the better one if there is
// one. Returns the point it ends at, or -1 if nothing measured ok.
int descend(Search& search, int start, Objective const& objective, CoordinateDescentOptions const& options) {
  int current = start;
  search.measure(current);
  for (;;) {
    bool moved = false;
    for (Dimension d : dimensions()) {
      std::vector<int> among{current};
      for (int c : line(search, search.knobs(current), d))
        if (c != current) among.push_back(c);
      if (among.size() < 2) continue;  // every candidate here shares this knob's value
      int const best = measure_and_pick(search, among, objective);
      if (best >= 0 && best != current) current = best, moved = true;
    }
    if (moved) continue;
    if (!search.usable(current)) {
      // The start failed, and so did everything on its lines: start again elsewhere.
      current = first_unmeasured(search);
      if (current < 0) return -1;
      search.measure(current);
      continue;
    }
    if (!options.diagonal_check) return current;
    std::vector<int> among{current};
    for (int c : diagonal_neighbours(search, search.knobs(current))) among.push_back(c);
    int const best = measure_and_pick(search, among, objective);
    if (best == current || best < 0) return current;
    current = best;
  }
}

// Where one step of a knob from `end` leads out of the candidates (a larger micro-batch that
// does not fit without more memory saved), the candidates on the lines through that missing
// point along every other knob: the configurations just beyond the wall. (A trial that failed
// is not taken for a wall: over the random landscapes of the tests that cost 0.5% more trials
// and bought nothing.)
std::vector<std::vector<int>> beyond_walls(Search const& search, int end) {
  Knobs const& here = search.knobs(end);
  std::vector<std::vector<int>> slices;
  for (Dimension b : dimensions())
    for (double value : search.neighbouring_values(here, b)) {
      Knobs const missing = with_value(here, b, value);
      if (search.find(missing) >= 0) continue;
      std::vector<int> slice;
      for (Dimension a : dimensions()) {
        if (a == b) continue;
        for (int c : line(search, missing, a)) slice.push_back(c);
      }
      if (!slice.empty()) slices.push_back(slice);
    }
  return slices;
}

void coordinate_descent(Search& search, int start, Objective const& objective,
                        CoordinateDescentOptions const& options) {
  if (options.fastest_first && objective.kind == Objective::Kind::energy_under_slowdown) {
    Objective least_time;  // weighted with eta 0 and 1 W: the value is T itself
    least_time.kind = Objective::Kind::weighted;
    least_time.eta = 0;
    least_time.p_max_w = 1;
    coordinate_descent(search, start, least_time, options);
    int const fastest = select_best(search.trials(), least_time);
    if (fastest >= 0) start = search.candidate_of(fastest);
  }
  int const end = descend(search, start, objective, options);
  if (end < 0 || !options.wall_restarts) return;
  std::vector<int> started{start, end};
  for (auto const& slice : beyond_walls(search, end)) {
    int const restart = measure_and_pick(search, slice, objective);
    if (restart < 0 || std::find(started.begin(), started.end(), restart) != started.end()) continue;
    started.push_back(restart);
    descend(search, restart, objective, options);
  }
}

}  // namespace

StrategyKind parse_strategy(std::string const& name) {
  if (name == "exhaustive") return StrategyKind::exhaustive;
  if (name == "coordinate_descent") return StrategyKind::coordinate_descent;
  throw std::invalid_argument("unknown search strategy '" + name +
                              "' (allowed: exhaustive, coordinate_descent)");
}

std::string to_string(StrategyKind kind) {
  switch (kind) {
    case StrategyKind::exhaustive: return "exhaustive";
    case StrategyKind::coordinate_descent: return "coordinate_descent";
  }
  return "?";
}

SearchResult run_search(StrategyKind kind, std::vector<Knobs> const& candidates, Knobs const& start,
                        Objective const& objective, Evaluate const& evaluate,
                        CoordinateDescentOptions const& options) {
  Search search(candidates, evaluate);
  if (search.size() > 0) {
    if (kind == StrategyKind::exhaustive) {
      for (int i = 0; i < search.size(); ++i) search.measure(i);
    } else {
      int const start_index = search.find(start);
      if (start_index < 0)
        throw std::invalid_argument("coordinate descent: the start configuration (" + start.describe() +
                                    ") is not among the candidates");
      coordinate_descent(search, start_index, objective, options);
    }
  }
  SearchResult result;
  result.trials = search.take_trials();
  result.best = select_best(result.trials, objective);
  result.pareto = pareto_front(result.trials);
  return result;
}

double regret(std::vector<TrialRecord> const& reference, Knobs const& found, Objective const& objective) {
  double const infinity = std::numeric_limits<double>::infinity();
  int const best = select_best(reference, objective);
  int found_index = -1;
  for (std::size_t i = 0; i < reference.size() && found_index < 0; ++i)
    if (reference[i].knobs == found && comparable(reference[i])) found_index = int(i);
  if (best < 0 || found_index < 0) return infinity;
  ObjectiveContext const context = objective_context(reference, objective);
  double const found_value = objective_in_context(reference[found_index], objective, context);
  double const best_value = objective_in_context(reference[best], objective, context);
  if (std::isinf(found_value)) return infinity;
  if (found_value == best_value) return 1;  // also when both are 0
  return found_value / best_value;
}

}  // namespace joule::scheduler
