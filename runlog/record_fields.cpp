#include "runlog/record_fields.hpp"

namespace joule::scheduler {

// Each table in the order the attributes are written; docs/run-log.md says what each means.
std::vector<RecordField<RunHeader>> const& header_fields() {
  using H = RunHeader;
  static std::vector<RecordField<H>> const rows = {
      {"joule_version", &H::joule_version},
      {"git_commit", &H::git_commit},
      {"kokkos_version", &H::kokkos_version},
      {"execution_space", &H::execution_space},
      {"host", &H::host},
      {"energy_source", &H::energy_source},
      {"energy_kind", &H::energy_kind},
      {"energy_regions", &H::energy_regions, kOptional},
      {"tuning", &H::tuning, kOptional},  // older logs: offline
      {"objective", &H::objective},
      {"strategy", &H::strategy},
      {"world_size", &H::world_size},
      {"config", &H::config_json},
      {"precision", &H::precision, kOptional},  // the three: absent before issue 29
      {"gemm_path", &H::gemm_path, kOptional},
      {"attention_path", &H::attention_path, kOptional},
      {"host_cores", &H::host_cores, kOptional},  // absent before issue 42
      {"host_threads", &H::host_threads, kOptional},  // absent before issue 68
      {"gpu", &H::gpu, kOptional},                // absent before issue 65
      {"created", &H::created},
      {"device_memory_budget_bytes", &H::device_memory_budget_bytes},
  };
  return rows;
}

std::vector<RecordField<TrialRecord>> const& trial_fields() {
  using T = TrialRecord;
  static std::vector<RecordField<T>> const rows = {
      {"reason", &T::reason},
      {"time_per_step_s", &T::time_per_step_s},
      {"energy_per_step_j", &T::energy_per_step_j},
      {"objective", &T::objective},
      {"ci_relative", &T::ci_relative},
      {"repeats", &T::repeats},
      {"warmup_steps", &T::warmup_steps},
      {"measured_steps", &T::measured_steps},
      {"drift", &T::drift},
      {"process_cpus", &T::process_cpus, kOptional},  // the three: absent before issue 41
      {"other_cpus", &T::other_cpus, kOptional},
      {"steal_share", &T::steal_share, kOptional},
      {"energy_resolution_s", &T::energy_resolution_s, kOptional},  // absent before issue 53
      {"predicted_device_bytes", &T::predicted_device_bytes},
      {"link_bytes_per_step", &T::link_bytes_per_step, kOptional},  // absent before issue 29
      {"host_jobs_speculated", &T::host_jobs_speculated, kOptional | kCount},  // the two: absent before issue 42
      {"host_jobs_rolled_back", &T::host_jobs_rolled_back, kOptional | kCount},
  };
  return rows;
}

}  // namespace joule::scheduler
