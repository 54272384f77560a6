#include "output_paths.hpp"

#include "core/io/commit.hpp"

#include <fmt/format.h>

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <stdexcept>
#include <cstring>
#include <filesystem>
#include <system_error>

namespace joule::apps {

namespace fs = std::filesystem;

namespace {

// The path with every symlink that exists followed (a dangling link to a file the command would
// create resolves to that file), absolute and normalised.
fs::path resolved(std::string const& path) {
  std::error_code ec;
  fs::path p = fs::absolute(path, ec);
  if (ec) p = path;
  for (int hops = 0; hops < 40; ++hops) {  // a link whose target does not exist: weakly_canonical keeps the link
    if (!fs::is_symlink(fs::symlink_status(p, ec)) || fs::exists(p, ec)) break;
    fs::path const target = fs::read_symlink(p, ec);
    if (ec) break;
    p = target.is_absolute() ? target : p.parent_path() / target;
  }
  fs::path const canonical = fs::weakly_canonical(p, ec);
  return (ec ? p : canonical).lexically_normal();
}

// "train.checkpoint (from cfg.json)" -> "train.checkpoint": what to give another value.
std::string short_role(std::string const& role) { return role.substr(0, role.find(" (")); }

std::string folder_text(fs::path const& folder) {
  return folder.empty() ? std::string("the working directory") : fmt::format("the folder {}", folder.string());
}

}  // namespace

bool same_file(std::string const& a, std::string const& b) {
  std::error_code ec;
  if (fs::exists(a, ec) && fs::exists(b, ec)) {
    bool const same = fs::equivalent(a, b, ec);
    if (!ec) return same;
  }
  return resolved(a) == resolved(b);
}

std::string probe_folder(std::string const& folder) {
  try {  // a private temporary (random name, made exclusively, checked), removed at once
    io::Temporary probe((folder.empty() ? std::string(".") : folder) + "/.joule-write-probe");
  } catch (io::WriteError const& e) {
    return e.what();
  }
  return "";
}

void FilePlan::input(std::string role, std::string path) {
  if (!path.empty()) inputs_.push_back({std::move(role), std::move(path), {}});
}

void FilePlan::output(std::string role, std::string path, OutputOptions options) {
  if (!path.empty()) outputs_.push_back({std::move(role), std::move(path), options});
}

void FilePlan::allow_same(std::string output_role, std::string input_role) {
  allowed_.emplace_back(std::move(output_role), std::move(input_role));
}

bool FilePlan::allowed(Use const& out, Use const& in) const {
  for (auto const& [o, i] : allowed_)
    if (o == out.role && i == in.role) return true;
  return false;
}

std::string FilePlan::clash() const {
  for (std::size_t k = 0; k < outputs_.size(); ++k) {
    auto const& out = outputs_[k];
    for (auto const& in : inputs_) {
      if (same_file(out.path, in.path)) {
        if (allowed(out, in)) continue;
        return fmt::format("{} {} and {} {} are the same file: the output would overwrite the input it reads "
                           "(give {} another path)", out.role, out.path, in.role, in.path, short_role(out.role));
      }
    }
    for (std::size_t m = k + 1; m < outputs_.size(); ++m)
      if (same_file(out.path, outputs_[m].path))
        return fmt::format("{} {} and {} {} are the same file: one output would overwrite the other", out.role,
                           out.path, outputs_[m].role, outputs_[m].path);
  }
  return "";
}

std::string FilePlan::probe() const {
  for (auto const& out : outputs_) {
    std::error_code ec;
    fs::path const path(out.path);
    // "out/c.h5/", "out/." or "out/..": a folder by its spelling, refused before lock() would make
    // "out/c.h5" as the folder to hold it.
    if (std::string const name = io::name_of(out.path); name.empty() || name == "." || name == "..")
      return fmt::format("{} {}: names a folder (it ends in '{}'); give the path of a file to write", out.role,
                         out.path, name.empty() ? "/" : name);
    if (fs::is_directory(path, ec))
      return fmt::format("{} {}: is a folder; give the path of a file to write", out.role, out.path);
    if (auto const why = io::output_target_problem(out.path); !why.empty())
      return fmt::format("{} {}: it {}", out.role, out.path, why);
    fs::path folder = path.parent_path();
    if (!folder.empty() && !fs::exists(folder, ec)) {
      if (!out.options.creates_folder)
        return fmt::format("{} {}: {} does not exist (create it first, or give another path)", out.role, out.path,
                           folder_text(folder));
      while (!folder.empty() && !fs::exists(folder, ec)) folder = folder.parent_path();  // created from here down
    }
    if (!folder.empty() && !fs::is_directory(folder, ec))
      return fmt::format("{} {}: {} is not a folder", out.role, out.path, folder.string());
    if (auto const why = probe_folder(folder.string()); !why.empty())
      return fmt::format("{} {}: cannot write in {}: {}", out.role, out.path, folder_text(folder), why);
  }
  return "";
}

std::string FilePlan::check() const {
  auto const c = clash();
  return c.empty() ? probe() : c;
}

std::string FilePlan::lock(std::vector<io::OutputLock>& held) const {
  for (auto const& out : outputs_) {
    if (out.path.empty()) continue;
    std::error_code ec;
    auto const folder = fs::path(out.path).parent_path();
    try {
      // An output whose command makes its folder: made now (never through another user's link,
      // each new folder synced into its parent), to hold the lock beside it.
      if (out.options.creates_folder && !folder.empty() && !fs::exists(folder, ec))
        io::FolderHandle::open_or_create(folder.string());
      held.emplace_back(out.role, out.path, [](std::string const& line) { fmt::print(stderr, "joule: {}\n", line); });
    } catch (io::WriteError const& e) {
      held.clear();
      return e.what();
    }
  }
  return "";
}

std::string check_on_root(parallel::Communicator* world, std::function<std::string()> const& check) {
  std::string verdict;
  if (!world || world->rank() == 0) {
    try {
      verdict = check();
    } catch (std::exception const& e) {
      verdict = e.what();
    }
  }
  if (!world) return verdict;
  std::uint64_t size = verdict.size();
  world->broadcast(&size, sizeof size, 0);
  verdict.resize(size);
  if (size > 0) world->broadcast(verdict.data(), size, 0);
  return verdict;
}

int refuse(parallel::Communicator* world, std::string const& problem) {
  if (!world) throw std::runtime_error(problem);
  if (world->rank() == 0) {
    fmt::print(stderr, "joule: error: {}\n", problem);
    std::fflush(stderr);
  }
  return 1;
}

}  // namespace joule::apps
