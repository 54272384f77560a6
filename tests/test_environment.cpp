// Environment variables read like configuration values (common/environment.hpp): the strict
// parsers, the variable types' messages, JOULE_HOST_CORES's range on few CPUs, and
// docs/configuration.md's table of environment variables against the tables in the code (names,
// allowed values and defaults, both ways).
#include "common/environment.hpp"
#include "core/environment.hpp"
#include "core/train/host_cores.hpp"
#include "environment.hpp"

#include "support/catch.hpp"
#include "support/test_paths.hpp"

#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdlib>
#include <functional>
#include <thread>
#include <fstream>
#include <map>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

using joule::environment::parse_integer;
using joule::test::Contains;
using joule::environment::parse_real;

namespace {

// Sets a variable for one test and restores what was there.
struct ScopedVariable {
  std::string name;
  std::optional<std::string> before;
  ScopedVariable(std::string n, char const* value) : name(std::move(n)) {
    if (char const* old = std::getenv(name.c_str())) before = old;
    if (value)
      ::setenv(name.c_str(), value, 1);
    else
      ::unsetenv(name.c_str());
  }
  ~ScopedVariable() {
    if (before)
      ::setenv(name.c_str(), before->c_str(), 1);
    else
      ::unsetenv(name.c_str());
  }
};

template <class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (joule::environment::Error const& e) {
    return e.what();
  }
  return "(no error)";
}

constexpr joule::environment::Integer kTestInteger{"JOULE_TEST_INTEGER", "a test", 1, 5, 3, nullptr};
constexpr joule::environment::Real kTestReal{"JOULE_TEST_REAL", "a test", 0.0, 10.0, true, 2.5, "watts"};
constexpr joule::environment::Switch kTestSwitch{"JOULE_TEST_SWITCH", "a test", true};

}  // namespace

TEST_CASE("environment: integers are the whole text, in plain decimal", "[environment]") {
  CHECK(parse_integer("0") == 0);
  CHECK(parse_integer("42") == 42);
  CHECK(parse_integer("-3") == -3);
  CHECK(parse_integer("007") == 7);
  CHECK(parse_integer("9223372036854775807") == 9223372036854775807LL);
  for (char const* bad : {"", " 2", "2 ", "4x", "+2", "abc", "1.0", "1e3", "-", "0x10", "9223372036854775808",
                          "99999999999999999999999999"}) {
    INFO("'" << bad << "'");
    CHECK_FALSE(parse_integer(bad).has_value());
  }
}

TEST_CASE("environment: real numbers are finite and the whole text", "[environment]") {
  CHECK(parse_real("20") == 20.0);
  CHECK(parse_real("0.5") == 0.5);
  CHECK(parse_real(".5") == 0.5);
  CHECK(parse_real("1e3") == 1000.0);
  CHECK(parse_real("2.5E-1") == 0.25);
  CHECK(parse_real("-2") == -2.0);
  for (char const* bad : {"", "nan", "NaN", "inf", "-inf", "infinity", "0x10", " 1", "1 ", "abc", "1e999", "e5", "1e",
                          "+1", "-", ".", "1..2", "1,5"}) {
    INFO("'" << bad << "'");
    CHECK_FALSE(parse_real(bad).has_value());
  }
}

TEST_CASE("environment: a variable's value, default and refusal", "[environment]") {
  {
    ScopedVariable unset("JOULE_TEST_INTEGER", nullptr);
    CHECK_FALSE(kTestInteger.read().has_value());
    CHECK(kTestInteger.value() == 3);
  }
  {
    ScopedVariable empty("JOULE_TEST_INTEGER", "");  // empty counts as unset
    CHECK(kTestInteger.value() == 3);
  }
  {
    ScopedVariable set("JOULE_TEST_INTEGER", "5");
    CHECK(kTestInteger.value() == 5);
  }
  for (char const* bad : {"0", "6", "abc", "-1"}) {
    ScopedVariable set("JOULE_TEST_INTEGER", bad);
    CHECK(error_of([] { kTestInteger.value(); }) ==
          std::string("JOULE_TEST_INTEGER is '") + bad + "'; allowed: an integer in [1, 5]");
  }
  {
    ScopedVariable set("JOULE_TEST_REAL", "10");
    CHECK(kTestReal.value() == 10.0);
  }
  for (char const* bad : {"0", "nan", "-1", "10.5", "x"}) {
    ScopedVariable set("JOULE_TEST_REAL", bad);
    CHECK(error_of([] { kTestReal.value(); }) ==
          std::string("JOULE_TEST_REAL is '") + bad + "'; allowed: a number of watts > 0 and <= 10");
  }
  {
    ScopedVariable off("JOULE_TEST_SWITCH", "off");
    CHECK_FALSE(kTestSwitch.value());
  }
  {
    ScopedVariable bad("JOULE_TEST_SWITCH", "no");
    CHECK(error_of([] { kTestSwitch.value(); }) == "JOULE_TEST_SWITCH is 'no'; allowed: on or off");
  }
}

TEST_CASE("environment: JOULE_HOST_CORES's range follows the CPUs, and says when none works", "[environment]") {
  {
    ScopedVariable set("JOULE_HOST_CORES", "1");
    CHECK(error_of([] { joule::core_environment::host_cores_wanted(1); }) ==
          "JOULE_HOST_CORES is '1', but no value can work here: this process may use 1 CPU; JOULE_HOST_CORES "
          "needs at least 2 (Kokkos keeps one)");
    CHECK(joule::core_environment::host_cores_wanted(2) == 1);
  }
  {
    ScopedVariable set("JOULE_HOST_CORES", "4");
    CHECK(error_of([] { joule::core_environment::host_cores_wanted(4); }) ==
          "JOULE_HOST_CORES is '4'; allowed: an integer in [1, 3] (this process may use 4 CPUs, and Kokkos keeps "
          "at least one)");
    CHECK(joule::core_environment::host_cores_wanted(5) == 4);
  }
  ScopedVariable unset("JOULE_HOST_CORES", nullptr);
  CHECK_FALSE(joule::core_environment::host_cores_wanted(1).has_value());
  // Unset, a CPU build sets nothing aside; a GPU build all but 4 of the process's own CPUs (an
  // mpirun-bound rank's 72 on a 288-CPU node, not the node's), half below 8, Kokkos keeping one.
  CHECK(joule::default_host_cores(72, /*device_is_host=*/true) == 0);
  CHECK(joule::default_host_cores(72, false) == 68);
  CHECK(joule::default_host_cores(8, false) == 4);
  CHECK(joule::default_host_cores(7, false) == 3);
  CHECK(joule::default_host_cores(2, false) == 1);
  CHECK(joule::default_host_cores(1, false) == 0);
}

namespace {
// The cells of a markdown table row ("| a | b |"), trimmed; empty for a line that is not one.
std::vector<std::string> cells(std::string const& line) {
  std::vector<std::string> out;
  if (line.size() < 2 || line[0] != '|') return out;
  std::string cell;
  for (std::size_t i = 1; i < line.size(); ++i) {
    if (line[i] == '|' && line[i - 1] != '\\') {
      auto const b = cell.find_first_not_of(' '), e = cell.find_last_not_of(' ');
      out.push_back(b == std::string::npos ? "" : cell.substr(b, e - b + 1));
      cell.clear();
    } else {
      cell += line[i];
    }
  }
  return out;
}
std::string unquoted(std::string text) {  // `name` -> name; \| -> |
  if (text.size() >= 2 && text.front() == '`' && text.back() == '`') text = text.substr(1, text.size() - 2);
  for (std::size_t at; (at = text.find("\\|")) != std::string::npos;) text.replace(at, 2, "|");
  return text;
}
}  // namespace

TEST_CASE("docs: configuration.md's table of environment variables is the code's", "[docs][environment]") {
  std::ifstream in(joule::test::source_path("docs/configuration.md"));
  REQUIRE(in);
  // The table whose header starts "| variable | meaning | allowed | default |".
  std::map<std::string, std::vector<std::string>> documented;
  std::string line;
  bool in_table = false;
  while (std::getline(in, line)) {
    auto const row = cells(line);
    if (!in_table) {
      in_table = row.size() == 4 && row[0] == "variable" && row[2] == "allowed";
      continue;
    }
    if (row.empty()) break;
    if (row[0].rfind("---", 0) == 0) continue;
    REQUIRE(row.size() == 4);
    documented[unquoted(row[0])] = {row[1], unquoted(row[2]), unquoted(row[3])};
  }
  REQUIRE(documented.size() > 10);  // the table was found
  std::ostringstream expected;      // the table as the code has it, printed when they differ
  bool same = true;
  for (auto const& v : joule::apps::environment_variables()) {
    expected << "| `" << v.name << "` | " << v.meaning << " | " << v.allowed << " | " << v.fallback << " |\n";
    auto const it = documented.find(v.name);
    if (it == documented.end()) {
      same = false;
      UNSCOPED_INFO(v.name << " is read by joule but not in the table");
      continue;
    }
    if (it->second[1] != v.allowed || it->second[2] != v.fallback) {
      same = false;
      UNSCOPED_INFO(v.name << ": the table says allowed '" << it->second[1] << "', default '" << it->second[2]
                           << "'; the code: '" << v.allowed << "', '" << v.fallback << "'");
    }
    documented.erase(it);
  }
  for (auto const& [name, row] : documented) {
    same = false;
    UNSCOPED_INFO(name << " is in the table but joule does not read it");
  }
  INFO("the code's table:\n" << expected.str());
  CHECK(same);
}

TEST_CASE("thread choice: OMP_NUM_THREADS above the usable CPUs and a cgroup quota give way; Kokkos' own count "
          "does not", "[environment]") {
  using joule::apps::choose_kokkos_threads;
  using joule::apps::UsableCpus;
  ScopedVariable omp_threads("OMP_NUM_THREADS", nullptr);
  ScopedVariable kokkos_threads("KOKKOS_NUM_THREADS", nullptr);
  char program[] = "joule", info[] = "info", flag[] = "--kokkos-num-threads=3", other[] = "--kokkos-numa=1";
  char* plain[] = {program, info, nullptr};
  char* with_flag[] = {program, info, flag, nullptr};
  char* with_other[] = {program, info, other, nullptr};
  auto const threads = [](joule::apps::ThreadChoice const& c) { return c.threads; };
  CHECK(threads(choose_kokkos_threads(UsableCpus{8, 2.5}, 2, plain)) == std::optional<long>(2));
  CHECK(choose_kokkos_threads(UsableCpus{8, 2.5}, 2, plain).note.empty());  // nothing the user set
  CHECK(threads(choose_kokkos_threads(UsableCpus{8, 0.5}, 2, plain)) == std::optional<long>(1));
  CHECK(threads(choose_kokkos_threads(UsableCpus{8, 0}, 2, plain)) == std::nullopt);    // no quota: OpenMP's
  CHECK(threads(choose_kokkos_threads(UsableCpus{2, 4.0}, 2, plain)) == std::nullopt);  // quota above the mask
  CHECK(threads(choose_kokkos_threads(UsableCpus{8, 2.5}, 3, with_flag)) == std::nullopt);
  CHECK(threads(choose_kokkos_threads(UsableCpus{8, 2.5}, 3, with_other)) == std::optional<long>(2));
  {
    ScopedVariable named("OMP_NUM_THREADS", "64,2");
    auto const choice = choose_kokkos_threads(UsableCpus{2, 0}, 2, plain);
    CHECK(threads(choice) == std::optional<long>(2));
    CHECK_THAT(choice.note, Contains("OMP_NUM_THREADS=64,2 asks for more threads than the 2 CPUs this process may "
                                     "use: Kokkos gets 2") &&
                                Contains("KOKKOS_NUM_THREADS=64 keeps 64"));
    CHECK(threads(choose_kokkos_threads(UsableCpus{2, 0}, 3, with_flag)) == std::nullopt);
    CHECK(threads(choose_kokkos_threads(UsableCpus{64, 0}, 2, plain)) == std::nullopt);  // as many CPUs as asked
  }
  {
    ScopedVariable named("OMP_NUM_THREADS", "2");
    CHECK(threads(choose_kokkos_threads(UsableCpus{8, 2.5}, 2, plain)) == std::nullopt);  // the user's, not above
  }
  ScopedVariable named("KOKKOS_NUM_THREADS", "64");
  CHECK(threads(choose_kokkos_threads(UsableCpus{2, 0}, 2, plain)) == std::nullopt);
}

TEST_CASE("thread choice: CPUs other work keeps busy are left to it, unless a count is set", "[environment]") {
  using joule::apps::choose_kokkos_threads;
  using joule::apps::UsableCpus;
  ScopedVariable omp_threads("OMP_NUM_THREADS", nullptr);
  ScopedVariable kokkos_threads("KOKKOS_NUM_THREADS", nullptr);
  char program[] = "joule", train[] = "train", flag[] = "--kokkos-num-threads=3";
  char* plain[] = {program, train, nullptr};
  char* with_flag[] = {program, train, flag, nullptr};
  int measured = 0;
  auto const busy = [&](double cpus) {
    return std::function<joule::energy::StartMeasurement()>([&measured, cpus] {
      ++measured;
      return joule::energy::StartMeasurement{joule::energy::level_rising(cpus, {}), cpus, 1.5};
    });
  };
  auto const threads = [](joule::apps::ThreadChoice const& c) { return c.threads; };
  // One busy process on 2 CPUs: one thread, and the note names the numbers and the way out.
  auto const one = choose_kokkos_threads(UsableCpus{2, 0}, 2, plain, busy(0.93));
  CHECK(threads(one) == std::optional<long>(1));
  CHECK_THAT(one.note, Contains("other work keeps 0.9 of the 2 CPUs this process may use busy (at least that in every "
                                "quarter second of 1.50 s): Kokkos gets 1 thread") &&
                           Contains("fixed for this run") && Contains("JOULE_SHARE_CPUS=off"));
  // The run log's record says the same, measured or not.
  CHECK(one.record == "Kokkos gets 1 of the 2 CPUs this process may use: other work kept 0.93 of them busy in every "
                      "quarter second of 1.50 s as the run started; fixed for the run");
  CHECK_THAT(choose_kokkos_threads(UsableCpus{2, 0}, 2, plain, busy(0.55)).record,
             Contains("Kokkos gets all 2 CPUs this process may use: no sustained load from other work (0.55 CPUs busy"));
  CHECK_THAT(choose_kokkos_threads(UsableCpus{2, 0}, 2, plain, busy(std::nan(""))).record,
             Contains("could not be measured"));
  CHECK(choose_kokkos_threads(UsableCpus{2, 0}, 2, plain).record.empty());  // not measured: nothing to record
  // Below the share: nothing left to others (OpenMP's own count; the quota's where there is one).
  CHECK(threads(choose_kokkos_threads(UsableCpus{2, 0}, 2, plain, busy(0.55))) == std::nullopt);
  CHECK(choose_kokkos_threads(UsableCpus{2, 0}, 2, plain, busy(0.55)).note.empty());
  CHECK(threads(choose_kokkos_threads(UsableCpus{8, 4.0}, 2, plain, busy(0.2))) == std::optional<long>(4));
  // Several busy CPUs of many; never fewer than one thread; the quota's CPUs are the ones counted.
  CHECK(threads(choose_kokkos_threads(UsableCpus{72, 0}, 2, plain, busy(2.7))) == std::optional<long>(69));
  CHECK(threads(choose_kokkos_threads(UsableCpus{4, 0}, 2, plain, busy(7.0))) == std::optional<long>(1));
  CHECK(threads(choose_kokkos_threads(UsableCpus{8, 3.0}, 2, plain, busy(1.0))) == std::optional<long>(2));
  // One CPU: nothing to leave. Unreadable: nothing left.
  CHECK(threads(choose_kokkos_threads(UsableCpus{1, 0}, 2, plain, busy(1.0))) == std::nullopt);
  CHECK(threads(choose_kokkos_threads(UsableCpus{2, 0}, 2, plain, busy(std::nan("")))) == std::nullopt);
  // A count the user set is taken, and the machine is not measured.
  measured = 0;
  CHECK(threads(choose_kokkos_threads(UsableCpus{2, 0}, 3, with_flag, busy(1.0))) == std::nullopt);
  {
    ScopedVariable named("OMP_NUM_THREADS", "2");
    CHECK(threads(choose_kokkos_threads(UsableCpus{2, 0}, 2, plain, busy(1.0))) == std::nullopt);
  }
  {
    ScopedVariable named("KOKKOS_NUM_THREADS", "2");
    CHECK(threads(choose_kokkos_threads(UsableCpus{2, 0}, 2, plain, busy(1.0))) == std::nullopt);
  }
  CHECK(measured == 0);
}

TEST_CASE("thread choice: a busy process beside this one is measured as other work", "[environment]") {
  // A child spins while the measurement sleeps: at least most of a CPU busy elsewhere (the
  // machine's other work can only add to it).
  pid_t const child = ::fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    auto const end = std::chrono::steady_clock::now() + std::chrono::seconds(3);
    volatile unsigned long spin = 0;
    while (std::chrono::steady_clock::now() < end) spin = spin + 1;
    ::_exit(0);
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(200));  // the child is running
  double const busy = joule::apps::cpus_busy_elsewhere(0.5);
  ::kill(child, SIGKILL);
  ::waitpid(child, nullptr, 0);
  INFO("busy elsewhere: " << busy << " CPUs");
  // Where the child shares a CPU with this process's mask only in part, it still runs: a spinning
  // process gets at least half a CPU beside one other.
  CHECK(busy >= 0.5);
}

TEST_CASE("oversubscription: more host threads than the CPUs the process may use is named", "[environment]") {
  using joule::apps::oversubscription_warning;
  using joule::apps::UsableCpus;
  CHECK(oversubscription_warning(2, UsableCpus{2, 0}).empty());
  CHECK(oversubscription_warning(1, UsableCpus{4, 0}).empty());
  CHECK_THAT(oversubscription_warning(64, UsableCpus{2, 0}),
             Contains("64 host threads on 2 CPUs") && Contains("affinity mask allows 2") && Contains("at most 2"));
  // A cgroup quota below the affinity mask limits too; a fraction of a CPU counts as none more.
  CHECK(UsableCpus{8, 2.5}.count() == 2);
  CHECK(UsableCpus{8, 0.5}.count() == 1);
  CHECK(UsableCpus{2, 16}.count() == 2);
  CHECK_THAT(oversubscription_warning(4, UsableCpus{8, 2.5}),
             Contains("4 host threads on 2 CPUs") && Contains("cgroup's CPU quota 2.50"));
  CHECK(oversubscription_warning(2, UsableCpus{8, 2.5}).empty());
}

TEST_CASE("host cores: ranks on one node that set aside the same CPUs take disjoint shares", "[environment][host_cores]") {
  using V = std::vector<int>;
  auto range = [](int a, int b) {
    V v;
    for (int c = a; c <= b; ++c) v.push_back(c);
    return v;
  };
  SECTION("four unbound ranks on each of two GH200 nodes: 68 CPUs each asked, 17 each kept, per node") {
    std::vector<std::string> const nodes{"n1", "n1", "n1", "n1", "n2", "n2", "n2", "n2"};
    std::vector<V> const asked(8, range(4, 71));
    auto const s = joule::share_optimizer_cpus(nodes, asked);
    REQUIRE(s.groups == std::vector<std::vector<int>>{{0, 1, 2, 3}, {4, 5, 6, 7}});
    CHECK_FALSE(s.shared);
    CHECK(s.cpus[0] == range(4, 20));
    CHECK(s.cpus[3] == range(55, 71));
    CHECK(s.cpus[4] == s.cpus[0]);  // another node: its own CPUs
    for (int a = 0; a < 4; ++a)
      for (int b = a + 1; b < 4; ++b)
        for (int c : s.cpus[std::size_t(a)])
          CHECK(std::find(s.cpus[std::size_t(b)].begin(), s.cpus[std::size_t(b)].end(), c) == s.cpus[std::size_t(b)].end());
  }
  SECTION("bound ranks (disjoint sets) and processes alone keep what they have") {
    std::vector<V> const asked{range(4, 71), range(76, 143), range(148, 215)};
    auto const s = joule::share_optimizer_cpus({"n1", "n1", "n1"}, asked);
    CHECK(s.groups.empty());
    CHECK(s.cpus == asked);
  }
  SECTION("uneven pools split to within one CPU; a pool smaller than its ranks is shared and says so") {
    auto const s = joule::share_optimizer_cpus({"a", "a", "a"}, {range(1, 7), range(5, 8), V{}});  // overlap 5-7
    REQUIRE(s.groups == std::vector<std::vector<int>>{{0, 1}});
    CHECK(s.cpus[0] == range(1, 4));
    CHECK(s.cpus[1] == range(5, 8));
    CHECK(s.cpus[2].empty());
    auto const few = joule::share_optimizer_cpus({"a", "a", "a"}, {V{1}, V{1}, V{1}});  // 2 cores, np 3, one each asked
    CHECK(few.shared);
    CHECK(few.cpus == std::vector<V>{V{1}, V{1}, V{1}});
  }
  CHECK(joule::cpu_list_text({0, 1, 2, 3, 8, 10, 11}) == "0-3,8,10,11");
  CHECK(joule::cpu_list_text({5}) == "5");
  CHECK(joule::cpu_list_text({}) == "");
}

TEST_CASE("host cores: processes started unbound on one node split its CPUs before Kokkos starts",
          "[environment][host_cores]") {
  using V = std::vector<int>;
  auto range = [](int a, int b) {
    V v;
    for (int c = a; c <= b; ++c) v.push_back(c);
    return v;
  };
  V const grace = range(0, 71);
  SECTION("unbound: the process's mask is the node's, and it has company") {
    CHECK(joule::started_unbound(grace, grace, 4));
    CHECK_FALSE(joule::started_unbound(grace, grace, 1));            // alone: keeps the node
    CHECK_FALSE(joule::started_unbound(range(0, 17), grace, 4));     // bound by the launcher: its choice stands
    CHECK_FALSE(joule::started_unbound(range(0, 71), V{}, 4));       // the node's CPUs unreadable: nothing done
  }
  SECTION("contiguous shares in local-rank order, sizes within one, covering the node once") {
    auto const s = joule::node_shares(grace, 4);
    CHECK_FALSE(s.shared);
    REQUIRE(s.cpus.size() == 4);
    CHECK(s.cpus[0] == range(0, 17));
    CHECK(s.cpus[3] == range(54, 71));
    auto const odd = joule::node_shares(V{0, 1, 2, 3, 4, 5, 6, 8}, 3);  // 8 CPUs (one missing from the numbering)
    CHECK(odd.cpus == std::vector<V>{V{0, 1}, V{2, 3, 4}, V{5, 6, 8}});
    V all;
    for (auto const& c : odd.cpus) all.insert(all.end(), c.begin(), c.end());
    CHECK(all == V{0, 1, 2, 3, 4, 5, 6, 8});
  }
  SECTION("fewer CPUs than processes: one each, round robin, and it says they share") {
    auto const s = joule::node_shares(V{0, 1}, 3);
    CHECK(s.shared);
    CHECK(s.cpus == std::vector<V>{V{0}, V{1}, V{0}});
  }
  SECTION("the kernel's CPU lists, as cgroups and /sys write them") {
    using joule::core_environment::parse_cpu_list;
    CHECK(parse_cpu_list("0-3,8,10-11") == V{0, 1, 2, 3, 8, 10, 11});
    CHECK(parse_cpu_list("5") == V{5});
    CHECK(parse_cpu_list(joule::cpu_list_text(range(3, 40))) == range(3, 40));
    CHECK(parse_cpu_list("").empty());
    CHECK(parse_cpu_list("0-").empty());
    CHECK(parse_cpu_list("3-1").empty());
    CHECK(parse_cpu_list("a").empty());
    CHECK_FALSE(joule::core_environment::node_cpus().empty());  // this machine's cgroup or online CPUs
  }
}
