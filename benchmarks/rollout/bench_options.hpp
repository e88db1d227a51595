// Command-line options of verlpp-bench-rollout and the built-in model shapes. Kept apart from
// the measuring code so that main() reads as "parse, build the engine, time each shape".
#pragma once

#include <verlpp/hw/plugin.hpp>
#include <verlpp/model/model_config.hpp>

#include <c10/core/Device.h>

#include <cstdint>
#include <string>
#include <vector>

namespace verlpp::bench {

// One workload: `batch` prompts of `prompt` tokens, each generating exactly `response` tokens.
struct RolloutShape {
  int64_t batch = 1, prompt = 1, response = 1;
};

struct RolloutBenchOptions {
  std::string model_dir;             // --model DIR (config.json; random weights)
  std::string shape_name;            // --shape NAME (a built-in config); one of the two, else examples/tiny
  std::string device = "cpu";        // --device cpu|cuda|privateuseone
  std::string dtype = "float32";     // --dtype float32|bfloat16|float16
  std::string plugin;                // --plugin NAME: that plugin's kernels ("" = LibTorch reference)
  bool kernel_streams = true;        // --kernel-streams 0|1: kernels on LibTorch's stream (1) or the NULL stream (0)
  std::vector<RolloutShape> shapes;  // --shapes B:P:R,... (default: the CPU set of docs/benchmarks.md)
  double temperature = 0;            // --temperature T (0 = greedy)
  int repeat = 3;                    // --repeat R: timed runs per shape, best reported
  int64_t kv_tokens = 0;             // --kv-tokens N: pool size (0 = what the largest shape needs)
  uint64_t init_seed = 1;            // --init-seed S: random weights
  std::string json_path;             // --json FILE: one JSON object per line, per shape
  bool transitions = false;          // --transitions: also time update_weights / sleep / wake
  std::string profile_path;          // --profile FILE: a Kineto trace of one more run of the first shape
  int64_t profile_tokens = 16;       // --profile-tokens N: that run's response length
  bool device_graphs = true;         // --device-graphs 0|1: EngineOptions::device_graphs
  bool decode_overlap = true;        // --decode-overlap 0|1: EngineOptions::overlap_decode
  // --resume A:T: also time a second turn of each shape (A appended ids, T new tokens) in a
  // GenerationSession with the prefix kept, beside the whole context submitted again (0 = off).
  int64_t resume_append = 0, resume_tokens = 0;
  // --agent K:L: also run each shape's response as K turns through the agent loop, with K-1 tool
  // calls answering after L ms, beside the same tokens single-turn (0 = off).
  int64_t agent_turns = 0, agent_tool_ms = 0;
};

// Parses argv; throws verlpp::Error naming the offending option or value. `--help` fills
// `help` with the usage text and returns.
RolloutBenchOptions parse_rollout_bench_args(int argc, char** argv, bool& help);
const char* rollout_bench_usage();

// "B:P:R,B:P:R" -> shapes; throws naming the bad entry.
std::vector<RolloutShape> parse_shapes(const std::string& text);

// A built-in config by name: "qwen2.5-0.5b" (Qwen2.5-0.5B's shape: hidden 896, 24 layers, 14
// heads, 2 KV heads, intermediate 4864, vocab 151936, tied embeddings) or "qwen2.5-7b" (hidden
// 3584, 28 layers, 28 heads, 4 KV heads, intermediate 18944, vocab 152064, untied). Unknown names
// throw, listing the known ones.
model::ModelConfig builtin_model_config(const std::string& name);

// The benches' model: the built-in shape when named, else the folder's config.json, else the
// embedded tiny model (examples/tiny).
model::ModelConfig bench_model_config(const std::string& shape_name, const std::string& model_dir);
// "cpu", "cuda" or "privateuseone" as the torch device a run would choose for it (device 0 of the
// best loaded plugin of that type, controller::choose_device); Error naming --device when this
// LibTorch cannot place tensors there.
c10::Device bench_device(const std::string& device);
// The loaded plugin named by --plugin; Error when it is not loaded (listing the loaded ones) or
// places tensors on another torch device than --device.
const hw::Plugin& bench_plugin(const std::string& name, const std::string& device);

}  // namespace verlpp::bench
