// TurnSource: where the agent loop gets its assistant turns. The rollout engine's
// GenerationSession is one (SessionTurnSource); a test's scripted policy is another, so the loop's
// token layout is checked against hand-derived vectors without a model.
#pragma once

#include <verlpp/core/token_id.hpp>
#include <verlpp/rollout/generation_session.hpp>

#include <cstdint>
#include <string>
#include <vector>

namespace verlpp::agent {

// One assistant turn as it ended.
struct GeneratedTurn {
  int64_t handle = 0;
  TokenIds token_ids;           // the stop id included when one ended the turn
  std::vector<float> logprobs;  // one per id
  bool aborted = false;         // the engine gave up on the sequence (error says why)
  std::string error;
};

class TurnSource {
 public:
  virtual ~TurnSource() = default;
  // Starts a trajectory's first turn from `prompt` with at most `max_new_tokens`; `index` is the
  // trajectory's place in the batch (it seeds its sampling). Returns its handle.
  virtual int64_t start(const TokenIds& prompt, int64_t max_new_tokens, int64_t index) = 0;
  // Appends `appended` (a tool segment) to a trajectory whose turn ended, and starts its next turn.
  virtual void resume(int64_t handle, const TokenIds& appended, int64_t max_new_tokens) = 0;
  // Ends a trajectory (its engine state is freed).
  virtual void finish(int64_t handle) = 0;
  // Whether step() would do something.
  virtual bool has_work() const = 0;
  // Advances generation; returns the turns that ended.
  virtual std::vector<GeneratedTurn> step() = 0;
};

// Turns from the rollout engine: each trajectory is a sequence of one GenerationSession, sampled
// with `sampling` (its n is 1 per trajectory; its max_new_tokens is replaced by each turn's budget).
// Trajectory `index` is seeded seeds[index] when `seeds` is given (a caller running a slice of a
// batch passes seeds of the global rows, so the tokens do not depend on the slicing); otherwise
// sampling.seed, or the engine's seed + index.
class SessionTurnSource : public TurnSource {
 public:
  SessionTurnSource(rollout::GenerationSession& session, rollout::SamplingParams sampling,
                    std::vector<uint64_t> seeds = {});
  int64_t start(const TokenIds& prompt, int64_t max_new_tokens, int64_t index) override;
  void resume(int64_t handle, const TokenIds& appended, int64_t max_new_tokens) override;
  void finish(int64_t handle) override;
  bool has_work() const override;
  std::vector<GeneratedTurn> step() override;

 private:
  rollout::GenerationSession& session_;
  rollout::SamplingParams sampling_;
  std::vector<uint64_t> seeds_;  // by trajectory index (empty: sampling_.seed or the engine's)
};

}  // namespace verlpp::agent
