#pragma once
// Image files (PNG, JPEG, BMP, GIF, TGA, PNM) read for a model: decoded with stb_image (Debian's
// libstb-dev), converted to the model's channel count and resized to its image size, as
// apps/scripts/images_to_h5.py converts them with PIL for a dataset: the same filters (bilinear on
// premultiplied alpha, as PIL), exact where no arithmetic is involved, else within rounding
// (tests/scripts/image_files_vs_pil.sh).
//
// stb_image decodes damaged files without a word (it skips PNG CRCs and fills what a truncated
// file lacks), so each file's bytes are checked first: PNG chunk CRCs, IHDR first, IEND last;
// JPEG's end-of-image marker after the last scan; BMP, TGA and PNM pixel data as long as the
// header says; GIF blocks whole and the trailer there (tests/scripts/damaged_images.sh).
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

namespace joule::apps {

enum class Resize { bilinear, nearest, none };
Resize parse_resize(std::string const& name);  // "bilinear" | "nearest" | "none"

// A file that is not a whole image joule can read: what() is "PATH: REASON".
class BadImageError : public std::runtime_error {
 public:
  BadImageError(std::string path, std::string reason);
  std::string const& path() const { return path_; }
  std::string const& reason() const { return reason_; }

 private:
  std::string path_, reason_;
};

struct BadImage {
  std::string path, reason;
};

// The entries of a folder with an image extension (case-insensitive), each list sorted by name:
// `files` are regular files (or links to them); `unusable` the others with why (a dangling link, a
// folder, a device), so that none is passed over without a word.
struct ImageFolder {
  std::vector<std::string> files;
  std::vector<BadImage> unusable;
};

// Throws if there is no such folder or no entry with an image extension in it.
ImageFolder image_files(std::string const& folder);

// Decodes `path` into `out` (channels * size * size bytes, channel-major as the dataset's /images).
// Throws BadImageError if the file cannot be read, is damaged or is not an image; and
// std::runtime_error, naming the file, if (Resize::none) it is not size x size.
// Returns what the file held, so that a caller can say what was converted to the model's shape.
struct ImageShape {
  int width = 0, height = 0, channels = 0;  // channels: 1 grey, 2 grey + alpha, 3 RGB, 4 RGBA
};
ImageShape load_image(std::string const& path, int channels, int size, Resize resize, std::uint8_t* out);

}  // namespace joule::apps
