#include "runlog/trial.hpp"

#include <fmt/format.h>

#include <stdexcept>

namespace joule::scheduler {

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
