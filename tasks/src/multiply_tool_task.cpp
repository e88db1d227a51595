// The agentic demo task (see multiply_tool_task.hpp).
#include <verlpp/core/error.hpp>
#include <verlpp/reward/reward.hpp>
#include <verlpp/tasks/arith_task.hpp>
#include <verlpp/tasks/multiply_tool_task.hpp>

#include <random>
#include <string_view>
#include <unordered_map>
#include <utility>

namespace verlpp::tasks {
namespace {

using json = nlohmann::json;

// The prompt and ground truth both RL rows of a problem share.
json multiply_row(int64_t a, int64_t b, const std::string& split, int64_t index, bool with_tool) {
  const std::string truth = std::to_string(a * b);
  return {{"data_source", "multiply_tool"},
          {"agent_name", with_tool ? "tool_agent" : "single_turn_agent"},
          {"prompt", json::array({{{"role", "user"}, {"content", fmt::format("{}*{}=", a, b)}}})},
          {"ability", "arithmetic"},
          {"reward_model", {{"style", "rule"}, {"ground_truth", truth}}},
          {"extra_info", {{"split", split}, {"index", index}}}};
}

// A tool-call trace: the problem, one call, the calculator's reply, the answer.
json multiply_trace(int64_t a, int64_t b, int64_t index) {
  const std::string problem = fmt::format("{}*{}", a, b), truth = std::to_string(a * b);
  json call = {{"type", "function"},
               {"function", {{"name", kMultiplyToolName}, {"arguments", {{"expression", problem}}}}}};
  json messages = json::array({{{"role", "user"}, {"content", problem + "="}},
                               {{"role", "assistant"}, {"content", ""}, {"tool_calls", json::array({call})}},
                               {{"role", "tool"}, {"content", truth}},
                               {{"role", "assistant"}, {"content", truth}}});
  return {{"data_source", "multiply_tool"},
          {"agent_name", "tool_agent"},
          {"messages", std::move(messages)},
          {"reward_model", {{"style", "rule"}, {"ground_truth", truth}}},
          {"extra_info", {{"split", "sft"}, {"index", index}}}};
}

}  // namespace

MultiplyToolSplits make_multiply_tool_splits(const MultiplyToolTaskOptions& o) {
  if (o.min_a < 0 || o.min_a > o.max_a || o.min_b < 0 || o.min_b > o.max_b)
    throw Error("multiply_tool task", fmt::format("the factor ranges {}..{} and {}..{} must be non-empty and >= 0",
                                                  o.min_a, o.max_a, o.min_b, o.max_b));
  if (o.sft_count < 0 || o.train_count < 0 || o.val_count < 0)
    throw Error("multiply_tool task", fmt::format("split sizes must be >= 0 (sft {}, train {}, val {})", o.sft_count,
                                                  o.train_count, o.val_count));
  const int64_t range_b = o.max_b - o.min_b + 1;
  const int64_t total = (o.max_a - o.min_a + 1) * range_b;
  const int64_t wanted = o.sft_count + o.train_count + o.val_count;
  if (wanted > total)
    throw Error(
        "multiply_tool task",
        fmt::format("{} problems asked for (sft {} + train {} + val {}) but {}..{} x {}..{} give only {}", wanted,
                    o.sft_count, o.train_count, o.val_count, o.min_a, o.max_a, o.min_b, o.max_b, total));
  // Problem k is (min_a + k / range_b) x (min_b + k % range_b). The first `wanted` entries of a
  // Fisher-Yates shuffle over mt19937_64 (our own: std::shuffle's algorithm is unspecified),
  // drawn lazily so the 810,000 problems of the default ranges are never all listed.
  std::mt19937_64 rng(o.seed * 7919ULL + 29ULL);
  std::unordered_map<int64_t, int64_t> moved;  // position -> value, where it is not the position
  auto at = [&](int64_t i) {
    const auto it = moved.find(i);
    return it == moved.end() ? i : it->second;
  };
  std::vector<int64_t> order;
  for (int64_t i = 0; i < wanted; ++i) {
    const int64_t j = i + int64_t(rng() % uint64_t(total - i));
    const int64_t vi = at(i), vj = at(j);
    moved[i] = vj;
    moved[j] = vi;
    order.push_back(vj);
  }
  MultiplyToolSplits out;
  size_t next = 0;
  auto factors = [&](size_t k) { return std::make_pair(o.min_a + order[k] / range_b, o.min_b + order[k] % range_b); };
  for (int64_t i = 0; i < o.val_count; ++i, ++next) {
    const auto [a, b] = factors(next);
    out.val.push_back(multiply_row(a, b, "val", i, true));
    out.val_without_tool.push_back(multiply_row(a, b, "val", i, false));
  }
  for (int64_t i = 0; i < o.train_count; ++i, ++next) {
    const auto [a, b] = factors(next);
    out.train.push_back(multiply_row(a, b, "train", i, true));
    out.train_without_tool.push_back(multiply_row(a, b, "train", i, false));
  }
  for (int64_t i = 0; i < o.sft_count; ++i, ++next) {
    const auto [a, b] = factors(next);
    out.sft.push_back(multiply_trace(a, b, i));
    json direct = multiply_row(a, b, "sft", i, false);
    direct["response"] = direct["reward_model"]["ground_truth"];
    out.sft_without_tool.push_back(std::move(direct));
  }
  return out;
}

std::string multiply_tool_config_yaml() {
  return fmt::format(
      R"(# The demo's calculator, in verl's tool config format (verlpp.tools.Calculator: exact arithmetic).
tools:
  - class_name: verlpp.tools.Calculator
    config:
      type: native
    tool_schema:
      type: function
      function:
        name: {}
        description: Evaluates an arithmetic expression exactly
        parameters:
          type: object
          properties:
            expression:
              type: string
              description: the expression, e.g. 1234*56
          required: [expression]
)",
      kMultiplyToolName);
}

std::string multiply_tool_chat_template() {
  return "{%- if tools %}{{- '<|im_start|>system\\ntools:' }}{%- for tool in tools %}"
         "{{- ' ' + tool.function.name + '(' + (tool.function.parameters.properties | list | join(', ')) + ')' }}"
         "{%- endfor %}{{- '<|im_end|>\\n' }}{%- endif %}"
         "{%- for message in messages %}"
         "{%- if message.role == 'tool' %}"
         "{{- '<|im_start|>user\\n<tool_response>\\n' + message.content + '\\n</tool_response><|im_end|>\\n' }}"
         "{%- elif message.role == 'assistant' and message.tool_calls %}"
         "{{- '<|im_start|>assistant\\n' + (message.content or '') }}"
         "{%- for call in message.tool_calls %}{%- set f = call.function if call.function else call %}"
         "{{- '<tool_call>\\n{\"name\": \"' + f.name + '\", \"arguments\": ' + (f.arguments | tojson) + "
         "'}\\n</tool_call>' }}{%- endfor %}{{- '<|im_end|>\\n' }}"
         "{%- else %}{{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>\\n' }}{%- endif %}"
         "{%- endfor %}"
         "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}";
}

double multiply_tool_reward(const std::string& response, const std::string& ground_truth) {
  // The arithmetic demo's rule on the final answer alone.
  constexpr std::string_view kReplyEnd = "</tool_response>";
  const size_t reply_end = response.rfind(kReplyEnd);
  return arith_reward(reply_end == std::string::npos ? response : response.substr(reply_end + kReplyEnd.size()),
                      ground_truth);
}

void register_multiply_tool_reward() {
  static const bool registered = reward::reward_sources().add("multiply_tool", [](const reward::RewardInput& in) {
    const std::string truth = in.ground_truth.is_string() ? in.ground_truth.get<std::string>()
                              : in.ground_truth.is_null() ? std::string()
                                                          : in.ground_truth.dump();
    return reward::RewardResult{multiply_tool_reward(in.response, truth)};
  });
  (void)registered;
}

}  // namespace verlpp::tasks
