// The agent loop under a fixed workload. Random weights write no tool calls, so a TurnSource
// around the engine's session ends every turn at R/K tokens and hands the loop a fixed hermes
// call in place of the turn's ids (the last turn: a fixed answer); the engine's work is what a
// model writing calls of that length would cost, and everything after a turn (parsing, the tool
// pool, the segment rendered by the Qwen2.5 template, resume with the kept prefix) is the loop's
// own code path.
#include "bench_agent.hpp"

#include <verlpp/agent/tool_agent_loop.hpp>
#include <verlpp/agent/turn_source.hpp>
#include <verlpp/model/chat_template.hpp>
#include <verlpp/model/tokenizer.hpp>
#include <verlpp/rollout/generation_session.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <iostream>
#include <map>
#include <thread>

namespace verlpp::bench {
namespace {

// verlpp.bench.FixedLatency: replies "42" after config.latency_ms.
class FixedLatencyTool : public agent::Tool {
 public:
  FixedLatencyTool(const nlohmann::json& config, const nlohmann::ordered_json& schema, const std::string& where)
      : Tool(schema, where), latency_ms_(config.value("latency_ms", int64_t(0))) {}
  agent::ToolResult call(const nlohmann::ordered_json&, const nlohmann::json&) const override {
    std::this_thread::sleep_for(std::chrono::milliseconds(latency_ms_));
    return {"42", 0.0};
  }

 private:
  int64_t latency_ms_;
};

// Turns of exactly `turn_tokens` engine tokens; the loop sees `call` for each but the last turn
// of a trajectory, then `answer`.
class FixedTurnSource : public agent::TurnSource {
 public:
  FixedTurnSource(agent::TurnSource& inner, int64_t turns, int64_t turn_tokens, TokenIds call, TokenIds answer)
      : inner_(inner), turns_(turns), turn_tokens_(turn_tokens), call_(std::move(call)), answer_(std::move(answer)) {}
  int64_t start(const TokenIds& prompt, int64_t, int64_t index) override {
    const int64_t handle = inner_.start(prompt, turn_tokens_, index);
    done_turns_[handle] = 0;
    return handle;
  }
  void resume(int64_t handle, const TokenIds& appended, int64_t) override {
    inner_.resume(handle, appended, turn_tokens_);
  }
  void finish(int64_t handle) override { inner_.finish(handle); }
  bool has_work() const override { return inner_.has_work(); }
  std::vector<agent::GeneratedTurn> step() override {
    std::vector<agent::GeneratedTurn> out = inner_.step();
    for (agent::GeneratedTurn& turn : out) {
      generated_ += int64_t(turn.token_ids.size());
      const bool last = ++done_turns_[turn.handle] >= turns_;
      turn.token_ids = last ? answer_ : call_;
      turn.logprobs.assign(turn.token_ids.size(), 0.0f);
    }
    return out;
  }
  int64_t generated() const { return generated_; }

 private:
  agent::TurnSource& inner_;
  int64_t turns_, turn_tokens_;
  TokenIds call_, answer_;
  std::map<int64_t, int64_t> done_turns_;
  int64_t generated_ = 0;
};

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace

nlohmann::json time_agent_loop(rollout::RolloutEngine& engine, const std::vector<rollout::GenerateRequest>& requests,
                               int64_t turns, int64_t tool_ms, int repeat) {
  static const bool registered =
      agent::tool_classes().contains("verlpp.bench.FixedLatency") ||
      agent::tool_classes().add(
          "verlpp.bench.FixedLatency",
          [](const nlohmann::json& config, const nlohmann::ordered_json& schema, const std::string& where) {
            return std::make_unique<FixedLatencyTool>(config, schema, where);
          });
  (void)registered;
  VERLPP_CHECK(!requests.empty(), "--agent: no requests");
  const int64_t response = requests.front().sampling.max_new_tokens;
  VERLPP_CHECK(turns >= 1 && response % turns == 0, "--agent: {} turns do not split a response of {} tokens evenly",
               turns, response);
  const int64_t turn_tokens = response / turns;
  const agent::ToolSet tools = agent::parse_tool_config(
      fmt::format("tools:\n  - class_name: verlpp.bench.FixedLatency\n    config: {{latency_ms: {}}}\n"
                  "    tool_schema: {{type: function, function: {{name: lookup, description: a fixed answer,\n"
                  "      parameters: {{type: object, properties: {{q: {{type: string}}}}}}}}}}\n",
                  tool_ms),
      "--agent");
  // The embedded tiny tokenizer renders the segments: its ids are valid in any larger vocabulary.
  const model::Tokenizer tokenizer =
      model::Tokenizer::from_file(std::string(VERLPP_SOURCE_DIR) + "/examples/tiny/tokenizer.json");
  const model::ChatTemplate chat = model::ChatTemplate::builtin("qwen2.5");
  const agent::ToolSegmentFormat format(tokenizer, chat);
  const TokenIds im_end = tokenizer.encode("<|im_end|>");
  TokenIds call = tokenizer.encode("<tool_call>\n{\"name\": \"lookup\", \"arguments\": {\"q\": \"x\"}}\n</tool_call>");
  call.insert(call.end(), im_end.begin(), im_end.end());
  TokenIds answer = tokenizer.encode("The answer is 42.");
  answer.insert(answer.end(), im_end.begin(), im_end.end());

  std::vector<agent::AgentSample> samples;
  for (const rollout::GenerateRequest& r : requests) {
    agent::AgentSample sample;
    sample.prompt_ids = r.prompt_ids;
    sample.agent_name = agent::kToolAgent;
    samples.push_back(std::move(sample));
  }
  agent::AgentLoopSettings settings;
  settings.response_length = 1 << 20;  // the turns' own budgets end them
  settings.tool_threads = int64_t(requests.size());
  rollout::SamplingParams sampling = requests.front().sampling;
  sampling.n = 1;

  int64_t longest = 0;
  for (const rollout::GenerateRequest& q : requests) longest = std::max<int64_t>(longest, int64_t(q.prompt_ids.size()));
  double agent_best = 1e30, single_best = 1e30;
  int64_t agent_tokens = 0, calls = 0, segment_tokens = 0;
  for (int r = 0; r < std::max(1, repeat) + 1; ++r) {  // the first round warms up
    {
      rollout::GenerationSession session(engine);
      session.reserve_context(longest + response + (turns - 1) * kAgentSegmentTokens);
      agent::SessionTurnSource inner(session, sampling);
      FixedTurnSource source(inner, turns, turn_tokens, call, answer);
      agent::AgentLoopStats stats;
      const auto start = std::chrono::steady_clock::now();
      const std::vector<agent::Trajectory> out =
          agent::run_agent_loop(source, samples, tools, format, tokenizer, settings, &stats);
      const double seconds = seconds_since(start);
      if (r > 0 && seconds < agent_best) {
        agent_best = seconds;
        agent_tokens = source.generated();
        calls = stats.tool_calls;
        segment_tokens = 0;
        for (const agent::Trajectory& t : out)
          segment_tokens += int64_t(std::count(t.response_mask.begin(), t.response_mask.end(), int8_t(0)));
      }
    }
    engine.generate(requests);
    if (r > 0) single_best = std::min(single_best, engine.last_stats().seconds);
  }
  const double tool_floor = double(turns - 1) * double(tool_ms) / 1000.0;
  std::cout << fmt::format("{:>6} {:>6} {:>8} {:>8} {:>12.4f} {:>12.4f} {:>8.2f} {:>10.3f} {:>12} {:>10}\n",
                           requests.size(), turns, turn_tokens, tool_ms, agent_best, single_best,
                           agent_best / single_best, tool_floor, agent_tokens, segment_tokens)
            << std::flush;
  return {{"agent_turns", turns},
          {"agent_turn_tokens", turn_tokens},
          {"agent_tool_ms", tool_ms},
          {"agent_seconds", agent_best},
          {"single_turn_seconds", single_best},
          {"agent_over_single", agent_best / single_best},
          {"agent_tool_latency_floor_s", tool_floor},
          {"agent_generated_tokens", agent_tokens},
          {"agent_tool_calls", calls},
          {"agent_segment_tokens", segment_tokens}};
}

}  // namespace verlpp::bench
