#include "parallel/agreement.hpp"

#include <cstdint>
#include <vector>

namespace joule::parallel {

std::string first_error(Communicator& comm, std::string const& mine) {
  int const size = comm.size(), rank = comm.rank();
  std::vector<double> failed(std::size_t(size), 0.0);  // one slot per rank: who failed
  failed[std::size_t(rank)] = mine.empty() ? 0.0 : 1.0;
  comm.allreduce_sum(failed.data(), failed.size());
  int first = -1, count = 0;
  for (int r = 0; r < size; ++r) {
    if (failed[std::size_t(r)] == 0) continue;
    if (first < 0) first = r;
    ++count;
  }
  if (first < 0) return "";
  std::uint64_t length = rank == first ? mine.size() : 0;
  comm.broadcast(&length, sizeof length, first);
  std::string text = rank == first ? mine : std::string(length, '\0');
  if (length > 0) comm.broadcast(text.data(), length, first);
  std::string out = "rank " + std::to_string(first) + ": " + text;
  if (count > 1) out += " (failed on " + std::to_string(count) + " of " + std::to_string(size) + " processes)";
  return out;
}

}  // namespace joule::parallel
