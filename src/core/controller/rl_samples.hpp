// Generated samples of a step and how they travel between ranks: each engine generates its share
// of the prompts, then every rank of the actor's pool (and, from its first rank, every other rank)
// holds all of them, in prompt order. Multi-turn samples carry their response masks and the agent
// loop's counts along.
#pragma once

#include "rl_state.hpp"

#include <cstdint>
#include <vector>

namespace verlpp::controller {

// What the agent loop counted for one trajectory (the batch's num_turns, ... columns).
struct TrajectoryCounts {
  int64_t num_turns = 0, tool_calls = 0, malformed_calls = 0;
  int64_t termination = 0;  // agent::Termination
};

// Generated samples of some prompts: token ids per sample and a log-prob per token; for
// multi-turn samples also a 0/1 mask per token (0: a tool's or a template's) and the counts.
struct Samples {
  std::vector<TokenIds> responses;
  std::vector<std::vector<float>> logprobs;
  std::vector<std::vector<float>> masks;  // multi-turn only
  std::vector<TrajectoryCounts> counts;   // multi-turn only
};

// With several engines, each generated the samples of its own prompt range [begins[e],
// begins[e+1]) with all their n samples; returns everyone's, in prompt order, on every rank of
// the actor's pool. `multi_turn` (the same on every rank) says whether masks and counts travel.
Samples gather_samples(const RlTrainer::State& s, Samples local, const std::vector<int64_t>& begins, int64_t n,
                       bool multi_turn);

// The actor pool's samples (`rows` of them) on every rank, sent by the pool's first rank, when the
// pool is not every rank.
Samples share_samples(const RlTrainer::State& s, Samples samples, int64_t rows, bool multi_turn);

// The multi-turn samples of prompts [first, last) of `prompts` (their agent_loop and tools_kwargs
// columns), n trajectories each, from this rank's engine through the agent loop
// (rl_agent_rollout.cpp). Trajectory k of prompt i is seeded sample_seed(seed_base + i, k).
Samples generate_trajectories(RlTrainer::State& s, const Batch& prompts, const std::vector<TokenIds>& tokens,
                              int64_t first, int64_t last, const rollout::SamplingParams& params, int64_t n,
                              uint64_t seed_base);

// The agent loop's settings from rollout.multi_turn.*, rollout.agent.* and the response length.
agent::AgentLoopSettings agent_loop_settings(const RlTrainer::State& s);

}  // namespace verlpp::controller
