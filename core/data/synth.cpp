#include "core/data/synth.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <random>

namespace joule {

namespace {

struct Colour {
  char const* name;
  std::array<int, 3> rgb;
};
constexpr std::array<Colour, 6> kColours{{{"red", {230, 40, 40}},
                                          {"green", {40, 200, 60}},
                                          {"blue", {50, 80, 240}},
                                          {"yellow", {235, 220, 40}},
                                          {"magenta", {220, 50, 220}},
                                          {"white", {235, 235, 235}}}};
constexpr std::array<char const*, 3> kShapes{"square", "circle", "triangle"};
constexpr std::array<char const*, 5> kPlaces{"top left", "top right", "bottom left", "bottom right", "center"};
constexpr std::array<char const*, 4> kMotions{"left", "right", "up", "down"};

// Is pixel (x, y) inside `shape` of half-size r centred at (cx, cy)?
bool inside(int shape, double x, double y, double cx, double cy, double r) {
  double const dx = x - cx, dy = y - cy;
  switch (shape) {
    case 0: return std::abs(dx) <= r && std::abs(dy) <= r;
    case 1: return dx * dx + dy * dy <= r * r;
    default:  // upward triangle: apex at top, base at bottom
      return dy <= r && dy >= -r && std::abs(dx) <= (dy + r) / 2.0;
  }
}

}  // namespace

SynthData make_synthetic(SynthOptions const& o) {
  if (o.count == 0 || o.frames < 1 || o.image_size < 8 || o.channels != 3)
    throw DatasetError("synthetic data: need count >= 1, frames >= 1, image_size >= 8 and 3 channels");
  SynthData d;
  d.shape = {o.count, o.frames, o.channels, o.image_size, o.image_size, o.text_len};
  std::size_t const px = d.shape.pixels_per_sample();
  d.images.resize(o.count * px);
  d.tokens.reserve(o.count * o.text_len);
  std::mt19937_64 rng(o.seed);
  std::uniform_int_distribution<int> noise(0, 24);
  double const n = o.image_size;
  for (std::size_t s = 0; s < o.count; ++s) {
    int const colour = int(rng() % kColours.size()), shape = int(rng() % kShapes.size());
    double const r = n * (0.13 + 0.04 * std::uniform_real_distribution<double>(0, 1)(rng));
    double const jitter = n * 0.05;
    std::uniform_real_distribution<double> jit(-jitter, jitter);
    std::string caption = std::string("a ") + kColours[colour].name + " " + kShapes[shape] + " ";
    double cx0, cy0, vx = 0, vy = 0;
    if (o.frames == 1) {
      int const place = int(rng() % kPlaces.size());
      double const lo = n * 0.27, hi = n * 0.73;
      double const xs[] = {lo, hi, lo, hi, n / 2}, ys[] = {lo, lo, hi, hi, n / 2};
      cx0 = xs[place] + jit(rng);
      cy0 = ys[place] + jit(rng);
      caption += kPlaces[place];
    } else {
      int const motion = int(rng() % kMotions.size());
      double const travel = n * 0.5;  // from one side to the other over the clip
      double const step = travel / (o.frames - 1);
      double const dxs[] = {-step, step, 0, 0}, dys[] = {0, 0, -step, step};
      vx = dxs[motion];
      vy = dys[motion];
      cx0 = n / 2 - vx * (o.frames - 1) / 2 + jit(rng);
      cy0 = n / 2 - vy * (o.frames - 1) / 2 + jit(rng);
      caption += std::string("moving ") + kMotions[motion];
    }
    for (int f = 0; f < o.frames; ++f) {
      double const cx = cx0 + vx * f, cy = cy0 + vy * f;
      for (int y = 0; y < o.image_size; ++y)
        for (int x = 0; x < o.image_size; ++x) {
          bool const on = inside(shape, x + 0.5, y + 0.5, cx, cy, r);
          for (int c = 0; c < 3; ++c) {
            int const v = (on ? kColours[colour].rgb[c] : 16) + noise(rng) - 12;
            d.images[s * px + ((std::size_t(f) * 3 + c) * o.image_size + y) * o.image_size + x] =
                std::uint8_t(std::clamp(v, 0, 255));
          }
        }
    }
    auto const t = encode_caption(caption, o.text_len);
    d.tokens.insert(d.tokens.end(), t.begin(), t.end());
    d.captions.push_back(caption);
  }
  return d;
}

void write_synthetic(std::string const& path, SynthOptions const& options) {
  auto const d = make_synthetic(options);
  write_dataset(path, d.shape, d.images, d.tokens);
}

}  // namespace joule
