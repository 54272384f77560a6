// The private scratch folder of the commands' own intermediate files (core/io/scratch_folder.hpp,
// `joule bench`'s offload and energy suites): made under $TMPDIR (else /tmp) with a name nobody can
// know before, mode 0700, written with the usual writer, and removed with everything in it when it
// goes (an exception included), a link in it removed and never followed. A $TMPDIR that others can
// change under joule is refused as an output's folder is. Everything happens in a folder the test makes.
#include "core/io/commit.hpp"
#include "core/io/scratch_folder.hpp"

#include "support/catch.hpp"

#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <stdexcept>
#include <string>

using joule::test::Contains;
namespace fs = std::filesystem;
namespace io = joule::io;

namespace {

// A folder of the test's own, named by $TMPDIR while the object lives (the old value put back).
struct TmpdirHere {
  fs::path path;
  std::optional<std::string> old;
  TmpdirHere() {
    if (char const* v = std::getenv("TMPDIR")) old = v;
    path = fs::temp_directory_path() / ("joule-scratch-test-" + std::to_string(getpid()));
    fs::remove_all(path);
    fs::create_directories(path);
    fs::permissions(path, fs::perms::owner_all);
    ::setenv("TMPDIR", path.c_str(), 1);
  }
  ~TmpdirHere() {
    if (old) ::setenv("TMPDIR", old->c_str(), 1);
    else ::unsetenv("TMPDIR");
    std::error_code ec;
    fs::remove_all(path, ec);
  }
  bool empty() const { return fs::is_empty(path); }
};

void write_text(std::string const& path, std::string const& text) { std::ofstream(path) << text; }

std::string read_text(std::string const& path) {
  std::ifstream in(path);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

}  // namespace

TEST_CASE("a scratch folder is private, under $TMPDIR, and removed whole", "[io][scratch]") {
  TmpdirHere tmp;
  fs::path const outside = tmp.path.parent_path() / ("joule-scratch-outside-" + std::to_string(getpid()));
  write_text(outside.string(), "not joule's");
  std::string made;
  {
    io::ScratchFolder scratch("joule-bench-");
    made = scratch.path();
    CHECK(fs::path(made).parent_path() == tmp.path);
    CHECK_THAT(fs::path(made).filename().string(), Contains("joule-bench-"));
    CHECK(fs::path(made).filename().string().size() == std::string("joule-bench-").size() + 12);
    struct stat st;
    REQUIRE(::lstat(made.c_str(), &st) == 0);
    CHECK(S_ISDIR(st.st_mode));
    CHECK((st.st_mode & 07777) == 0700);
    CHECK(st.st_uid == ::geteuid());
    CHECK(scratch.file("data.h5") == made + "/data.h5");
    // The usual writer writes in it, and leaves nothing else.
    io::commit_file(scratch.file("a.txt"), "test file", [](std::string const& t) { write_text(t, "a"); });
    CHECK(read_text(scratch.file("a.txt")) == "a");
    // What a writer may leave (folders, a link to a file outside) all goes; the link's target stays.
    fs::create_directories(made + "/sub/deeper");
    write_text(made + "/sub/deeper/b.txt", "b");
    fs::create_symlink(outside, made + "/sub/link");
    fs::create_directory_symlink(tmp.path.parent_path(), made + "/dirlink");
  }
  CHECK_FALSE(fs::exists(fs::symlink_status(made)));
  CHECK(tmp.empty());
  CHECK(read_text(outside.string()) == "not joule's");
  fs::remove(outside);
}

TEST_CASE("a scratch folder is removed when an exception leaves its scope", "[io][scratch]") {
  TmpdirHere tmp;
  std::string made;
  try {
    io::ScratchFolder scratch("joule-bench-");
    made = scratch.path();
    write_text(scratch.file("data.h5"), "x");
    throw std::runtime_error("the suite failed");
  } catch (std::runtime_error const&) {
  }
  CHECK_FALSE(made.empty());
  CHECK_FALSE(fs::exists(fs::symlink_status(made)));
  CHECK(tmp.empty());
}

TEST_CASE("two scratch folders never share a name", "[io][scratch]") {
  TmpdirHere tmp;
  io::ScratchFolder a("joule-bench-"), b("joule-bench-");
  CHECK(a.path() != b.path());
}

TEST_CASE("a scratch folder is made in /tmp where $TMPDIR is unset or empty", "[io][scratch]") {
  TmpdirHere tmp;
  ::setenv("TMPDIR", "", 1);
  CHECK(io::scratch_root() == "/tmp");
  ::unsetenv("TMPDIR");
  CHECK(io::scratch_root() == "/tmp");
  ::setenv("TMPDIR", "/tmp//", 1);
  CHECK(io::scratch_root() == "/tmp");
  ::unsetenv("TMPDIR");
  io::ScratchFolder scratch("joule-scratch-test-");
  CHECK(fs::path(scratch.path()).parent_path() == "/tmp");
}

TEST_CASE("a $TMPDIR others can change, or one that is not there, is refused naming it", "[io][scratch]") {
  TmpdirHere tmp;
  fs::path const open = tmp.path / "open";
  fs::create_directory(open);
  REQUIRE(::chmod(open.c_str(), 0777) == 0);  // writable by all, no sticky bit
  ::setenv("TMPDIR", open.c_str(), 1);
  ::unsetenv("JOULE_ACCEPT_SHARED_FOLDER");
  REQUIRE_THROWS_WITH(io::ScratchFolder("joule-bench-"), Contains(open.string()) && Contains("no sticky bit"));
  CHECK(fs::is_empty(open));
  ::setenv("TMPDIR", (tmp.path / "absent").c_str(), 1);
  REQUIRE_THROWS_WITH(io::ScratchFolder("joule-bench-"), Contains("absent") && Contains("does not exist"));
}
