// verlpp-bench-dist [--nproc N] [--plugin cpu_ref] [--max-mb 256] [--reps 5] [--rows 64] [--micro 8] [--zero-stage S]
// [--json F] Started plainly it is the launcher: it times the one-rank training step itself (all cores), then starts N
// ranks of itself (launch_local, as `verlpp train --nproc`). The ranks measure all-reduce and all-gather through the
// plugin communicator for 1 KB .. --max-mb (bus bandwidth as nccl-tests defines it: all-reduce moves 2(N-1)/N of the
// buffer per rank, all-gather (N-1)/N), then the same data-parallel actor update on N ranks (each rank cores/N
// threads). Rank 0 writes its figures to a file the launcher reads, prints as one table and as JSON.
#include <ATen/Parallel.h>
#include <verlpp/controller/launcher.hpp>
#include <verlpp/hw/plugin_registry.hpp>
#include <verlpp/hw/process_group.hpp>
#include <verlpp/hw/world.hpp>
#include <verlpp/model/model_config.hpp>
#include <verlpp/train/actor.hpp>

#include <ATen/ops/ones.h>
#include <ATen/ops/randint.h>
#include <ATen/ops/randn.h>
#include <ATen/ops/zeros.h>

#include <nlohmann/json.hpp>

#include "bench_ranks.hpp"

#include <malloc.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <string>
#include <thread>
#include <vector>

using namespace verlpp;
using json = nlohmann::json;

namespace {

struct Options {
  int nproc = 2, reps = 5;
  int64_t max_mb = 256, rows = 64, micro = 8, prompt = 24, response = 40;
  std::string plugin = "cpu_ref", json_path, model = std::string(VERLPP_SOURCE_DIR) + "/examples/tiny/config.json";
  // --zero-stage 1|2|3 (--zero1 = 1): the N-rank step with a sharded optimizer; at 2 and 3 it
  // runs twice: every collective waited for where it starts, then the background ones (each
  // layer's gradient reduce-scatter overlapping the layers below; at 3 also the next layer's
  // gather prefetched).
  int zero_stage = 0;
  std::string result_file;  // internal: where rank 0 writes its figures
  std::vector<std::string> argv;
};

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 0; i < argc; ++i) o.argv.push_back(argv[i]);
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) throw Error(a, "needs a value");
      return argv[++i];
    };
    if (a == "--nproc")
      o.nproc = std::stoi(value());
    else if (a == "--reps")
      o.reps = std::stoi(value());
    else if (a == "--max-mb")
      o.max_mb = std::stoll(value());
    else if (a == "--rows")
      o.rows = std::stoll(value());
    else if (a == "--micro")
      o.micro = std::stoll(value());
    else if (a == "--plugin")
      o.plugin = value();
    else if (a == "--model")
      o.model = value();
    else if (a == "--json")
      o.json_path = value();
    else if (a == "--zero1")
      o.zero_stage = 1;
    else if (a == "--zero-stage")
      o.zero_stage = int(std::stoll(value()));
    else if (a == "--result-file")
      o.result_file = value();
    else
      throw Error(a, "unknown option (see the opening comment of benchmarks/dist/bench_dist.cpp)");
  }
  if (o.nproc < 1 || o.reps < 1 || o.rows < 1) throw Error("options", "--nproc, --reps and --rows must be >= 1");
  if (o.zero_stage < 0 || o.zero_stage > 3)
    throw Error("--zero-stage", fmt::format("{} is not 0, 1, 2 or 3", o.zero_stage));
  return o;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// A rollout-shaped batch: ragged prompts and responses, old log-probs and advantages.
data::Batch make_batch(const model::DecoderLM& m, const Options& o) {
  at::manual_seed(3);
  const int64_t t = o.prompt + o.response;
  at::Tensor ids = at::randint(m.config().vocab_size, {o.rows, t}, at::TensorOptions().dtype(at::kLong));
  at::Tensor mask = at::ones({o.rows, t}, at::TensorOptions().dtype(at::kLong));
  for (int64_t r = 0; r < o.rows; ++r)
    for (int64_t k = 0; k < (r * 7) % o.response; ++k) mask[r][t - 1 - k] = 0;
  data::Batch b;
  b.set("input_ids", ids);
  b.set("attention_mask", mask);
  b.set("position_ids", mask.cumsum(1).sub(1).clamp_min(0));
  b.set("responses", ids.narrow(1, o.prompt, o.response).contiguous());
  b.set("response_mask", mask.narrow(1, o.prompt, o.response).to(at::kFloat).contiguous());
  b.set("old_log_probs", at::randn({o.rows, o.response}).mul(0.1).sub(3.0));
  b.set("advantages", at::randn({o.rows, o.response}));
  return b;
}

// Gradient elements the model and its optimizer hold after an update (the parameters' own
// gradients, which ZeRO-1 keeps, plus ZeRO-2's shard), counted from the tensors.
// fp32 gradient elements the actor holds between updates, from the tensors (memory_held).
int64_t held_gradient_elements(const train::Actor& actor) {
  return actor.trained_model().memory_held().gradients / int64_t(sizeof(float));
}

const char* stage_name(int stage) {
  static const char* kNames[] = {" (replicated)", " (ZeRO-1)", " (ZeRO-2)", " (ZeRO-3)"};
  return kNames[stage];
}

// Median seconds of one actor update (one optimizer step over the whole batch).
json time_train_step(const Options& o, const train::DataParallel& dp, const train::ShardingOptions& sharding = {}) {
  model::DecoderLM m(model::load_model_config(o.model));
  m.init_weights(1);
  const data::Batch batch = make_batch(m, o);
  train::ActorConfig cfg;
  cfg.ppo_mini_batch_size = o.rows;
  // The same micro-batch size on every rank count, so only the split differs.
  cfg.ppo_micro_batch_size = o.micro;
  train::Actor actor(m, cfg, train::LrSchedule({1e-5, "constant", 0, 1000, 0.0, 0.5}));
  actor.set_data_parallel(dp, sharding);
  actor.update_policy(batch);  // warm-up
  std::vector<double> times;
  for (int i = 0; i < o.reps; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    actor.update_policy(batch);
    times.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  const double tokens = batch.tensor("attention_mask").sum().item<double>();
  return {{"ranks", dp.world_size()},
          {"threads_per_rank", at::get_num_threads()},
          {"median_s", median(times)},
          {"zero_stage", actor.optimizer().zero_stage()},
          {"prefetch", sharding.forward_prefetch},
          {"overlap_reduce", sharding.overlap_reduce},
          {"optimizer_state_mib_rank0", double(actor.optimizer().state_elements()) * 4 / (1 << 20)},
          {"gradient_mib_rank0", double(held_gradient_elements(actor)) * 4 / (1 << 20)},
          {"tokens", tokens},
          {"tokens_per_s", tokens / median(times)}};
}

json time_collectives(const Options& o, const hw::ProcessGroup& g) {
  json rows = json::array();
  const double n = g.world_size();
  for (int64_t bytes = 1024; bytes <= o.max_mb * 1024 * 1024; bytes *= 4) {
    at::Tensor buf = at::zeros({bytes / 4}, at::TensorOptions().dtype(at::kFloat));
    at::Tensor part = at::zeros({bytes / 4 / g.world_size()}, at::TensorOptions().dtype(at::kFloat));
    const int reps = bytes >= (int64_t(64) << 20) ? std::max(2, o.reps / 2) : o.reps;
    for (const std::string op : {"all_reduce", "all_gather"}) {
      std::vector<double> times;
      for (int i = 0; i <= reps; ++i) {  // the first is a warm-up
        g.barrier();
        const auto t0 = std::chrono::steady_clock::now();
        if (op == "all_reduce")
          g.all_reduce_sum(buf);
        else
          (void)g.all_gather(part);
        const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        if (i > 0) times.push_back(s);
      }
      // The slowest rank's time is the collective's time.
      at::Tensor t = at::zeros({1}, at::TensorOptions().dtype(at::kDouble));
      t[0] = median(times);
      g.all_reduce_max(t);
      const double s = t[0].item<double>();
      const double factor = op == "all_reduce" ? 2 * (n - 1) / n : (n - 1) / n;
      rows.push_back({{"op", op},
                      {"bytes", bytes},
                      {"median_s", s},
                      {"algbw_gbps", double(bytes) / s / 1e9},
                      {"busbw_gbps", double(bytes) / s / 1e9 * factor}});
    }
  }
  return rows;
}

int run_rank(const Options& o) {
  const hw::WorldInfo world = hw::world_from_environment();
  auto group = bench::join_bench_group(o.plugin, std::chrono::milliseconds(120000));
  const train::DataParallel dp(group.get(), c10::Device(c10::kCPU));
  train::ShardingOptions sharding;
  sharding.zero_stage = o.zero_stage;
  // First every collective where it is needed; then (ZeRO-2 and 3) the background ones: each
  // layer's gradient reduce-scatter overlapping the layers below, and at ZeRO-3 the next layer's
  // gather prefetched in forwards and backwards.
  sharding.backward_prefetch = false;
  sharding.overlap_reduce = false;
  json out = {{"collectives", time_collectives(o, *group)}, {"train_step", time_train_step(o, dp, sharding)}};
  if (o.zero_stage >= 2) {
    sharding.overlap_reduce = true;
    if (o.zero_stage == 3) sharding.forward_prefetch = sharding.backward_prefetch = true;
    out["train_step_overlap"] = time_train_step(o, dp, sharding);
  }
  group->barrier();
  if (world.rank == 0) std::ofstream(o.result_file) << out.dump();
  return 0;
}

int run_launcher(const Options& o) {
  std::cout << fmt::format("verlpp-bench-dist: {} ranks on plugin {}, model {}, {} rows x {} tokens\n", o.nproc,
                           o.plugin, o.model, o.rows, o.prompt + o.response);
  // Two one-rank baselines: one thread (as each rank when N >= cores) and every core (the ranks
  // share them: cores / N threads each). The ratio is taken against the faster.
  at::set_num_threads(1);
  const json single_1 = time_train_step(o, train::DataParallel());
  at::set_num_threads(int(std::max(1u, std::thread::hardware_concurrency())));
  const json single_all = time_train_step(o, train::DataParallel());
  const json single =
      single_1["tokens_per_s"].get<double>() >= single_all["tokens_per_s"].get<double>() ? single_1 : single_all;
  const json ranks = bench::launch_bench_ranks("verlpp-bench-dist", o.argv, o.nproc);

  std::cout << fmt::format("\ncollectives through the {} communicator, {} ranks (median of {}; busbw as nccl-tests)\n",
                           o.plugin, o.nproc, o.reps);
  std::cout << fmt::format("{:>12} {:>14} {:>14} {:>12} {:>12}\n", "bytes", "all_reduce ms", "all_gather ms",
                           "AR busbw GB/s", "AG busbw GB/s");
  const json& c = ranks["collectives"];
  for (size_t i = 0; i + 1 < c.size(); i += 2)
    std::cout << fmt::format("{:>12} {:>14.3f} {:>14.3f} {:>12.3f} {:>12.3f}\n", c[i]["bytes"].get<int64_t>(),
                             c[i]["median_s"].get<double>() * 1e3, c[i + 1]["median_s"].get<double>() * 1e3,
                             c[i]["busbw_gbps"].get<double>(), c[i + 1]["busbw_gbps"].get<double>());
  const json& dp = ranks["train_step"];
  const double efficiency = dp["tokens_per_s"].get<double>() / single["tokens_per_s"].get<double>();
  std::cout << fmt::format("\nactor update (fwd + bwd + AdamW) over {} rows, same machine:\n", o.rows);
  for (const json* one : {&single_1, &single_all})
    std::cout << fmt::format("  1 rank  x {} threads: {:.3f} s, {:.0f} tokens/s\n",
                             (*one)["threads_per_rank"].get<int>(), (*one)["median_s"].get<double>(),
                             (*one)["tokens_per_s"].get<double>());
  std::cout << fmt::format(
      "  {} ranks x {} threads{}: {:.3f} s, {:.0f} tokens/s  (throughput ratio to the faster one-rank run {:.2f})\n",
      o.nproc, dp["threads_per_rank"].get<int>(), stage_name(o.zero_stage), dp["median_s"].get<double>(),
      dp["tokens_per_s"].get<double>(), efficiency);
  if (ranks.contains("train_step_overlap")) {
    const json& p = ranks["train_step_overlap"];
    std::cout << fmt::format(
        "  {} ranks x {} threads ({}): {:.3f} s, {:.0f} tokens/s  (ratio {:.2f}; {:.2f}x the step without it)\n",
        o.nproc, p["threads_per_rank"].get<int>(),
        o.zero_stage == 3 ? "ZeRO-3, reduce-scatters in the background, next layer's gather prefetched"
                          : "ZeRO-2, reduce-scatters in the background",
        p["median_s"].get<double>(), p["tokens_per_s"].get<double>(),
        p["tokens_per_s"].get<double>() / single["tokens_per_s"].get<double>(),
        dp["median_s"].get<double>() / p["median_s"].get<double>());
  }
  std::cout << fmt::format("  AdamW state on rank 0: {:.2f} MiB with 1 rank, {:.2f} MiB with {} ranks{}\n",
                           single["optimizer_state_mib_rank0"].get<double>(),
                           dp["optimizer_state_mib_rank0"].get<double>(), o.nproc, stage_name(o.zero_stage));
  std::cout << fmt::format(
      "  gradients kept between updates on rank 0: {:.2f} MiB with 1 rank, {:.2f} MiB with {} ranks\n",
      single["gradient_mib_rank0"].get<double>(), dp["gradient_mib_rank0"].get<double>(), o.nproc);
  const json all = {{"nproc", o.nproc},
                    {"plugin", o.plugin},
                    {"collectives", c},
                    {"train_step_1_rank_1_thread", single_1},
                    {"train_step_1_rank_all_cores", single_all},
                    {"train_step_n_ranks", dp},
                    {"train_step_n_ranks_overlap", ranks.value("train_step_overlap", json())},
                    {"dp_throughput_ratio", efficiency}};
  if (!o.json_path.empty()) std::ofstream(o.json_path) << all.dump(2) << "\n";
  std::cout << all.dump() << "\n";
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  // As the verlpp command does (src/apps/main.cpp): a fixed mmap threshold, so the one-rank and
  // the N-rank steps both run with activations reused from the heap, not page-faulted afresh.
  mallopt(M_MMAP_THRESHOLD, 64 << 20);
  mallopt(M_TRIM_THRESHOLD, 256 << 20);
  try {
    const Options o = parse(argc, argv);
    return std::getenv("RANK") != nullptr ? run_rank(o) : run_launcher(o);
  } catch (const std::exception& e) {
    std::cerr << "verlpp-bench-dist: error: " << e.what() << "\n";
    return 1;
  }
}
