#pragma once
// Image files (PNG, JPEG, BMP, GIF, TGA, PNM) read for a model: decoded with stb_image (Debian's
// libstb-dev), converted to the model's channel count and resized to its image size, as
// apps/scripts/images_to_h5.py converts them with PIL for a dataset: the same filters (bilinear on
// premultiplied alpha, as PIL), exact where no arithmetic is involved, else within rounding
// (tests/scripts/image_files_vs_pil.sh).
#include <cstdint>
#include <string>
#include <vector>

namespace joule::apps {

enum class Resize { bilinear, nearest, none };
Resize parse_resize(std::string const& name);  // "bilinear" | "nearest" | "none"

// The image files of `folder` (by extension, case-insensitive), sorted by name; throws if there
// is no such folder or no image in it.
std::vector<std::string> image_files(std::string const& folder);

// Decodes `path` into `out` (channels * size * size bytes, channel-major as the dataset's /images);
// throws, naming the file, if it cannot be read or (Resize::none) is not size x size.
void load_image(std::string const& path, int channels, int size, Resize resize, std::uint8_t* out);

}  // namespace joule::apps
