// verlpp-bench: every suite (kernels, algo, train, rollout, collectives, e2e) on every plugin
// given, side by side in one run; a table, --json and --html. Exit 0 when every workload ran
// or was skipped with a reason, 1 when one was wrong or failed, 2 for bad options. Decision: a
// plugin the loader found but rejected (a cuda plugin on a machine without a GPU) is a skip
// with the loader's reason; a name nobody found is an error naming the known plugins.
#include "bench.hpp"

#include <verlpp/core/strings.hpp>
#include <verlpp/hw/plugin_registry.hpp>
#include <verlpp/hw/torch_device.hpp>

#include <ATen/Parallel.h>
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <ctime>
#include <fstream>
#include <iostream>
#include <thread>

namespace verlpp::bench {
namespace {

const char* kUsage = R"(usage: verlpp-bench [options]
  --suites a,b        suites to run (default: all): {suites}
  --plugins a,b       plugins to run on (default: every plugin that loads); a plugin is found
                      as by VERL_HARDWARE_PLUGIN / VERLPP_PLUGIN_PATH (see `verlpp plugins`)
  --baseline NAME     the plugin the ratio column is taken against (default: cpu_ref when it
                      runs, else the first plugin)
  --reps N            timed repetitions per workload (default 5); min / median / max
  --warmup N          untimed runs before them (default 1)
  --ranks N           ranks of the collectives suite, as threads (default 2)
  --quick             small shapes (CI)
  --json FILE         write every measurement as JSON
  --html FILE         write a self-contained report with bar charts
)";

std::vector<std::string> split_list(const std::string& s) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= s.size()) {
    const size_t comma = s.find(',', start);
    const std::string item = s.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    if (!item.empty()) out.push_back(item);
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return out;
}

std::string suite_names() {
  std::string names;
  for (const Suite& s : all_suites()) names += (names.empty() ? "" : ", ") + s.name;
  return names;
}

Options parse(int argc, char** argv, bool& help) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) throw Error(a, "needs a value");
      return argv[++i];
    };
    auto number = [&](int min) {
      const std::string v = value();
      size_t used = 0;
      int n = 0;
      try {
        n = std::stoi(v, &used);
      } catch (const std::exception&) {
        used = 0;
      }
      if (used != v.size() || n < min) throw Error(a, fmt::format("'{}' is not a whole number >= {}", v, min));
      return n;
    };
    if (a == "--help" || a == "-h")
      help = true;
    else if (a == "--suites")
      o.suites = split_list(value());
    else if (a == "--plugins")
      o.plugins = split_list(value());
    else if (a == "--baseline")
      o.baseline = value();
    else if (a == "--reps")
      o.reps = number(1);
    else if (a == "--warmup")
      o.warmup = number(0);
    else if (a == "--ranks")
      o.ranks = number(1);
    else if (a == "--quick")
      o.quick = true;
    else if (a == "--json")
      o.json_path = value();
    else if (a == "--html")
      o.html_path = value();
    else
      throw Error(a, "unknown option (see --help)");
  }
  if (o.suites.empty())
    for (const Suite& s : all_suites()) o.suites.push_back(s.name);
  for (const std::string& name : o.suites) {
    bool known = false;
    for (const Suite& s : all_suites()) known = known || s.name == name;
    if (!known) throw Error("--suites", fmt::format("unknown suite '{}'; the suites are {}", name, suite_names()));
  }
  return o;
}

// The plugins to run on, each with its torch device or the reason it cannot run here.
std::vector<Target> resolve_targets(const Options& o) {
  const hw::DiscoveryResult& found = hw::plugins();
  std::vector<std::string> names = o.plugins;
  if (names.empty())
    for (const hw::Plugin& p : found.loaded) names.push_back(p.name());
  if (names.empty()) throw Error("--plugins", "no plugin loaded (see `verlpp plugins`); name one with --plugins");
  std::vector<Target> targets;
  for (const std::string& name : names) {
    Target t;
    t.name = name;
    for (const hw::Plugin& p : found.loaded)
      if (p.name() == name) t.plugin = &p;
    if (t.plugin == nullptr) {
      for (const hw::RejectedPlugin& r : found.rejected)
        if (r.name == name && t.skip_reason.empty()) t.skip_reason = "not loaded: " + r.reason;
      if (t.skip_reason.empty()) {
        std::string known;
        for (const hw::Plugin& p : found.loaded) known += (known.empty() ? "" : ", ") + p.name();
        for (const hw::RejectedPlugin& r : found.rejected)
          if (!r.name.empty()) known += (known.empty() ? "" : ", ") + r.name + " (rejected)";
        throw Error("--plugins", fmt::format("unknown plugin '{}'; found: {}", name, known.empty() ? "none" : known));
      }
    } else {
      const std::string type = t.plugin->torch_device_type();
      const std::string problem = hw::torch_placement_problem(type);
      if (!problem.empty())
        t.skip_reason = fmt::format("torch device '{}': {}", type, problem);
      else if (type == "cuda")
        t.device = c10::Device(c10::kCUDA, 0);
      else if (type != "cpu")
        t.skip_reason = fmt::format("torch device '{}' is not one this bench places tensors on", type);
    }
    targets.push_back(t);
  }
  return targets;
}

nlohmann::json machine_info(int argc, char** argv) {
  std::string command;
  for (int i = 0; i < argc; ++i) command += (i ? " " : "") + std::string(argv[i]);
  char date[32] = {0};
  const std::time_t now = std::time(nullptr);
  std::strftime(date, sizeof(date), "%Y-%m-%d %H:%M", std::localtime(&now));
  return {{"command", command},
          {"date", date},
          {"cores", std::thread::hardware_concurrency()},
          {"aten_threads", at::get_num_threads()},
          {"libtorch", hw::torch_version()}};
}

int run(const Options& o, const nlohmann::json& machine) {
  const std::vector<Target> targets = resolve_targets(o);
  std::string baseline = o.baseline;
  for (const Target& t : targets)
    if (baseline.empty() && t.name == "cpu_ref" && t.skip_reason.empty()) baseline = t.name;
  if (baseline.empty()) baseline = targets.front().name;
  bool baseline_listed = false;
  for (const Target& t : targets) baseline_listed = baseline_listed || t.name == baseline;
  if (!baseline_listed) throw Error("--baseline", fmt::format("'{}' is not one of the plugins run", baseline));

  std::cout << fmt::format("verlpp-bench: suites {}; plugins", verlpp::join(o.suites, ","));
  for (const Target& t : targets)
    std::cout << " " << t.name
              << (t.skip_reason.empty() ? " (" + t.device.str() + ")" : " (skipped: " + t.skip_reason + ")");
  std::cout << fmt::format("; {} reps after {} warm-up{}; baseline {}\n", o.reps, o.warmup,
                           o.quick ? "; quick shapes" : "", baseline)
            << std::flush;
  std::vector<Measurement> all;
  for (const Suite& suite : all_suites()) {
    if (std::find(o.suites.begin(), o.suites.end(), suite.name) == o.suites.end()) continue;
    for (const Target& t : targets) {
      std::cout << fmt::format("  {} on {} ...\n", suite.name, t.name) << std::flush;
      std::vector<Measurement> got;
      if (!t.skip_reason.empty()) {
        got.push_back(skipped(suite.name, "(all workloads)", "", t, t.skip_reason));
      } else {
        try {
          got = suite.run(o, t);
        } catch (const std::exception& e) {  // a suite that fails is one row, not the end of the run
          Measurement m = make_measurement(suite.name, "(all workloads)", "", t);
          m.status = Status::error;
          m.reason = e.what();
          got.push_back(m);
        }
      }
      all.insert(all.end(), got.begin(), got.end());
    }
  }
  print_table(all, baseline);
  if (!o.json_path.empty()) {
    std::ofstream out(o.json_path);
    if (!(out << to_json(all, o, baseline, machine).dump(2) << "\n"))
      throw Error("--json", fmt::format("cannot write '{}'", o.json_path));
    std::cout << "wrote " << o.json_path << "\n";
  }
  if (!o.html_path.empty()) {
    write_html(o.html_path, all, baseline, machine);
    std::cout << "wrote " << o.html_path << "\n";
  }
  int failed = 0;
  for (const Measurement& m : all) failed += m.status == Status::wrong || m.status == Status::error;
  if (failed) std::cout << fmt::format("verlpp-bench: {} workload(s) wrong or failed (see the table)\n", failed);
  return failed ? 1 : 0;
}

}  // namespace
}  // namespace verlpp::bench

int main(int argc, char** argv) {
  using namespace verlpp::bench;
  Options o;
  bool help = false;
  try {
    o = parse(argc, argv, help);
  } catch (const std::exception& e) {
    std::cerr << "verlpp-bench: " << e.what() << "\n";
    return 2;
  }
  if (help) {
    std::cout << fmt::format(kUsage, fmt::arg("suites", suite_names()));
    return 0;
  }
  try {
    return run(o, machine_info(argc, argv));
  } catch (const verlpp::Error& e) {
    std::cerr << "verlpp-bench: " << e.what() << "\n";
    return 2;
  }
}
