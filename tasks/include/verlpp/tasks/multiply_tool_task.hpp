// The agentic demo task (verlpp.demo.task = multiply_tool): multiplications of a 3-4-digit by a
// 2-digit number ("1234*56="), which the tiny model cannot compute alone, and a calculator tool
// that can. Its rows in verl's schema:
// - SFT rows are tool-call traces as chat conversations ("messages"): the user's problem, the
//   assistant's call calc({"expression": "1234*56"}), the tool's reply "69104", the assistant's
//   answer "69104";
// - RL rows run verl's tool agent loop (agent_name "tool_agent", the calculator reachable) or,
//   for the comparison run, the single-turn loop with no tool (whose SFT rows answer at once).
// Problems are enumerated and shuffled once by the seed, then cut into disjoint splits.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>
#include <vector>

namespace verlpp::tasks {

struct MultiplyToolTaskOptions {
  int64_t min_a = 100, max_a = 9999;  // the long factor: 3 or 4 digits
  int64_t min_b = 10, max_b = 99;     // the short factor: 2 digits
  uint64_t seed = 1;                  // the shuffle that assigns problems to splits
  int64_t sft_count = 2000;           // rows in each split, taken in this order from the shuffle
  int64_t train_count = 2000;
  int64_t val_count = 200;
};

// The splits. Each comes twice on the same problems: with the tool (SFT traces, tool_agent RL
// rows) and without it (SFT rows whose "response" is the answer, single-turn RL rows).
struct MultiplyToolSplits {
  std::vector<nlohmann::json> sft, train, val;
  std::vector<nlohmann::json> sft_without_tool, train_without_tool, val_without_tool;
};
// Error when the ranges are empty or hold fewer problems than asked for.
MultiplyToolSplits make_multiply_tool_splits(const MultiplyToolTaskOptions& options);

// The name the tool config gives the calculator, and that config (verl's tool YAML).
constexpr const char* kMultiplyToolName = "calc";
std::string multiply_tool_config_yaml();
// A compact ChatML template with tools for the demo's tokenizer (the tiny one has none of its
// own): one system line naming the tools, assistant tool calls rendered as hermes
// <tool_call> blocks, tool replies as user turns wrapped in <tool_response>, as Qwen2.5's does.
std::string multiply_tool_chat_template();

// Registers the reward source "multiply_tool" (multiply_tool_reward); idempotent.
void register_multiply_tool_reward();
// 1 if the last integer of the final answer equals the ground truth written canonically, else
// 0. The final answer is the text after the last "</tool_response>" (the whole response when
// no tool replied): the tool's own reply never counts as the model's answer.
double multiply_tool_reward(const std::string& response, const std::string& ground_truth);

}  // namespace verlpp::tasks
