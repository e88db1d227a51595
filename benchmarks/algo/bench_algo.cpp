// verlpp-bench-algo: times the advantage estimators (GAE, REINFORCE++, ReMax and the grouped
// outcome estimators) on a (rows x cols) fp32 batch and prints a table and one JSON line
// (min/median/max over --reps runs after --warmup runs). Two reference rows show the floor:
// one fresh [rows, cols] fp32 tensor filled, and one sum over cols. Side by side in the same
// run: verl's GAE loop taken literally (column ops on the [B, T] layout) against ours, and our
// two recurrence methods (stepwise, scan) whatever the device's default.
// Decision: each case runs twice, first with glibc's default allocator (every large tensor is
// a fresh mmap, so first-touch page faults are paid on each call — very expensive in some VMs)
// and then with mmap disabled (freed blocks are reused: the steady state of a training loop).
#include <ATen/Parallel.h>
#include <ATen/core/Tensor.h>
#include <ATen/CPUGeneratorImpl.h>
#include <ATen/ops/add.h>
#include <ATen/ops/arange.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/rand.h>
#include <ATen/ops/randint.h>
#include <ATen/ops/randn.h>
#include <ATen/ops/stack.h>
#include <ATen/ops/zeros.h>
#include <fmt/format.h>
#include <malloc.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include <verlpp/algo.hpp>

namespace va = verlpp::algo;

namespace {

struct Options {
  int64_t rows = 4096, cols = 8192, group_size = 8;
  int reps = 5, warmup = 1, threads = 0;  // threads 0: leave ATen's setting
  bool skip_literal = false;
  std::string device = "cpu";   // e.g. cuda: inputs moved there, each timed call ends in a sync
  std::string memory = "both";  // cpu: fresh, reused or both
};

struct Result {
  std::string name, memory;
  double min_s, median_s, max_s;
};

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

Result time_case(const std::string& name, const std::string& memory, int warmup, int reps,
                 const std::function<void()>& fn) {
  for (int i = 0; i < warmup; ++i) fn();
  std::vector<double> t;
  for (int i = 0; i < reps; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    fn();
    t.push_back(seconds_since(t0));
  }
  std::sort(t.begin(), t.end());
  return {name, memory, t.front(), t[t.size() / 2], t.back()};
}

// verl's compute_gae_advantage_return line by line: one column of the [B, T] tensors per step.
at::Tensor gae_verl_literal(const at::Tensor& r, const at::Tensor& v, const at::Tensor& m, double gamma, double lam) {
  at::Tensor next_values = at::zeros({r.size(0)}, r.options());
  at::Tensor last_gae = at::zeros({r.size(0)}, r.options());
  std::vector<at::Tensor> reversed;
  for (int64_t t = r.size(1) - 1; t >= 0; --t) {
    const at::Tensor m_t = m.select(1, t), v_t = v.select(1, t);
    const at::Tensor delta = r.select(1, t) + gamma * next_values - v_t;
    const at::Tensor g = delta + gamma * lam * last_gae;
    next_values = v_t * m_t + (1 - m_t) * next_values;
    last_gae = g * m_t + (1 - m_t) * last_gae;
    reversed.push_back(last_gae);
  }
  std::reverse(reversed.begin(), reversed.end());
  const at::Tensor adv = at::stack(reversed, 1);
  return va::masked_whiten(adv, m);
}

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> long {
      if (i + 1 >= argc) {
        fmt::print(stderr, "{} needs a value\n", a);
        std::exit(2);
      }
      return std::atol(argv[++i]);
    };
    if (a == "--rows")
      o.rows = next();
    else if (a == "--cols")
      o.cols = next();
    else if (a == "--group-size")
      o.group_size = next();
    else if (a == "--reps")
      o.reps = static_cast<int>(next());
    else if (a == "--warmup")
      o.warmup = static_cast<int>(next());
    else if (a == "--threads")
      o.threads = static_cast<int>(next());
    else if (a == "--skip-literal")
      o.skip_literal = true;
    else if (a == "--device" && i + 1 < argc)
      o.device = argv[++i];
    else if (a == "--memory" && i + 1 < argc)
      o.memory = argv[++i];
    else {
      fmt::print(stderr,
                 "usage: verlpp-bench-algo [--rows N] [--cols N] [--group-size N] [--reps N] "
                 "[--warmup N] [--threads N] [--skip-literal] [--device cpu|cuda] "
                 "[--memory fresh|reused|both]\n");
      std::exit(a == "--help" || a == "-h" ? 0 : 2);
    }
  }
  if (o.memory != "fresh" && o.memory != "reused" && o.memory != "both") {
    fmt::print(stderr, "verlpp-bench-algo: --memory is fresh, reused or both; got '{}'\n", o.memory);
    std::exit(2);
  }
  if (o.rows < 2 || o.cols < 1 || o.group_size < 1 || o.reps < 1 || o.warmup < 0) {
    fmt::print(stderr, "verlpp-bench-algo: need rows >= 2, cols >= 1, group-size >= 1, reps >= 1\n");
    std::exit(2);
  }
  return o;
}

}  // namespace

int main(int argc, char** argv) {
  const Options o = parse(argc, argv);
  if (o.threads > 0) at::set_num_threads(o.threads);
  const int64_t B = o.rows, T = o.cols;

  // Inputs: ragged responses (length uniform in [T/2, T]), dense rewards (gae, rpp, remax) and
  // an outcome reward on each row's last token (grouped estimators), uids in groups of G.
  at::Generator gen = at::detail::createCPUGenerator(2024);
  const auto f32 = at::TensorOptions().dtype(at::kFloat);
  const at::Device device(o.device);
  const bool on_cpu = device.is_cpu();
  const at::Tensor lengths = at::randint(T / 2, T + 1, {B, 1}, gen, at::kLong);
  const at::Tensor positions = at::arange(T, at::kLong).unsqueeze(0);
  const at::Tensor mask = (positions < lengths).to(at::kFloat).to(device);           // [B, T]
  const at::Tensor dense_rewards = (at::randn({B, T}, gen, f32)).to(device) * mask;  // [B, T]
  const at::Tensor values = at::randn({B, T}, gen, f32).to(device);                  // [B, T]
  const at::Tensor outcome = (at::rand({B, 1}, gen, f32) > 0.5).to(at::kFloat);      // [B, 1]
  const at::Tensor outcome_rewards = ((positions == lengths - 1).to(at::kFloat) * outcome).to(device);
  const at::Tensor baselines = at::rand({B}, gen, f32).to(device);
  // On an accelerator a copy to the host waits for the queued work: ends each timed call.
  auto sync = [&] {
    if (!on_cpu) (void)mask.select(0, 0).select(0, 0).item<float>();
  };
  std::vector<std::string> uids;
  for (int64_t i = 0; i < B; ++i) uids.push_back(fmt::format("prompt-{:06d}", i / o.group_size));

  va::AdvantageInputs dense;
  dense.token_level_rewards = dense_rewards;
  dense.response_mask = mask;
  dense.values = values;
  dense.reward_baselines = baselines;
  va::AdvantageInputs grouped;
  grouped.token_level_rewards = outcome_rewards;
  grouped.response_mask = mask;
  grouped.index = uids;
  va::AdvantageInputs grouped_ids = grouped;
  grouped_ids.group_ids = va::make_groups(uids, device).ids;
  va::AdvantageConfig cfg;
  cfg.gamma = 0.99;
  cfg.lam = 0.95;

  struct Case {
    std::string name;
    std::function<void()> fn;
  };
  std::vector<Case> cases = {
      {"[floor] new [B,T] fp32 + fill",
       [&] {
         at::empty({B, T}, f32.device(device)).fill_(1.0);
         sync();
       }},
      {"[floor] sum over T",
       [&] {
         (void)dense_rewards.sum(-1);
         sync();
       }},
      {"make_groups (B uid strings)",
       [&] {
         (void)va::make_groups(uids, device);
         sync();
       }},
  };
  for (const char* name : {"gae", "reinforce_plus_plus", "remax"})
    cases.push_back({name, [&, name] {
                       (void)va::compute_advantage(name, dense, cfg);
                       sync();
                     }});
  cases.push_back({"gae, stepwise recurrence", [&] {
                     (void)va::compute_gae_advantage_return(dense_rewards, values, mask, 0.99, 0.95,
                                                            va::Recurrence::stepwise);
                     sync();
                   }});
  cases.push_back({"gae, scan recurrence", [&] {
                     (void)va::compute_gae_advantage_return(dense_rewards, values, mask, 0.99, 0.95,
                                                            va::Recurrence::scan);
                     sync();
                   }});
  for (const char* name : {"grpo", "grpo_vectorized", "grpo_passk", "rloo", "rloo_vectorized",
                           "reinforce_plus_plus_baseline", "opo", "gpg"})
    cases.push_back({name, [&, name] {
                       (void)va::compute_advantage(name, grouped, cfg);
                       sync();
                     }});
  cases.push_back({"grpo (given group_ids)", [&] {
                     (void)va::compute_advantage("grpo", grouped_ids, cfg);
                     sync();
                   }});
  if (!o.skip_literal)
    cases.push_back({"gae, verl's loop literally", [&] {
                       (void)gae_verl_literal(dense_rewards, values, mask, 0.99, 0.95);
                       sync();
                     }});

  std::vector<Result> results;
  std::vector<const char*> memories = {"caching"};
  if (on_cpu && o.memory == "both") memories = {"fresh", "reused"};
  if (on_cpu && o.memory == "fresh") memories = {"fresh"};
  if (on_cpu && o.memory == "reused") memories = {"reused"};
  for (const char* memory : memories) {
    if (std::strcmp(memory, "reused") == 0) {
      // Large blocks from the heap, never trimmed: later allocations reuse warm pages.
      mallopt(M_MMAP_MAX, 0);
      mallopt(M_TRIM_THRESHOLD, 1 << 30);
    }
    for (const Case& c : cases) {
      const bool literal = c.name.rfind("gae, verl", 0) == 0;
      results.push_back(time_case(c.name, memory, literal ? std::min(o.warmup, 1) : o.warmup,
                                  literal ? std::min(o.reps, 3) : o.reps, c.fn));
    }
  }

  fmt::print(
      "verlpp-bench-algo: rows {} cols {} fp32 on {}, groups of {}, ATen threads {}, reps {} "
      "(warm-up {} excluded)\n",
      B, T, device.str(), o.group_size, at::get_num_threads(), o.reps, o.warmup);
  fmt::print("{:<32} {:>8} {:>10} {:>10} {:>10}\n", "case", "memory", "min ms", "median ms", "max ms");
  for (const Result& r : results)
    fmt::print("{:<32} {:>8} {:>10.1f} {:>10.1f} {:>10.1f}\n", r.name, r.memory, r.min_s * 1e3, r.median_s * 1e3,
               r.max_s * 1e3);
  std::string json = fmt::format(
      "{{\"bench\":\"verlpp-bench-algo\",\"rows\":{},\"cols\":{},\"dtype\":\"float32\","
      "\"device\":\"{}\",\"group_size\":{},\"threads\":{},\"reps\":{},\"warmup\":{},"
      "\"results\":[",
      B, T, device.str(), o.group_size, at::get_num_threads(), o.reps, o.warmup);
  for (size_t i = 0; i < results.size(); ++i)
    json += fmt::format(
        "{}{{\"name\":\"{}\",\"memory\":\"{}\",\"min_s\":{:.6f},"
        "\"median_s\":{:.6f},\"max_s\":{:.6f}}}",
        i ? "," : "", results[i].name, results[i].memory, results[i].min_s, results[i].median_s, results[i].max_s);
  fmt::print("{}]}}\n", json);
  return 0;
}
