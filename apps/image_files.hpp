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
#include "core/io/input_file.hpp"
#include "core/model/limits.hpp"  // generated from core/model/limits.json

#include <cstddef>
#include <cstdint>
#include <memory>
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

// What an image file may cost before anything of it is decoded. An image's declared size (PNG's
// IHDR, a JPEG's frame header, ...: what stb_image's stbi_info_from_memory reads) is checked
// against max_pixels before its image data is inflated or decoded: a 388 KB PNG declaring 20,000 x
// 20,000 pixels took 1.6 GB and 128 s of CPU. The default, 64 Mpixel (8192 x 8192; limits.json's
// images.max_pixels_default, which the converter reads too), is four times the largest image a
// dataset holds (model.image_size up to 4096); `--max-image-pixels N` changes it. Of the file
// itself at most max_bytes() are read.
struct ImageLimits {
  std::uint64_t max_pixels = std::uint64_t(limits::kImageMaxPixelsDefault);
  // 8 bytes for each pixel allowed (16-bit RGBA, stored uncompressed) + 16 MiB of other data, at
  // most 2 GiB - 1 (stb_image reads from an int-sized buffer).
  std::size_t max_bytes() const;
};
// "--max-image-pixels N", as messages name the limit.
std::string max_pixels_text(ImageLimits const& limits);

// Decodes an image into `out` (channels * size * size bytes, channel-major as the dataset's
// /images). Throws BadImageError if the file cannot be read, is not a regular file, is larger
// than the limits allow, is damaged or is not an image; and std::runtime_error, naming the file,
// if (Resize::none) it is not size x size. Returns what the file held, so that a caller can say
// what was converted to the model's shape. The path form opens the file once (io::InputFile: a
// FIFO or a device is refused before any read); the other decodes the file an io::InputFile holds,
// read through its descriptor from its start.
struct ImageShape {
  int width = 0, height = 0, channels = 0;  // channels: 1 grey, 2 grey + alpha, 3 RGB, 4 RGBA
};
ImageShape load_image(std::string const& path, int channels, int size, Resize resize, std::uint8_t* out,
                      ImageLimits const& limits = {});
ImageShape load_image(io::InputFile const& file, int channels, int size, Resize resize, std::uint8_t* out,
                      ImageLimits const& limits = {});

// An image file checked (decoded once) and decoded again later from the same file (`joule caption
// --images` checks every file before it builds a model, then decodes each for its batch): the
// descriptor checked is kept and decoded from, so nothing renamed over the name meanwhile (a FIFO,
// a link to /dev/zero, another image) is read. Where too many files are listed to keep one
// descriptor each (RLIMIT_NOFILE), the file is opened again by name and must be the very file
// checked (device, inode, size, modification and status-change times). Either way a file changed
// in between is refused: BadImageError "PATH: the file changed while joule read it (...)".
struct CheckedImage {
  std::string path;
  std::shared_ptr<io::InputFile const> file;  // null: not held open
  io::FileIdentity identity;                  // the file's when it was checked
};
// Opens `path` once, decodes it into `out` as load_image does (the check), and keeps its
// descriptor when keep_open. Throws as load_image.
CheckedImage check_image(std::string const& path, bool keep_open, int channels, int size, Resize resize,
                         std::uint8_t* out, ImageLimits const& limits, ImageShape* shape = nullptr);
ImageShape load_image(CheckedImage const& image, int channels, int size, Resize resize, std::uint8_t* out,
                      ImageLimits const& limits);
// How many image files one process may keep open at once: half the descriptors RLIMIT_NOFILE
// leaves it, less a margin for everything else.
std::size_t image_descriptor_budget();

}  // namespace joule::apps
