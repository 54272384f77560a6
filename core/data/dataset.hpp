#pragma once
// The dataset format (HDF5) and its reader:
//   /images  uint8 [N, F, C, H, W]   pixels; F = 1 for still images
//   /tokens  int32 [N, T]            caption as [BOS, bytes..., EOS, PAD...] (ids < 259)
//   root attributes: format = "joule-captions-v1", count, frames, channels, height, width, text_len
// Dataset::open() validates all of it (structure, that the file stores every sample it claims,
// the model's shapes, and every token id of every sample, read in bounded chunks) and throws
// DatasetError naming the file, the object and what was expected.
#include "core/data/host_batch.hpp"
#include "core/config/config.hpp"
#include "core/io/input_file.hpp"

#include <cstdint>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

namespace joule {

namespace io {
class H5File;
}  // namespace io

class DatasetError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

inline constexpr char const* kDatasetFormat = "joule-captions-v1";

struct DatasetShape {
  std::size_t count = 0;
  int frames = 1, channels = 3, height = 0, width = 0, text_len = 0;
  std::size_t pixels_per_sample() const { return std::size_t(frames) * channels * height * width; }
};

class Dataset {
 public:
  // Samples one file may hold (sample indices are sizes, but counts reach int in places).
  static constexpr std::size_t kMaxSamples = 2147483647;
  // Bytes read at a time by the content check.
  static constexpr std::size_t kCheckChunkBytes = std::size_t(32) << 20;

  // Opens and validates the file, contents included (every token id of every sample in range,
  // every pixel readable), so a bad sample stops the run before its first step rather than at
  // the batch that reads it; if `model` is given, also checks that its image and text shapes
  // match the model's. The file is opened once (io::InputFile) and read through that descriptor
  // from then on: first in a child process (io::read_in_child), so a file that crashes the HDF5
  // library is an error here, not a crash, then here, and every batch after; a file renamed over the
  // path meanwhile is never read, and one changed in place (its ctime) is refused.
  static Dataset open(std::string const& path, ModelConfig const* model = nullptr);
  // The structure alone (datasets, types, shapes, the model's image and text shapes), not every
  // sample: a job checks it before it writes anything (a run log), and opens the file later.
  static void check_shape(std::string const& path, ModelConfig const& model);

  std::string const& path() const { return path_; }
  DatasetShape const& shape() const { return shape_; }
  // Reads the given samples (in this order).
  HostBatch read(std::vector<std::size_t> const& samples) const;
  // The same into `into`, reusing its buffers (no allocation once they have grown), reading each
  // run of consecutive samples at once.
  void read(std::vector<std::size_t> const& samples, HostBatch& into) const;

 private:
  static Dataset open_checked(io::SharedInput const& file, ModelConfig const* model, bool check_contents);
  void check_contents() const;  // every sample, kCheckChunkBytes at a time
  // Before and after every read: the file opened is still at the path (device and inode) and
  // unchanged (size, modification and status-change times, io::FileIdentity::unchanged).
  void check_same_file() const;
  void check_unchanged(io::H5File const& f) const;  // ... and its datasets' shapes
  std::string path_;
  DatasetShape shape_;
  io::SharedInput file_;  // opened once; its identity() is the file's when it was opened
};

// How many samples of n form the held-out set (the last ones): round(n * fraction), at least 1 and,
// with n > 1, at most n - 1. The trainer, `joule caption --held-out` and images_to_h5.py use it.
std::size_t held_out_count(std::size_t n, double fraction);

void write_dataset(std::string const& path, DatasetShape const& shape,
                   std::vector<std::uint8_t> const& images, std::vector<std::int32_t> const& tokens);

// Caption text <-> token row of length text_len: [BOS, bytes..., EOS, PAD...].
std::vector<std::int32_t> encode_caption(std::string const& text, int text_len);
std::string decode_caption(std::int32_t const* tokens, int text_len);  // bytes after BOS until EOS

// Shuffled batches over a subset of sample indices, reshuffled each epoch from (seed, epoch),
// so its whole state is (epoch, cursor) and a resumed run sees the same order.
class BatchSampler {
 public:
  BatchSampler(std::vector<std::size_t> indices, int batch, std::uint64_t seed);
  std::vector<std::size_t> next();
  // What next() would return after `skip` more draws, if that lies in this epoch's order; empty
  // if it reaches into the next epoch. Changes nothing (read-ahead).
  std::vector<std::size_t> peek(int skip) const;
  long long epoch() const { return epoch_; }
  long long cursor() const { return cursor_; }
  void restore(long long epoch, long long cursor);
  // Draws `batch` samples per next() from here on; the order of the samples is unchanged.
  void set_batch(int batch);

 private:
  void shuffle();
  std::vector<std::size_t> indices_, order_;
  int batch_;
  std::uint64_t seed_;
  long long epoch_ = 0, cursor_ = 0;
};

}  // namespace joule
