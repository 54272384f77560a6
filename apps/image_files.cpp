#include "image_files.hpp"

#include <fmt/format.h>

#define STB_IMAGE_IMPLEMENTATION
#define STBI_NO_LINEAR
#define STBI_NO_HDR
#include <stb/stb_image.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <filesystem>
#include <memory>
#include <stdexcept>

namespace joule::apps {

Resize parse_resize(std::string const& name) {
  if (name == "bilinear") return Resize::bilinear;
  if (name == "nearest") return Resize::nearest;
  if (name == "none") return Resize::none;
  throw std::invalid_argument("resize '" + name + "': allowed are bilinear, nearest, none");
}

std::vector<std::string> image_files(std::string const& folder) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (!fs::is_directory(folder, ec)) throw std::runtime_error(folder + ": no such folder");
  static char const* const kExtensions[] = {".png", ".jpg", ".jpeg", ".bmp", ".gif", ".tga", ".pgm", ".ppm", ".pnm"};
  std::vector<std::string> files;
  for (auto const& entry : fs::directory_iterator(folder)) {
    if (!entry.is_regular_file()) continue;
    std::string ext = entry.path().extension().string();
    std::transform(ext.begin(), ext.end(), ext.begin(), [](unsigned char c) { return char(std::tolower(c)); });
    if (std::find(std::begin(kExtensions), std::end(kExtensions), ext) != std::end(kExtensions))
      files.push_back(entry.path().string());
  }
  if (files.empty())
    throw std::runtime_error(folder + ": no image files (png, jpg, jpeg, bmp, gif, tga, pgm, ppm, pnm)");
  std::sort(files.begin(), files.end());
  return files;
}

namespace {

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

void load_image(std::string const& path, int channels, int size, Resize resize, std::uint8_t* out) {
  int w = 0, h = 0, in_channels = 0;
  std::unique_ptr<stbi_uc, void (*)(void*)> pixels(stbi_load(path.c_str(), &w, &h, &in_channels, channels),
                                                   stbi_image_free);
  if (!pixels) throw std::runtime_error(fmt::format("{}: cannot read the image ({})", path, stbi_failure_reason()));
  if (resize == Resize::none && (w != size || h != size))
    throw std::runtime_error(fmt::format("{}: the image is {}x{}; with resize none it must be {}x{} (the model's "
                                         "image_size); resize it with bilinear or nearest",
                                         path, w, h, size, size));
  auto const* src = pixels.get();  // [h][w][channels]
  if (w == size && h == size) {
    for (int c = 0; c < channels; ++c)
      for (int i = 0; i < size * size; ++i) out[c * size * size + i] = src[i * channels + c];
    return;
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
}

}  // namespace joule::apps
