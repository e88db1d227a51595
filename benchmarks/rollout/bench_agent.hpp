// verlpp-bench-rollout --agent K:L: the agent loop's cost. Each shape's response of R tokens is
// generated as K turns of R/K tokens by agent::run_agent_loop over the engine's
// GenerationSession, with K-1 tool calls between them (a tool that answers after L ms), beside
// the same R tokens generated single-turn by generate(). The ratio is the loop's overhead: tool
// latency, the tool segments' prefill, parking and resuming, and the host's bookkeeping.
#pragma once

#include <verlpp/rollout/engine.hpp>

#include <nlohmann/json.hpp>

#include <cstdint>
#include <vector>

namespace verlpp::bench {

// Room for one tool segment (its rendering is ~20 ids) in a sequence's KV blocks.
inline constexpr int64_t kAgentSegmentTokens = 64;

// Times `requests` (every sample exactly max_new_tokens, EOS ignored) both ways, best of
// `repeat` after a warm-up; prints one row and returns its figures.
nlohmann::json time_agent_loop(rollout::RolloutEngine& engine, const std::vector<rollout::GenerateRequest>& requests,
                               int64_t turns, int64_t tool_ms, int repeat);

}  // namespace verlpp::bench
