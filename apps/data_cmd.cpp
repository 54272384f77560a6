// `joule data synth`: write the built-in synthetic captioning dataset.
#include "commands.hpp"
#include "common/plural.hpp"
#include "output_paths.hpp"
#include "run_config.hpp"

#include "core/data/synth.hpp"
#include "core/config/config.hpp"
#include "core/model/limits.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <filesystem>
#include <limits>
#include <optional>

namespace joule::apps {

std::function<int()> add_data_command(CLI::App& app) {
  auto o = std::make_shared<SynthOptions>();
  auto out = std::make_shared<std::string>();
  auto config = std::make_shared<std::string>();
  auto* data = app.add_subcommand("data", "datasets");
  data->require_subcommand(1);
  auto* synth = data->add_subcommand("synth", "write the synthetic shapes captioning dataset (HDF5)");
  synth->add_option("--out", *out, "output file (default with --config: its data.path); its folder is made");
  auto* config_opt = synth->add_option("--config", *config, "take frames, image size and text length from this configuration")
      ->check(CLI::ExistingFile);
  synth->add_option("--count", o->count, "samples")->check(whole_number())->check(CLI::Range(1, 10000000));
  // With --config the shapes are the model's: a flag for them too would be silently ignored.
  synth->add_option("--frames", o->frames, "frames per sample (> 1: moving shapes)")
      ->check(whole_number())->check(CLI::Range(limits::kFramesMin, limits::kFramesMax))->excludes(config_opt);
  // The shapes need 8 pixels at least (core/data/synth.cpp); the maximum is the model's.
  synth->add_option("--image-size", o->image_size, "image height and width")
      ->check(whole_number())->check(CLI::Range(std::max(8, limits::kImageSizeMin), limits::kImageSizeMax))
      ->excludes(config_opt);
  synth->add_option("--text-len", o->text_len, "tokens per caption incl. BOS/EOS/PAD")
      ->check(whole_number())->check(CLI::Range(limits::kTextLenMin, limits::kTextLenMax))->excludes(config_opt);
  synth->add_option("--seed", o->seed, "random seed (>= 0)")
      ->check(whole_number())->check(CLI::Range(0LL, std::numeric_limits<long long>::max()));

  auto info_path = std::make_shared<std::string>();
  auto* info = data->add_subcommand("info", "validate a dataset file and print its shape and a few captions");
  info->add_option("file", *info_path, "dataset (HDF5)")->required();
  info->add_option("--config", *config, "also check it against this configuration's model")
      ->check(CLI::ExistingFile);

  return [=]() -> int {
    if (*info) {
      std::optional<Config> cfg;
      if (!config->empty()) cfg = load_config(*config);
      auto const ds = Dataset::open(*info_path, cfg ? &cfg->model : nullptr);
      auto const& s = ds.shape();
      fmt::print("{}: {}, {} frame(s) of {}x{}x{}, text length {}{}\n", *info_path,
                 counted(static_cast<long long>(s.count), "sample", "samples"),
                 s.frames, s.channels, s.height, s.width, s.text_len,
                 cfg ? ", matches the configuration" : "");
      std::vector<std::size_t> first;
      for (std::size_t i = 0; i < std::min<std::size_t>(3, s.count); ++i) first.push_back(i);
      auto const b = ds.read(first);
      for (std::size_t i = 0; i < first.size(); ++i)
        fmt::print("  [{}] \"{}\"\n", i, decode_caption(&b.tokens[i * s.text_len], s.text_len));
      return 0;
    }
    if (!*synth) return -1;
    std::string path = *out;
    if (!config->empty()) {
      Config const cfg = load_config(*config);
      *o = SynthOptions::for_model(cfg.model, o->count, o->seed);
      if (path.empty()) path = cfg.data.path;
    }
    if (path.empty()) throw std::invalid_argument("joule data synth: give --out FILE (or --config)");
    FilePlan plan;  // before writing: not over the configuration it read, and writable there
    plan.input("--config", *config);
    OutputOptions made;
    made.creates_folder = true;
    plan.output(out->empty() ? fmt::format("data.path (from {})", *config) : std::string("--out"), path, made);
    if (auto const problem = plan.check(); !problem.empty()) throw std::invalid_argument(problem);
    std::vector<io::OutputLock> locks;  // one job at a time writes the file
    if (auto const problem = plan.lock(locks); !problem.empty()) throw std::invalid_argument(problem);
    auto const parent = std::filesystem::path(path).parent_path();
    if (!parent.empty()) std::filesystem::create_directories(parent);
    write_synthetic(path, *o);
    fmt::print("wrote {} samples ({} frame(s) of {}x{}, text length {}) to {}\n", o->count, o->frames,
               o->image_size, o->image_size, o->text_len, path);
    return 0;
  };
}

}  // namespace joule::apps
