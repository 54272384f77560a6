// image_probe FILE CHANNELS SIZE RESIZE OUT [MAX_PIXELS]: writes what joule caption --images would
// feed the model for FILE (apps/image_files.hpp: channels * size * size bytes, channel-major) to
// OUT, so a script can compare it with PIL's conversion (tests/scripts/image_files_vs_pil.sh); a
// file that cannot be read or is damaged exits 1 with "image_probe: FILE: reason"
// (damaged_images.sh, untrusted_inputs.sh). MAX_PIXELS: as caption's --max-image-pixels.
#include "image_files.hpp"

#include <cstdio>
#include <exception>
#include <fstream>
#include <string>
#include <vector>

int main(int argc, char** argv) {
  if (argc != 6 && argc != 7) {
    std::fprintf(stderr, "usage: image_probe FILE CHANNELS SIZE bilinear|nearest|none OUT [MAX_PIXELS]\n");
    return 2;
  }
  try {
    int const channels = std::stoi(argv[2]), size = std::stoi(argv[3]);
    std::vector<std::uint8_t> pixels(std::size_t(channels) * size * size);
    joule::apps::ImageLimits limits;
    if (argc == 7) limits.max_pixels = std::stoull(argv[6]);
    joule::apps::load_image(argv[1], channels, size, joule::apps::parse_resize(argv[4]), pixels.data(), limits);
    std::ofstream(argv[5], std::ios::binary).write(reinterpret_cast<char const*>(pixels.data()), std::streamsize(pixels.size()));
  } catch (std::exception const& e) {
    std::fprintf(stderr, "image_probe: %s\n", e.what());
    return 1;
  }
  return 0;
}
