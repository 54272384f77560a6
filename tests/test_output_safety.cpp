// Nothing joule writes can be turned against its user (core/io/commit.hpp): a link or a file planted
// where the old writers put PATH.tmp or PATH.lock is never written through, an output that is not
// a regular file (a FIFO, a link to a device, a folder) is refused before any work and left as it
// is, the temporary is private and never left behind, a writer that replaces nothing replaces
// nothing, and a lock holder removes the temporaries a killed writer left. Everything happens in a
// folder the test makes; the only device named is /dev/null, through a link, and never written.
#include "core/io/commit.hpp"
#include "output_paths.hpp"
#include "scheduler/run_log.hpp"

#include "support/catch.hpp"

#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

using joule::test::Contains;
namespace fs = std::filesystem;
namespace io = joule::io;

namespace {

struct Folder {
  fs::path path;
  Folder() {
    path = fs::temp_directory_path() / ("joule-output-safety-" + std::to_string(getpid()));
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~Folder() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
  std::string operator/(std::string const& name) const { return (path / name).string(); }
  std::string write(std::string const& name, std::string const& text) const {
    std::ofstream(path / name) << text;
    return *this / name;
  }
  // Every entry but those named: what a writer left behind.
  std::vector<std::string> others(std::vector<std::string> const& expected) const {
    std::vector<std::string> out;
    for (auto const& e : fs::directory_iterator(path)) {
      std::string const name = e.path().filename().string();
      bool known = false;
      for (auto const& x : expected) known = known || x == name;
      if (!known) out.push_back(name);
    }
    return out;
  }
};

std::string contents(std::string const& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

void write_text(std::string const& path, std::string const& text, io::CommitChecks const& checks = {}) {
  io::commit_file(path, "table", [&](std::string const& temporary) { std::ofstream(temporary) << text; }, checks);
}

bool is_fifo(std::string const& path) {
  struct stat st;
  return ::lstat(path.c_str(), &st) == 0 && S_ISFIFO(st.st_mode);
}

}  // namespace

TEST_CASE("writers: a link planted at the old PATH.tmp or anywhere near is never written through",
          "[outputs][hostile]") {
  Folder d;
  std::string const victim = d.write("victim.txt", "the user's own file");
  fs::create_symlink(victim, d / "out.csv.tmp");  // where every writer used to put its temporary
  bool private_folder = false;
  io::commit_file(d / "out.csv", "table", [&](std::string const& temporary) {
    struct stat st;
    REQUIRE(::stat(io::folder_of(temporary).c_str(), &st) == 0);
    private_folder = S_ISDIR(st.st_mode) && (st.st_mode & 0777) == 0700 && io::folder_of(io::folder_of(temporary)) == d.path.string();
    std::ofstream(temporary) << "new table";
  });
  CHECK(private_folder);
  CHECK(contents(victim) == "the user's own file");
  CHECK(contents(d / "out.csv") == "new table");
  CHECK(d.others({"victim.txt", "out.csv.tmp", "out.csv"}).empty());  // no temporary left

  // The run log: created, then changed through a copy, never through the planted link.
  fs::create_symlink(victim, d / "log.h5.tmp");
  joule::scheduler::RunHeader header;
  header.joule_version = "test";
  header.config_json = "{}";
  header.tuning = "profile";
  header.energy_kind = "model";
  auto log = joule::scheduler::RunLogWriter::create(d / "log.h5", header);
  log.close();
  CHECK(contents(victim) == "the user's own file");
  CHECK(joule::scheduler::is_run_log(d / "log.h5"));
  // The energy tool's kind of log replaces no file.
  CHECK_THROWS_WITH(joule::scheduler::RunLogWriter::create(d / "log.h5", header, /*replace=*/false),
                    Contains("log.h5") && Contains("replaces none"));
  CHECK(joule::scheduler::is_run_log(d / "log.h5"));
}

TEST_CASE("writers: an output that is not a regular file is refused before any work and left as it is",
          "[outputs][hostile]") {
  Folder d;
  REQUIRE(::mkfifo((d / "pipe").c_str(), 0600) == 0);
  fs::create_symlink("/dev/null", d / "null-link");
  fs::create_directories(d / "folder");
  std::string const kept = d.write("kept.txt", "kept");
  fs::create_symlink(kept, d / "link-to-file");
  struct Case {
    std::string name, says;
  };
  for (auto const& c : {Case{"pipe", "is a FIFO (named pipe), not a regular file"},
                        Case{"null-link", "is a symbolic link to a character device"},
                        Case{"folder", "is a folder"}}) {
    INFO(c.name);
    bool written = false;
    CHECK_THROWS_WITH(io::commit_file(d / c.name, "checkpoint", [&](std::string const&) { written = true; }),
                      Contains("cannot write the checkpoint " + (d / c.name)) && Contains(c.says));
    CHECK_FALSE(written);  // refused before any work
    joule::apps::FilePlan plan;
    plan.output("--checkpoint", d / c.name);
    CHECK_THAT(plan.check(), Contains("--checkpoint " + (d / c.name)) && Contains(c.says));
  }
  CHECK(is_fifo(d / "pipe"));
  CHECK(fs::read_symlink(d / "null-link") == "/dev/null");
  CHECK(fs::is_directory(d / "folder"));

  // A link to a regular file: the link is replaced by the new file; the file it named is not touched.
  joule::apps::FilePlan plan;
  plan.output("--out", d / "link-to-file");
  CHECK(plan.check().empty());
  write_text(d / "link-to-file", "new");
  CHECK_FALSE(fs::is_symlink(d / "link-to-file"));
  CHECK(contents(d / "link-to-file") == "new");
  CHECK(contents(kept) == "kept");
  CHECK(d.others({"pipe", "null-link", "folder", "kept.txt", "link-to-file"}).empty());
}

TEST_CASE("writers: a failed write leaves no temporary; a writer that replaces nothing replaces nothing",
          "[outputs][hostile]") {
  Folder d;
  std::string const old = d.write("out.csv", "old");
  CHECK_THROWS_WITH(io::commit_file(d / "out.csv", "table",
                                    [](std::string const& temporary) {
                                      std::ofstream(temporary) << "half";
                                      throw std::runtime_error("disk on fire");
                                    }),
                    Contains("disk on fire") && Contains("the previous table there is unchanged"));
  CHECK(contents(old) == "old");
  CHECK(d.others({"out.csv"}).empty());

  io::CommitChecks no_replace;
  no_replace.replace = false;
  CHECK_THROWS_WITH(write_text(old, "new", no_replace), Contains("replaces none"));
  CHECK(contents(old) == "old");
  write_text(d / "fresh.csv", "fresh", no_replace);
  CHECK(contents(d / "fresh.csv") == "fresh");
  CHECK(d.others({"out.csv", "fresh.csv"}).empty());
}

TEST_CASE("output lock: never through a link or into a non-file; the holder removes a killed writer's temporaries",
          "[outputs][hostile]") {
  Folder d;
  std::string const victim = d.write("victim.txt", "the user's own file");
  fs::create_symlink(victim, d / "ckpt.h5.lock");
  CHECK_THROWS_WITH(io::OutputLock("--checkpoint", d / "ckpt.h5"),
                    Contains("--checkpoint " + (d / "ckpt.h5")) && Contains("is a symbolic link"));
  CHECK(contents(victim) == "the user's own file");
  CHECK(fs::is_symlink(d / "ckpt.h5.lock"));

  REQUIRE(::mkfifo((d / "log.h5.lock").c_str(), 0600) == 0);
  CHECK_THROWS_WITH(io::OutputLock("--log", d / "log.h5"), Contains("is a FIFO (named pipe), not a regular file"));
  CHECK(is_fifo(d / "log.h5.lock"));

  // What a writer killed in the middle leaves: its private folder with the half-written file.
  std::string const prefix = io::temporary_prefix(d / "out.h5");
  CHECK(prefix == ".out.h5.joule-");
  fs::create_directories(d / (prefix + "a1B2c3"));
  std::ofstream(d / (prefix + "a1B2c3/out.h5")) << "half";
  fs::create_directories(d / (prefix + "short"));            // not a name mkdtemp makes: kept
  fs::create_symlink(d.path, d / (prefix + "link99"));        // a link, never followed: kept
  std::vector<std::string> notes;
  {
    io::OutputLock lock("--out", d / "out.h5", [&](std::string const& line) { notes.push_back(line); });
    REQUIRE(notes.size() == 1);
    CHECK_THAT(notes[0], Contains(prefix + "a1B2c3") && Contains("a temporary left by an interrupted write"));
    CHECK_FALSE(fs::exists(d / (prefix + "a1B2c3")));
    CHECK(fs::is_directory(d / (prefix + "short")));
    CHECK(fs::is_symlink(d / (prefix + "link99")));
    CHECK(fs::exists(d / "out.h5.lock"));
  }
  CHECK_FALSE(fs::exists(d / "out.h5.lock"));  // removed on release
}
