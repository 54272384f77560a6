#pragma once
// What the scheduler minimises. Every objective compares configurations at the same global
// batch, from the energy per optimizer step E (J) and the time per step T (s); lower is better.
//   edp                    E·T (the default: neither energy nor time may be bought cheaply)
//   ed2p                   E·T² (leans towards speed)
//   weighted               η·E + (1−η)·P_max·T (Zeus' form; η = 1 is least energy, η = 0 least
//                          time). P_max in watts: when not given (0), the largest average power
//                          E/T among the ok trials being compared stands in, so that the time
//                          term is in joules on the same scale as E.
//   energy_under_slowdown  least E among configurations at most X slower than the fastest ok one
//                          (X = 0.10: at most 10% slower)
// Also the Pareto front of time against energy, which a report shows whatever the objective.
#include "runlog/trial.hpp"

#include <string>
#include <vector>

namespace joule::scheduler {

struct Objective {
  enum class Kind { edp, ed2p, weighted, energy_under_slowdown };
  Kind kind = Kind::edp;
  double eta = 0.5;           // weighted: weight of energy against time, in [0, 1]
  double p_max_w = 0;         // weighted: watts converting time into joules; 0: see above
  double max_slowdown = 0.10; // energy_under_slowdown: allowed slowdown, as a fraction

  // The spec parse() reads back: "edp", "weighted:0.3", "energy_under_slowdown:0.05".
  // (p_max_w is not part of it; it is set on its own.)
  std::string name() const;
  // "edp", "ed2p", "weighted", "weighted:ETA" (0 <= ETA <= 1), "energy_under_slowdown",
  // "energy_under_slowdown:X" (0 <= X <= 1, a fraction: 0.05 is 5%). Anything else throws
  // std::invalid_argument naming the allowed forms.
  static Objective parse(std::string const& spec);
};

// True for a trial the objectives may compare: status ok, E and T finite, T > 0 and E >= 0.
bool comparable(TrialRecord const& trial);

// The parts of an objective that depend on the set of trials compared: the P_max that
// `weighted` uses (the objective's own when set, else the largest E/T among the comparable
// trials) and the fastest comparable time, which `energy_under_slowdown` measures slowdown
// against. NaN where there are no comparable trials.
struct ObjectiveContext {
  double p_max_w = kNaN;
  double fastest_s = kNaN;
};
ObjectiveContext objective_context(std::vector<TrialRecord> const& trials, Objective const& objective);

// The objective of one trial on its own, e.g. for TrialRecord::objective. p_max_w is the P_max
// `weighted` uses; when it is not positive the trial's own average power E/T stands in (the rule
// above, for a set of one trial). For energy_under_slowdown the value is E: the slowdown bound
// is a property of the set, which select_best applies.
double objective_value(Objective const& objective, double energy_j, double time_s, double p_max_w);

// A trial's objective judged within a set (its context): objective_value with the set's P_max;
// for energy_under_slowdown, E when the trial is at most X slower than the set's fastest and
// +inf when slower still. NaN when the trial is not comparable.
double objective_in_context(TrialRecord const& trial, Objective const& objective,
                            ObjectiveContext const& context);

// Index into `trials` of the best comparable trial, or -1 if there is none. Ties on the
// objective go to the faster trial, then to the earlier one in `trials`. Trials that are not
// ok, or whose E or T is not finite, are ignored. A trial counts as "at most X slower" when
// T <= fastest·(1 + X), with a 1e-9 relative allowance for rounding.
int select_best(std::vector<TrialRecord> const& trials, Objective const& objective);

// The best among the trials at the indices `among`, judged in the context (P_max, fastest time)
// of all of `trials`: coordinate descent compares the points of one line against everything
// measured so far. If none of `among` is within the slowdown bound of energy_under_slowdown,
// the fastest of them is chosen (it is the one closest to meeting it). Ties go to the faster
// trial, then to the one earlier in `among`.
int select_best(std::vector<TrialRecord> const& trials, std::vector<int> const& among,
                Objective const& objective);

// The comparable trials not dominated in (T, E), both minimised, sorted by T (then E, then
// index). A trial is dominated when another is no slower and uses no more energy, and is better
// in at least one of the two; so of two trials with equal T the one with more energy is not on
// the front, while trials with identical (T, E) (duplicates) are all on it, neither dominating
// the other.
std::vector<int> pareto_front(std::vector<TrialRecord> const& trials);

}  // namespace joule::scheduler
