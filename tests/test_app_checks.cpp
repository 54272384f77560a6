// Checks the commands make before any work (apps/output_paths.hpp): outputs are never inputs,
// through symlinks and hard links too; output folders exist and are writable. And the report of a
// run log whose figures are inconsistent (scheduler/report.hpp): warned about, never "nan%".
#include "output_paths.hpp"
#include "scheduler/report.hpp"

#include "support/catch.hpp"

#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>

using joule::apps::FilePlan;
using joule::apps::OutputOptions;
using joule::apps::probe_folder;
using joule::apps::same_file;
using joule::test::Contains;
namespace fs = std::filesystem;

namespace {

struct TempDir {
  fs::path path;
  TempDir() {
    path = fs::temp_directory_path() / ("joule-app-checks-" + std::to_string(getpid()));
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~TempDir() {
    std::error_code ec;
    fs::permissions(path / "ro", fs::perms::owner_all, ec);
    fs::remove_all(path, ec);
  }
  std::string file(std::string const& name, std::string const& text = "x") const {
    std::ofstream(path / name) << text;
    return (path / name).string();
  }
  std::string operator/(std::string const& name) const { return (path / name).string(); }
};

}  // namespace

TEST_CASE("same_file: one file under several names", "[outputs]") {
  TempDir d;
  auto const data = d.file("data.h5");
  auto const other = d.file("other.h5");
  fs::create_symlink(data, d / "link.h5");
  fs::create_hard_link(data, d / "hard.h5");
  fs::create_directories(d / "sub");
  CHECK(same_file(data, data));
  CHECK(same_file(d / "link.h5", data));
  CHECK(same_file(d / "hard.h5", data));
  CHECK(same_file(d / "sub/../data.h5", data));
  CHECK_FALSE(same_file(other, data));
  // Paths that do not exist yet: compared once resolved.
  CHECK(same_file(d / "new.h5", d / "sub/../new.h5"));
  CHECK_FALSE(same_file(d / "new.h5", d / "new2.h5"));
  // A dangling symlink leads where the file would be written.
  fs::create_symlink(d / "target.h5", d / "dangling.h5");
  CHECK(same_file(d / "dangling.h5", d / "target.h5"));
}

TEST_CASE("FilePlan: an output that is an input is refused, naming both", "[outputs]") {
  TempDir d;
  auto const data = d.file("data.h5");
  fs::create_symlink(data, d / "link.h5");
  OutputOptions const renamed;

  FilePlan plan;
  plan.input("--data", data);
  plan.output("--checkpoint", d / "link.h5", renamed);
  auto const message = plan.check();
  CHECK_THAT(message, Contains("--checkpoint " + (d / "link.h5")) && Contains("--data " + data) &&
                          Contains("same file"));

  FilePlan fine;
  fine.input("--data", data);
  fine.output("--checkpoint", d / "ckpt.h5", renamed);
  CHECK(fine.check().empty());

  SECTION("two outputs on one file") {
    FilePlan two;
    two.output("--out", d / "a.h5");
    two.output("train.checkpoint (from cfg.json)", d / "a.h5");
    CHECK_THAT(two.clash(), Contains("--out") && Contains("train.checkpoint (from cfg.json)"));
  }
  SECTION("an input-and-output by design is allowed, and only that pair") {
    auto const ckpt = d.file("ckpt.h5");
    FilePlan resume;
    resume.input("--data", data);
    resume.input("--resume", ckpt);
    resume.output("--checkpoint", ckpt, renamed);
    CHECK_THAT(resume.clash(), Contains("--resume"));
    resume.allow_same("--checkpoint", "--resume");
    CHECK(resume.clash().empty());
    FilePlan still;
    still.input("--data", ckpt);
    still.input("--resume", ckpt);
    still.output("--checkpoint", ckpt, renamed);
    still.allow_same("--checkpoint", "--resume");
    CHECK_THAT(still.clash(), Contains("--data"));
  }
}

TEST_CASE("FilePlan: outputs' folders checked by a probe file", "[outputs]") {
  TempDir d;
  fs::create_directories(d / "adir");
  auto probe_of = [](std::string const& path, bool creates_folder = false) {
    FilePlan plan;
    OutputOptions o;
    o.creates_folder = creates_folder;
    plan.output("--checkpoint", path, o);
    return plan.probe();
  };
  CHECK(probe_of(d / "ckpt.h5").empty());
  CHECK_THAT(probe_of(d / "missing/ckpt.h5"), Contains("--checkpoint " + (d / "missing/ckpt.h5")) &&
                                                   Contains("does not exist"));
  CHECK_THAT(probe_of(d / "adir"), Contains("--checkpoint " + (d / "adir")) && Contains("is a folder"));
  CHECK_THAT(probe_of(d.file("plain") + "/ckpt.h5"), Contains("is not a folder"));
  // A command that makes the folder: the nearest existing folder above must be writable.
  CHECK(probe_of(d / "missing/deeper/ckpt.h5", /*creates_folder=*/true).empty());
  CHECK_FALSE(fs::exists(d / "missing"));  // the check itself creates nothing
  // The probe file is removed again.
  CHECK(probe_folder(d.path.string()).empty());
  for (auto const& entry : fs::directory_iterator(d.path))
    CHECK(entry.path().filename().string().rfind(".joule-write-probe", 0) != 0);
}

TEST_CASE("FilePlan: a read-only output folder is refused by its probe", "[outputs]") {
  // Root writes anyway; tests/scripts/cli_checks.sh runs the commands' refusal as user nobody.
  if (geteuid() == 0) JOULE_SKIP("running as root, who can write in a read-only folder");
  TempDir d;
  fs::create_directories(d / "ro");
  fs::permissions(d / "ro", fs::perms::owner_read | fs::perms::owner_exec);
  FilePlan plan;
  plan.output("--checkpoint", d / "ro/ckpt.h5", OutputOptions{});
  CHECK_THAT(plan.probe(), Contains("cannot write in the folder") && Contains("Permission denied"));
}

namespace {

joule::scheduler::RunLogContents two_trials() {
  using namespace joule::scheduler;
  RunLogContents log;
  log.path = "run.h5";
  log.header.energy_kind = "measured";
  log.header.energy_source = "RAPL package";
  for (int i = 0; i < 3; ++i) {
    TrialRecord t;
    t.index = i;
    t.knobs.offload_ratio = 0.5 * i;
    t.time_per_step_s = 0.1 + 0.02 * i;
    t.energy_per_step_j = 10 - i;
    t.objective = t.time_per_step_s * t.energy_per_step_j;
    t.ci_relative = 0.01;
    log.trials.push_back(t);
  }
  log.best = 1;
  log.pareto = {0, 1, 2};
  return log;
}

}  // namespace

TEST_CASE("report: non-finite figures are named, never printed as nan%", "[report]") {
  double const nan = std::numeric_limits<double>::quiet_NaN(), inf = std::numeric_limits<double>::infinity();
  auto const good = joule::scheduler::format_run_report(two_trials());
  CHECK_THAT(good, Contains("time lost 20.0%") && !Contains("WARNING"));

  SECTION("the chosen trial") {
    for (auto [t, e] : {std::pair{nan, 9.0}, std::pair{0.12, nan}, std::pair{inf, 9.0}, std::pair{0.12, -inf}}) {
      auto log = two_trials();
      log.trials[1].time_per_step_s = t;
      log.trials[1].energy_per_step_j = e;
      auto const report = joule::scheduler::format_run_report(log);
      CAPTURE(t, e, report);
      CHECK_THAT(report, Contains("WARNING: inconsistent log: the chosen trial 1"));
      CHECK_THAT(report, !Contains("nan%") && !Contains("inf%") && !Contains("time lost"));
    }
  }
  SECTION("the chosen trial is not ok") {
    auto log = two_trials();
    log.trials[1].status = joule::scheduler::TrialStatus::failed;
    CHECK_THAT(joule::scheduler::format_run_report(log), Contains("the chosen trial 1 has status failed"));
  }
  SECTION("the fastest trial") {
    for (auto [t, e] : {std::pair{0.1, nan}, std::pair{0.0, 10.0}, std::pair{-inf, 10.0}}) {
      auto log = two_trials();
      log.trials[0].time_per_step_s = t;
      log.trials[0].energy_per_step_j = e;
      auto const report = joule::scheduler::format_run_report(log);
      CAPTURE(t, e, report);
      CHECK_THAT(report, Contains("WARNING: inconsistent log: ok trial 0 has no finite time and energy"));
      CHECK_THAT(report, !Contains("nan%") && !Contains("inf%"));
      // The comparison is made with the fastest trial whose figures are finite: trial 1 itself.
      CHECK_THAT(report, Contains("also the fastest"));
    }
  }
  SECTION("a zero energy does not divide") {
    auto log = two_trials();
    log.trials[0].energy_per_step_j = 0;
    auto const report = joule::scheduler::format_run_report(log);
    CHECK_THAT(report, !Contains("nan%") && !Contains("inf%") && Contains("time lost 20.0%"));
  }
}
