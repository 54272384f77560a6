#pragma once
// The energy tool's profile of a Kokkos program (ProfileRecord, run_log.hpp) as text: the table the
// tool prints at the program's end and `joule inspect` prints from the log, and its CSV. One
// formatter for both, so the two cannot drift apart. No Kokkos (part of joule_run_log).
#include "runlog/run_log.hpp"

#include <string>
#include <string_view>

namespace joule::scheduler {

// What the kernels' timeline of a profile holds besides kernels, told apart by a name prefix:
// the one table the tool's callbacks (writing names) and the reports (reading them) use.
enum class Operation { kernel, deep_copy, fence };
struct OperationKind {
  Operation operation;
  char const* kind;         // the report's and the CSV's "kind" column
  std::string_view prefix;  // what the name begins with ("deep_copy HostSpace <- HostSpace")
};
inline constexpr OperationKind kOperationKinds[] = {
    {Operation::kernel, "kernel", ""}, {Operation::deep_copy, "deep_copy", "deep_copy "}, {Operation::fence, "fence", "fence "}};
constexpr OperationKind const& operation_kind(Operation o) { return kOperationKinds[int(o)]; }
// The kind of a row of ProfileRecord::kernels, by its name's prefix.
char const* operation_kind_of(std::string_view name);

// "measured: SOURCES" or "MODEL ESTIMATE (no sensor readable): MODEL", from the header.
std::string energy_label(RunHeader const& header);

// The table: a first line with the program's time and energy, its source and the edge mode, then
// the `top` regions and the `top` kernels/copies/fences by energy (0: all), the energy outside any
// region, the tool's own time, and what "below resolution" means. Regions per call path where the
// record has them (each indented under the region it was opened in, with those it was opened in
// when `top` leaves them out), else by name.
std::string format_profile_report(RunHeader const& header, ProfileRecord const& profile, int top);
// One CSV field (RFC 4180): quoted when it holds a comma or a double quote (quotes doubled); line
// breaks and tabs become spaces, so a record stays on one line. Both CSVs (this one, the trials').
std::string csv_field(std::string const& text);

// kind,name,calls,seconds,energy_j,mean_w,below_resolution,source,parent,path: one row for the
// program, one for outside any region, then every region (per call path where the record has
// them, in tree order; `path` its names from the top joined by '/') and kernel row (`path` its name).
std::string format_profile_csv(RunHeader const& header, ProfileRecord const& profile);

}  // namespace joule::scheduler
