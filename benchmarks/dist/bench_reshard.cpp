// verlpp-bench-reshard [--shape qwen2.5-0.5b|qwen2.5-7b|tiny] [--layers K] [--nproc N] [--tp 1,2,4]
// [--source zero3|replicated] [--dtype bfloat16] [--reps 3] [--plugin cpu_ref] [--json F]
//
// The trainer -> rollout-engine weight sync (controller/engine_sync.hpp, the 3D reshard) on N
// local ranks: the trainer's weights as ZeRO-3 shards (or whole on every rank), the engine whole
// (tp 1) or split over groups of tp ranks. Per engine layout: the sync's seconds (median of
// --reps, slowest rank), the bytes rank 0 received and kept, the most transient memory it held, and the
// peak growth of each rank's resident memory during the sync (its high-water mark reset first;
// the engine's buffers come back from release_weights inside it, as after each RL step).
// --layers K builds only K decoder layers, for shapes whose whole copies do not fit the host N
// times over; the whole model's figures are then the measured outer unit plus L x the measured
// mean layer (time), and exact sums over the whole shape's units (bytes).
#include <verlpp/controller/engine_sync.hpp>
#include <verlpp/model/decoder.hpp>
#include <verlpp/model/tensor_parallel.hpp>
#include <verlpp/rollout/engine.hpp>
#include <verlpp/rollout/tensor_parallel.hpp>
#include <verlpp/train/data_parallel.hpp>
#include <verlpp/train/sharded_weights.hpp>

#include <ATen/Parallel.h>
#include <ATen/core/grad_mode.h>
#include <ATen/ops/zeros.h>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <fstream>
#include <iostream>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "../rollout/bench_options.hpp"
#include "bench_ranks.hpp"

using namespace verlpp;
using json = nlohmann::json;

namespace {

struct Options {
  int nproc = 4, reps = 3;
  int64_t layers = 0;  // 0: the shape's own depth
  std::string shape = "qwen2.5-0.5b", source = "zero3", dtype = "bfloat16", plugin = "cpu_ref", json_path;
  std::vector<int64_t> tp = {1, 2, 4};
  std::string result_file;  // internal: where rank 0 writes its figures
  std::vector<std::string> argv;
};

// Checks what CLI11 cannot: the source's name and that every engine size divides the ranks.
void check(const Options& o) {
  if (o.source != "zero3" && o.source != "replicated")
    throw Error("--source", fmt::format("'{}' is not zero3 or replicated", o.source));
  for (const int64_t t : o.tp)
    if (t < 1 || o.nproc % t != 0) throw Error("--tp", fmt::format("{} does not divide --nproc {}", t, o.nproc));
}

// A built-in shape by name, or "tiny" (examples/tiny).
model::ModelConfig shape_config(const std::string& shape) {
  return bench::bench_model_config(shape == "tiny" ? "" : shape, "");
}

model::ModelConfig measured_config(const Options& o) {
  model::ModelConfig c = shape_config(o.shape);
  if (o.layers > 0) c.num_hidden_layers = o.layers;
  return c;
}

// This process's resident memory now and its high-water mark, in bytes (/proc/self/status).
std::pair<int64_t, int64_t> rss_and_peak() {
  std::ifstream in("/proc/self/status");
  int64_t rss = 0, peak = 0;
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("VmRSS:", 0) == 0) rss = std::stoll(line.substr(6)) * 1024;
    if (line.rfind("VmHWM:", 0) == 0) peak = std::stoll(line.substr(6)) * 1024;
  }
  return {rss, peak};
}

// Starts the high-water mark again from the current resident size (Linux's clear_refs 5).
void reset_peak() { std::ofstream("/proc/self/clear_refs") << "5"; }

// Exact per-rank bytes for the whole shape: the unit all-gathers' receipts (every unit padded
// to a multiple of the ranks, as ShardedWeights lays them out) and the engine's part.
std::pair<int64_t, int64_t> whole_shape_bytes(const model::ModelConfig& c, int64_t ranks, int64_t tp, int64_t element,
                                              bool sharded) {
  std::map<std::string, int64_t> units;
  for (const model::ParamSpec& spec : model::parameter_specs(c)) {
    const std::string prefix = "model.layers.";
    std::string unit = "outer";
    if (spec.name.rfind(prefix, 0) == 0) unit = spec.name.substr(0, spec.name.find('.', prefix.size()));
    units[unit] += spec.numel();
  }
  int64_t received = 0;
  for (const auto& [name, numel] : units) {
    const int64_t padded = (numel + ranks - 1) / ranks * ranks;
    if (sharded) received += (padded - padded / ranks) * element;
  }
  const model::ModelConfig part = tp > 1 ? model::rank_config(c, model::tensor_parallel_layout(c, tp)) : c;
  return {received, model::parameter_count(part) * element};
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

double max_over_ranks(const hw::ProcessGroup& g, double x) {
  at::Tensor t = at::zeros({1}, at::TensorOptions().dtype(at::kDouble));
  t[0] = x;
  g.all_reduce_max(t);
  return t[0].item<double>();
}

int run_rank(const Options& o) {
  at::NoGradGuard no_grad;
  const hw::WorldInfo world = hw::world_from_environment();
  at::set_num_threads(int(std::max<unsigned>(1, std::thread::hardware_concurrency() / unsigned(world.world_size))));
  auto group = bench::join_bench_group(o.plugin, std::chrono::milliseconds(600000));
  const model::ModelConfig c = measured_config(o);
  model::ModelOptions mo;
  mo.dtype = model::dtype_from_name(o.dtype);
  mo.device = hw::plugin_named(o.plugin).torch_device_type() == "cpu" ? c10::Device(c10::kCPU)
                                                                      : c10::Device(c10::kCUDA, world.local_rank);

  // The trainer's side: ZeRO-3 shards built from a whole model (freed again), or the whole model.
  std::unique_ptr<train::ShardedWeights> units;
  std::unique_ptr<model::DecoderLM> whole;
  {
    auto m = std::make_unique<model::DecoderLM>(c, mo);
    m->init_weights(1);
    if (o.source == "zero3") {
      train::ShardedWeightsOptions so;
      so.dtype = mo.dtype;
      so.dp = train::DataParallel(group.get(), mo.device);
      so.shard = so.gather_per_use = true;
      so.trainable = false;
      units = std::make_unique<train::ShardedWeights>(*m, so);
    } else {
      whole = std::move(m);
    }
  }
  json rows = json::array();
  for (const int64_t tp : o.tp) {
    json row = {{"tp", tp}};
    try {
      model::tensor_parallel_layout(shape_config(o.shape), tp);
    } catch (const Error& e) {
      row["refused"] = e.message();
      rows.push_back(row);
      continue;
    }
    const std::unique_ptr<hw::ProcessGroup> engine_group =
        rollout::engine_group(*group, tp, fmt::format("reshard/tp{}", tp));
    rollout::EngineOptions eo;
    eo.kv_token_budget = 64;  // the pool is not what this measures
    auto engine = std::make_unique<rollout::RolloutEngine>(
        tp > 1 ? rollout::tensor_parallel_engine_model(c, mo, *engine_group) : model::DecoderLM(c, mo), eo);
    engine->release_weights();  // as the RL loop leaves it between generations
    std::vector<double> seconds, peaks;
    controller::EngineSyncReport last;
    for (int rep = 0; rep < o.reps; ++rep) {
      group->barrier();
      const int64_t before = rss_and_peak().first;
      reset_peak();
      last = units ? controller::sync_engine_from_units(*units, *engine)
                   : controller::sync_engine_from_model(*whole, *engine);
      peaks.push_back(double(rss_and_peak().second - before));
      seconds.push_back(last.seconds);
      engine->release_weights();  // the reverse direction: the engine's part freed again
    }
    double outer = 0, layers = 0;
    int64_t outer_received = 0, layers_received = 0;
    for (size_t u = 0; u < last.unit_seconds.size(); ++u) {
      const bool is_outer = units && units->unit_name(int64_t(u)) == "outer";
      (is_outer ? outer : layers) += last.unit_seconds[u];
      (is_outer ? outer_received : layers_received) += last.unit_received_bytes[u];
    }
    const model::ModelConfig full = shape_config(o.shape);
    const int64_t element = int64_t(c10::elementSize(mo.dtype));
    auto [received_full, engine_full] = whole_shape_bytes(full, world.world_size, tp, element, bool(units));
    const auto [received_model, engine_model] = whole_shape_bytes(c, world.world_size, tp, element, bool(units));
    // A split engine from shards receives only its slices, point to point (their exact count per
    // rank is proven in tests/controller/test_engine_sync.cpp): here, less than the all-gather's,
    // and the whole shape's from the measured units (every layer has one layout).
    const bool point_to_point = units && tp > 1;
    if (point_to_point && c.num_hidden_layers > 0)
      received_full = outer_received + layers_received / c.num_hidden_layers * full.num_hidden_layers;
    const bool received_ok =
        point_to_point ? last.received_bytes < received_model : received_model == last.received_bytes;
    row.update({{"seconds", max_over_ranks(*group, median(seconds))},
                {"received_bytes", last.received_bytes},
                {"engine_bytes", last.engine_bytes},
                {"source_bytes", last.source_bytes},
                {"peak_held_bytes", last.peak_held_bytes},
                {"peak_rss_growth_bytes", max_over_ranks(*group, median(peaks))},
                // (a whole engine synced from a whole model shares it: nothing of its own to count)
                {"bytes_match_shape", received_ok && (last.shared > 0 || engine_model == last.engine_bytes)},
                {"whole_shape_received_bytes", received_full},
                {"whole_shape_engine_bytes", engine_full}});
    if (units && o.layers > 0 && c.num_hidden_layers > 0)
      row["whole_shape_seconds_estimate"] =
          max_over_ranks(*group, outer + layers / double(c.num_hidden_layers) * double(full.num_hidden_layers));
    rows.push_back(row);
  }
  group->barrier();
  if (world.rank == 0) std::ofstream(o.result_file) << rows.dump();
  return 0;
}

int run_launcher(const Options& o) {
  const model::ModelConfig c = measured_config(o);
  std::cout << fmt::format(
      "verlpp-bench-reshard: {} ranks on plugin {}, shape {} ({} of its {} layers built), {}, trainer weights {}\n",
      o.nproc, o.plugin, o.shape, c.num_hidden_layers, shape_config(o.shape).num_hidden_layers, o.dtype,
      o.source == "zero3" ? "as ZeRO-3 shards" : "whole on every rank");
  const json rows = bench::launch_bench_ranks("verlpp-bench-reshard", o.argv, o.nproc);
  constexpr double kMiB = 1024.0 * 1024.0;
  std::cout << fmt::format("{:>4} {:>10} {:>14} {:>14} {:>14} {:>16} {:>14} {:>16} {:>16}\n", "tp", "sync s",
                           "received MiB", "engine MiB", "peak held MiB", "RSS growth MiB", "whole-shape s",
                           "whole recv MiB", "whole engine MiB");
  for (const json& row : rows) {
    if (row.contains("refused")) {
      std::cout << fmt::format("{:>4} refused: {}\n", row["tp"].get<int64_t>(), row["refused"].get<std::string>());
      continue;
    }
    if (!row["bytes_match_shape"].get<bool>())
      throw Error("verlpp-bench-reshard", fmt::format("tp {}: the sync's bytes differ from the shape's sums: {}",
                                                      row["tp"].get<int64_t>(), row.dump()));
    std::cout << fmt::format(
        "{:>4} {:>10.3f} {:>14.1f} {:>14.1f} {:>14.1f} {:>16.1f} {:>14} {:>16.1f} {:>16.1f}\n",
        row["tp"].get<int64_t>(), row["seconds"].get<double>(), row["received_bytes"].get<double>() / kMiB,
        row["engine_bytes"].get<double>() / kMiB, row["peak_held_bytes"].get<double>() / kMiB,
        row["peak_rss_growth_bytes"].get<double>() / kMiB,
        row.contains("whole_shape_seconds_estimate")
            ? fmt::format("{:.3f}", row["whole_shape_seconds_estimate"].get<double>())
            : std::string("-"),
        row["whole_shape_received_bytes"].get<double>() / kMiB, row["whole_shape_engine_bytes"].get<double>() / kMiB);
  }
  const json all = {{"nproc", o.nproc},   {"shape", o.shape}, {"layers_built", c.num_hidden_layers},
                    {"source", o.source}, {"dtype", o.dtype}, {"rows", rows}};
  if (!o.json_path.empty()) std::ofstream(o.json_path) << all.dump(2) << "\n";
  std::cout << all.dump() << "\n";
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  for (int i = 0; i < argc; ++i) o.argv.push_back(argv[i]);
  CLI::App app{"verlpp-bench-reshard: the trainer -> rollout-engine weight sync over N local ranks"};
  app.add_option("--shape", o.shape, "qwen2.5-0.5b, qwen2.5-7b or tiny (examples/tiny)");
  app.add_option("--layers", o.layers, "decoder layers to build (0: the shape's own depth)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--nproc", o.nproc, "local ranks")->check(CLI::PositiveNumber);
  app.add_option("--tp", o.tp, "engine sizes to sync into (comma-separated, each dividing --nproc)")->delimiter(',');
  app.add_option("--source", o.source, "the trainer's layout: zero3 (shards) or replicated (whole on every rank)");
  app.add_option("--dtype", o.dtype, "the weights' dtype (bfloat16, float32)");
  app.add_option("--reps", o.reps, "syncs per layout (median reported)")->check(CLI::PositiveNumber);
  app.add_option("--plugin", o.plugin, "the plugin whose communicator the ranks use");
  app.add_option("--json", o.json_path, "also write the figures as JSON here");
  app.add_option("--result-file", o.result_file, "internal: where rank 0 writes its figures")->group("");
  CLI11_PARSE(app, argc, argv);
  try {
    check(o);
    return std::getenv("RANK") != nullptr ? run_rank(o) : run_launcher(o);
  } catch (const std::exception& e) {
    std::cerr << "verlpp-bench-reshard: error: " << e.what() << "\n";
    return 1;
  }
}
