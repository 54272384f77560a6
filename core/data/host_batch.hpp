#pragma once
// A batch on the host: what the dataset reader fills and the model's set_batch copies to the
// device. Its own header, so that the model needs nothing else of the data folder (and data
// nothing of the model's but the configuration).
#include <cstdint>
#include <vector>

namespace joule {

// Samples gathered for one batch, on the host.
struct HostBatch {
  std::vector<std::uint8_t> images;  // [B, F, C, H, W]
  std::vector<std::int32_t> tokens;  // [B, T]
  std::vector<std::size_t> samples;  // dataset indices
};

}  // namespace joule
