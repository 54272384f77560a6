#include "core/data/dataset.hpp"

#include "core/io/commit.hpp"
#include "core/io/h5file.hpp"
#include "core/model/limits.hpp"

#include <fmt/format.h>

#include <sys/stat.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <utility>

namespace joule {

namespace {
[[noreturn]] void fail(std::string const& path, std::string const& what) {
  throw DatasetError(path + ": " + what);
}
[[noreturn]] void fail_changed(std::string const& path, std::string const& how) {
  fail(path, "the dataset changed while this run was reading it (" + how +
                 "); a dataset must not be replaced or rewritten under a running job");
}
std::string dims_text(io::Dims const& d) {
  std::string s = "[";
  for (std::size_t i = 0; i < d.size(); ++i) s += (i ? ", " : "") + std::to_string(d[i]);
  return s + "]";
}
}  // namespace

namespace {
// Per-sample extents a configuration can ask for (docs/configuration.md); a file beyond them is
// refused before its size is trusted for anything.
struct Extent {
  char const* object;
  io::Dims const* shape;
  char const* what;
  std::size_t value;
  std::size_t lo, hi;
  char const* field;
};

std::string token_rule() { return "allowed: 0..255 bytes, 256 BOS, 257 EOS, 258 PAD"; }

// "" when a row of ids (each already in the vocabulary) is a caption as the model learns it:
// BOS, bytes, EOS, then only PAD; else what is wrong with it. Training on rows without BOS or EOS
// teaches the model to caption without them (greedy decoding never stops).
std::string caption_row_problem(std::int32_t const* row, std::size_t T) {
  auto const at = [](std::size_t p) { return " at position " + std::to_string(p); };
  if (row[0] != kTokenBos) return "does not start with BOS (256): id " + std::to_string(row[0]) + at(0);
  std::size_t p = 1;
  while (p < T && row[p] < 256) ++p;
  if (p == T) return "has no EOS (257): the caption fills the row (make text_len larger, or the caption shorter)";
  if (row[p] != kTokenEos) return "holds " + std::string(row[p] == kTokenBos ? "BOS" : "PAD") + " before its EOS" + at(p);
  for (std::size_t q = p + 1; q < T; ++q)
    if (row[q] != kTokenPad) return "holds id " + std::to_string(row[q]) + at(q) + " after its EOS, where only PAD (258) may follow";
  return "";
}
}  // namespace

namespace {
io::SharedInput open_input(std::string const& path) {
  try {
    return std::make_shared<io::InputFile const>(io::open_input(path));
  } catch (io::H5Error const& e) {
    throw DatasetError(e.what());
  }
}
void require_dataset_unchanged(io::InputFile const& in) {
  try {
    io::require_unchanged(in);
  } catch (io::H5Error const& e) {
    throw DatasetError(e.what());
  }
}
}  // namespace

Dataset Dataset::open(std::string const& path, ModelConfig const* model) {
  // Opened once: the child and this process read the same file, through its descriptor.
  io::SharedInput const file = open_input(path);
  // Everything is read first in a child process, where a crash of the HDF5 library on a damaged
  // or forged file ends only that process (io::read_in_child).
  io::ChildRead child;
  try {
    child = io::read_in_child(*file, [&] { open_checked(file, model, true); }, io::read_timeout_for(*file));
  } catch (io::H5Error const& e) {
    throw DatasetError(e.what());
  }
  // Completed there: the contents are known good, and only the structure is read again here.
  // Rejected there (or not run): the same checks here throw the same error.
  Dataset ds = open_checked(file, model, /*check_contents=*/!child.ran || child.threw);
  require_dataset_unchanged(*file);  // what the child checked is what was read here
  return ds;
}

void Dataset::check_shape(std::string const& path, ModelConfig const& model) {
  io::SharedInput const file = open_input(path);
  try {  // in a child first, as open() does: a forged file cannot crash the job here
    io::read_in_child(*file, [&] { open_checked(file, &model, false); }, io::read_timeout_for(*file));
  } catch (io::H5Error const& e) {
    throw DatasetError(e.what());
  }
  open_checked(file, &model, /*check_contents=*/false);
  require_dataset_unchanged(*file);
}

namespace {
// Why a file without /images or /tokens is not a dataset: what it is, when its root attributes
// say (another joule file given by mistake: a run log, a checkpoint), and what a dataset holds.
std::string not_a_dataset(io::H5File const& f, char const* missing) {
  std::string format, tuning;
  try {
    if (f.has_attribute("/", "format")) format = f.attribute_string("/", "format");
    if (f.has_attribute("/", "tuning")) tuning = f.attribute_string("/", "tuning");
  } catch (io::H5Error const&) {  // an attribute that is not a string: say nothing of it
  }
  std::string const expected =
      fmt::format("joule data info and training read a captioning dataset: /images uint8 [N, F, C, H, W] and "
                  "/tokens int32 [N, T], root attribute format = \"{}\" (docs/datasets.md)", kDatasetFormat);
  std::string what;
  if (format == "joule-run-log-v1" && tuning == "profile")
    what = "this is a joule energy profile (root attributes format = \"joule-run-log-v1\", tuning = \"profile\"; "
           "written by the energy tool), not a dataset: read it with `joule inspect`";
  else if (format == "joule-run-log-v1")
    what = "this is a joule run log (root attribute format = \"joule-run-log-v1\"; written by joule tune or "
           "joule train --tune), not a dataset: read it with `joule inspect` or apps/scripts/plot_run.py";
  else if (format == "joule-checkpoint-v1")
    what = "this is a joule checkpoint (root attribute format = \"joule-checkpoint-v1\"; written by joule train), "
           "not a dataset: continue its run with `joule train --resume`";
  else if (!format.empty() && format != kDatasetFormat)
    what = fmt::format("this HDF5 file's root attribute format is \"{}\": not a joule dataset", format);
  if (what.empty()) return fmt::format("missing dataset {}: {}", missing, expected);
  return fmt::format("{} (it has no {}); {}", what, missing, expected);
}
}  // namespace

Dataset Dataset::open_checked(io::SharedInput const& file, ModelConfig const* model, bool check_contents) {
  std::string const& path = file->path();
  Dataset ds;
  ds.path_ = path;
  ds.file_ = file;
  try {
    io::H5File f(*file);
    for (char const* name : {"/images", "/tokens"})
      if (!f.exists(name)) fail(path, not_a_dataset(f, name));
    if (f.dtype("/images") != "uint8") fail(path, "/images has element type " + f.dtype("/images") + ", expected uint8");
    if (f.dtype("/tokens") != "int32") fail(path, "/tokens has element type " + f.dtype("/tokens") + ", expected int32");
    auto const im = f.dims("/images"), tk = f.dims("/tokens");
    if (im.size() != 5) fail(path, "/images has shape " + dims_text(im) + ", expected [N, F, C, H, W]");
    if (tk.size() != 2) fail(path, "/tokens has shape " + dims_text(tk) + ", expected [N, T]");
    if (im[0] != tk[0])
      fail(path, "/images holds " + std::to_string(im[0]) + " samples but /tokens " + std::to_string(tk[0]));
    if (im[0] == 0) fail(path, "holds no samples");
    if (im[0] > kMaxSamples)
      fail(path, "/images and /tokens claim " + std::to_string(im[0]) + " samples; joule reads at most " +
                     std::to_string(kMaxSamples));
    using namespace limits;  // core/model/limits.json, as the configuration's ranges
    for (Extent const& e : {Extent{"/images", &im, "frames per sample", im[1], kFramesMin, kFramesMax, "model.frames"},
                            Extent{"/images", &im, "channels", im[2], kChannelsMin, kChannelsMax, "model.channels"},
                            Extent{"/images", &im, "image height", im[3], kImageSizeMin, kImageSizeMax, "model.image_size"},
                            Extent{"/images", &im, "image width", im[4], kImageSizeMin, kImageSizeMax, "model.image_size"},
                            Extent{"/tokens", &tk, "text length", tk[1], kTextLenMin, kTextLenMax, "model.text_len"}})
      if (e.value < e.lo || e.value > e.hi)
        fail(path, std::string(e.object) + " has shape " + dims_text(*e.shape) + ": " + e.what + " " +
                       std::to_string(e.value) + " is outside " + std::to_string(e.lo) + ".." +
                       std::to_string(e.hi) + " (the range of " + e.field + ")");
    // The file must hold the samples it claims (a sparse or forged file can declare 2^40 of them).
    f.check_stored("/images");
    f.check_stored("/tokens");
    ds.shape_ = {im[0], int(im[1]), int(im[2]), int(im[3]), int(im[4]), int(tk[1])};
    if (f.has_attribute("/", "format") && f.attribute_string("/", "format") != kDatasetFormat)
      fail(path, "format attribute is '" + f.attribute_string("/", "format") + "', expected " + kDatasetFormat);
    // The root attributes, where present, must describe the datasets.
    auto const& s = ds.shape_;
    std::pair<char const*, std::size_t> const described[] = {
        {"count", s.count},        {"frames", std::size_t(s.frames)}, {"channels", std::size_t(s.channels)},
        {"height", std::size_t(s.height)}, {"width", std::size_t(s.width)}, {"text_len", std::size_t(s.text_len)}};
    for (auto const& [name, value] : described)
      if (f.has_attribute("/", name)) {
        long long const a = f.attribute_int("/", name);
        if (a < 0 || std::size_t(a) != value)
          fail(path, std::string("root attribute '") + name + "' is " + std::to_string(a) + " but /images and /tokens hold " +
                         std::to_string(value));
      }
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
  if (check_contents) ds.check_contents();
  return ds;
}

// Every read re-checks what open() checked that a read depends on: the file is still the one
// opened (not replaced under the run: `mv new.h5 data.h5`), and its datasets still have the
// shapes opened, so that no read copies rows of another size into the batch (a larger swapped-in
// file corrupted the heap; a smaller one was read silently).
void Dataset::check_same_file() const {
  if (!file_) return;
  io::FileIdentity const& opened = file_->identity();
  struct stat st;
  if (::stat(path_.c_str(), &st) != 0 || std::uint64_t(st.st_dev) != opened.device ||
      std::uint64_t(st.st_ino) != opened.inode)
    fail_changed(path_, "another file is now at this path");
  // Rewritten in place (the same inode): found before HDF5 reads a file that may be half written.
  // Its status-change time (ctime) moves with any write, and no owner can set it back, even where
  // they put the size and the modification time back as they were.
  io::FileIdentity now;
  try {
    now = file_->current();
  } catch (io::InputError const& e) {
    throw DatasetError(e.what());
  }
  if (!now.unchanged(opened))
    fail_changed(path_, "it was rewritten in place, or its status changed: " + io::InputFile::change_text(opened, now) +
                            " since the run opened it");
}

void Dataset::check_unchanged(io::H5File const& f) const {
  auto const changed = [&](std::string const& how) { fail_changed(path_, how); };
  io::Dims const images{shape_.count, std::size_t(shape_.frames), std::size_t(shape_.channels),
                        std::size_t(shape_.height), std::size_t(shape_.width)};
  io::Dims const tokens{shape_.count, std::size_t(shape_.text_len)};
  for (auto const& [name, want] : {std::pair<char const*, io::Dims const&>{"/images", images}, {"/tokens", tokens}}) {
    if (!f.exists(name)) changed(std::string(name) + " is gone");
    io::Dims const got = f.dims(name);
    if (got != want) changed(std::string(name) + " is now " + dims_text(got) + ", it was " + dims_text(want) + " when the run opened it");
  }
}

void Dataset::check_contents() const {
  std::size_t const sample_bytes = shape_.pixels_per_sample() + sizeof(std::int32_t) * shape_.text_len;
  std::size_t const rows = std::max<std::size_t>(1, kCheckChunkBytes / sample_bytes);
  std::size_t const T = shape_.text_len;
  try {
    io::H5File f(*file_);
    for (std::size_t first = 0; first < shape_.count; first += rows) {
      std::size_t const n = std::min(rows, shape_.count - first);
      auto const tokens = f.read_rows<std::int32_t>("/tokens", first, n);
      for (std::size_t i = 0; i < tokens.size(); ++i)
        if (tokens[i] < 0 || tokens[i] >= kVocabSize)
          fail(path_, "/tokens[" + std::to_string(first + i / T) + "][" + std::to_string(i % T) + "] (sample " +
                          std::to_string(first + i / T) + ", position " + std::to_string(i % T) + ") holds id " +
                          std::to_string(tokens[i]) + "; " + token_rule());
      for (std::size_t r = 0; r < n; ++r)
        if (auto const why = caption_row_problem(tokens.data() + r * T, T); !why.empty())
          fail(path_, "/tokens[" + std::to_string(first + r) + "] (sample " + std::to_string(first + r) + ") " + why +
                          "; a caption is [BOS, bytes..., EOS, PAD...]");
      // Pixels are uint8, so every value is valid; reading them proves the file is whole (a
      // truncated file or a damaged compressed chunk fails here, not at some later step).
      f.read_rows<std::uint8_t>("/images", first, n);
    }
  } catch (io::H5Error const& e) {
    throw DatasetError(e.what());
  }
}

HostBatch Dataset::read(std::vector<std::size_t> const& samples) const {
  HostBatch b;
  read(samples, b);
  return b;
}

void Dataset::read(std::vector<std::size_t> const& samples, HostBatch& b) const {
  b.samples = samples;
  std::size_t const px = shape_.pixels_per_sample(), tl = std::size_t(shape_.text_len);
  b.images.resize(samples.size() * px);
  b.tokens.resize(samples.size() * tl);
  try {
    check_same_file();
    io::H5File f(*file_);
    check_unchanged(f);
    for (std::size_t i = 0; i < samples.size();) {
      if (samples[i] >= shape_.count) fail(path_, "sample " + std::to_string(samples[i]) + " out of range");
      std::size_t run = 1;  // samples[i], samples[i] + 1, ... read as one block
      while (i + run < samples.size() && samples[i + run] == samples[i] + run && samples[i + run] < shape_.count) ++run;
      auto const im = f.read_rows<std::uint8_t>("/images", samples[i], run);
      auto const tk = f.read_rows<std::int32_t>("/tokens", samples[i], run);
      if (im.size() != run * px || tk.size() != run * tl) fail(path_, "rows of an unexpected size were read");
      std::copy(im.begin(), im.end(), b.images.begin() + i * px);
      std::copy(tk.begin(), tk.end(), b.tokens.begin() + i * tl);
      i += run;
    }
    // Rewritten while these rows were read (after the check above): the rows may be half old, half
    // new. Said as that, before the tokens' values are judged.
    check_same_file();
  } catch (io::H5Error const& e) {
    check_same_file();  // a file rewritten while it was read: say that, not what HDF5 made of it
    throw DatasetError(e.what());
  }
  for (std::size_t i = 0; i < b.tokens.size(); ++i)
    if (b.tokens[i] < 0 || b.tokens[i] >= kVocabSize)
      fail(path_, "/tokens[" + std::to_string(samples[i / tl]) + "] holds id " + std::to_string(b.tokens[i]) +
                      "; " + token_rule());
}

std::size_t held_out_count(std::size_t n, double fraction) {
  auto const k = std::size_t(std::llround(double(n) * fraction));
  return std::clamp<std::size_t>(k, 1, n > 1 ? n - 1 : 1);
}

void write_dataset(std::string const& path, DatasetShape const& s,
                   std::vector<std::uint8_t> const& images, std::vector<std::int32_t> const& tokens) {
  if (images.size() != s.count * s.pixels_per_sample() || tokens.size() != s.count * s.text_len)
    throw DatasetError(path + ": write_dataset: buffer sizes do not match the shape");
  io::CommitChecks checks;
  checks.expected_bytes = images.size() + tokens.size() * sizeof(std::int32_t) + (64u << 10);
  checks.verify = io::verify_h5;
  io::commit_file(path, "dataset", [&](std::string const& tmp) {
    io::H5File f(tmp, io::H5File::Mode::truncate);
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
    f.close();
  }, checks);
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

std::vector<std::size_t> BatchSampler::peek(int skip) const {
  long long const begin = cursor_ + (long long)skip * batch_, end = begin + batch_;
  if (skip < 0 || end > (long long)order_.size()) return {};
  return {order_.begin() + begin, order_.begin() + end};
}

void BatchSampler::set_batch(int batch) {
  if (batch <= 0) throw DatasetError("BatchSampler: a batch of " + std::to_string(batch) + " samples");
  batch_ = batch;
}

void BatchSampler::restore(long long epoch, long long cursor) {
  if (epoch < 0 || cursor < 0 || cursor > (long long)indices_.size())
    throw DatasetError("BatchSampler: cannot restore epoch " + std::to_string(epoch) + ", cursor " +
                       std::to_string(cursor) + ": the epoch must be >= 0 and the cursor in 0.." +
                       std::to_string(indices_.size()) + " (the samples it draws from)");
  epoch_ = epoch;
  cursor_ = cursor;
  shuffle();
}

}  // namespace joule
