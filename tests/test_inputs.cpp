// Issue 64, the images `joule caption --images` reads: each file is opened once, checked, and
// decoded for its batch from that same descriptor (apps/image_files.hpp, CheckedImage), so what is
// put at its name in between (a FIFO, a link to /dev/zero, another image) is never read; and an
// image's declared size is bounded before anything of it is decoded (--max-image-pixels).
#include "image_files.hpp"

#include "support/catch.hpp"

#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

using joule::apps::BadImageError;
using joule::apps::CheckedImage;
using joule::apps::ImageLimits;
using joule::apps::Resize;
using joule::test::Contains;
using Catch::Matchers::StartsWith;
namespace fs = std::filesystem;

namespace {

struct Folder {
  std::string path;
  Folder() {
    char name[] = "/tmp/joule-images-XXXXXX";
    REQUIRE(::mkdtemp(name));
    path = name;
  }
  ~Folder() {
    std::error_code ignored;
    fs::remove_all(path, ignored);
  }
};

// A W x H grey image (binary PGM, which stb_image reads) of one value.
void write_pgm(std::string const& path, int width, int height, unsigned char value) {
  std::ofstream out(path, std::ios::binary);
  out << "P5\n" << width << ' ' << height << "\n255\n";
  out << std::string(std::size_t(width) * height, char(value));
  REQUIRE(out.good());
}

std::vector<std::uint8_t> decode(CheckedImage const& image, ImageLimits const& limits = {}) {
  std::vector<std::uint8_t> pixels(4 * 4);
  joule::apps::load_image(image, 1, 4, Resize::none, pixels.data(), limits);
  return pixels;
}

CheckedImage check(std::string const& path, bool keep_open, ImageLimits const& limits = {}) {
  std::vector<std::uint8_t> pixels(4 * 4);
  return joule::apps::check_image(path, keep_open, 1, 4, Resize::none, pixels.data(), limits);
}

}  // namespace

TEST_CASE("inputs: an image swapped after its check is decoded from the file checked", "[images][inputs]") {
  Folder dir;
  std::string const folder = dir.path + "/images", path = folder + "/a.pgm", other = dir.path + "/b.pgm";
  REQUIRE(::mkdir(folder.c_str(), 0700) == 0);
  write_pgm(path, 4, 4, 7);
  write_pgm(other, 4, 4, 200);
  CheckedImage const image = check(path, /*keep_open=*/true);
  REQUIRE(image.file != nullptr);
  // After the check, the folder is renamed away and a new one put in its place, whose a.pgm is a
  // FIFO nobody writes (reading it waited for ever), then a link to /dev/zero (reading it grew
  // without end), then another image: the file checked, untouched, is what is decoded.
  REQUIRE(::rename(folder.c_str(), (folder + ".old").c_str()) == 0);
  REQUIRE(::mkdir(folder.c_str(), 0700) == 0);
  REQUIRE(::mkfifo(path.c_str(), 0600) == 0);
  REQUIRE(decode(image) == std::vector<std::uint8_t>(16, 7));
  REQUIRE(::unlink(path.c_str()) == 0);
  REQUIRE(::symlink("/dev/zero", path.c_str()) == 0);
  REQUIRE(decode(image) == std::vector<std::uint8_t>(16, 7));
  REQUIRE(::unlink(path.c_str()) == 0);
  REQUIRE(::link(other.c_str(), path.c_str()) == 0);
  REQUIRE(decode(image) == std::vector<std::uint8_t>(16, 7));
  // A FIFO renamed over the file checked: the file's status changes (it is unlinked), so it is
  // refused at once; nothing is read from the FIFO.
  CheckedImage const again = check(path, /*keep_open=*/true);
  std::string const fifo = dir.path + "/fifo";
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  REQUIRE(::rename(fifo.c_str(), path.c_str()) == 0);
  REQUIRE_THROWS_WITH(decode(again), StartsWith(path + ": the file changed while joule read it (") &&
                                         Contains("nothing of it was used"));
}

TEST_CASE("inputs: an image not held open is decoded only if its name still gives the file checked",
          "[images][inputs]") {
  // Past the descriptors a process may keep (RLIMIT_NOFILE), an image is opened again by name: the
  // file there must be the one checked, unchanged; a FIFO or a device is refused before any read.
  Folder dir;
  std::string const path = dir.path + "/a.pgm", other = dir.path + "/b.pgm";
  write_pgm(path, 4, 4, 7);
  write_pgm(other, 4, 4, 200);
  CheckedImage const image = check(path, /*keep_open=*/false);
  REQUIRE(image.file == nullptr);
  REQUIRE(decode(image) == std::vector<std::uint8_t>(16, 7));
  REQUIRE(::rename(path.c_str(), (path + ".old").c_str()) == 0);
  REQUIRE(::mkfifo(path.c_str(), 0600) == 0);
  REQUIRE_THROWS_WITH(decode(image), Contains(path + ": is a FIFO (named pipe), not a regular file; joule reads images "
                                                     "only from regular files (nothing of it was read)"));
  REQUIRE(::unlink(path.c_str()) == 0);
  REQUIRE(::symlink("/dev/zero", path.c_str()) == 0);
  REQUIRE_THROWS_WITH(decode(image), Contains(path + ": is a character device, not a regular file"));
  REQUIRE(::unlink(path.c_str()) == 0);
  REQUIRE(::rename(other.c_str(), path.c_str()) == 0);
  REQUIRE_THROWS_WITH(decode(image), StartsWith(path + ": the file changed while joule read it (it is another file"));
}

TEST_CASE("inputs: an image file that is not a regular file is refused without a read", "[images][inputs]") {
  Folder dir;
  std::string const fifo = dir.path + "/pipe.png", zero = dir.path + "/zero.png";
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  REQUIRE(::symlink("/dev/zero", zero.c_str()) == 0);
  std::vector<std::uint8_t> pixels(16);
  REQUIRE_THROWS_AS(joule::apps::load_image(fifo, 1, 4, Resize::none, pixels.data()), BadImageError);
  REQUIRE_THROWS_WITH(joule::apps::load_image(zero, 1, 4, Resize::none, pixels.data()),
                      Contains(zero + ": is a character device, not a regular file"));
}

TEST_CASE("inputs: an image's declared size is bounded before it is decoded, by a limit that can be raised",
          "[images][inputs]") {
  Folder dir;
  std::string const path = dir.path + "/a.pgm";
  write_pgm(path, 13, 9, 5);  // 117 pixels
  ImageLimits limits;
  REQUIRE(limits.max_pixels == 67108864u);  // 64 Mpixel by default (core/model/limits.json)
  limits.max_pixels = 116;
  std::vector<std::uint8_t> pixels(16);
  REQUIRE_THROWS_WITH(joule::apps::load_image(path, 1, 4, Resize::bilinear, pixels.data(), limits),
                      Contains(path + ": declares 13 x 9 pixels (117), more than the 116 pixels joule decodes "
                                      "(--max-image-pixels 116); nothing of it was decoded"));
  limits.max_pixels = 117;
  REQUIRE(joule::apps::load_image(path, 1, 4, Resize::bilinear, pixels.data(), limits).width == 13);
  // Of the file itself no more than 8 bytes a pixel allowed + 16 MiB are read.
  REQUIRE(limits.max_bytes() == 117 * 8 + (16u << 20));
}
