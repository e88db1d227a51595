#include <verlpp/agent/turn_source.hpp>

#include <verlpp/core/error.hpp>

namespace verlpp::agent {

SessionTurnSource::SessionTurnSource(rollout::GenerationSession& session, rollout::SamplingParams sampling,
                                     std::vector<uint64_t> seeds)
    : session_(session), sampling_(std::move(sampling)), seeds_(std::move(seeds)) {
  sampling_.n = 1;
}

int64_t SessionTurnSource::start(const TokenIds& prompt, int64_t max_new_tokens, int64_t index) {
  rollout::GenerateRequest request;
  request.prompt_ids = prompt;
  request.sampling = sampling_;
  request.sampling.max_new_tokens = max_new_tokens;
  if (!seeds_.empty()) {
    VERLPP_CHECK(index >= 0 && size_t(index) < seeds_.size(), "agent loop: trajectory {} has no seed ({} given)", index,
                 seeds_.size());
    request.sampling.seed = seeds_[size_t(index)];
  }
  const std::vector<rollout::SequenceId> ids = session_.submit(request, index);
  VERLPP_CHECK(ids.size() == 1, "agent loop: the engine queued {} sequences for one trajectory", ids.size());
  return ids[0];
}

void SessionTurnSource::resume(int64_t handle, const TokenIds& appended, int64_t max_new_tokens) {
  session_.resume(handle, appended, max_new_tokens);
}

void SessionTurnSource::finish(int64_t handle) {
  if (session_.is_parked(handle)) session_.release(handle);
}

bool SessionTurnSource::has_work() const { return session_.has_work(); }

std::vector<GeneratedTurn> SessionTurnSource::step() {
  std::vector<GeneratedTurn> out;
  for (rollout::TurnOutput& turn : session_.step()) {
    GeneratedTurn t;
    t.handle = turn.sequence;
    t.token_ids = std::move(turn.token_ids);
    t.logprobs = std::move(turn.logprobs);
    t.aborted = turn.finish_reason == rollout::FinishReason::kAborted;
    if (t.aborted) t.error = "the engine aborted the sequence";
    out.push_back(std::move(t));
  }
  return out;
}

}  // namespace verlpp::agent
