// Multi-turn rollouts: this engine's trajectories through the agent loop (see rl_samples.hpp).
#include "rl_samples.hpp"

#include <verlpp/agent/turn_source.hpp>
#include <verlpp/config/keys.hpp>
#include <verlpp/core/log.hpp>
#include <verlpp/core/strings.hpp>
#include <verlpp/rollout/generation_session.hpp>
#include <verlpp/rollout/sampling.hpp>

#include <algorithm>

namespace verlpp::controller {

using json = nlohmann::json;

namespace {

// `f`'s Error, said at `key` (the file a key names is the user's to fix).
template <class F>
void at_key(const char* key, F f) {
  try {
    f();
  } catch (const Error& e) {
    throw Error(key, e.what());
  }
}

}  // namespace

void setup_agent_loop(RlTrainer::State& s) {
  const config::RolloutSettings& r = s.settings.rollout;
  if (r.agent.agent_loop_config_path)
    at_key(config::keys::kRolloutAgentLoopConfigPath,
           [&] { s.agent_loops.add_config_file(*r.agent.agent_loop_config_path); });
  at_key(config::keys::kRolloutAgentDefaultAgentLoop,
         [&] { s.agent_loops.loop_of(r.agent.default_agent_loop, "the default agent loop"); });
  if (r.multi_turn.tool_config_path)
    at_key(config::keys::kRolloutMultiTurnToolConfigPath,
           [&] { s.tools = agent::load_tool_config(*r.multi_turn.tool_config_path); });
  if (r.multi_turn.interaction_config_path)
    at_key(config::keys::kRolloutMultiTurnInteractionConfigPath,
           [&] { s.interactions = agent::load_interaction_config(*r.multi_turn.interaction_config_path); });
  if (s.tools.empty() && s.interactions.empty()) return;
  if (!s.tools.empty() && !s.chat->renders_tools())
    throw Error(config::keys::kRolloutMultiTurnToolConfigPath,
                fmt::format("the model's chat template ('{}') renders no tools (it never reads `tools`; the Qwen2.5, "
                            "Qwen3 and Llama 3.1+ templates do)",
                            s.chat->name()));
  // Tool and interaction turns render with the prompts' template variables, as verl's do.
  model::ChatOptions turn_options;
  turn_options.template_kwargs = s.settings.data.apply_chat_template_kwargs;
  s.tool_format = std::make_unique<agent::ToolSegmentFormat>(*s.tokenizer, *s.chat, turn_options);
  if (!s.tools.empty())
    log(LogLevel::info, fmt::format("agent loop: {} tool(s) ({}), {} calls per turn at most", s.tools.size(),
                                    join(s.tools.names(), ", "), r.multi_turn.max_parallel_calls));
  if (!s.interactions.empty())
    log(LogLevel::info,
        fmt::format("agent loop: {} interaction(s) ({})", s.interactions.size(), join(s.interactions.names(), ", ")));
}

agent::AgentLoopSettings agent_loop_settings(const RlTrainer::State& s) {
  const config::MultiTurnSettings& m = s.settings.rollout.multi_turn;
  agent::AgentLoopSettings a;
  a.response_length = s.response_length;
  a.max_assistant_turns = m.max_assistant_turns;
  a.max_user_turns = m.max_user_turns;
  a.max_parallel_calls = m.max_parallel_calls;
  a.max_tool_response_length = m.max_tool_response_length;
  a.tool_response_truncate_side = m.tool_response_truncate_side;
  a.tool_threads = s.settings.rollout.agent.num_workers;
  return a;
}

Samples generate_trajectories(RlTrainer::State& s, const Batch& prompts, const std::vector<TokenIds>& tokens,
                              int64_t first, int64_t last, const rollout::SamplingParams& params, int64_t n,
                              uint64_t seed_base) {
  VERLPP_CHECK(s.tool_format != nullptr,
               "the agent loop runs without a tool segment format (no tools or interactions configured)");
  const auto& loops = prompts.column("agent_loop");
  const auto& kwargs = prompts.column("tools_kwargs");
  const auto& interaction_kwargs = prompts.column("interaction_kwargs");
  const auto& messages = prompts.column("raw_prompt");
  std::vector<agent::AgentSample> samples;
  std::vector<uint64_t> seeds;
  int64_t longest = 0;
  for (int64_t i = first; i < last; ++i) {
    longest = std::max<int64_t>(longest, int64_t(tokens[size_t(i)].size()));
    for (int64_t k = 0; k < n; ++k) {
      samples.push_back({tokens[size_t(i)], loops[size_t(i)].get<std::string>(), kwargs[size_t(i)], messages[size_t(i)],
                         interaction_kwargs[size_t(i)]});
      seeds.push_back(rollout::sample_seed(seed_base + uint64_t(i), k));
    }
  }
  Samples local;
  if (samples.empty()) return local;

  rollout::SamplingParams sampling = params;
  sampling.n = 1;  // each trajectory is its own sequence
  rollout::GenerationSession session(*s.engine);
  session.reserve_context(longest + s.response_length);
  agent::SessionTurnSource source(session, sampling, std::move(seeds));
  agent::AgentLoopStats stats;
  std::vector<agent::Trajectory> done = agent::run_agent_loop(source, samples, s.tools, *s.tool_format, *s.tokenizer,
                                                              agent_loop_settings(s), &stats, &s.interactions);
  for (size_t row = 0; row < done.size(); ++row) {
    agent::Trajectory& t = done[row];
    const int64_t prompt = first + int64_t(row) / n;
    if (t.termination == agent::Termination::kAborted)
      throw Error(fmt::format("prompt row {} ({})", prompt, prompts.column("uid")[size_t(prompt)].dump()),
                  fmt::format("the agent loop's trajectory {} ended: {}", int64_t(row) % n, t.error));
    local.masks.emplace_back(t.response_mask.begin(), t.response_mask.end());
    local.responses.push_back(std::move(t.response_ids));
    local.logprobs.push_back(std::move(t.response_logprobs));
    local.counts.push_back({t.num_turns, t.tool_calls, t.malformed_calls, int64_t(t.termination)});
  }
  // Parse failures are a metric (agent/malformed_tool_calls); the log says it once per step.
  if (stats.malformed_calls > 0)
    log(LogLevel::warning, fmt::format("agent loop: {} tool call(s) could not be parsed in {} trajectories "
                                       "(the first: {}); the model read no reply for them",
                                       stats.malformed_calls, stats.trajectories, stats.first_malformed));
  return local;
}

}  // namespace verlpp::controller
