#include "image_files.hpp"

#include <fmt/format.h>

#define STB_IMAGE_IMPLEMENTATION
#define STBI_NO_LINEAR
#define STBI_NO_HDR
#include <stb/stb_image.h>
#include <zlib.h>

#include <sys/resource.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <limits>
#include <memory>
#include <stdexcept>
#include <utility>

namespace joule::apps {

Resize parse_resize(std::string const& name) {
  if (name == "bilinear") return Resize::bilinear;
  if (name == "nearest") return Resize::nearest;
  if (name == "none") return Resize::none;
  throw std::invalid_argument("resize '" + name + "': allowed are bilinear, nearest, none");
}

BadImageError::BadImageError(std::string path, std::string reason)
    : std::runtime_error(path + ": " + reason), path_(std::move(path)), reason_(std::move(reason)) {}

namespace {

std::string special_file_kind(std::filesystem::file_type type) {
  using std::filesystem::file_type;
  switch (type) {
    case file_type::fifo: return "a FIFO (named pipe)";
    case file_type::socket: return "a socket";
    case file_type::block: return "a block device";
    case file_type::character: return "a character device";
    default: return "a special file";
  }
}

}  // namespace

ImageFolder image_files(std::string const& folder) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (!fs::is_directory(folder, ec)) throw std::runtime_error(folder + ": no such folder");
  static char const* const kExtensions[] = {".png", ".jpg", ".jpeg", ".bmp", ".gif", ".tga", ".pgm", ".ppm", ".pnm"};
  ImageFolder listing;
  for (auto const& entry : fs::directory_iterator(folder)) {
    std::string ext = entry.path().extension().string();
    std::transform(ext.begin(), ext.end(), ext.begin(), [](unsigned char c) { return char(std::tolower(c)); });
    if (std::find(std::begin(kExtensions), std::end(kExtensions), ext) == std::end(kExtensions)) continue;
    std::string const path = entry.path().string();
    std::error_code status_ec;
    fs::file_status const target = fs::status(entry.path(), status_ec);  // follows links
    if (fs::is_regular_file(target)) {
      listing.files.push_back(path);
      continue;
    }
    std::string reason;
    if (fs::is_symlink(fs::symlink_status(entry.path(), ec))) {
      std::error_code link_ec;
      std::string const link = "a symbolic link to " + fs::read_symlink(entry.path(), link_ec).string();
      if (target.type() == fs::file_type::not_found) reason = link + ", which does not exist";
      else if (fs::is_directory(target)) reason = link + ", which is a folder";
      else if (target.type() == fs::file_type::none) reason = link + " that cannot be followed (" + status_ec.message() + ")";
      else reason = link + ", which is " + special_file_kind(target.type()) + ", not a regular file";
    } else if (target.type() == fs::file_type::none) {
      reason = "cannot be examined (" + status_ec.message() + ")";
    } else if (fs::is_directory(target)) {
      reason = "a folder, not an image file";
    } else {
      reason = special_file_kind(target.type()) + ", not a regular file";
    }
    listing.unusable.push_back({path, reason});
  }
  if (listing.files.empty() && listing.unusable.empty())
    throw std::runtime_error(folder + ": no image files (png, jpg, jpeg, bmp, gif, tga, pgm, ppm, pnm)");
  std::sort(listing.files.begin(), listing.files.end());
  std::sort(listing.unusable.begin(), listing.unusable.end(),
            [](BadImage const& a, BadImage const& b) { return a.path < b.path; });
  return listing;
}

namespace {

using Bytes = std::vector<std::uint8_t>;

std::size_t be16(Bytes const& b, std::size_t at) { return std::size_t(b[at]) << 8 | b[at + 1]; }
std::size_t le16(Bytes const& b, std::size_t at) { return std::size_t(b[at + 1]) << 8 | b[at]; }
std::uint32_t be32(Bytes const& b, std::size_t at) {
  return std::uint32_t(b[at]) << 24 | std::uint32_t(b[at + 1]) << 16 | std::uint32_t(b[at + 2]) << 8 | b[at + 3];
}
std::uint32_t le32(Bytes const& b, std::size_t at) {
  return std::uint32_t(b[at + 3]) << 24 | std::uint32_t(b[at + 2]) << 16 | std::uint32_t(b[at + 1]) << 8 | b[at];
}
bool starts_with(Bytes const& b, char const* signature, std::size_t n) {
  return b.size() >= n && std::memcmp(b.data(), signature, n) == 0;
}

// CRC-32 as PNG (and zlib) computes it: reflected, polynomial 0xEDB88320.
std::uint32_t crc32_of(std::uint8_t const* data, std::size_t n) {
  static std::array<std::uint32_t, 256> const table = [] {
    std::array<std::uint32_t, 256> t{};
    for (std::uint32_t i = 0; i < 256; ++i) {
      std::uint32_t c = i;
      for (int k = 0; k < 8; ++k) c = c & 1 ? 0xEDB88320u ^ (c >> 1) : c >> 1;
      t[i] = c;
    }
    return t;
  }();
  std::uint32_t c = 0xFFFFFFFFu;
  for (std::size_t i = 0; i < n; ++i) c = table[(c ^ data[i]) & 0xFF] ^ (c >> 8);
  return c ^ 0xFFFFFFFFu;
}

std::string png_chunk_name(Bytes const& b, std::size_t at) {
  std::string name(reinterpret_cast<char const*>(&b[at]), 4);
  bool const letters = std::all_of(name.begin(), name.end(), [](unsigned char c) { return std::isalpha(c) != 0; });
  return letters ? name : fmt::format("0x{:08X}", be32(b, at));
}

// Every chunk whole with its CRC right, IHDR first, IEND last with nothing after it.
std::string png_problem(Bytes const& b) {
  std::size_t const n = b.size();
  std::size_t pos = 8;
  std::string previous = "the signature";
  for (bool first = true;; first = false) {
    if (pos == n) return fmt::format("truncated PNG: no IEND chunk (the file ends after {})", previous);
    if (n - pos < 12)
      return fmt::format("truncated PNG: the file ends {} bytes into the chunk after {} (at byte {}; a chunk "
                         "takes at least 12)", n - pos, previous, pos);
    std::size_t const length = be32(b, pos);
    std::string const name = png_chunk_name(b, pos + 4);
    if (length > 0x7FFFFFFFu)
      return fmt::format("PNG chunk {} at byte {} declares {} bytes of data (at most 2^31 - 1)", name, pos, length);
    if (n - pos - 12 < length)
      return fmt::format("truncated PNG: chunk {} at byte {} needs {} bytes ({} of data), the file ends {} bytes "
                         "into it", name, pos, length + 12, length, n - pos);
    std::uint32_t const stored = be32(b, pos + 8 + length), computed = crc32_of(&b[pos + 4], length + 4);
    if (stored != computed)
      return fmt::format("PNG chunk {} at byte {} is damaged: its CRC-32 is 0x{:08X}, its bytes give 0x{:08X}",
                         name, pos, stored, computed);
    if (first && name != "IHDR") return fmt::format("the first PNG chunk is {}, not IHDR", name);
    previous = fmt::format("chunk {} at byte {}", name, pos);
    pos += 12 + length;
    if (name == "IEND") {
      if (pos == n) return "";
      return fmt::format("{} bytes after the IEND chunk (from byte {}): a PNG ends with IEND", n - pos, pos);
    }
  }
}

// The bytes of pixel rows a PNG's image data must inflate to: each row of each (Adam7) pass with its
// filter byte; 0 when IHDR is one stb_image refuses itself (bad colour type, bit depth, size).
std::uint64_t png_raw_bytes(std::uint64_t width, std::uint64_t height, unsigned depth, unsigned colour,
                            unsigned interlace) {
  unsigned const channels = colour == 0 ? 1 : colour == 2 ? 3 : colour == 3 ? 1 : colour == 4 ? 2 : colour == 6 ? 4 : 0;
  bool const depth_ok = depth == 1 || depth == 2 || depth == 4 || depth == 8 || depth == 16;
  if (!channels || !depth_ok || width == 0 || height == 0 || width > STBI_MAX_DIMENSIONS ||
      height > STBI_MAX_DIMENSIONS || interlace > 1)
    return 0;
  auto const rows = [&](std::uint64_t w, std::uint64_t h) {
    return w == 0 || h == 0 ? 0 : h * (1 + (w * channels * depth + 7) / 8);
  };
  if (interlace == 0) return rows(width, height);
  static int const pass[7][4] = {{0, 0, 8, 8}, {4, 0, 8, 8}, {0, 4, 4, 8}, {2, 0, 4, 4},
                                 {0, 2, 2, 4}, {1, 0, 2, 2}, {0, 1, 1, 2}};  // x0, y0, dx, dy
  std::uint64_t total = 0;
  for (auto const& p : pass)
    total += rows((width + p[2] - 1 - p[0]) / p[2], (height + p[3] - 1 - p[1]) / p[3]);
  return total;
}

// The image data, once the chunks are whole (png_problem): the IDAT chunks' bytes together are one
// zlib stream that must be whole (its end, then its Adler-32 check) and inflate to exactly the rows
// IHDR declares, with nothing after it. stb_image decodes a stream cut short before its check, or
// with a wrong check, without a word (and PIL one cut short once the rows are all there).
std::string png_data_problem(Bytes const& b) {
  std::vector<std::pair<std::size_t, std::size_t>> pieces;  // (first byte, length) of each IDAT's data
  std::uint64_t expected = 0, compressed = 0;
  std::string image;  // "13x9 pixels (colour type 2, 8 bits)"
  for (std::size_t pos = 8;;) {
    std::size_t const length = be32(b, pos);
    std::string const name(reinterpret_cast<char const*>(&b[pos + 4]), 4);
    if (name == "IHDR" && length >= 13) {
      expected = png_raw_bytes(be32(b, pos + 8), be32(b, pos + 12), b[pos + 16], b[pos + 17], b[pos + 20]);
      image = fmt::format("{}x{} pixels (colour type {}, {} bits{})", be32(b, pos + 8), be32(b, pos + 12), b[pos + 17],
                          b[pos + 16], b[pos + 20] ? ", interlaced" : "");
    }
    if (name == "IDAT") {
      pieces.emplace_back(pos + 8, length);
      compressed += length;
    }
    pos += 12 + length;
    if (name == "IEND") break;
  }
  if (pieces.empty() || expected == 0) return "";  // stb_image refuses it itself
  std::string const where =
      fmt::format("the zlib stream of its image data ({} bytes in {} IDAT chunk(s) from byte {})", compressed,
                  pieces.size(), pieces.front().first - 8);
  z_stream z{};
  if (inflateInit(&z) != Z_OK) return "";  // no memory for zlib: stb_image decodes it as before
  std::array<Bytef, 1 << 15> out;
  std::uint64_t produced = 0;
  std::size_t next = 0;
  int rc = Z_OK;
  while (rc == Z_OK || rc == Z_BUF_ERROR) {
    if (z.avail_in == 0) {
      if (next == pieces.size()) break;  // every IDAT byte given, and the stream has not ended
      z.next_in = const_cast<Bytef*>(&b[pieces[next].first]);
      z.avail_in = uInt(pieces[next].second);
      ++next;
      continue;
    }
    z.next_out = out.data();
    z.avail_out = uInt(out.size());
    rc = inflate(&z, Z_NO_FLUSH);
    produced += out.size() - z.avail_out;
    if (produced > expected || (rc == Z_BUF_ERROR && z.avail_in != 0)) break;
  }
  std::string const zlib_message = z.msg ? z.msg : "error " + std::to_string(rc);
  std::uint64_t after = z.avail_in;
  for (std::size_t i = next; i < pieces.size(); ++i) after += pieces[i].second;
  inflateEnd(&z);
  if (produced > expected)
    return fmt::format("PNG image data is damaged: {} inflates to more than the {} bytes of rows its {} need", where,
                       expected, image);
  if (rc == Z_MEM_ERROR) return "";
  if (rc != Z_OK && rc != Z_BUF_ERROR && rc != Z_STREAM_END)
    return fmt::format("PNG image data is damaged: {} does not inflate (zlib: {})", where, zlib_message);
  if (rc != Z_STREAM_END)
    return fmt::format("truncated PNG: {} is cut short: it ends before the stream's end and Adler-32 check, after "
                       "{} of the {} bytes of rows its {} need", where, produced, expected, image);
  if (produced < expected)
    return fmt::format("truncated PNG: {} inflates to {} bytes, and its {} need {} (each row with its filter byte)",
                       where, produced, image, expected);
  if (after > 0)
    return fmt::format("PNG image data is damaged: {} bytes follow the end of {}", after, where);
  return "";
}

// Segments whole, and scans' entropy-coded data followed by a marker until the end-of-image marker
// (a truncated file has none). As stb_image and libjpeg do, stray bytes between segments and
// anything after FFD9 are passed over.
std::string jpeg_problem(Bytes const& b) {
  std::size_t const n = b.size();
  auto const no_eoi = [](std::string const& where) {
    return "truncated JPEG: no end-of-image marker (FFD9); the file ends " + where;
  };
  std::size_t pos = 2, scans = 0;
  for (;;) {
    while (pos < n && b[pos] != 0xFF) ++pos;
    while (pos < n && b[pos] == 0xFF) ++pos;  // fill bytes
    if (pos >= n) return no_eoi(fmt::format("after {} scan(s)", scans));
    std::uint8_t const marker = b[pos++];
    std::size_t const at = pos - 2;
    if (marker == 0xD9) return "";
    if (marker == 0x00 || marker == 0x01 || (marker >= 0xD0 && marker <= 0xD8)) continue;  // no length follows
    if (n - pos < 2) return no_eoi(fmt::format("in the length of marker segment FF{:02X} at byte {}", marker, at));
    std::size_t const length = be16(b, pos);
    if (length < 2)
      return fmt::format("JPEG marker segment FF{:02X} at byte {} has length {} (at least 2)", marker, at, length);
    if (n - pos < length)
      return no_eoi(fmt::format("inside marker segment FF{:02X} at byte {} ({} of its {} bytes there)", marker, at,
                                n - pos, length));
    pos += length;
    if (marker != 0xDA) continue;
    ++scans;
    std::size_t const scan_data = pos;
    for (;;) {  // within the data FF is followed by 00 (a stuffed FF) or a restart marker
      auto const* ff = static_cast<std::uint8_t const*>(std::memchr(b.data() + pos, 0xFF, n - pos));
      if (!ff || ff + 1 == b.data() + n)
        return no_eoi(fmt::format("inside the entropy-coded data of scan {} (from byte {})", scans, scan_data));
      pos = std::size_t(ff - b.data());
      std::uint8_t const next = b[pos + 1];
      if (next == 0xFF) { ++pos; continue; }
      if (next != 0x00 && !(next >= 0xD0 && next <= 0xD7)) break;  // a marker: the scan ends here
      pos += 2;
    }
  }
}

std::string truncated_pixels(char const* format, std::string const& what, std::uint64_t need, std::size_t from,
                             std::size_t n) {
  return fmt::format("truncated {}: {} need {} bytes of pixel data from byte {}, the file has {}", format, what, need,
                     from, from < n ? n - from : 0);
}

// Uncompressed BMP (BI_RGB, BI_BITFIELDS): rows padded to 4 bytes, from the header's data offset.
// Run-length BMPs are left to stb_image, which refuses them.
std::string bmp_problem(Bytes const& b) {
  std::size_t const n = b.size();
  if (n < 26) return fmt::format("truncated BMP: {} bytes, less than its header", n);
  std::size_t const offset = le32(b, 10), header = le32(b, 14);
  std::int64_t width = 0, height = 0;
  std::size_t bits = 0, compression = 0;
  if (header == 12) {
    width = std::int64_t(le16(b, 18)), height = std::int64_t(le16(b, 20)), bits = le16(b, 24);
  } else {
    if (n < 34) return fmt::format("truncated BMP: {} bytes, less than its header", n);
    width = std::int32_t(le32(b, 18)), height = std::int32_t(le32(b, 22)), bits = le16(b, 28), compression = le32(b, 30);
  }
  if (compression != 0 && compression != 3 && compression != 6) return "";
  if (width <= 0 || height == 0 || bits == 0 || bits > 32 || width > STBI_MAX_DIMENSIONS || height > STBI_MAX_DIMENSIONS ||
      -height > STBI_MAX_DIMENSIONS)
    return "";  // stb_image refuses these itself
  std::uint64_t const row = (std::uint64_t(bits) * std::uint64_t(width) + 31) / 32 * 4;
  std::uint64_t const need = row * std::uint64_t(height < 0 ? -height : height);
  if (offset > n || n - offset < need)
    return truncated_pixels("BMP", fmt::format("{}x{} pixels of {} bits", width, height < 0 ? -height : height, bits),
                            need, offset, n);
  return "";
}

// Binary PNM (P5 grey, P6 colour; stb_image reads no other): after the header's maxval and one
// whitespace byte, width * height samples of 1 byte (maxval < 256) or 2.
std::string pnm_problem(Bytes const& b) {
  std::size_t const n = b.size();
  std::size_t pos = 2;
  auto const space = [](std::uint8_t c) { return c == ' ' || c == '\t' || c == '\n' || c == '\v' || c == '\f' || c == '\r'; };
  auto const number = [&](std::uint64_t& value) {
    for (;;) {  // whitespace and # comments, as stb_image skips them
      while (pos < n && space(b[pos])) ++pos;
      if (pos >= n || b[pos] != '#') break;
      while (pos < n && b[pos] != '\n' && b[pos] != '\r') ++pos;
    }
    std::size_t const start = pos;
    value = 0;
    while (pos < n && std::isdigit(b[pos]) && value < (1u << 30)) value = value * 10 + (b[pos++] - '0');
    return pos > start;
  };
  char const* const format = b[1] == '6' ? "PPM" : "PGM";
  std::uint64_t width = 0, height = 0, maxval = 0;
  if (!number(width) || !number(height) || !number(maxval) || pos >= n)
    return fmt::format("truncated {}: the header (width, height, maxval) is not whole", format);
  if (width > STBI_MAX_DIMENSIONS || height > STBI_MAX_DIMENSIONS) return "";  // stb_image refuses it itself
  ++pos;  // the one whitespace byte before the pixels
  std::uint64_t const samples = b[1] == '6' ? 3 : 1, depth = maxval > 255 ? 2 : 1;
  std::uint64_t const need = width * height * samples * depth;
  if (n - pos < need)
    return truncated_pixels(format, fmt::format("{}x{} pixels of {} sample(s) of {} byte(s)", width, height, samples, depth),
                            need, pos, n);
  return "";
}

// Blocks whole (extensions, images with their colour tables and data sub-blocks) up to the trailer
// (3B); a truncated file ends inside one or lacks the trailer.
std::string gif_problem(Bytes const& b) {
  std::size_t const n = b.size();
  if (n < 13) return fmt::format("truncated GIF: {} bytes, less than its header", n);
  auto const colour_table = [](std::uint8_t packed) { return packed & 0x80 ? 3u << ((packed & 7) + 1) : 0u; };
  std::size_t pos = 13 + colour_table(b[10]);
  if (pos > n) return "truncated GIF: the file ends inside its global colour table";
  std::size_t images = 0;
  auto const sub_blocks = [&](char const* what, std::size_t start) -> std::string {  // data blocks up to a 0
    for (;;) {
      if (pos >= n)
        return fmt::format("truncated GIF: the file ends inside the {} at byte {} (before the 0 that ends its data "
                           "blocks)", what, start);
      std::size_t const size = b[pos++];
      if (size == 0) return "";
      if (n - pos < size)
        return fmt::format("truncated GIF: in the {} at byte {}, a data block declares {} bytes and the file has {}",
                           what, start, size, n - pos);
      pos += size;
    }
  };
  for (;;) {
    if (pos >= n) return fmt::format("truncated GIF: no trailer (3B); the file ends after {} image(s)", images);
    std::size_t const start = pos;
    std::uint8_t const kind = b[pos];
    if (kind == 0x3B) return "";
    if (kind == 0x21) {
      pos += 2;  // introducer, label
      if (auto problem = sub_blocks("extension", start); !problem.empty()) return problem;
    } else if (kind == 0x2C) {
      if (n - pos < 11) return fmt::format("truncated GIF: the file ends inside the image descriptor at byte {}", start);
      pos += 10 + colour_table(b[pos + 9]) + 1;  // descriptor, local colour table, LZW code size
      if (pos > n) return fmt::format("truncated GIF: the file ends inside the image at byte {}", start);
      if (auto problem = sub_blocks("image", start); !problem.empty()) return problem;
      ++images;
    } else {
      return fmt::format("GIF: byte 0x{:02X} at byte {} where a block should start (21 extension, 2C image or 3B "
                         "trailer)", kind, start);
    }
  }
}

// TGA has no signature: stb_image takes a file none of the others claims as one. Pixel data
// follows the header, the id field and the colour map: width * height pixels, or run-length
// packets (a count byte, then one pixel repeated or that many pixels) covering as many.
std::string tga_problem(Bytes const& b) {
  std::size_t const n = b.size();
  if (n < 18) return fmt::format("truncated TGA: {} bytes, less than its header", n);
  std::size_t const type = b[2], width = le16(b, 12), height = le16(b, 14), bits = b[16];
  std::size_t const map_bytes = b[1] ? le16(b, 5) * ((b[7] + 7) / 8) : 0;
  std::size_t const offset = 18 + b[0] + map_bytes, pixel = (bits + 7) / 8;
  std::uint64_t const pixels = std::uint64_t(width) * height;
  std::string const what = fmt::format("{}x{} pixels of {} bits", width, height, bits);
  if (type == 1 || type == 2 || type == 3) {
    if (offset > n || n - offset < pixels * pixel) return truncated_pixels("TGA", what, pixels * pixel, offset, n);
    return "";
  }
  if (type != 9 && type != 10 && type != 11) return "";
  if (offset > n) return fmt::format("truncated TGA: the file ends inside its header and colour map ({} bytes)", offset);
  std::size_t pos = offset;
  std::uint64_t covered = 0;
  while (covered < pixels) {
    if (pos >= n)
      return fmt::format("truncated TGA: the run-length data ends after {} of the {} ({}) at byte {}", covered, pixels, what, pos);
    std::size_t const count = (b[pos] & 0x7F) + 1, data = b[pos] & 0x80 ? pixel : count * pixel;
    if (n - pos - 1 < data)
      return fmt::format("truncated TGA: the run-length packet at byte {} needs {} bytes, the file has {} ({} of the "
                         "{} pixels before it)", pos, data, n - pos - 1, covered, pixels);
    pos += 1 + data;
    covered += count;
  }
  return "";
}

enum class Format { png, jpeg, gif, bmp, pnm, psd_or_pic, unknown };

// As stb_image tells formats apart: by their first bytes.
Format sniff(Bytes const& b) {
  if (starts_with(b, "\x89PNG\r\n\x1a\n", 8)) return Format::png;
  if (starts_with(b, "\xFF\xD8", 2)) return Format::jpeg;
  if (starts_with(b, "GIF87a", 6) || starts_with(b, "GIF89a", 6)) return Format::gif;
  if (starts_with(b, "BM", 2)) return Format::bmp;
  if (starts_with(b, "P5", 2) || starts_with(b, "P6", 2)) return Format::pnm;
  if (starts_with(b, "8BPS", 4) || starts_with(b, "\x53\x80\xF6\x34", 4)) return Format::psd_or_pic;
  return Format::unknown;
}

std::string structure_problem(Format format, Bytes const& b) {
  switch (format) {
    case Format::png: {
      auto problem = png_problem(b);
      return problem.empty() ? png_data_problem(b) : problem;
    }
    case Format::jpeg: return jpeg_problem(b);
    case Format::gif: return gif_problem(b);
    case Format::bmp: return bmp_problem(b);
    case Format::pnm: return pnm_problem(b);
    default: return "";
  }
}

// "PATH: why" without "PATH: ", as BadImageError keeps it.
std::string reason_of(std::string const& path, std::string const& message) {
  std::string const prefix = path + ": ";
  return message.compare(0, prefix.size(), prefix) == 0 ? message.substr(prefix.size()) : message;
}

io::InputFile open_image(std::string const& path) {
  try {
    return io::InputFile(path, "images");
  } catch (io::InputError const& e) {
    throw BadImageError(path, reason_of(path, e.what()));
  }
}

// The width and height a file declares before anything of it is decoded: as stb_image reads them
// (stbi_info_from_memory: headers only), else, for a PNG whose header stb_image does not take,
// its IHDR's. false when neither says.
bool declared_size(Bytes const& b, Format format, std::uint64_t* width, std::uint64_t* height) {
  int w = 0, h = 0, channels = 0;
  if (stbi_info_from_memory(b.data(), int(b.size()), &w, &h, &channels) && w > 0 && h > 0) {
    *width = std::uint64_t(w), *height = std::uint64_t(h);
    return true;
  }
  if (format == Format::png && b.size() >= 24 && std::memcmp(&b[12], "IHDR", 4) == 0) {
    *width = be32(b, 16), *height = be32(b, 20);
    return true;
  }
  return false;
}

void require_same(CheckedImage const& image, io::FileIdentity const& now) {
  if (now.unchanged(image.identity)) return;
  throw BadImageError(image.path, "the file changed while joule read it (" +
                                      io::InputFile::change_text(image.identity, now) +
                                      "): it was written, replaced or had its status changed since it was checked; "
                                      "nothing of it was used");
}

ImageShape decode(std::string const& path, Bytes const& bytes, int channels, int size, Resize resize, std::uint8_t* out,
                  ImageLimits const& limits);

// One axis of a resampling: output i takes sum_k weight[i][k] * input[first[i] + k]. PIL's scheme
// (Image.resize): pixel centres at (i + 0.5) * scale; bilinear is a triangle filter widened by the
// scale when shrinking (so it averages rather than skips), nearest takes the pixel under the centre.
struct Axis {
  std::vector<int> first;
  std::vector<std::vector<double>> weight;
};

Axis axis(int in, int out, Resize resize) {
  Axis a;
  double const scale = double(in) / out;
  for (int i = 0; i < out; ++i) {
    double const centre = (i + 0.5) * scale;
    if (resize == Resize::nearest) {
      a.first.push_back(std::min(in - 1, int(centre)));
      a.weight.push_back({1.0});
      continue;
    }
    double const widen = std::max(scale, 1.0), support = widen;
    int const lo = std::max(0, int(centre - support + 0.5)), hi = std::min(in, int(centre + support + 0.5));
    std::vector<double> w;
    double total = 0;
    for (int x = lo; x < hi; ++x) {
      double const d = std::abs((x + 0.5 - centre) / widen);
      w.push_back(d < 1.0 ? 1.0 - d : 0.0);
      total += w.back();
    }
    for (auto& v : w) v = total > 0 ? v / total : 0.0;
    a.first.push_back(lo);
    a.weight.push_back(std::move(w));
  }
  return a;
}

}  // namespace

std::size_t ImageLimits::max_bytes() const {
  std::uint64_t const cap = std::uint64_t(std::numeric_limits<int>::max());
  std::uint64_t const pixels = std::min<std::uint64_t>(max_pixels, cap);  // no overflow below
  return std::size_t(std::min(cap, pixels * 8 + (std::uint64_t(16) << 20)));
}

std::string max_pixels_text(ImageLimits const& limits) { return fmt::format("--max-image-pixels {}", limits.max_pixels); }

std::size_t image_descriptor_budget() {
  struct rlimit limit {};
  if (::getrlimit(RLIMIT_NOFILE, &limit) != 0) return 0;
  std::uint64_t const soft = limit.rlim_cur == RLIM_INFINITY ? (std::uint64_t(1) << 20) : std::uint64_t(limit.rlim_cur);
  return soft > 128 ? std::size_t((soft - 64) / 2) : 0;
}

ImageShape load_image(std::string const& path, int channels, int size, Resize resize, std::uint8_t* out,
                      ImageLimits const& limits) {
  return load_image(open_image(path), channels, size, resize, out, limits);
}

ImageShape load_image(io::InputFile const& file, int channels, int size, Resize resize, std::uint8_t* out,
                      ImageLimits const& limits) {
  std::string const& path = file.path();
  std::size_t const max_bytes = limits.max_bytes();
  Bytes bytes;
  try {
    file.read_at_most(max_bytes, bytes);  // from its start, through the descriptor checked
  } catch (io::InputError const& e) {
    throw BadImageError(path, reason_of(path, e.what()));
  }
  if (bytes.size() > max_bytes)
    throw BadImageError(path, fmt::format("more than the {} bytes joule reads of an image file (8 bytes for each of "
                                          "the {} pixels it decodes at most ({}), + 16 MiB, and never 2 GiB); nothing "
                                          "of it was decoded",
                                          max_bytes, limits.max_pixels, max_pixels_text(limits)));
  return decode(path, bytes, channels, size, resize, out, limits);
}

CheckedImage check_image(std::string const& path, bool keep_open, int channels, int size, Resize resize,
                         std::uint8_t* out, ImageLimits const& limits, ImageShape* shape) {
  auto file = std::make_shared<io::InputFile const>(open_image(path));
  ImageShape const decoded = load_image(*file, channels, size, resize, out, limits);
  if (shape) *shape = decoded;
  CheckedImage image{path, nullptr, file->identity()};
  if (keep_open) image.file = std::move(file);
  return image;
}

ImageShape load_image(CheckedImage const& image, int channels, int size, Resize resize, std::uint8_t* out,
                      ImageLimits const& limits) {
  auto const examined = [&](io::InputFile const& file) {
    try {
      return file.current();
    } catch (io::InputError const& e) {
      throw BadImageError(image.path, reason_of(image.path, e.what()));
    }
  };
  if (image.file) {  // the descriptor checked
    require_same(image, examined(*image.file));
    ImageShape const shape = load_image(*image.file, channels, size, resize, out, limits);
    require_same(image, examined(*image.file));
    return shape;
  }
  io::InputFile const file = open_image(image.path);  // again by name: it must be the file checked
  require_same(image, file.identity());
  ImageShape const shape = load_image(file, channels, size, resize, out, limits);
  require_same(image, examined(file));
  return shape;
}

namespace {

ImageShape decode(std::string const& path, Bytes const& bytes, int channels, int size, Resize resize, std::uint8_t* out,
                  ImageLimits const& limits) {
  if (bytes.empty()) throw BadImageError(path, "an empty file, not an image");
  Format const format = sniff(bytes);
  // The declared size first: nothing is inflated (png_data_problem) or decoded for more pixels than allowed.
  if (std::uint64_t width = 0, height = 0; declared_size(bytes, format, &width, &height) &&
                                           (height != 0 && width > limits.max_pixels / height))
    throw BadImageError(path, fmt::format("declares {} x {} pixels ({}), more than the {} pixels joule decodes ({}); "
                                          "nothing of it was decoded",
                                          width, height, width * height, limits.max_pixels, max_pixels_text(limits)));
  if (auto const problem = structure_problem(format, bytes); !problem.empty()) throw BadImageError(path, problem);
  int w = 0, h = 0, in_channels = 0;
  std::unique_ptr<stbi_uc, void (*)(void*)> pixels(
      stbi_load_from_memory(bytes.data(), int(bytes.size()), &w, &h, &in_channels, channels), stbi_image_free);
  if (!pixels)
    throw BadImageError(path, fmt::format("cannot decode it as an image (stb_image: {})", stbi_failure_reason()));
  if (format == Format::unknown)  // decoded, so stb_image took it for a TGA
    if (auto const problem = tga_problem(bytes); !problem.empty()) throw BadImageError(path, problem);
  if (resize == Resize::none && (w != size || h != size))
    throw std::runtime_error(fmt::format("{}: the image is {}x{}; with resize none it must be {}x{} (the model's "
                                         "image_size); resize it with bilinear or nearest",
                                         path, w, h, size, size));
  auto const* src = pixels.get();  // [h][w][channels]
  if (w == size && h == size) {
    for (int c = 0; c < channels; ++c)
      for (int i = 0; i < size * size; ++i) out[c * size * size + i] = src[i * channels + c];
    return {w, h, in_channels};
  }
  Axis const ax = axis(w, size, resize), ay = axis(h, size, resize);
  // With alpha, colours are filtered premultiplied (as PIL does for RGBA, except with nearest), so a
  // transparent pixel's colour does not bleed into its neighbours.
  bool const premultiplied = channels == 4 && resize == Resize::bilinear;
  auto value = [&](std::size_t pixel, int c) {
    double const v = src[pixel * channels + c];
    return premultiplied && c < 3 ? v * src[pixel * channels + 3] / 255.0 : v;
  };
  std::vector<double> rows(std::size_t(h) * size * channels), result(static_cast<std::size_t>(channels));
  for (int y = 0; y < h; ++y)  // horizontal pass: [h][size][channels]
    for (int x = 0; x < size; ++x)
      for (int c = 0; c < channels; ++c) {
        double s = 0;
        for (std::size_t k = 0; k < ax.weight[x].size(); ++k) s += ax.weight[x][k] * value(std::size_t(y) * w + ax.first[x] + k, c);
        rows[(std::size_t(y) * size + x) * channels + c] = s;
      }
  for (int y = 0; y < size; ++y)
    for (int x = 0; x < size; ++x) {
      for (int c = 0; c < channels; ++c) {
        double s = 0;
        for (std::size_t k = 0; k < ay.weight[y].size(); ++k)
          s += ay.weight[y][k] * rows[((ay.first[y] + k) * size + x) * channels + c];
        result[c] = s;
      }
      if (premultiplied)
        for (int c = 0; c < 3; ++c) result[c] = result[3] > 0 ? result[c] * 255.0 / result[3] : 0.0;
      for (int c = 0; c < channels; ++c)
        out[(std::size_t(c) * size + y) * size + x] = std::uint8_t(std::clamp(std::lround(result[c]), 0L, 255L));
    }
  return {w, h, in_channels};
}

}  // namespace

}  // namespace joule::apps
