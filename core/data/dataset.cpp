#include "core/data/dataset.hpp"

#include "core/io/h5file.hpp"

#include <algorithm>
#include <numeric>

namespace joule {

namespace {
[[noreturn]] void fail(std::string const& path, std::string const& what) {
  throw DatasetError(path + ": " + what);
}
std::string dims_text(io::Dims const& d) {
  std::string s = "[";
  for (std::size_t i = 0; i < d.size(); ++i) s += (i ? ", " : "") + std::to_string(d[i]);
  return s + "]";
}
}  // namespace

Dataset Dataset::open(std::string const& path, ModelConfig const* model) {
  Dataset ds;
  ds.path_ = path;
  try {
    io::H5File f(path, io::H5File::Mode::read);
    for (char const* name : {"/images", "/tokens"})
      if (!f.exists(name)) fail(path, std::string("missing dataset ") + name + " (see the README's dataset format)");
    if (f.dtype("/images") != "uint8") fail(path, "/images has element type " + f.dtype("/images") + ", expected uint8");
    if (f.dtype("/tokens") != "int32") fail(path, "/tokens has element type " + f.dtype("/tokens") + ", expected int32");
    auto const im = f.dims("/images"), tk = f.dims("/tokens");
    if (im.size() != 5) fail(path, "/images has shape " + dims_text(im) + ", expected [N, F, C, H, W]");
    if (tk.size() != 2) fail(path, "/tokens has shape " + dims_text(tk) + ", expected [N, T]");
    if (im[0] != tk[0])
      fail(path, "/images holds " + std::to_string(im[0]) + " samples but /tokens " + std::to_string(tk[0]));
    if (im[0] == 0) fail(path, "holds no samples");
    ds.shape_ = {im[0], int(im[1]), int(im[2]), int(im[3]), int(im[4]), int(tk[1])};
    if (f.has_attribute("/", "format") && f.attribute_string("/", "format") != kDatasetFormat)
      fail(path, "format attribute is '" + f.attribute_string("/", "format") + "', expected " + kDatasetFormat);
  } catch (io::H5Error const& e) {
    throw DatasetError(e.what());
  }
  if (model) {
    auto const& s = ds.shape_;
    auto mismatch = [&](char const* what, long long got, long long want, char const* field) {
      if (got != want)
        fail(path, std::string(what) + " is " + std::to_string(got) + " but the model's " + field +
                       " is " + std::to_string(want));
    };
    mismatch("frames per sample", s.frames, model->frames, "model.frames");
    mismatch("channels", s.channels, model->channels, "model.channels");
    mismatch("image height", s.height, model->image_size, "model.image_size");
    mismatch("image width", s.width, model->image_size, "model.image_size");
    mismatch("text length", s.text_len, model->text_len, "model.text_len");
  }
  return ds;
}

HostBatch Dataset::read(std::vector<std::size_t> const& samples) const {
  HostBatch b;
  b.samples = samples;
  std::size_t const px = shape_.pixels_per_sample();
  b.images.resize(samples.size() * px);
  b.tokens.resize(samples.size() * shape_.text_len);
  try {
    io::H5File f(path_, io::H5File::Mode::read);
    for (std::size_t i = 0; i < samples.size(); ++i) {
      if (samples[i] >= shape_.count) fail(path_, "sample " + std::to_string(samples[i]) + " out of range");
      auto const im = f.read_rows<std::uint8_t>("/images", samples[i], 1);
      auto const tk = f.read_rows<std::int32_t>("/tokens", samples[i], 1);
      std::copy(im.begin(), im.end(), b.images.begin() + i * px);
      std::copy(tk.begin(), tk.end(), b.tokens.begin() + i * shape_.text_len);
    }
  } catch (io::H5Error const& e) {
    throw DatasetError(e.what());
  }
  for (std::size_t i = 0; i < b.tokens.size(); ++i)
    if (b.tokens[i] < 0 || b.tokens[i] >= kVocabSize)
      fail(path_, "/tokens[" + std::to_string(samples[i / shape_.text_len]) + "] holds id " +
                      std::to_string(b.tokens[i]) + "; allowed: 0..255 bytes, 256 BOS, 257 EOS, 258 PAD");
  return b;
}

void write_dataset(std::string const& path, DatasetShape const& s,
                   std::vector<std::uint8_t> const& images, std::vector<std::int32_t> const& tokens) {
  if (images.size() != s.count * s.pixels_per_sample() || tokens.size() != s.count * s.text_len)
    throw DatasetError(path + ": write_dataset: buffer sizes do not match the shape");
  io::H5File f(path, io::H5File::Mode::truncate);
  f.write("/images", images.data(),
          {s.count, std::size_t(s.frames), std::size_t(s.channels), std::size_t(s.height), std::size_t(s.width)});
  f.write("/tokens", tokens.data(), {s.count, std::size_t(s.text_len)});
  f.set_attribute("/", "format", kDatasetFormat);
  f.set_attribute("/", "count", (long long)s.count);
  f.set_attribute("/", "frames", (long long)s.frames);
  f.set_attribute("/", "channels", (long long)s.channels);
  f.set_attribute("/", "height", (long long)s.height);
  f.set_attribute("/", "width", (long long)s.width);
  f.set_attribute("/", "text_len", (long long)s.text_len);
}

std::vector<std::int32_t> encode_caption(std::string const& text, int text_len) {
  if (int(text.size()) + 2 > text_len)
    throw DatasetError("caption '" + text + "' needs " + std::to_string(text.size() + 2) +
                       " tokens with BOS/EOS, more than text_len = " + std::to_string(text_len));
  std::vector<std::int32_t> t(text_len, kTokenPad);
  t[0] = kTokenBos;
  for (std::size_t i = 0; i < text.size(); ++i) t[i + 1] = static_cast<unsigned char>(text[i]);
  t[text.size() + 1] = kTokenEos;
  return t;
}

std::string decode_caption(std::int32_t const* tokens, int text_len) {
  std::string s;
  for (int i = (text_len > 0 && tokens[0] == kTokenBos) ? 1 : 0; i < text_len; ++i) {
    if (tokens[i] == kTokenEos || tokens[i] == kTokenPad) break;
    if (tokens[i] >= 0 && tokens[i] < 256) s += char(tokens[i]);
  }
  return s;
}

BatchSampler::BatchSampler(std::vector<std::size_t> indices, int batch, std::uint64_t seed)
    : indices_(std::move(indices)), batch_(batch), seed_(seed) {
  if (indices_.empty()) throw DatasetError("BatchSampler: no samples to draw from");
  shuffle();
}

void BatchSampler::shuffle() {
  order_ = indices_;
  std::mt19937_64 rng(seed_ * 0x9E3779B97F4A7C15ull + std::uint64_t(epoch_));
  std::shuffle(order_.begin(), order_.end(), rng);
}

std::vector<std::size_t> BatchSampler::next() {
  std::vector<std::size_t> out;
  while (int(out.size()) < batch_) {
    if (cursor_ == (long long)order_.size()) {
      ++epoch_;
      cursor_ = 0;
      shuffle();
    }
    out.push_back(order_[cursor_++]);
  }
  return out;
}

void BatchSampler::restore(long long epoch, long long cursor) {
  if (epoch < 0 || cursor < 0 || cursor > (long long)indices_.size())
    throw DatasetError("BatchSampler: cannot restore epoch " + std::to_string(epoch) + ", cursor " +
                       std::to_string(cursor));
  epoch_ = epoch;
  cursor_ = cursor;
  shuffle();
}

}  // namespace joule
