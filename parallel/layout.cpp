#include "parallel/layout.hpp"

#include <cstdint>
#include <vector>

namespace joule::parallel {

ProcessLayout make_layout(int world, int rank, int seq_shards, int heads, int seq_len) {
  auto const fail = [&](std::string const& what) {
    throw LayoutError("process layout: seq_shards = " + std::to_string(seq_shards) + " with " +
                      std::to_string(world) + " processes: " + what);
  };
  if (world < 1 || rank < 0 || rank >= world) fail("rank " + std::to_string(rank) + " is outside the world");
  if (seq_shards < 1) fail("seq_shards must be >= 1");
  if (world % seq_shards != 0)
    fail("seq_shards must divide the number of processes (world = seq_shards x dp)");
  if (heads % seq_shards != 0)
    fail("seq_shards must divide the number of attention heads (" + std::to_string(heads) +
         "): each shard runs whole heads");
  if (seq_len % seq_shards != 0)
    fail("seq_shards must divide the sequence length (" + std::to_string(seq_len) +
         " = image tokens + text tokens): each shard holds as many tokens");
  ProcessLayout l;
  l.world = world;
  l.seq_shards = seq_shards;
  l.dp = world / seq_shards;
  l.rank = rank;
  l.seq_rank = rank % seq_shards;
  l.dp_rank = rank / seq_shards;
  return l;
}

namespace {
std::uint64_t fnv1a(std::string const& s) {
  std::uint64_t h = 1469598103934665603ull;
  for (unsigned char c : s) {
    h ^= c;
    h *= 1099511628211ull;
  }
  return h;
}
}  // namespace

void require_same_config(Communicator& comm, std::string const& config_json) {
  std::uint64_t const mine = fnv1a(config_json);
  std::uint64_t root = mine;
  comm.broadcast(&root, sizeof root, 0);
  std::vector<double> differs(comm.size(), 0.0);
  differs[comm.rank()] = root != mine ? 1.0 : 0.0;
  comm.allreduce_sum(differs.data(), differs.size());
  std::string ranks;
  for (int r = 0; r < comm.size(); ++r)
    if (differs[r] != 0.0) ranks += (ranks.empty() ? "" : ", ") + std::to_string(r);
  if (!ranks.empty())
    throw LayoutError("the configuration differs between ranks: rank(s) " + ranks +
                      " were given another configuration than rank 0 (every rank must run the same one)");
}

}  // namespace joule::parallel
