#pragma once
// The process layout: world size W = seq_shards x dp. Ranks that share a sequence (one sample's
// tokens split across them, Ulysses style) are consecutive: rank = dp_rank * seq_shards +
// seq_rank, so a sequence group sits on one node when W is spread node by node.
#include "parallel/communicator.hpp"

#include <stdexcept>
#include <string>

namespace joule::parallel {

class LayoutError : public std::invalid_argument {
 public:
  using std::invalid_argument::invalid_argument;
};

struct ProcessLayout {
  int world = 1, seq_shards = 1, dp = 1;
  int rank = 0, seq_rank = 0, dp_rank = 0;
};

// Checks every constraint and says which one failed: seq_shards must divide the world size, the
// number of attention heads (each shard gets whole heads) and the sequence length (each rank
// gets the same number of tokens).
ProcessLayout make_layout(int world, int rank, int seq_shards, int heads, int seq_len);

// Stops every rank with a clear error unless all ranks were given the same configuration text:
// rank 0's hash is broadcast and compared; the ranks that differ are named.
void require_same_config(Communicator& comm, std::string const& config_json);

}  // namespace joule::parallel
