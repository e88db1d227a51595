// The second turn, two ways. Kept: every sequence parked after its first turn is resumed with
// the appended ids, so its prefill computes those (and the turn's last sampled token) only.
// Again: the whole context (prompt, first turn, appended ids) is submitted as a fresh prompt, so
// the prefill computes all of it. Greedy runs must give the same tokens both ways (compared).
#include "bench_resume.hpp"

#include <verlpp/rollout/generation_session.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <iostream>

namespace verlpp::bench {
namespace {

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace

nlohmann::json time_resume(rollout::RolloutEngine& engine, const std::vector<rollout::GenerateRequest>& first_turn,
                           int64_t append, int64_t new_tokens, int repeat, int64_t vocab) {
  double kept_best = 1e30, again_best = 1e30;
  int64_t kept_prefill_tokens = 0, again_prefill_tokens = 0;
  bool same_tokens = true;
  for (int r = 0; r < std::max(1, repeat) + 1; ++r) {  // the first round warms up
    std::vector<TokenIds> contexts(first_turn.size());
    std::vector<TokenIds> kept_tokens(first_turn.size());
    double kept_seconds = 0;
    int64_t prefill_tokens = 0;
    {
      rollout::GenerationSession session(engine);
      std::vector<rollout::SequenceId> ids;
      for (size_t i = 0; i < first_turn.size(); ++i) ids.push_back(session.submit(first_turn[i], int64_t(i)).front());
      while (session.has_work()) session.step();
      const int64_t before = session.stats().steps.num_prompt_tokens;
      const auto start = std::chrono::steady_clock::now();
      for (size_t i = 0; i < ids.size(); ++i) {
        TokenIds appended;
        for (int64_t t = 0; t < append; ++t) appended.push_back((int64_t(i) * 71 + t * 13 + 3) % vocab);
        session.resume(ids[i], appended, new_tokens);
        contexts[i] = session.context(ids[i]);
      }
      while (session.has_work())
        for (rollout::TurnOutput& turn : session.step())
          kept_tokens[size_t(turn.request_index)] = std::move(turn.token_ids);
      kept_seconds = seconds_since(start);
      prefill_tokens = session.stats().steps.num_prompt_tokens - before;
      for (rollout::SequenceId id : ids) session.release(id);
    }
    std::vector<rollout::GenerateRequest> again(first_turn.size());
    for (size_t i = 0; i < again.size(); ++i) {
      again[i].prompt_ids = contexts[i];
      again[i].sampling = first_turn[i].sampling;
      again[i].sampling.max_new_tokens = new_tokens;
    }
    const std::vector<rollout::GenerateOutput> outs = engine.generate(again);
    for (const rollout::GenerateOutput& out : outs)
      same_tokens &= out.token_ids == kept_tokens[size_t(out.request_index)];
    if (r == 0) continue;
    if (kept_seconds < kept_best) {
      kept_best = kept_seconds;
      kept_prefill_tokens = prefill_tokens;
    }
    if (engine.last_stats().seconds < again_best) {
      again_best = engine.last_stats().seconds;
      again_prefill_tokens = engine.last_stats().num_prompt_tokens;
    }
  }
  const bool greedy = !first_turn.empty() && first_turn.front().sampling.temperature == 0;
  std::cout << fmt::format("{:>6} {:>7} {:>7} {:>12.4f} {:>12.4f} {:>8.2f} {:>14} {:>14} {:>12}\n", first_turn.size(),
                           append, new_tokens, kept_best, again_best, again_best / kept_best, kept_prefill_tokens,
                           again_prefill_tokens, greedy ? (same_tokens ? "same" : "DIFFER") : "sampled")
            << std::flush;
  return {{"resume_append", append},
          {"resume_new_tokens", new_tokens},
          {"resume_kept_seconds", kept_best},
          {"resume_again_seconds", again_best},
          {"resume_kept_prefill_tokens", kept_prefill_tokens},
          {"resume_again_prefill_tokens", again_prefill_tokens},
          {"resume_same_tokens", greedy ? nlohmann::json(same_tokens) : nlohmann::json(nullptr)}};
}

}  // namespace verlpp::bench
