// Option parsing for verlpp-bench-rollout. Every bad option or value is an Error naming it, so
// a typo in a GPU script fails in the first second rather than after a model has been built.
#include "bench_options.hpp"

#include <verlpp/controller/device_choice.hpp>
#include <verlpp/core/error.hpp>
#include <verlpp/hw/plugin_registry.hpp>
#include <verlpp/hw/torch_device.hpp>

#include <nlohmann/json.hpp>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <sstream>

namespace verlpp::bench {
namespace {

int64_t parse_int(const std::string& option, const std::string& value, int64_t min) {
  char* end = nullptr;
  errno = 0;
  const long long v = std::strtoll(value.c_str(), &end, 10);
  if (value.empty() || *end != '\0' || errno != 0 || v < min)
    VERLPP_FAIL_AT(option, "'{}' is not an integer >= {}", value, min);
  return int64_t(v);
}

double parse_double(const std::string& option, const std::string& value) {
  char* end = nullptr;
  const double v = std::strtod(value.c_str(), &end);
  if (value.empty() || *end != '\0') VERLPP_FAIL_AT(option, "'{}' is not a number", value);
  return v;
}

// "1" or "0": a path on or off.
bool parse_switch(const std::string& option, const std::string& value) {
  if (value != "0" && value != "1") VERLPP_FAIL_AT(option, "'{}' is not 0 (off) or 1 (on)", value);
  return value == "1";
}

}  // namespace

const char* rollout_bench_usage() {
  return "verlpp-bench-rollout [--model DIR | --shape qwen2.5-0.5b] [--device cpu|cuda|privateuseone]\n"
         "                     [--dtype float32|bfloat16|float16] [--plugin NAME [--kernel-streams 0|1]]\n"
         "                     [--shapes B:P:R,...]\n"
         "                     [--temperature T] [--repeat R] [--kv-tokens N] [--init-seed S]\n"
         "                     [--json FILE] [--transitions] [--profile FILE [--profile-tokens N]]\n"
         "                     [--device-graphs 0|1] [--decode-overlap 0|1] [--resume A:T] [--agent K:L]\n"
         "Generated tokens/s of RolloutEngine::generate, every sample running exactly R new tokens\n"
         "(EOS ignored), random weights, best of --repeat runs after one warm-up run.\n"
         "--plugin NAME uses that loaded plugin's kernels (paged attention decode, sampling);\n"
         "without it the LibTorch reference path runs; --kernel-streams 0 runs them on the plugin's\n"
         "synchronous NULL stream instead of LibTorch's (side-by-side timing). --transitions also times the "
         "hybrid-engine\n"
         "hooks (update_weights shared / cast from fp32, sleep, wake). --profile FILE writes a Kineto\n"
         "(chrome://tracing) trace of one more run of the first shape with --profile-tokens new tokens\n"
         "(default 16), where this LibTorch (2.1+) has the profiler. --device-graphs 0 runs decode steps\n"
         "eagerly, --decode-overlap 0 waits for each step's tokens before queuing the next (both on by\n"
         "default, as verlpp.rollout.device_graphs / decode_overlap in a run's config; also from\n"
         "VERLPP_BENCH_DEVICE_GRAPHS / VERLPP_BENCH_DECODE_OVERLAP=0|1). --resume A:T also times a\n"
         "second turn of each shape (A appended ids, T new tokens, as after a tool call): resumed in a\n"
         "GenerationSession with the prefix's KV kept, and the whole context submitted again.\n"
         "--agent K:L also runs each shape's R tokens as K turns of R/K through the agent loop, with\n"
         "K-1 tool calls that answer after L ms, beside the same tokens generated single-turn.\n";
}

std::vector<RolloutShape> parse_shapes(const std::string& text) {
  std::vector<RolloutShape> shapes;
  std::stringstream in(text);
  std::string item;
  while (std::getline(in, item, ',')) {
    const size_t a = item.find(':'), b = a == std::string::npos ? a : item.find(':', a + 1);
    if (b == std::string::npos || item.find(':', b + 1) != std::string::npos)
      VERLPP_FAIL_AT("--shapes", "'{}' is not batch:prompt:response (e.g. 32:128:128)", item);
    RolloutShape s;
    s.batch = parse_int("--shapes batch", item.substr(0, a), 1);
    s.prompt = parse_int("--shapes prompt", item.substr(a + 1, b - a - 1), 1);
    s.response = parse_int("--shapes response", item.substr(b + 1), 1);
    shapes.push_back(s);
  }
  if (shapes.empty()) VERLPP_FAIL_AT("--shapes", "no shape given in '{}'", text);
  return shapes;
}

RolloutBenchOptions parse_rollout_bench_args(int argc, char** argv, bool& help) {
  RolloutBenchOptions o;
  help = false;
  // The switches may also come from the environment (VERLPP_BENCH_*, as verlpp-bench-train's), so
  // that run_gpu_perf.sh's ROLLOUT_ENVS lists can compare them; a flag wins.
  if (const char* v = std::getenv("VERLPP_BENCH_DEVICE_GRAPHS"))
    o.device_graphs = parse_switch("VERLPP_BENCH_DEVICE_GRAPHS", v);
  if (const char* v = std::getenv("VERLPP_BENCH_DECODE_OVERLAP"))
    o.decode_overlap = parse_switch("VERLPP_BENCH_DECODE_OVERLAP", v);
  for (int i = 1; i < argc; ++i) {
    const std::string opt = argv[i];
    if (opt == "--help" || opt == "-h") {
      help = true;
      return o;
    }
    if (opt == "--transitions") {
      o.transitions = true;
      continue;
    }
    if (i + 1 >= argc) VERLPP_FAIL_AT(opt, "needs a value (see --help)");
    const std::string val = argv[++i];
    if (opt == "--model")
      o.model_dir = val;
    else if (opt == "--shape")
      o.shape_name = val;
    else if (opt == "--device")
      o.device = val;
    else if (opt == "--dtype")
      o.dtype = val;
    else if (opt == "--plugin")
      o.plugin = val;
    else if (opt == "--kernel-streams")
      o.kernel_streams = parse_int(opt, val, 0) != 0;
    else if (opt == "--shapes")
      o.shapes = parse_shapes(val);
    else if (opt == "--temperature")
      o.temperature = parse_double(opt, val);
    else if (opt == "--repeat")
      o.repeat = int(parse_int(opt, val, 1));
    else if (opt == "--kv-tokens")
      o.kv_tokens = parse_int(opt, val, 1);
    else if (opt == "--init-seed")
      o.init_seed = uint64_t(parse_int(opt, val, 0));
    else if (opt == "--json")
      o.json_path = val;
    else if (opt == "--profile")
      o.profile_path = val;
    else if (opt == "--profile-tokens")
      o.profile_tokens = parse_int(opt, val, 1);
    else if (opt == "--device-graphs")
      o.device_graphs = parse_switch(opt, val);
    else if (opt == "--decode-overlap")
      o.decode_overlap = parse_switch(opt, val);
    else if (opt == "--resume") {
      const size_t colon = val.find(':');
      if (colon == std::string::npos) VERLPP_FAIL_AT(opt, "'{}': give A:T (appended ids : new tokens)", val);
      o.resume_append = parse_int(opt, val.substr(0, colon), 0);
      o.resume_tokens = parse_int(opt, val.substr(colon + 1), 1);
    } else if (opt == "--agent") {
      const size_t colon = val.find(':');
      if (colon == std::string::npos) VERLPP_FAIL_AT(opt, "'{}': give K:L (turns : tool latency in ms)", val);
      o.agent_turns = parse_int(opt, val.substr(0, colon), 1);
      o.agent_tool_ms = parse_int(opt, val.substr(colon + 1), 0);
    } else
      VERLPP_FAIL_AT(opt, "unknown option (see --help)");
  }
  if (!o.model_dir.empty() && !o.shape_name.empty())
    VERLPP_FAIL_AT("--model/--shape", "give one of --model DIR and --shape NAME, not both");
  if (o.device != "cpu" && o.device != "cuda" && o.device != "privateuseone")
    VERLPP_FAIL_AT("--device", "'{}' is not cpu, cuda or privateuseone", o.device);
  if (o.dtype != "float32" && o.dtype != "bfloat16" && o.dtype != "float16")
    VERLPP_FAIL_AT("--dtype", "'{}' is not float32, bfloat16 or float16", o.dtype);
  if (!(o.temperature >= 0)) VERLPP_FAIL_AT("--temperature", "{} must be >= 0 (0 = greedy)", o.temperature);
  if (o.shapes.empty()) o.shapes = {{1, 32, 128}, {8, 32, 128}, {32, 64, 128}, {64, 128, 256}};
  if (o.agent_turns > 0)
    for (const RolloutShape& s : o.shapes)
      if (s.response % o.agent_turns != 0)
        VERLPP_FAIL_AT("--agent", "{} turns do not split shape {}:{}:{}'s response evenly", o.agent_turns, s.batch,
                       s.prompt, s.response);
  return o;
}

model::ModelConfig builtin_model_config(const std::string& name) {
  if (name != "qwen2.5-0.5b" && name != "qwen2.5-7b")
    VERLPP_FAIL_AT("--shape", "unknown shape '{}' (known: qwen2.5-0.5b, qwen2.5-7b)", name);
  // Qwen/Qwen2.5-0.5B's config.json, shape-defining fields (the weights are random).
  nlohmann::json j = {
      {"architectures", {"Qwen2ForCausalLM"}},
      {"model_type", "qwen2"},
      {"vocab_size", 151936},
      {"hidden_size", 896},
      {"intermediate_size", 4864},
      {"num_hidden_layers", 24},
      {"num_attention_heads", 14},
      {"num_key_value_heads", 2},
      {"hidden_act", "silu"},
      {"max_position_embeddings", 32768},
      {"rms_norm_eps", 1e-6},
      {"rope_theta", 1000000.0},
      {"initializer_range", 0.02},
      {"tie_word_embeddings", true},
      {"use_sliding_window", false},
      {"torch_dtype", "bfloat16"},
      {"bos_token_id", 151643},
      {"eos_token_id", 151643},
  };
  if (name == "qwen2.5-7b")  // Qwen/Qwen2.5-7B's widths and depth, untied head
    j.update({{"vocab_size", 152064},
              {"hidden_size", 3584},
              {"intermediate_size", 18944},
              {"num_hidden_layers", 28},
              {"num_attention_heads", 28},
              {"num_key_value_heads", 4},
              {"tie_word_embeddings", false}});
  return model::parse_model_config(j, "built-in shape " + name);
}

}  // namespace verlpp::bench

namespace verlpp::bench {

model::ModelConfig bench_model_config(const std::string& shape_name, const std::string& model_dir) {
  if (!shape_name.empty()) return builtin_model_config(shape_name);
  return model::load_model_config(model_dir.empty() ? std::string(VERLPP_SOURCE_DIR) + "/examples/tiny" : model_dir);
}

c10::Device bench_device(const std::string& device) {
  // The run's own device choice: a privateuseone plugin's LibTorch backend is loaded and checked
  // there, and a type this LibTorch cannot use is refused naming --device.
  return controller::choose_device(device, 0, "--device").device;
}

const hw::Plugin& bench_plugin(const std::string& name, const std::string& device) {
  const hw::Plugin& plugin = hw::plugin_named(name);  // Error listing the loaded ones
  if (plugin.torch_device_type() != device)
    VERLPP_FAIL_AT("--plugin", "plugin '{}' places tensors on torch device '{}', but --device is '{}'", name,
                   plugin.torch_device_type(), device);
  return plugin;
}

}  // namespace verlpp::bench
