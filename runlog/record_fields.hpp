#pragma once
// The run log's scalar attributes, one table per record: RunLogWriter writes every row, the
// reader reads every row, and tests/test_run_log.cpp gives every row a value of its own and
// compares them all after a round trip, so no attribute is written but not read back, or read but
// not tested. The test also counts each record's members: one added with no row (and not among
// those by hand) fails there. The knobs are rows of knob_table(); the datasets, the trial's
// status, and what the writer derives (energy_below_resolution) or owns (the header's resumed,
// run_id and knob_table) are written by hand in run_log.cpp.
#include "runlog/run_log.hpp"

#include <cstddef>
#include <string>
#include <variant>
#include <vector>

namespace joule::scheduler {

enum RecordFieldFlags : unsigned {
  kAlways = 0,
  kOptional = 1,  // absent in logs older than it: read as the member's default
  kCount = 2,     // a negative value in a file is damage (a std::size_t member is always one)
};

template <class Record>
struct RecordField {
  char const* name;  // the attribute, on the record's group
  // The member, by its type: double is a float64 attribute, the integers an int64 (an int member
  // must hold the file's value), std::string a string.
  std::variant<double Record::*, int Record::*, long long Record::*, std::size_t Record::*, std::string Record::*>
      member;
  unsigned flags = kAlways;
};

std::vector<RecordField<RunHeader>> const& header_fields();   // attributes of /
std::vector<RecordField<TrialRecord>> const& trial_fields();  // attributes of /trials/<i>

}  // namespace joule::scheduler
