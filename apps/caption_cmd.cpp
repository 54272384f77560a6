// `joule caption`: caption images with a trained checkpoint (greedy decoding, batched, with the
// training kernels), and for a dataset's samples compare with the references: for its held-out
// set that is the list of the model's mistakes.
#include "commands.hpp"
#include "common/plural.hpp"
#include "image_files.hpp"
#include "output_paths.hpp"
#include "run_config.hpp"
#include "standard_output.hpp"

#include "core/io/commit.hpp"
#include "core/io/h5file.hpp"
#include "core/train/captioning.hpp"
#include "core/train/memory_check.hpp"
#include "core/train/trainer.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>  // fmt::join (in fmt/format.h before fmt 11)

#include <algorithm>
#include <map>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <new>
#include <optional>
#include <stdexcept>
#include <utility>

namespace joule::apps {

namespace {

struct CaptionOptions {
  std::string checkpoint, data, images, resize = "bilinear", out;
  bool held_out = false, skip_bad_images = false;
  std::optional<long long> micro_batch, limit;
  long long max_image_pixels = limits::kImageMaxPixelsDefault;
  std::string precision;  // "": the checkpoint's train.precision
};

struct CaptionRow {
  std::string sample, reference, prediction;
  bool has_reference = false, correct = false;
};

std::string csv_field(std::string const& s) {
  if (s.find_first_of(",\"\r\n") == std::string::npos) return s;
  std::string q = "\"";
  for (char c : s) q += c == '"' ? std::string("\"\"") : std::string(1, c);
  return q + "\"";
}

bool ends_with(std::string const& s, std::string const& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

// Through an io::Temporary, synced and renamed (io::commit_file): an interrupted run or a full disk
// never leaves half a table under PATH, nor a temporary behind.
void write_rows(std::string const& path, std::string const& checkpoint, std::vector<CaptionRow> const& rows) {
  bool const csv = ends_with(path, ".csv");
  io::CommitChecks checks;
  if (!csv) checks.verify = io::verify_h5;
  io::commit_file(path, "caption table", [&](std::string const& tmp) {
    if (csv) {
      std::ofstream f(tmp, std::ios::binary);
      f << "sample,reference,prediction,correct\n";
      for (auto const& r : rows)
        f << csv_field(r.sample) << ',' << csv_field(r.reference) << ',' << csv_field(r.prediction) << ','
          << (r.has_reference ? (r.correct ? "1" : "0") : "") << '\n';
      f.close();
      if (!f) throw std::runtime_error(std::string("write failed (") + std::strerror(errno) + ")");
      return;
    }
    io::H5File f(tmp, io::H5File::Mode::truncate);
    std::vector<std::string> sample, reference, prediction;
    std::vector<std::uint8_t> correct;
    for (auto const& r : rows) {
      sample.push_back(r.sample), reference.push_back(r.reference), prediction.push_back(r.prediction);
      correct.push_back(r.correct ? 1 : 0);
    }
    f.write_strings("/sample", sample);
    f.write_strings("/reference", reference);
    f.write_strings("/prediction", prediction);
    f.write("/correct", correct.data(), {correct.size()});
    f.set_attribute("/", "checkpoint", checkpoint);
    f.close();
  }, checks);
}

// The lines caption prints on standard output (one per sample, then the summary), each write
// checked: one that fails (a full disk, a closed pipe, a file past `ulimit -f`) stops the command
// at once, before --out is written, with an error naming standard output and why (the limit, for
// EFBIG). --out is then left as it was: it is written whole or not at all. (fmt::print would throw
// "cannot write to file", naming neither, or, between flushes, lose the failure.)
class PrintedLines {
 public:
  explicit PrintedLines(std::string out) : out_(std::move(out)) {}
  void line(std::string const& text) {
    if (std::fwrite(text.data(), 1, text.size(), stdout) != text.size()) fail(errno);
  }
  void flush() {
    errno = 0;
    if (std::fflush(stdout) != 0 || std::ferror(stdout)) fail(errno);
  }

 private:
  [[noreturn]] void fail(int error) const {
    throw std::runtime_error(fmt::format("cannot write to standard output ({}): the captions printed there are "
                                         "incomplete{}", output_error_text(error),
                                         out_.empty() ? "" : "; --out " + out_ + " was not written (it is as it was)"));
  }
  std::string out_;
};

// The folder's images to caption, each decoded here before any model is built, so that a damaged
// or unreadable one (or an entry with an image extension that is no file) stops the run before any
// output, all of them named, or with --skip-bad-images is left out and listed in `bad`. Decoding
// again for the batches costs little beside the model, where keeping the pixels would take memory
// in proportion to the folder. Each file is opened once here and its descriptor kept for that
// second decoding (CheckedImage), so what is decoded for a batch is the file checked, not whatever
// is at its name by then (a FIFO, a link to /dev/zero); past image_descriptor_budget() files the
// name is opened again and must still be the file checked. With --limit, only as many good files
// are looked at as are captioned.
std::vector<CheckedImage> good_image_files(CaptionOptions const& o, ModelConfig const& m, std::vector<BadImage>& bad) {
  ImageFolder listing = image_files(o.images);
  Resize const resize = parse_resize(o.resize);
  ImageLimits limits;
  limits.max_pixels = std::uint64_t(o.max_image_pixels);
  std::size_t const budget = image_descriptor_budget();
  std::vector<std::uint8_t> scratch(std::size_t(m.channels) * m.image_size * m.image_size);
  std::vector<CheckedImage> good;
  bad = listing.unusable;
  // What was made to fit the model (said once, not per file): other sizes, other channel counts.
  std::size_t resized = 0;
  std::map<int, std::size_t> converted;  // by the file's channel count
  for (auto const& file : listing.files) {
    if (o.limit && good.size() == std::size_t(*o.limit)) {
      bad.erase(std::remove_if(bad.begin(), bad.end(), [&](BadImage const& b) { return b.path > file; }), bad.end());
      break;
    }
    try {
      ImageShape shape;
      good.push_back(check_image(file, good.size() < budget, m.channels, m.image_size, resize, scratch.data(), limits,
                                 &shape));
      resized += shape.width != m.image_size || shape.height != m.image_size;
      if (shape.channels != m.channels) ++converted[shape.channels];
    } catch (BadImageError const& e) {
      bad.push_back({e.path(), e.reason()});
    }
  }
  std::sort(bad.begin(), bad.end(), [](BadImage const& a, BadImage const& b) { return a.path < b.path; });
  std::string list;
  for (auto const& b : bad) list += fmt::format("\n  {}: {}", b.path, b.reason);
  if (good.empty())
    throw std::runtime_error(fmt::format("--images {}: no image to caption: all {} image file(s) are damaged or "
                                         "unreadable:{}", o.images, bad.size(), list));
  if (!bad.empty() && !o.skip_bad_images)
    throw std::runtime_error(fmt::format("--images {}: {} image file(s) damaged or unreadable (repair or remove them, "
                                         "or pass --skip-bad-images to caption the other {}):{}",
                                         o.images, bad.size(), good.size(), list));
  if (!bad.empty())
    fmt::print(stderr, "--images {}: skipping {} damaged or unreadable image file(s) (listed at the end)\n", o.images,
               bad.size());
  if (resized > 0)
    fmt::print(stderr, "--images {}: {} of {} image(s) resized to the model's {}x{} ({}; --resize none refuses them)\n",
               o.images, resized, good.size(), m.image_size, m.image_size, o.resize);
  if (!converted.empty()) {
    auto const kind = [](int c) {
      return c == 1 ? "grey" : c == 2 ? "grey with alpha" : c == 3 ? "RGB" : c == 4 ? "RGBA" : "other";
    };
    std::vector<std::string> parts;
    for (auto const& [channels, count] : converted) parts.push_back(fmt::format("{} {}", count, kind(channels)));
    fmt::print(stderr, "--images {}: converted to the model's {} channel(s) ({}): {}\n", o.images, m.channels,
               m.channels == 1 ? "grey" : m.channels == 3 ? "RGB, alpha dropped, grey copied to each" : "stb_image's rule",
               fmt::join(parts, ", "));
  }
  return good;
}

int run_caption(CaptionOptions const& o) {
  if (!o.out.empty() && !ends_with(o.out, ".csv") && !ends_with(o.out, ".h5") && !ends_with(o.out, ".hdf5"))
    throw ConfigError("--out " + o.out + ": name a .csv or .h5 file (the format follows the extension)");
  FilePlan plan;
  plan.input("--checkpoint", o.checkpoint);
  plan.input("--data", o.data);
  plan.output("--out", o.out);
  if (auto const problem = plan.check(); !problem.empty()) throw ConfigError(problem);
  std::vector<io::OutputLock> locks;  // one job at a time writes --out
  if (auto const problem = plan.lock(locks); !problem.empty()) throw ConfigError(problem);

  // The checkpoint, opened once: its configuration and its parameters are read from this one file.
  io::InputFile const checkpoint = io::open_input(o.checkpoint);
  Config const cfg = checkpoint_config(checkpoint);
  ModelConfig const& m = cfg.model;
  int const B = int(o.micro_batch.value_or(cfg.train.micro_batch)), T = m.text_len;
  std::size_t const px = std::size_t(m.frames) * m.channels * m.image_size * m.image_size;

  // The samples: dataset indices (all, or the held-out tail as training splits it) or files.
  std::optional<Dataset> data;
  std::vector<std::size_t> indices;
  std::vector<CheckedImage> files;
  std::vector<BadImage> bad_images;  // skipped with --skip-bad-images
  if (!o.data.empty()) {
    data = Dataset::open(o.data, &m);
    std::size_t const n = data->shape().count;
    std::size_t const first = o.held_out ? n - held_out_count(n, cfg.data.eval_fraction) : 0;
    for (std::size_t i = first; i < n; ++i) indices.push_back(i);
    if (o.held_out)
      fmt::print(stderr, "{}: the held-out set is samples {}..{} (the last {} of {}, data.eval_fraction {} of {})\n",
                 o.data, first, n - 1, n - first, n, cfg.data.eval_fraction, o.checkpoint);
  } else {
    if (m.frames != 1)
      throw ConfigError(fmt::format("--images: {} was trained on clips of {} frames; caption a dataset of clips "
                                    "with --data", o.checkpoint, m.frames));
    files = good_image_files(o, m, bad_images);
  }
  std::size_t n = data ? indices.size() : files.size();
  if (o.limit) n = std::min<std::size_t>(n, std::size_t(*o.limit));

  // Forward passes only: recomputing every block keeps one block's activations, the least memory.
  // Checked by the memory model before anything is allocated, as training is; an allocation that
  // fails all the same (memory taken meanwhile) is reported with the same figures.
  MemoryAvailable const available = available_memory();
  // The checkpoint holds fp32 master weights whatever the run's precision; its kernels run in the
  // precision it was trained in unless --precision says otherwise.
  Precision const precision = o.precision.empty() ? cfg.train.precision : parse_precision(o.precision);
  if (auto const problem = inference_memory_shortfall(m, B, available, precision); !problem.empty())
    throw ConfigError(fmt::format("{}: captioning does not fit: {}", o.checkpoint, problem));
  std::optional<Model> built;
  try {
    built.emplace(m, B, /*recompute_depth=*/m.layers, SequenceShards{}, precision);
  } catch (std::bad_alloc const&) {
    throw std::runtime_error(fmt::format("{}: cannot allocate the model for micro-batch {}: {}", o.checkpoint, B,
                                         memory_figures(m, B, m.layers, available_memory(), precision)));
  }
  Model& model = *built;
  load_checkpoint_parameters(checkpoint, model);
  ExecSpace space;
  Resize const resize = parse_resize(o.resize);
  ImageLimits image_limits;
  image_limits.max_pixels = std::uint64_t(o.max_image_pixels);
  HostBatch batch;
  std::vector<std::size_t> ids(B);
  std::vector<std::int32_t> tokens;
  std::vector<char> done;
  std::vector<CaptionRow> rows;
  std::size_t correct = 0;
  PrintedLines printed(o.out);
  for (std::size_t first = 0; first < n; first += B) {
    int const valid = int(std::min<std::size_t>(B, n - first));
    if (data) {
      for (int i = 0; i < B; ++i) ids[i] = indices[first + std::min(i, valid - 1)];  // a short batch repeats its last
      data->read(ids, batch);
    } else {
      batch.images.resize(std::size_t(B) * px);
      batch.tokens.assign(std::size_t(B) * T, kTokenPad);
      batch.samples.assign(B, 0);
      for (int i = 0; i < B; ++i)
        load_image(files[first + std::min(i, valid - 1)], m.channels, m.image_size, resize, &batch.images[i * px],
                   image_limits);
    }
    greedy_captions(space, model, batch, tokens, done);
    for (int b = 0; b < valid; ++b) {
      CaptionRow row;
      row.prediction = decode_caption(&tokens[std::size_t(b) * T], T);
      if (data) {
        row.sample = std::to_string(indices[first + b]);
        row.reference = decode_caption(&batch.tokens[std::size_t(b) * T], T);
        row.has_reference = true;
        row.correct = row.prediction == row.reference;
        correct += row.correct;
        printed.line(fmt::format("{}\t{}\t{}\t{}\n", row.sample, row.correct ? "ok" : "WRONG", row.prediction,
                                 row.reference));
      } else {
        row.sample = std::filesystem::path(files[first + b].path).filename().string();  // as listed in the folder
        printed.line(fmt::format("{}\t{}\n", row.sample, row.prediction));
      }
      if (!o.out.empty()) rows.push_back(std::move(row));
    }
    printed.flush();
  }
  if (!bad_images.empty()) {
    fmt::print(stderr, "skipped {} damaged or unreadable image file(s) of {} in {}:\n", bad_images.size(),
               bad_images.size() + files.size(), o.images);
    for (auto const& b : bad_images) fmt::print(stderr, "  {}: {}\n", b.path, b.reason);
  }
  if (data)
    printed.line(fmt::format("captioned {}: {} exactly right ({:.1f}%)\n", counted(n, "sample", "samples"), correct,
                             n ? 100.0 * correct / n : 0.0));
  printed.flush();  // all of it on standard output before --out is written
  if (!o.out.empty()) {
    write_rows(o.out, o.checkpoint, rows);
    fmt::print(stderr, "wrote {} rows to {}\n", rows.size(), o.out);
  }
  return 0;
}

}  // namespace

std::function<int()> add_caption_command(CLI::App& app) {
  auto o = std::make_shared<CaptionOptions>();
  auto* cmd = app.add_subcommand(
      "caption", "caption images with a trained checkpoint (greedy decoding); for a dataset, compare with its captions");
  cmd->add_option("--checkpoint", o->checkpoint, "a checkpoint written by joule train (its configuration gives the model)")
      ->required()->check(CLI::ExistingFile);
  auto* data = cmd->add_option("--data", o->data, "caption the samples of this dataset (HDF5) and compare with their captions")
                   ->check(CLI::ExistingFile);
  auto* images = cmd->add_option("--images", o->images,
                                 "caption every image file in this folder (png, jpg, bmp, gif, tga, pnm), by name")
                     ->check(CLI::ExistingDirectory)->excludes(data);
  cmd->add_flag("--held-out", o->held_out,
                "only the held-out samples: the last data.eval_fraction of the dataset, as training split it")
      ->needs(data);
  cmd->add_flag("--skip-bad-images", o->skip_bad_images,
                "with --images: skip image files that are damaged or cannot be read, and list them at the end "
                "(by default the command stops before captioning any, naming each)")
      ->needs(images);
  cmd->add_option("--resize", o->resize, "fit images to the model's size: bilinear (default), nearest, or none (must fit)")
      ->check(CLI::IsMember({"bilinear", "nearest", "none"}))->needs(images);
  cmd->add_option("--max-image-pixels", o->max_image_pixels,
                  fmt::format("with --images: the most pixels (width x height) an image file may declare; a larger "
                              "one is refused before it is decoded (default {}, 8192 x 8192)",
                              limits::kImageMaxPixelsDefault))
      ->check(whole_number())->check(CLI::Range(1LL, 1LL << 48))->needs(images);
  cmd->add_option("--out", o->out, "also write (sample, reference, prediction, correct) to this .csv or .h5 file");
  cmd->add_option("--micro-batch", o->micro_batch, "samples per forward pass (default: the checkpoint's train.micro_batch)")
      ->check(whole_number())->check(CLI::Range(1, 1 << 20));
  cmd->add_option("--precision", o->precision,
                  "fp32 or bf16: the kernels' precision (default: the checkpoint's train.precision)")
      ->check(CLI::IsMember({"fp32", "bf16"}));
  cmd->add_option("--limit", o->limit, "caption at most this many samples")->check(whole_number())->check(CLI::Range(1LL, 1LL << 40));
  return [o, cmd, data, images]() -> int {
    if (!*cmd) return -1;
    if (!*data && !*images) throw ConfigError("joule caption: give --data FILE.h5 or --images FOLDER");
    return run_caption(*o);
  };
}

}  // namespace joule::apps
