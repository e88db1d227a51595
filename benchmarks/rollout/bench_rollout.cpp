// verlpp-bench-rollout: generated tokens/s of RolloutEngine for fixed shapes (batch, prompt,
// response), EOS ignored so every sample runs its full length, random weights. Runs on the CPU
// or a CUDA GPU (`--device cuda --dtype bfloat16 --shape qwen2.5-0.5b`), with a plugin's kernels
// (`--plugin cuda`) or the LibTorch reference path; `--transitions` also times the hybrid-engine
// hooks. One engine serves every shape: its KV pool is sized for the largest shape (so no
// preemption, and a pool that is not the whole GPU). Options: bench_options.hpp, --help.
#include "bench_options.hpp"
#include "bench_profile.hpp"
#include "bench_agent.hpp"
#include "bench_resume.hpp"

#include <verlpp/core/error.hpp>
#include <verlpp/hw/kernels.hpp>
#include <verlpp/hw/plugin_registry.hpp>
#include <verlpp/hw/torch_device.hpp>
#include <verlpp/model/decoder.hpp>
#include <verlpp/rollout/engine.hpp>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <fstream>
#include <iostream>
#include <memory>
#include <optional>
#include <string>

namespace verlpp::bench {
namespace {

// Prompts of deterministic, spread-out ids; every sample runs exactly `response` tokens.
std::vector<rollout::GenerateRequest> make_requests(const RolloutShape& s, int64_t vocab, double temperature) {
  std::vector<rollout::GenerateRequest> reqs;
  for (int64_t b = 0; b < s.batch; ++b) {
    rollout::GenerateRequest r;
    for (int64_t t = 0; t < s.prompt; ++t) r.prompt_ids.push_back((b * 131 + t * 17) % vocab);
    r.sampling.temperature = temperature;
    r.sampling.max_new_tokens = s.response;
    r.sampling.ignore_eos = true;
    reqs.push_back(std::move(r));
  }
  return reqs;
}

// The common fields of every JSON object this bench writes (hf_generate.py writes the same).
nlohmann::json base_json(const RolloutBenchOptions& o, const model::ModelConfig& config) {
  return {{"bench", "rollout"},
          {"impl", "verlpp"},
          {"kernels", o.plugin.empty() ? std::string("reference") : o.plugin},
          {"model", o.shape_name.empty() ? config.architecture : o.shape_name},
          {"device", o.device},
          {"dtype", o.dtype},
          {"temperature", o.temperature}};
}

// Times the hybrid-engine hooks; each figure is the best of `repeat` calls (and the first).
// The trainer's tensors are clones on the engine's device: once in the engine's dtype (shared,
// no copy) and once in another dtype (fp32 for a bf16/fp16 engine: a cast into the engine's
// buffers, as after a training step with fp32 master weights).
nlohmann::json time_transitions(rollout::RolloutEngine& engine, int repeat) {
  const auto& params = engine.model().named_parameters();
  const at::ScalarType dtype = engine.model().options().dtype;
  const at::ScalarType cast_from = dtype == at::kFloat ? at::kBFloat16 : at::kFloat;
  std::vector<std::pair<std::string, at::Tensor>> same, other;
  for (const auto& [name, p] : params) {
    same.emplace_back(name, p.clone());
    other.emplace_back(name, p.to(cast_from));
  }
  struct Timing {
    double first = 0, best = 1e30;
    void add(int i, double s) {
      if (i == 0) first = s;
      best = std::min(best, s);
    }
  };
  Timing cast, shared, sleep, wake;
  int64_t num_cast = 0, num_shared = 0;
  // Cast first: a parameter shared earlier would make the first cast allocate a private buffer.
  for (int i = 0; i < repeat; ++i) {
    const auto r = engine.update_weights(other);
    cast.add(i, r.seconds);
    num_cast = r.num_copied;
  }
  for (int i = 0; i < repeat; ++i) {
    const auto r = engine.update_weights(same);
    shared.add(i, r.seconds);
    num_shared = r.num_shared;
  }
  for (int i = 0; i < repeat; ++i) {
    sleep.add(i, engine.sleep());
    wake.add(i, engine.wake());
  }
  auto row = [](const char* what, const Timing& t, const std::string& note) {
    std::cout << fmt::format("{:<34} {:>10.4f} {:>10.4f}  {}\n", what, t.best, t.first, note);
  };
  std::cout << fmt::format("\n{:<34} {:>10} {:>10}\n", "transition", "best s", "first s");
  row("update_weights (same dtype: share)", shared, fmt::format("{} tensors shared", num_shared));
  row(fmt::format("update_weights (cast from {})", model::dtype_name(cast_from)).c_str(), cast,
      fmt::format("{} tensors cast", num_cast));
  row("sleep (free the KV pool)", sleep, fmt::format("{:.1f} MiB pool", double(engine.pool_bytes()) / (1 << 20)));
  row("wake (re-create the KV pool)", wake, "");
  return {{"update_weights_shared_s", shared.best},
          {"update_weights_shared_first_s", shared.first},
          {"update_weights_cast_s", cast.best},
          {"update_weights_cast_first_s", cast.first},
          {"cast_from", model::dtype_name(cast_from)},
          {"num_shared", num_shared},
          {"num_cast", num_cast},
          {"sleep_s", sleep.best},
          {"wake_s", wake.best},
          {"pool_bytes", engine.pool_bytes()}};
}

// One generate of `reqs` under the Kineto profiler, saved as a trace file.
void profile_run(rollout::RolloutEngine& engine, const std::vector<rollout::GenerateRequest>& reqs,
                 const std::string& path) {
  profile_to(path, [&] { engine.generate(reqs); });
  std::cout << fmt::format("profile: {} ({} prefill + {} decode steps)\n", path, engine.last_stats().num_prefill_steps,
                           engine.last_stats().num_decode_steps);
}

int run(const RolloutBenchOptions& o) {
  if (!o.profile_path.empty() && !profiler_unavailable_reason().empty())
    VERLPP_FAIL_AT("--profile", "{}; cannot write '{}'", profiler_unavailable_reason(), o.profile_path);
  const model::ModelConfig config = bench_model_config(o.shape_name, o.model_dir);
  const c10::Device device = bench_device(o.device);

  std::optional<hw::Kernels> kernels;
  if (!o.plugin.empty()) kernels.emplace(bench_plugin(o.plugin, o.device), hw::KernelsOptions{o.kernel_streams});

  // The pool holds the largest shape whole (no preemption), unless --kv-tokens says otherwise.
  // Each sequence owns whole blocks, so its tokens round up to a multiple of the block size.
  rollout::EngineOptions options;
  options.device_graphs = o.device_graphs;
  options.overlap_decode = o.decode_overlap;
  const int64_t bs = options.block_size;
  int64_t kv_tokens = o.kv_tokens;
  for (const RolloutShape& s : o.shapes)
    if (o.kv_tokens == 0)
      kv_tokens = std::max(kv_tokens, s.batch *
                                          ((s.prompt + s.response + o.resume_append + o.resume_tokens +
                                            std::max<int64_t>(0, o.agent_turns - 1) * kAgentSegmentTokens + bs - 1) /
                                           bs) *
                                          bs);

  model::DecoderLM lm(config);  // fp32 on the CPU: init_weights draws there, then one move
  lm.init_weights(o.init_seed);
  lm.to(model::dtype_from_name(o.dtype), device);
  options.kv_token_budget = kv_tokens;
  options.kernels = kernels ? &*kernels : nullptr;
  // Admit the whole batch at once, as a rollout worker does with its share of prompts.
  for (const RolloutShape& s : o.shapes) options.limits.max_num_seqs = std::max(options.limits.max_num_seqs, s.batch);
  rollout::RolloutEngine engine(std::move(lm), options);

  std::cout << fmt::format(
      "model {} ({} layers, hidden {}, vocab {}), {} {}, kernels: {}, KV pool {} tokens ({:.1f} MiB)\n",
      o.shape_name.empty() ? config.architecture : o.shape_name, config.num_hidden_layers, config.hidden_size,
      config.vocab_size, o.device, o.dtype, o.plugin.empty() ? "LibTorch reference" : o.plugin + " plugin",
      engine.num_blocks() * engine.block_size(), double(engine.pool_bytes()) / (1 << 20));
  std::cout << fmt::format("decode graphs: {}\n", engine.device_graphs_off_reason().empty()
                                                      ? std::string("on (--device-graphs 0 turns them off)")
                                                      : "off: " + engine.device_graphs_off_reason());
  std::unique_ptr<std::ofstream> json_out;
  if (!o.json_path.empty()) {
    json_out = std::make_unique<std::ofstream>(o.json_path);
    VERLPP_CHECK(json_out->good(), "--json: cannot write '{}'", o.json_path);
  }
  // prefill s / decode s: wall time in those steps (device work included); the rest of
  // `seconds` is the host's scheduling between steps.
  // overlapped: decode steps queued while the step before ran (decode graphs, overlap_decode).
  // early edges: graph edges the warm-up's captures made launch early behind a library kernel.
  std::cout << fmt::format("{:>6} {:>7} {:>9} {:>12} {:>10} {:>10} {:>10} {:>8} {:>8} {:>11} {:>12} {:>12}\n", "batch",
                           "prompt", "response", "tokens/s", "seconds", "prefill s", "decode s", "prefills", "decodes",
                           "overlapped", "preemptions", "early edges")
            << std::flush;
  for (const RolloutShape& s : o.shapes) {
    const auto reqs = make_requests(s, config.vocab_size, o.temperature);
    engine.generate(reqs);  // warm-up: kernels, cuBLAS handles, the caching allocator, graph captures
    const rollout::GenerateStats warmup = engine.last_stats();
    double best = 1e30;
    rollout::GenerateStats stats;
    uint64_t tokens_hash = 1469598103934665603ull;  // FNV-1a over the last run's token ids: runs that
    for (int r = 0; r < o.repeat; ++r) {            // must agree (e.g. greedy, streams on/off) compare it
      const auto outputs = engine.generate(reqs);
      tokens_hash = 1469598103934665603ull;
      for (const auto& out : outputs)
        for (int64_t id : out.token_ids) tokens_hash = (tokens_hash ^ uint64_t(id)) * 1099511628211ull;
      if (engine.last_stats().seconds < best) {
        best = engine.last_stats().seconds;
        stats = engine.last_stats();
      }
    }
    const double tps = double(stats.num_generated_tokens) / best;
    std::cout << fmt::format(
                     "{:>6} {:>7} {:>9} {:>12.1f} {:>10.3f} {:>10.3f} {:>10.3f} {:>8} {:>8} {:>11} {:>12} {:>12}\n",
                     s.batch, s.prompt, s.response, tps, best, stats.prefill_seconds, stats.decode_seconds,
                     stats.num_prefill_steps, stats.num_decode_steps, stats.num_overlapped_steps, stats.num_preemptions,
                     warmup.graph_early_launch_edges)
              << std::flush;
    nlohmann::json j = base_json(o, config);
    j.update({{"batch", s.batch},
              {"prompt", s.prompt},
              {"response", s.response},
              {"generated_tokens", stats.num_generated_tokens},
              {"tokens_per_s", tps},
              {"seconds", best},
              {"prefill_seconds", stats.prefill_seconds},
              {"decode_seconds", stats.decode_seconds},
              {"repeat", o.repeat},
              {"preemptions", stats.num_preemptions},
              {"tokens_fnv1a", fmt::format("{:016x}", tokens_hash)},
              {"device_graphs", engine.device_graphs_off_reason().empty()},
              {"graph_steps", stats.num_graph_steps},
              {"overlapped_steps", stats.num_overlapped_steps},
              {"discarded_steps", stats.num_discarded_steps},
              {"warmup_graph_captures", warmup.num_graph_captures},
              {"warmup_graph_capture_seconds", warmup.graph_capture_seconds},
              {"warmup_graph_early_launch_edges", warmup.graph_early_launch_edges}});
    if (json_out) *json_out << j.dump() << "\n" << std::flush;
  }
  if (o.resume_tokens > 0) {
    // kept s: the second turn resumed with its prefix's KV kept; again s: the whole context
    // submitted as a fresh prompt; prefill tokens: what each computed before decoding.
    std::cout << fmt::format("\n{:>6} {:>7} {:>7} {:>12} {:>12} {:>8} {:>14} {:>14} {:>12}\n", "batch", "append",
                             "tokens", "kept s", "again s", "ratio", "kept prefill", "again prefill", "agree");
    for (const RolloutShape& s : o.shapes) {
      nlohmann::json j = base_json(o, config);
      j.update({{"batch", s.batch}, {"prompt", s.prompt}, {"response", s.response}});
      j.update(time_resume(engine, make_requests(s, config.vocab_size, o.temperature), o.resume_append, o.resume_tokens,
                           o.repeat, config.vocab_size));
      if (json_out) *json_out << j.dump() << "\n" << std::flush;
    }
  }
  if (o.agent_turns > 0) {
    // agent s: the response as K turns through the agent loop (tool calls between); single s:
    // generate() of the same requests; floor: the tool latency one trajectory waits in all.
    std::cout << fmt::format("\n{:>6} {:>6} {:>8} {:>8} {:>12} {:>12} {:>8} {:>10} {:>12} {:>10}\n", "batch", "turns",
                             "turn tok", "tool ms", "agent s", "single s", "ratio", "floor s", "generated",
                             "seg tokens");
    for (const RolloutShape& s : o.shapes) {
      nlohmann::json j = base_json(o, config);
      j.update({{"batch", s.batch}, {"prompt", s.prompt}, {"response", s.response}});
      j.update(time_agent_loop(engine, make_requests(s, config.vocab_size, o.temperature), o.agent_turns,
                               o.agent_tool_ms, o.repeat));
      if (json_out) *json_out << j.dump() << "\n" << std::flush;
    }
  }
  if (!o.profile_path.empty() && !o.shapes.empty()) {
    RolloutShape shape = o.shapes.front();
    shape.response = o.profile_tokens;
    profile_run(engine, make_requests(shape, config.vocab_size, o.temperature), o.profile_path);
  }
  if (o.transitions) {
    nlohmann::json j = base_json(o, config);
    j["transitions"] = time_transitions(engine, o.repeat);
    if (json_out) *json_out << j.dump() << "\n" << std::flush;
  }
  return 0;
}

}  // namespace
}  // namespace verlpp::bench

int main(int argc, char** argv) {
  try {
    bool help = false;
    const auto options = verlpp::bench::parse_rollout_bench_args(argc, argv, help);
    if (help) {
      std::cout << verlpp::bench::rollout_bench_usage();
      return 0;
    }
    return verlpp::bench::run(options);
  } catch (const std::exception& e) {
    std::cerr << "verlpp-bench-rollout: " << e.what() << "\n";
    return 2;
  }
}
