#pragma once
// How the scheduler walks the space of candidate configurations.
//   exhaustive          measures every candidate: the reference, affordable for small spaces.
//   coordinate_descent  from a start configuration (the memory model's fastest feasible one),
//                       takes each knob in turn, measures every value of that knob with the
//                       others held, and moves to the best point of that line; cycles over the
//                       knobs until a whole cycle makes no move. Then, because one knob at a time
//                       misses what needs two (see CoordinateDescentOptions): a diagonal check,
//                       restarts beyond memory walls, and for energy_under_slowdown a first
//                       descent on time alone.
// On 200 random synthetic landscapes of 540 configurations (tests/test_scheduler.cpp) coordinate
// descent finds the exhaustive optimum in 195 to 199 of them depending on the objective, at most
// 4% off otherwise (one energy_under_slowdown:0.10 miss broke the bound instead), measuring 9-12%
// of the candidates on average and at most 24%.
//
// Limitation: away from memory walls, coordinate descent looks one knob, or two knobs one step
// each, from where it stands. An optimum reached only through worse points by any such move (a
// valley running diagonally, two recompute depths per offload step) is missed; the tests include
// such a landscape and measure the cost (regret 1.19 there).
//
// The strategy does not measure; it asks `evaluate`, which runs a trial (or replays it from a
// resumed log) and returns its record, ok or failed. No knob set is asked for twice. Failed
// trials (not ok, or E/T not finite) are kept in the result and passed over.
#include "scheduler/objective.hpp"
#include "runlog/trial.hpp"

#include <functional>
#include <string>
#include <vector>

namespace joule::scheduler {

enum class StrategyKind { exhaustive, coordinate_descent };
// "exhaustive", "coordinate_descent"; anything else throws std::invalid_argument naming them.
StrategyKind parse_strategy(std::string const& name);
std::string to_string(StrategyKind kind);

// What coordinate descent adds to the plain method; all on by default. Turned off, they show
// what they buy (the tests do). Over 200 random landscapes, edp: the plain method finds the
// optimum in 116 of them (worst regret 1.31) measuring 3.7% of the candidates on average; with
// the diagonal check in 179 (1.07) at 6.5%; with the restarts too in 197 (1.04) at 9.3%.
// energy_under_slowdown:0.10 finds it in 192 without fastest_first, 199 with (9.3% -> 12.1%).
struct CoordinateDescentOptions {
  // When the lines make no move, measure the diagonal neighbours too (one step in two knobs at
  // once: more offload with deeper recomputation to hide it) and go on from a better one.
  bool diagonal_check = true;
  // Where a step from the end point leaves the candidates (a larger micro-batch that only fits
  // with more memory saved), measure the lines through that missing point along the other knobs
  // and descend again from the best of them. Once, from the first end point.
  bool wall_restarts = true;
  // energy_under_slowdown: its bound is relative to the fastest configuration, so find that
  // first (a descent on time alone), and descend on energy from there.
  bool fastest_first = true;
};

// The runner measures (or replays from a resumed log) one configuration and returns its record.
using Evaluate = std::function<TrialRecord(Knobs const&)>;

struct SearchResult {
  std::vector<TrialRecord> trials;  // in measuring order; trials[i].index is set to i
  int best = -1;                    // select_best(trials, objective); -1 if nothing measured ok
  std::vector<int> pareto;          // pareto_front(trials)
};

// `candidates`: the feasible configurations, in the space's order (duplicates are measured
// once). `start` must be one of them (std::invalid_argument otherwise); coordinate descent
// starts there, exhaustive ignores it. The knobs varied are the rows of knob_table() (offload_ratio, recompute_depth,
// seq_shards, micro_batch, host_threads and power_limit_w, in that order; a knob all candidates
// share is skipped. If the start fails and nothing on its lines measures ok, coordinate descent
// starts again from the first candidate not yet measured. The best is chosen over every trial
// measured, restarts included.
SearchResult run_search(StrategyKind kind, std::vector<Knobs> const& candidates, Knobs const& start,
                        Objective const& objective, Evaluate const& evaluate,
                        CoordinateDescentOptions const& options = {});

// How much worse `found` is than the best of `reference` (e.g. an exhaustive search's trials),
// both judged in the context of all of `reference` (its P_max, its fastest time): 1 is optimal,
// 1.05 is 5% worse. edp, ed2p, weighted: the ratio of objective values. energy_under_slowdown:
// the ratio of energies if `found` is within the slowdown bound of reference's fastest trial,
// +inf if it breaks it. +inf also when `found` has no comparable trial in `reference`.
double regret(std::vector<TrialRecord> const& reference, Knobs const& found, Objective const& objective);

}  // namespace joule::scheduler
