// verlpp-bench: the pieces every suite shares. A suite is a function that runs its fixed, named
// workloads on one plugin (a Target) and returns one Measurement per workload. Decision: a
// workload that cannot run on a plugin (device not placeable, kernel absent, wrong result) is
// still a Measurement, with a status and a reason, so every table, JSON file and report lists
// the same workloads for every plugin and a skip is never silent.
#pragma once

#include <verlpp/hw/plugin.hpp>

#include <c10/core/Device.h>
#include <nlohmann/json.hpp>

#include <functional>
#include <string>
#include <vector>

namespace verlpp::bench {

struct Options {
  std::vector<std::string> suites;   // --suites a,b (default: all)
  std::vector<std::string> plugins;  // --plugins a,b (default: every plugin that loads)
  int reps = 5;                      // --reps N timed repetitions (after the warm-up)
  int warmup = 1;                    // --warmup N untimed runs first
  int ranks = 2;                     // --ranks N: collectives' ranks (threads of this process)
  bool quick = false;                // --quick: small shapes for CI
  std::string json_path, html_path;  // --json F, --html F
  std::string baseline;              // --baseline NAME (default cpu_ref when run, else the first)
};

// One plugin as the suites see it: the plugin, the torch device its tensors go on, and why it
// cannot run here (empty = it can).
struct Target {
  const hw::Plugin* plugin = nullptr;
  std::string name;
  c10::Device device{c10::kCPU};
  std::string skip_reason;
  // Waits for the plugin's queued device work (a no-op on a synchronous device).
  void sync() const;
};

enum class Status { ok, skipped, wrong, error };
const char* status_name(Status s);

// One workload on one plugin.
struct Measurement {
  std::string suite, workload;  // workload: a fixed name, e.g. "rms_norm"
  std::string shape;            // the shapes, printed: "N=4096 D=896 f32"
  std::string plugin;
  Status status = Status::ok;
  std::string reason;           // why skipped / wrong / error
  double worst_error = 0;       // kernels: the correctness check's worst |got - want|
  std::vector<double> seconds;  // one per timed repetition (empty unless ok)
  double work = 0;              // units of work per repetition (tokens, bytes), 0 = none
  std::string work_unit;        // "tokens", "bytes", ...: the table shows work / median
  double min_s() const;
  double median_s() const;
  double max_s() const;
};

// Runs `fn` warmup times, then reps times, each timed and followed by target.sync().
std::vector<double> time_reps(const Options& o, const Target& t, const std::function<void()>& fn);

// A Measurement of `suite`/`workload` on `t` with status ok and no times yet.
Measurement make_measurement(const std::string& suite, const std::string& workload, const std::string& shape,
                             const Target& t);
// The same, marked skipped with `reason`.
Measurement skipped(const std::string& suite, const std::string& workload, const std::string& shape, const Target& t,
                    const std::string& reason);

// The suites, in the order they run. Each returns its workloads' Measurements on `t`.
using SuiteFn = std::function<std::vector<Measurement>(const Options&, const Target&)>;
struct Suite {
  std::string name;
  std::string what;  // one line for --help
  SuiteFn run;
};
const std::vector<Suite>& all_suites();

std::vector<Measurement> run_kernels(const Options& o, const Target& t);
std::vector<Measurement> run_rollout(const Options& o, const Target& t);
std::vector<Measurement> run_train(const Options& o, const Target& t);
std::vector<Measurement> run_algo(const Options& o, const Target& t);
std::vector<Measurement> run_collectives(const Options& o, const Target& t);
std::vector<Measurement> run_e2e(const Options& o, const Target& t);

// Output (bench_report.cpp). `baseline`: the plugin the ratio column is taken against.
void print_table(const std::vector<Measurement>& all, const std::string& baseline);
nlohmann::json to_json(const std::vector<Measurement>& all, const Options& o, const std::string& baseline,
                       const nlohmann::json& machine);
void write_html(const std::string& path, const std::vector<Measurement>& all, const std::string& baseline,
                const nlohmann::json& machine);
// baseline median / this median for the same suite and workload; 0 when either did not run.
double speedup(const std::vector<Measurement>& all, const Measurement& m, const std::string& baseline);

}  // namespace verlpp::bench
