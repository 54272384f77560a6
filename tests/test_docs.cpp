// Reference pages that cannot drift silently (issue 18):
//  - docs/configuration.md lists exactly the configuration fields joule's parsers accept. The
//    accepted names come from the parsers themselves: each is given a configuration with an
//    unknown field in one section, and its "unknown field" error lists the fields it knows
//    (core/config/config.cpp for model, data, train and the section names;
//    scheduler/tune_settings.cpp for tune; parallel/backend_choice.cpp for parallel).
//  - docs/run-log.md lists exactly the groups, datasets and attributes the run-log writer creates,
//    each as what it is: a log is written here through RunLogWriter with every part (trials ok,
//    infeasible and failed, with regions and power by domain, a resume, /best, /pareto, an
//    in-flight /train) and walked with the HDF5 C API.
// Both compare both ways and name every missing or extra name.
#include "core/config/config.hpp"
#include "core/precision/precision.hpp"
#include "parallel/backend_choice.hpp"
#include "runlog/run_log.hpp"
#include "scheduler/tune_settings.hpp"

#include <hdf5.h>
#include <nlohmann/json.hpp>

#include "support/catch.hpp"
#include "support/tiny_config.hpp"
#include "support/test_paths.hpp"

#include <fstream>
#include <functional>
#include <map>
#include <set>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

using namespace joule;

namespace {

std::string read_text(std::string const& path) {
  std::ifstream in(path);
  if (!in) throw std::runtime_error("cannot read " + path);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

std::string trim(std::string const& s) {
  auto const b = s.find_first_not_of(" \t");
  if (b == std::string::npos) return "";
  return s.substr(b, s.find_last_not_of(" \t") - b + 1);
}

// The cells of a markdown table row ("| a | b |" -> {"a", "b"}); empty for other lines.
std::vector<std::string> cells(std::string const& line) {
  std::string const t = trim(line);
  if (t.size() < 2 || t.front() != '|') return {};
  std::vector<std::string> out;
  std::size_t start = 1;
  for (std::size_t bar = t.find('|', start); bar != std::string::npos; bar = t.find('|', start)) {
    out.push_back(trim(t.substr(start, bar - start)));
    start = bar + 1;
  }
  return out;
}

// The backticked spans of a cell ("`a` (optional)" -> {"a"}).
std::vector<std::string> backticked(std::string const& cell) {
  std::vector<std::string> out;
  for (std::size_t pos = 0;;) {
    auto const open = cell.find('`', pos);
    if (open == std::string::npos) break;
    auto const close = cell.find('`', open + 1);
    if (close == std::string::npos) break;
    out.push_back(cell.substr(open + 1, close - open - 1));
    pos = close + 1;
  }
  return out;
}

struct DocName {
  std::string name, kind;  // kind: the table's first header cell ("field", "group", "dataset", "attribute")
  int line = 0;
};

// The first-column names of the tables in `path` whose header's first cell is one of `kinds`. Every
// body row of such a table must hold exactly one backticked name there (else the test fails
// naming the line: a row the test cannot read must not slip through unchecked).
std::vector<DocName> documented_names(std::string const& path, std::set<std::string> const& kinds) {
  std::istringstream in(read_text(path));
  std::vector<DocName> names;
  std::string line, kind;  // kind: "" outside a table that counts
  bool in_table = false, header = false;
  for (int number = 1; std::getline(in, line); ++number) {
    auto const row = cells(line);
    if (row.empty()) {
      in_table = false;
      kind.clear();
      continue;
    }
    if (!in_table) {  // a header row
      in_table = true;
      header = true;
      kind = kinds.count(row[0]) ? row[0] : "";
      continue;
    }
    if (header) {  // the |---| line under the header
      header = false;
      continue;
    }
    if (kind.empty()) continue;
    auto const spans = backticked(row[0]);
    INFO(path << ":" << number << ": " << line);
    REQUIRE(spans.size() == 1);  // one name per row, in backticks
    names.push_back({spans[0], kind, number});
  }
  return names;
}

std::string joined(std::set<std::string> const& names) {
  std::string out;
  for (auto const& n : names) out += "\n  " + n;
  return out;
}

// a - b
std::set<std::string> minus(std::set<std::string> const& a, std::set<std::string> const& b) {
  std::set<std::string> out;
  for (auto const& x : a)
    if (!b.count(x)) out.insert(x);
  return out;
}

// ---- configuration ------------------------------------------------------------------------------

// The list an "unknown field" error gives: "... zz_probe ... (allowed[ in SECTION]: a, b, c)".
std::set<std::string> allowed_in(std::string const& message, std::string const& probe) {
  INFO("the parser's error: " << message);
  REQUIRE(message.find(probe) != std::string::npos);  // it names the unknown field
  auto const open = message.rfind("(allowed");
  REQUIRE(open != std::string::npos);
  auto const colon = message.find(": ", open);
  auto const close = message.find(')', open);
  REQUIRE(close != std::string::npos);
  REQUIRE(colon < close);
  std::set<std::string> names;
  std::string const list = message.substr(colon + 2, close - colon - 2);
  for (std::size_t start = 0; start <= list.size();) {
    auto const comma = std::min(list.find(", ", start), list.size());
    names.insert(list.substr(start, comma - start));
    start = comma + 2;
  }
  return names;
}

// The message of the exception `parse` throws (the test fails if it throws none).
std::string error_of(std::function<void()> const& parse) {
  try {
    parse();
  } catch (std::exception const& e) {
    return e.what();
  }
  FAIL("an unknown field was accepted");
  return "";
}

char const* const kProbe = "zz_undocumented_probe";

// Every field the parsers accept, as "section.field".
std::set<std::string> accepted_fields() {
  auto const base = nlohmann::json::parse(read_text(joule::test::source_path("apps/configs/tiny.json")));
  auto with_probe = [&](std::string const& section) {
    auto j = base;
    j[section][kProbe] = 1;
    return j.dump();
  };
  // How to ask each section's parser; a section the configuration accepts but this table does
  // not know fails the test below.
  std::map<std::string, std::function<std::string()>> ask;
  for (char const* section : {"model", "data", "train"})
    ask[section] = [&, section] { return error_of([&] { parse_config(with_probe(section)); }); };
  ask["tune"] = [&] {
    Config const cfg = parse_config(with_probe("tune"));  // training does not read the tune section
    return error_of([&] { scheduler::parse_tune_settings(cfg); });
  };
  ask["parallel"] = [&] { return error_of([&] { parallel::requested_comm_backend(with_probe("parallel")); }); };

  auto const sections = allowed_in(error_of([&] {
                                     auto j = base;
                                     j[kProbe] = nlohmann::json::object();
                                     parse_config(j.dump());
                                   }),
                                   kProbe);
  std::set<std::string> fields;
  for (auto const& section : sections) {
    INFO("section '" << section << "': the configuration accepts it; teach this test how to ask its parser");
    REQUIRE(ask.count(section));
    for (auto const& field : allowed_in(ask.at(section)(), kProbe)) fields.insert(section + "." + field);
  }
  return fields;
}

}  // namespace

TEST_CASE("docs: configuration.md documents every configuration field the parsers accept, and no other", "[docs]") {
  std::string const doc = joule::test::source_path("docs/configuration.md");
  auto const accepted = accepted_fields();
  REQUIRE(accepted.size() > 40);  // sanity: the probe read real lists
  std::set<std::string> documented;
  for (auto const& d : documented_names(doc, {"field"})) {
    INFO(doc << ":" << d.line << ": `" << d.name << "` is listed twice");
    CHECK(documented.insert(d.name).second);
  }
  auto const undocumented = minus(accepted, documented);
  auto const unknown = minus(documented, accepted);
  std::string problems;
  if (!undocumented.empty())
    problems += "accepted by the parsers but not in a field table of docs/configuration.md:" + joined(undocumented) + "\n";
  if (!unknown.empty()) problems += "in docs/configuration.md but not accepted by any parser:" + joined(unknown) + "\n";
  if (!problems.empty()) FAIL_CHECK(problems);
}

// ---- run log ------------------------------------------------------------------------------------

namespace {

using namespace joule::scheduler;

PowerTrace power(std::size_t samples) {
  PowerTrace p;
  p.domains = {"gpu0", "cpu", "module"};
  for (std::size_t i = 0; i < samples; ++i) {
    p.time_s.push_back(0.1 * double(i));
    for (std::size_t d = 0; d < p.domains.size(); ++d) p.watts.push_back(100.0 + double(i + d));
  }
  return p;
}

std::vector<RegionMeasure> regions() {
  return {{"forward", 4, 0.2, 30.0, false, "step"}, {"optimizer_host", 4, 0.001, 0.1, true, ""}};
}

TrialRecord trial(int index, TrialStatus status) {
  TrialRecord t;
  t.index = index;
  t.knobs.offload_ratio = 0.25 * index;
  t.knobs.recompute_depth = index % 2;
  t.knobs.micro_batch = 16;
  t.knobs.host_threads = 0;
  t.knobs.power_limit_w = 300;
  t.status = status;
  if (status == TrialStatus::ok) {
    t.time_per_step_s = 0.1 + index;
    t.energy_per_step_j = 20.0 - index;
    t.objective = t.time_per_step_s * t.energy_per_step_j;
    t.ci_relative = 0.03;
    t.repeats = 2;
    t.warmup_steps = 1;
    t.measured_steps = 2;
    t.drift = 1.01;
    t.step_time_s = {0.1, 0.11, 0.1, 0.12};
    t.step_energy_j = {20, 21, 19, 20};
    t.measured_on = {3, 4, 5, 6};
    t.regions = regions();
    t.power = power(5);
  } else {
    t.reason = status == TrialStatus::failed ? "out of memory" : "predicted 90 GiB > 80 GiB";
  }
  t.predicted_device_bytes = 1u << 20;
  return t;
}

TrainRecord train() {
  TrainRecord t;
  t.knobs.offload_ratio = 0.25;
  t.in_flight = true;
  t.search_steps = 6;
  t.switches = 2;
  t.switch_seconds = 0.3;
  for (int s = 1; s <= 8; ++s) t.steps.push_back({s, 5.0 / s, 1e-3, 1.0, 0.1, s <= 6 ? s / 3 : 1, s % 3 != 0, 0.1 * s});
  t.evals = {{4, 2.0, 0.5, 8}, {8, 1.0, 0.75, 8}};
  t.regions = regions();
  t.seconds = 0.8;
  t.energy_j = 160;
  t.power = power(9);
  return t;
}

// What the file holds: "/path" -> "group" | "dataset", "/path@name" -> "attribute"; trial groups'
// names (digits under /trials) replaced by <i>, as the page writes them.
std::map<std::string, std::string> walk(std::string const& path) {
  std::map<std::string, std::string> found;
  auto normal = [](std::string const& name) {  // "trials/0003/regions" -> "/trials/<i>/regions"
    std::string p = "/" + name;
    std::string const prefix = "/trials/";
    if (p.compare(0, prefix.size(), prefix) == 0) {
      auto const end = std::min(p.find('/', prefix.size()), p.size());
      auto const part = p.substr(prefix.size(), end - prefix.size());
      if (!part.empty() && part.find_first_not_of("0123456789") == std::string::npos)
        p = prefix + "<i>" + p.substr(end);
    }
    return p;
  };
  struct Walk {
    std::map<std::string, std::string>* found;
    std::string object;
  };
  auto const attributes = [](hid_t id, std::string const& object, std::map<std::string, std::string>& out) {
    Walk w{&out, object};
    return H5Aiterate(
        id, H5_INDEX_NAME, H5_ITER_INC, nullptr,
        [](hid_t, char const* name, H5A_info_t const*, void* data) -> herr_t {
          auto* walk_state = static_cast<Walk*>(data);
          (*walk_state->found)[walk_state->object + "@" + name] = "attribute";
          return 0;
        },
        &w);
  };
  hid_t const file = H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  REQUIRE(file >= 0);
  found["/"] = "group";
  REQUIRE(attributes(file, "/", found) >= 0);
  struct Visit {
    std::map<std::string, std::string>* found;
    std::function<std::string(std::string const&)> normal;
    std::function<herr_t(hid_t, std::string const&, std::map<std::string, std::string>&)> attributes;
  } v{&found, normal, attributes};
  herr_t const visited = H5Lvisit(
      file, H5_INDEX_NAME, H5_ITER_INC,
      [](hid_t group, char const* name, H5L_info_t const*, void* data) -> herr_t {
        auto* visit = static_cast<Visit*>(data);
        hid_t const object = H5Oopen(group, name, H5P_DEFAULT);
        if (object < 0) return -1;
        H5I_type_t const type = H5Iget_type(object);
        std::string const p = visit->normal(name);
        (*visit->found)[p] = type == H5I_GROUP ? "group" : type == H5I_DATASET ? "dataset" : "other";
        herr_t const listed = visit->attributes(object, p, *visit->found);
        H5Oclose(object);
        return listed < 0 ? -1 : 0;
      },
      &v);
  H5Fclose(file);
  REQUIRE(visited >= 0);
  return found;
}

}  // namespace

TEST_CASE("docs: run-log.md lists every group, dataset and attribute the run-log writer creates, and no other", "[docs]") {
  std::string const doc = joule::test::source_path("docs/run-log.md");
  test::TempFile log(".h5");
  {
    RunHeader h;
    h.joule_version = "0.test";
    h.git_commit = "abc";
    h.kokkos_version = "3.4.1";
    h.execution_space = "OpenMP";
    h.host = "here";
    h.energy_source = "fake";
    h.energy_kind = "measured";
    h.energy_regions = "timeline";
    h.objective = "edp";
    h.strategy = "exhaustive";
    h.tuning = "in_flight";
    h.config_json = read_text(joule::test::source_path("apps/configs/tiny.json"));
    h.device_memory_budget_bytes = 1e9;
    auto writer = RunLogWriter::create(log.path(), h);
    writer.append_trial(trial(0, TrialStatus::ok));
    writer.append_trial(trial(1, TrialStatus::infeasible));
    writer.close();
    auto resumed = RunLogWriter::resume(log.path(), h);  // a crash and --resume: the `resumed` record
    resumed.append_trial(trial(2, TrialStatus::ok));
    resumed.append_trial(trial(3, TrialStatus::failed));
    ChoiceRecord choice;  // how it was chosen: every attribute and the confirming rounds
    choice.best = choice.chosen = 2;
    choice.baseline = 0;
    choice.verdict = "chose trial 2";
    choice.confirm_ratios = {0.9, 0.92};
    resumed.write_best(trial(2, TrialStatus::ok), &choice);
    resumed.write_pareto({trial(0, TrialStatus::ok), trial(2, TrialStatus::ok)});
    resumed.write_train(train());
  }
  REQUIRE(read_run_log(log.path()).train.has_value());  // a log joule reads back whole
  test::TempFile profile_log(".h5");  // the energy tool's log: a profile instead of a search
  {
    RunHeader h;
    h.energy_kind = "model";
    h.tuning = "profile";
    h.config_json = "{}";
    auto writer = RunLogWriter::create(profile_log.path(), h);
    ProfileRecord p;
    p.program = "./app --size 7";
    p.regions = {{"solve", 3, 1.5, 30.0, false, ""}};
    p.kernels = {{"axpy", 9, 0.5, 10.0, true, ""}, {"fence wait", 2, 0.01, 0.2, true, ""}};
    p.power = {{"model (model, model)"}, {0.0, 0.01}, {20.0, 20.0}};
    writer.write_profile(p);
  }
  REQUIRE(read_run_log(profile_log.path()).profile.has_value());

  auto in_file = walk(log.path());
  for (auto const& object : walk(profile_log.path())) in_file.insert(object);
  std::map<std::string, std::string> in_doc;
  for (auto const& d : documented_names(doc, {"group", "dataset", "attribute"})) {
    INFO(doc << ":" << d.line << ": `" << d.name << "` is listed twice");
    CHECK(in_doc.emplace(d.name, d.kind).second);
  }
  std::set<std::string> missing, extra, wrong_kind;
  for (auto const& [name, kind] : in_file) {
    auto const it = in_doc.find(name);
    if (it == in_doc.end()) missing.insert(name + " (" + kind + ")");
    else if (it->second != kind) wrong_kind.insert(name + ": a " + kind + " in the file, in the page's " + it->second + " table");
  }
  for (auto const& [name, kind] : in_doc)
    if (!in_file.count(name)) extra.insert(name + " (" + kind + ")");
  std::string problems;
  if (!missing.empty()) problems += "written by the run-log writer but not listed in docs/run-log.md:" + joined(missing) + "\n";
  if (!extra.empty()) problems += "listed in docs/run-log.md but not written by the run-log writer:" + joined(extra) + "\n";
  if (!wrong_kind.empty()) problems += "listed as the wrong kind of object:" + joined(wrong_kind) + "\n";
  if (!problems.empty()) FAIL_CHECK(problems);
}

// ---- precision -----------------------------------------------------------------------------------

TEST_CASE("docs: design.md's precision table is core/precision/precision.hpp's, row for row", "[docs]") {
  std::istringstream doc(read_text(joule::test::source_path("docs/design.md")));
  std::vector<std::vector<std::string>> rows;
  bool in_table = false;
  for (std::string line; std::getline(doc, line);) {
    if (line.rfind("| kind of tensor |", 0) == 0) {
      in_table = true;
      continue;
    }
    if (!in_table) continue;
    if (line.empty() || line[0] != '|') break;
    if (line.rfind("|---", 0) == 0) continue;
    std::vector<std::string> cells;
    std::stringstream cells_text(line.substr(1));
    for (std::string cell; std::getline(cells_text, cell, '|');) {
      auto const b = cell.find_first_not_of(' '), e = cell.find_last_not_of(' ');
      cells.push_back(b == std::string::npos ? "" : cell.substr(b, e - b + 1));
    }
    rows.push_back(cells);
  }
  REQUIRE(rows.size() == std::size(joule::kHeldPrecision));
  for (std::size_t i = 0; i < rows.size(); ++i) {
    auto const& want = joule::kHeldPrecision[i];
    INFO("row " << i + 1 << " of the table in docs/design.md");
    REQUIRE(rows[i].size() >= 3);
    CHECK(rows[i][0] == want.name);
    CHECK(rows[i][1] == (want.bf16_in_bf16_runs ? "bf16" : "fp32"));
    CHECK(rows[i][2] == want.why);
    CHECK(&joule::held_precision(want.held) == &want);  // every kind has its own row
  }
}
