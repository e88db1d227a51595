// verlpp-bench's shared helpers: the suite list, repetition timing and the statistics of a
// Measurement. Timing ends each repetition with the plugin's device_synchronize, so queued
// device work is inside the time on every plugin (a no-op on cpu_ref).
#include "bench.hpp"

#include <verlpp/hw/device.hpp>

#include <algorithm>
#include <chrono>

namespace verlpp::bench {

void Target::sync() const {
  if (plugin != nullptr) hw::Device(*plugin, device.has_index() ? device.index() : 0).synchronize();
}

const char* status_name(Status s) {
  switch (s) {
    case Status::ok: return "ok";
    case Status::skipped: return "skipped";
    case Status::wrong: return "wrong";
    case Status::error: return "error";
  }
  return "?";
}

namespace {
std::vector<double> sorted(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v;
}
}  // namespace

double Measurement::min_s() const { return seconds.empty() ? 0 : sorted(seconds).front(); }
double Measurement::max_s() const { return seconds.empty() ? 0 : sorted(seconds).back(); }
double Measurement::median_s() const {
  if (seconds.empty()) return 0;
  const std::vector<double> s = sorted(seconds);
  const size_t n = s.size();
  return n % 2 ? s[n / 2] : 0.5 * (s[n / 2 - 1] + s[n / 2]);
}

std::vector<double> time_reps(const Options& o, const Target& t, const std::function<void()>& fn) {
  for (int i = 0; i < o.warmup; ++i) {
    fn();
    t.sync();
  }
  std::vector<double> out;
  for (int i = 0; i < o.reps; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    fn();
    t.sync();
    out.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  return out;
}

Measurement make_measurement(const std::string& suite, const std::string& workload, const std::string& shape,
                             const Target& t) {
  Measurement m;
  m.suite = suite;
  m.workload = workload;
  m.shape = shape;
  m.plugin = t.name;
  return m;
}

Measurement skipped(const std::string& suite, const std::string& workload, const std::string& shape, const Target& t,
                    const std::string& reason) {
  Measurement m = make_measurement(suite, workload, shape, t);
  m.status = Status::skipped;
  m.reason = reason;
  return m;
}

const std::vector<Suite>& all_suites() {
  static const std::vector<Suite> suites = {
      {"kernels", "the plugin's kernel table on its device, each checked against LibTorch math first", run_kernels},
      {"algo", "advantage estimators and the policy loss on the plugin's torch device", run_algo},
      {"train", "one actor update (forward, backward, AdamW) of the tiny model on the plugin's device", run_train},
      {"rollout", "RolloutEngine::generate on the plugin's device with its kernels", run_rollout},
      {"collectives", "all_reduce / all_gather through the plugin communicator, ranks as threads", run_collectives},
      {"e2e", "a short GRPO run (RlTrainer, tiny model), per stage from its timing_s/* metrics", run_e2e},
  };
  return suites;
}

double speedup(const std::vector<Measurement>& all, const Measurement& m, const std::string& baseline) {
  if (m.status != Status::ok || m.seconds.empty()) return 0;
  for (const Measurement& b : all)
    if (b.plugin == baseline && b.suite == m.suite && b.workload == m.workload && b.shape == m.shape)
      return b.status == Status::ok && m.median_s() > 0 ? b.median_s() / m.median_s() : 0;
  return 0;
}

}  // namespace verlpp::bench
