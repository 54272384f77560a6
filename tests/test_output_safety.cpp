// Nothing joule writes can be turned against its user (core/io/commit.hpp): a link or a file planted
// where the old writers put PATH.tmp or PATH.lock is never written through, an output that is not
// a regular file (a FIFO, a link to a device, a folder) is refused before any work and left as it
// is, the temporary is private and never left behind, a writer that replaces nothing replaces
// nothing, and a lock holder removes the temporaries a killed writer left. Everything happens in a
// folder the test makes; the only device named is /dev/null, through a link, and never written.
#include "core/io/commit.hpp"
#include "output_paths.hpp"
#include "runlog/run_log.hpp"

#include "support/catch.hpp"

#include <sys/stat.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

using joule::test::Contains;
namespace fs = std::filesystem;
namespace io = joule::io;

namespace {

struct SafetyFolder {
  fs::path path;
  SafetyFolder() {
    path = fs::temp_directory_path() / ("joule-output-safety-" + std::to_string(getpid()));
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~SafetyFolder() {
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

void commit_text(std::string const& path, std::string const& text, io::CommitChecks const& checks = {}) {
  io::commit_file(path, "table", [&](std::string const& temporary) { std::ofstream(temporary) << text; }, checks);
}

bool is_fifo(std::string const& path) {
  struct stat st;
  return ::lstat(path.c_str(), &st) == 0 && S_ISFIFO(st.st_mode);
}

}  // namespace

TEST_CASE("writers: a link planted at the old PATH.tmp or anywhere near is never written through",
          "[outputs][hostile]") {
  SafetyFolder d;
  std::string const victim = d.write("victim.txt", "the user's own file");
  fs::create_symlink(victim, d / "out.csv.tmp");  // where every writer used to put its temporary
  bool private_folder = false;
  io::commit_file(d / "out.csv", "table", [&](std::string const& temporary) {
    // Reached through the private folder's descriptor, and that folder is one of d's: 0700, this user's.
    CHECK_THAT(temporary, Contains("/proc/self/fd/"));
    struct stat st;
    REQUIRE(::stat(io::folder_of(temporary).c_str(), &st) == 0);
    for (auto const& e : fs::directory_iterator(d.path)) {
      struct stat in_d;
      if (::lstat(e.path().c_str(), &in_d) == 0 && in_d.st_ino == st.st_ino && in_d.st_dev == st.st_dev)
        private_folder = S_ISDIR(st.st_mode) && (st.st_mode & 0777) == 0700 && st.st_uid == ::geteuid() &&
                         e.path().filename().string().rfind(io::temporary_prefix(d / "out.csv"), 0) == 0;
    }
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
  SafetyFolder d;
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
  commit_text(d / "link-to-file", "new");
  CHECK_FALSE(fs::is_symlink(d / "link-to-file"));
  CHECK(contents(d / "link-to-file") == "new");
  CHECK(contents(kept) == "kept");
  CHECK(d.others({"pipe", "null-link", "folder", "kept.txt", "link-to-file"}).empty());
}

TEST_CASE("writers: a failed write leaves no temporary; a writer that replaces nothing replaces nothing",
          "[outputs][hostile]") {
  SafetyFolder d;
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
  CHECK_THROWS_WITH(commit_text(old, "new", no_replace), Contains("replaces none"));
  CHECK(contents(old) == "old");
  commit_text(d / "fresh.csv", "fresh", no_replace);
  CHECK(contents(d / "fresh.csv") == "fresh");
  CHECK(d.others({"out.csv", "fresh.csv"}).empty());
}

TEST_CASE("output lock: never through a link or into a non-file; the holder removes a killed writer's temporaries",
          "[outputs][hostile]") {
  SafetyFolder d;
  std::string const victim = d.write("victim.txt", "the user's own file");
  fs::create_symlink(victim, d / "ckpt.h5.lock");
  CHECK_THROWS_WITH(io::OutputLock("--checkpoint", d / "ckpt.h5"),
                    Contains("--checkpoint " + (d / "ckpt.h5")) && Contains("is a symbolic link"));
  CHECK(contents(victim) == "the user's own file");
  CHECK(fs::is_symlink(d / "ckpt.h5.lock"));

  REQUIRE(::mkfifo((d / "log.h5.lock").c_str(), 0600) == 0);
  CHECK_THROWS_WITH(io::OutputLock("--log", d / "log.h5"), Contains("is a FIFO (named pipe), not a regular file"));
  CHECK(is_fifo(d / "log.h5.lock"));

  // What a writer killed in the middle leaves: its private folder with the half-written file and
  // its marker, and its lock file with the same token (a Temporary never destroyed stands for it).
  std::string const prefix = io::temporary_prefix(d / "out.h5");
  CHECK(prefix == ".out.h5.joule-");
  auto* killed = new io::Temporary(d / "out.h5");  // leaked on purpose: the process "died" here
  std::ofstream(killed->path()) << "half";
  std::string const left = fs::path(killed->shown()).parent_path().filename().string();
  std::ofstream(d / "out.h5.lock") << "process 999999 on a node, since then\ntoken " << io::process_token() << "\n";
  // A folder of the same shape that no run of this user made (renamed there by someone): kept,
  // whatever it holds; so is one whose marker has another token.
  fs::create_directories(d / (prefix + "a1B2c3d4e5f6"));
  std::ofstream(d / (prefix + "a1B2c3d4e5f6/out.h5")) << "someone's data";
  fs::create_directories(d / (prefix + "0123456789ab"));
  std::ofstream(d / (prefix + "0123456789ab/out.h5")) << "another run's";
  std::ofstream(d / (prefix + "0123456789ab/.joule-temporary")) << "joule temporary\ntarget out.h5\ntoken 00\n";
  fs::permissions(d / (prefix + "0123456789ab"), fs::perms::owner_all);
  fs::create_symlink(d.path, d / (prefix + "link99link99"));  // a link, never followed: kept
  std::vector<std::string> notes;
  {
    io::OutputLock lock("--out", d / "out.h5", [&](std::string const& line) { notes.push_back(line); });
    REQUIRE(notes.size() == 2);
    CHECK_THAT(notes[0], Contains("taking over the lock left by process 999999 on a node"));
    CHECK_THAT(notes[1], Contains(left) && Contains("a temporary left by an interrupted write"));
    CHECK_FALSE(fs::exists(d / left));
    CHECK(contents(d / (prefix + "a1B2c3d4e5f6/out.h5")) == "someone's data");
    CHECK(contents(d / (prefix + "0123456789ab/out.h5")) == "another run's");
    CHECK(fs::is_symlink(d / (prefix + "link99link99")));
    CHECK(fs::exists(d / "out.h5.lock"));
    struct stat st;
    REQUIRE(::stat((d / "out.h5.lock").c_str(), &st) == 0);
    CHECK((st.st_mode & 0777) == 0600);  // its token is nobody else's to read
  }
  CHECK_FALSE(fs::exists(d / "out.h5.lock"));  // removed on release
}

TEST_CASE("writers: a replaced file of this user's keeps its mode; another user's is refused unless accepted",
          "[outputs][hostile]") {
  SafetyFolder d;
  std::string const old = d.write("ckpt.csv", "old");
  REQUIRE(::chmod(old.c_str(), 0600) == 0);
  commit_text(old, "new");
  struct stat st;
  REQUIRE(::stat(old.c_str(), &st) == 0);
  CHECK(contents(old) == "new");
  CHECK((st.st_mode & 07777) == 0600);
  REQUIRE(::chmod(old.c_str(), 0640) == 0);
  commit_text(old, "newer");
  REQUIRE(::stat(old.c_str(), &st) == 0);
  CHECK((st.st_mode & 07777) == 0640);
  // A new file takes the umask as any file does.
  commit_text(d / "fresh.csv", "fresh");
  REQUIRE(::stat((d / "fresh.csv").c_str(), &st) == 0);
  mode_t const mask = ::umask(0);
  ::umask(mask);
  CHECK((st.st_mode & 0777) == (0666 & ~mask));
  if (::geteuid() != 0) return;  // only root can give a file to another user here
  // Another user made the name first, writable by all (so that they could edit root's data in
  // place afterwards): refused by the command's checks and by the writer, left as it was.
  std::string const theirs = d.write("data.csv", "theirs");
  REQUIRE(::chown(theirs.c_str(), 65534, 65534) == 0);
  REQUIRE(::chmod(theirs.c_str(), 0666) == 0);
  ::unsetenv("JOULE_REPLACE_OTHERS_FILES");
  CHECK_THROWS_WITH(commit_text(theirs, "root's"), Contains("is a file of user 65534") &&
                                                      Contains("JOULE_REPLACE_OTHERS_FILES=1"));
  joule::apps::FilePlan plan;
  plan.output("--out", theirs);
  CHECK_THAT(plan.check(), Contains("--out " + theirs) && Contains("is a file of user 65534"));
  REQUIRE(::stat(theirs.c_str(), &st) == 0);
  CHECK(contents(theirs) == "theirs");
  CHECK(st.st_uid == 65534u);
  // Accepted: replaced by root's own file, which the other user cannot write.
  ::setenv("JOULE_REPLACE_OTHERS_FILES", "1", 1);
  CHECK(plan.check().empty());
  commit_text(theirs, "root's");
  ::unsetenv("JOULE_REPLACE_OTHERS_FILES");
  REQUIRE(::stat(theirs.c_str(), &st) == 0);
  CHECK(contents(theirs) == "root's");
  CHECK(st.st_uid == 0u);
  CHECK(st.st_gid == 0u);
  CHECK((st.st_mode & 07777) == 0644);
}

TEST_CASE("output folders: every folder on the way must be one no other user can change", "[outputs][hostile]") {
  uid_t const me = ::geteuid(), other = me == 65534 ? 65533 : 65534;
  CHECK(io::folder_trust_problem(040755, 0, me).empty());
  CHECK(io::folder_trust_problem(041777, 0, 0).empty());
  CHECK_THAT(io::folder_trust_problem(040755, 0, other), Contains("belongs to user " + std::to_string(other)));
  CHECK_THAT(io::folder_trust_problem(041777, 0, other), Contains("belongs to user"));  // sticky, but theirs
  CHECK_THAT(io::folder_trust_problem(040777, 0, 0), Contains("no sticky bit"));
  // With an access ACL, the group bits are its mask: a write bit there is others' write, whatever the
  // group (the user's private group included).
  CHECK_THAT(io::folder_trust_problem(040775, 0, me, true), Contains("writable by other users through its access ACL"));
  CHECK(io::folder_trust_problem(041775, 0, me, true).empty());
  CHECK(io::folder_trust_problem(040755, 0, me, true).empty());
  if (me != 0) return;  // the rest makes another user's folder
  SafetyFolder d;
  {  // A folder of root's, 0775 with an ACL letting user 65534 write (root's group is its private one).
    fs::create_directories(d.path / "acl");
    REQUIRE(::chmod((d.path / "acl").c_str(), 0755) == 0);
    struct Entry {
      std::uint16_t tag, perm;
      std::uint32_t id;
    };
    std::uint32_t const version = 2;
    Entry const entries[] = {{0x01, 7, ~0u}, {0x02, 7, 65534}, {0x04, 5, ~0u}, {0x10, 7, ~0u}, {0x20, 5, ~0u}};
    std::string acl(reinterpret_cast<char const*>(&version), sizeof version);
    acl.append(reinterpret_cast<char const*>(entries), sizeof entries);
    if (::setxattr((d.path / "acl").c_str(), "system.posix_acl_access", acl.data(), acl.size(), 0) == 0) {
      ::unsetenv("JOULE_ACCEPT_SHARED_FOLDER");
      CHECK_THROWS_WITH(commit_text(d / "acl/data.csv", "x"), Contains("writable by other users through its access ACL"));
      CHECK_FALSE(fs::exists(d / "acl/data.csv"));
    } else {
      WARN("no POSIX ACLs on " << d.path.string() << ": the ACL case is not run");
    }
  }
  // /tmp/run1/sub/data.csv where run1 is another user's (0755) and sub a folder in it: that user
  // can put a link to a folder of the victim's at sub whenever they like. Refused, naming run1.
  fs::create_directories(d.path / "run1/sub");
  REQUIRE(::chown((d.path / "run1").c_str(), other, other) == 0);
  ::unsetenv("JOULE_ACCEPT_SHARED_FOLDER");
  CHECK_THROWS_WITH(commit_text(d / "run1/sub/data.csv", "x"),
                    Contains("the folder " + (d / "run1") + ", on the way to " + (d / "run1/sub")) &&
                        Contains("belongs to user " + std::to_string(other)) &&
                        Contains("JOULE_ACCEPT_SHARED_FOLDER=1"));
  joule::apps::FilePlan plan;
  plan.output("--out", d / "run1/sub/data.csv");
  CHECK_THAT(plan.check(), Contains("belongs to user " + std::to_string(other)));
  CHECK_FALSE(fs::exists(d / "run1/sub/data.csv"));
  // A path that names a folder by its spelling is refused before any folder is made for it.
  for (std::string const spelled : {"new/c.h5/", "new/.", "new/.."}) {
    joule::apps::FilePlan folder_plan;
    folder_plan.output("--out", d / spelled, {true});
    CHECK_THAT(folder_plan.check(), Contains("names a folder"));
    CHECK_FALSE(fs::exists(d / "new"));
  }
  // The working directory counts too: a relative path is walked from it.
  fs::path const here = fs::current_path();
  fs::current_path(d.path / "run1");
  CHECK_THROWS_WITH(commit_text("sub/data.csv", "x"), Contains("the working directory belongs to user"));
  fs::current_path(here);
  ::setenv("JOULE_ACCEPT_SHARED_FOLDER", "1", 1);
  commit_text(d / "run1/sub/data.csv", "x");
  ::unsetenv("JOULE_ACCEPT_SHARED_FOLDER");
  CHECK(contents(d / "run1/sub/data.csv") == "x");
}

TEST_CASE("output lock: a job's writes stay in the folder it locked, whatever is renamed on the path",
          "[outputs][hostile]") {
  SafetyFolder d;
  fs::create_directories(d.path / "alice/run");
  fs::create_directories(d.path / "elsewhere");
  {
    io::OutputLock lock("--checkpoint", d / "alice/run/ck.csv");
    commit_text(d / "alice/run/ck.csv", "step 1");
    // Mid-run, alice is renamed and a new alice/run put in its place (here a link to another folder).
    fs::rename(d.path / "alice", d.path / "alice-moved");
    fs::create_directories(d.path / "alice");
    fs::create_directory_symlink(d.path / "elsewhere", d.path / "alice/run");
    commit_text(d / "alice/run/ck.csv", "step 2");
    CHECK(contents(d / "alice-moved/run/ck.csv") == "step 2");  // where the job's lock is
    CHECK(fs::exists(d / "alice-moved/run/ck.csv.lock"));
    CHECK_FALSE(fs::exists(d / "elsewhere/ck.csv"));
  }
  CHECK_FALSE(fs::exists(d / "alice-moved/run/ck.csv.lock"));
  commit_text(d / "alice/run/ck.csv", "later job");  // unpinned with the lock: walked again
  CHECK(contents(d / "elsewhere/ck.csv") == "later job");
}

TEST_CASE("output lock: a lock file with a second name is never written, truncated or chmod'ed", "[outputs][hostile]") {
  SafetyFolder d;
  // A hard link another user made, where fs.protected_hardlinks is 0, to a file of this user's.
  std::string const secret = d.write("secret", "this user's own text");
  REQUIRE(::chmod(secret.c_str(), 0644) == 0);
  REQUIRE(::link(secret.c_str(), (d / "data.h5.lock").c_str()) == 0);
  CHECK_THROWS_WITH(io::OutputLock("--out", d / "data.h5"),
                    Contains("--out " + (d / "data.h5")) && Contains("has 2 names (hard links)"));
  struct stat st;
  REQUIRE(::stat(secret.c_str(), &st) == 0);
  CHECK(contents(secret) == "this user's own text");
  CHECK((st.st_mode & 07777) == 0644);
}

TEST_CASE("writers: what turns up at the path during the write is left as it is", "[outputs][hostile]") {
  SafetyFolder d;
  std::string const target = d.write("out.csv", "old");
  // A FIFO put in the file's place after the command's checks (while it wrote): refused, kept.
  CHECK_THROWS_WITH(io::commit_file(target, "table",
                                    [&](std::string const& temporary) {
                                      std::ofstream(temporary) << "new";
                                      fs::remove(target);
                                      REQUIRE(::mkfifo(target.c_str(), 0600) == 0);
                                    }),
                    Contains("FIFO"));
  CHECK(is_fifo(target));
  CHECK(d.others({"out.csv"}).empty());
  // A writer that replaces nothing, and a file that appears meanwhile: OutputExists, file kept.
  io::CommitChecks no_replace;
  no_replace.replace = false;
  std::string const fresh = d / "fresh.csv";
  CHECK_THROWS_AS(io::commit_file(fresh, "table",
                                  [&](std::string const& temporary) {
                                    std::ofstream(temporary) << "mine";
                                    std::ofstream(fresh) << "theirs";
                                  },
                                  no_replace),
                  io::OutputExists);
  CHECK(contents(fresh) == "theirs");
  CHECK(d.others({"out.csv", "fresh.csv"}).empty());
}

TEST_CASE("writers: two long names that share their first 100 bytes get temporaries of their own", "[outputs]") {
  std::string const common(100, 'x');
  CHECK(io::temporary_prefix(common + "-one.h5") != io::temporary_prefix(common + "-two.h5"));
  CHECK(io::temporary_prefix(common + "-one.h5").size() < 200);
  CHECK(io::temporary_prefix("dir/short.h5") == ".short.h5.joule-");
}

TEST_CASE("output folders: one that others can write without the sticky bit is refused unless accepted",
          "[outputs][hostile]") {
  SafetyFolder d;
  fs::create_directories(d.path / "shared");
  REQUIRE(::chmod((d.path / "shared").c_str(), 0777) == 0);
  ::unsetenv("JOULE_ACCEPT_SHARED_FOLDER");
  joule::apps::FilePlan plan;
  plan.output("--checkpoint", d / "shared/ckpt.h5");
  CHECK_THAT(plan.check(), Contains("--checkpoint " + (d / "shared/ckpt.h5")) && Contains("writable by every user") &&
                               Contains("no sticky bit") && Contains("JOULE_ACCEPT_SHARED_FOLDER=1"));
  CHECK_THROWS_WITH(commit_text(d / "shared/t.csv", "x"), Contains("no sticky bit"));
  CHECK_FALSE(fs::exists(d / "shared/t.csv"));
  // Writable by its group: shared where the group is another's (nogroup here); the user's own
  // private group (named as the user, no other member: root's on Debian) is the user alone.
  REQUIRE(::chmod((d.path / "shared").c_str(), 0775) == 0);
  if (::geteuid() == 0) {
    CHECK(plan.check().empty());  // root:root 0775
    REQUIRE(::chown((d.path / "shared").c_str(), uid_t(-1), 65534) == 0);
    REQUIRE(::chmod((d.path / "shared").c_str(), 0775) == 0);
    CHECK_THAT(plan.check(), Contains("writable by its group"));
  }
  // The sticky bit makes it safe (others may not rename or remove this user's entries).
  REQUIRE(::chmod((d.path / "shared").c_str(), 01777) == 0);
  CHECK(plan.check().empty());
  // Accepted explicitly: written, with a warning.
  REQUIRE(::chmod((d.path / "shared").c_str(), 0777) == 0);
  ::setenv("JOULE_ACCEPT_SHARED_FOLDER", "1", 1);
  CHECK(plan.check().empty());
  commit_text(d / "shared/t.csv", "x");
  ::unsetenv("JOULE_ACCEPT_SHARED_FOLDER");
  CHECK(contents(d / "shared/t.csv") == "x");
}

TEST_CASE("escaped_text: control characters from another's file never reach the terminal raw", "[outputs]") {
  CHECK(io::escaped_text("process 12 on node") == "process 12 on node");
  CHECK(io::escaped_text("a\x1b]0;owned\x07" "b\n") == "a\\x1b]0;owned\\x07b\\x0a");
  CHECK(io::escaped_text("caf\xc3\xa9") == "caf\xc3\xa9");               // UTF-8 kept
  CHECK(io::escaped_text("\xc2\x9b" "31m\xff") == "\\xc2\\x9b31m\\xff");  // C1 CSI and a stray byte
}

TEST_CASE("output folders: a folder a command makes is never writable by others, whatever the umask", "[outputs]") {
  SafetyFolder d;
  joule::apps::FilePlan plan;
  joule::apps::OutputOptions made;
  made.creates_folder = true;
  plan.output("--out", d / "new/deeper/run.h5", made);
  REQUIRE(plan.check().empty());
  mode_t const mask = ::umask(0);  // a umask that would make it 0777
  std::vector<io::OutputLock> held;
  std::string const problem = plan.lock(held);
  ::umask(mask);
  CHECK(problem.empty());
  for (auto const* folder : {"new", "new/deeper"}) {
    struct stat st;
    REQUIRE(::stat((d / folder).c_str(), &st) == 0);
    CHECK((st.st_mode & 07777) == 0755);
  }
  CHECK(fs::exists(d / "new/deeper/run.h5.lock"));
}
