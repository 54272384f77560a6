#include "scheduler/trial.hpp"

#include <fmt/format.h>

#include <stdexcept>

namespace joule::scheduler {

std::string Knobs::describe() const {
  std::string text = fmt::format("offload {:.2f}, recompute {}, shards {}", offload_ratio,
                                 recompute_depth, seq_shards);
  // The optional knobs only when the search set them; otherwise the configuration's value holds.
  if (micro_batch > 0) text += fmt::format(", micro-batch {}", micro_batch);
  if (host_threads == 0) text += ", host threads all";
  if (host_threads > 0) text += fmt::format(", host threads {}", host_threads);
  if (power_limit_w > 0) text += fmt::format(", power limit {} W", power_limit_w);
  return text;
}

char const* to_string(TrialStatus s) {
  switch (s) {
    case TrialStatus::ok: return "ok";
    case TrialStatus::infeasible: return "infeasible";
    case TrialStatus::failed: return "failed";
  }
  return "?";
}

TrialStatus trial_status_from(std::string const& s) {
  if (s == "ok") return TrialStatus::ok;
  if (s == "infeasible") return TrialStatus::infeasible;
  if (s == "failed") return TrialStatus::failed;
  throw std::invalid_argument("unknown trial status '" + s + "' (allowed: ok, infeasible, failed)");
}

}  // namespace joule::scheduler
