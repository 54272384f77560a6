#pragma once
// The built-in synthetic captioning dataset: one coloured shape on a dark, slightly noisy
// background, captioned by what it is and where it is ("a red square top left"); with frames > 1
// the shape moves across the frames and the caption says where to ("a blue circle moving right").
// Captions are a function of the pixels, so the task is learnable; the same seed gives the same file.
#include "core/data/dataset.hpp"

#include <cstdint>
#include <string>

namespace joule {

struct SynthOptions {
  std::size_t count = 2048;
  int frames = 1;
  int image_size = 32;
  int channels = 3;
  int text_len = 36;
  std::uint64_t seed = 1;

  // Samples shaped for a model: its frames, image size, channels and text length.
  static SynthOptions for_model(ModelConfig const& m, std::size_t count, std::uint64_t seed) {
    SynthOptions o;
    o.count = count;
    o.frames = m.frames;
    o.image_size = m.image_size;
    o.channels = m.channels;
    o.text_len = m.text_len;
    o.seed = seed;
    return o;
  }
};

// Generates the samples in memory (returned as a shape plus buffers) ...
struct SynthData {
  DatasetShape shape;
  std::vector<std::uint8_t> images;
  std::vector<std::int32_t> tokens;
  std::vector<std::string> captions;
};
SynthData make_synthetic(SynthOptions const& options);
// ... or straight into a dataset file.
void write_synthetic(std::string const& path, SynthOptions const& options);

}  // namespace joule
