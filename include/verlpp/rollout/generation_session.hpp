// GenerationSession: the rollout engine's incremental interface, for callers that serve
// trajectories rather than batches (the agent loop: a turn, a tool call, the next turn). It runs
// the scheduler generate() runs — generate() is itself a session that submits every request,
// steps until none is left and releases each sample as its turn ends — but the caller decides
// between steps: submit more, collect the turns that ended, append tokens to a sequence (a tool's
// answer) and resume it while the others keep decoding.
//
// A sequence whose turn ended is parked: its KV blocks stay in the pool, so resuming it computes
// only the appended tokens (the prefix is kept). When the pool runs short — a waiting sequence
// cannot be admitted, or a running one cannot grow — parked sequences give their blocks back,
// the longest-parked first, before any running sequence is preempted; such a sequence computes
// its whole context again when it is resumed (counted in SessionStats::num_parked_evictions).
//
// One session at a time per engine (they share its KV pool); while it is open the engine cannot
// sleep, release or update its weights.
#pragma once

#include <verlpp/core/token_id.hpp>
#include <verlpp/rollout/engine.hpp>
#include <verlpp/rollout/sampling.hpp>

#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <vector>

namespace verlpp::rollout {

class BlockManager;
class Scheduler;
struct Sequence;

// A handle on one sequence of a session (one sample of a submitted request).
using SequenceId = int64_t;

// One turn of one sequence, as it ended.
struct TurnOutput {
  SequenceId sequence = 0;
  int64_t request_index = 0;    // as given to submit()
  int64_t sample_index = 0;     // which of the request's n samples
  int64_t turn = 0;             // 0 for the submitted prompt's turn, then one per resume()
  TokenIds token_ids;           // the ids this turn generated (the stop id included when it ended it)
  std::vector<float> logprobs;  // [token_ids.size()] log-prob of each under softmax(logits / T)
  FinishReason finish_reason = FinishReason::kLength;
  int64_t num_preemptions = 0;  // times the sequence was preempted during this turn
};

// Counters since the session opened.
struct SessionStats {
  GenerateStats steps;               // prefill and decode steps, tokens, graphs, time
  int64_t num_resumes = 0;           // resume() calls
  int64_t num_resumed_tokens = 0;    // tokens appended by them
  int64_t num_parked_evictions = 0;  // parked sequences that gave their blocks back
};

class GenerationSession {
 public:
  // Opens a session on `engine`: syncs or refuses stale weights as generate() does, and refuses a
  // second session, a sleeping engine or released weights (Errors that say which).
  explicit GenerationSession(RolloutEngine& engine);
  ~GenerationSession();
  GenerationSession(const GenerationSession&) = delete;
  GenerationSession& operator=(const GenerationSession&) = delete;

  // Queues the request's n samples; returns their handles in sample order. The seed of a request
  // without one is the engine's seed + `request_index`. A request that check_request refuses is
  // an Error with its reason, and nothing is queued.
  std::vector<SequenceId> submit(const GenerateRequest& request, int64_t request_index);
  // Whether a sequence waits or runs (a step would do something).
  bool has_work() const;
  // Runs one engine step (a prefill or a decode); returns the turns that ended in it, in the
  // order they ended. Their sequences are parked. A step that throws leaves the session
  // unusable (later calls say why); nothing when there is no work.
  std::vector<TurnOutput> step();
  // Appends `appended` to a parked sequence's context and lets it generate up to
  // `max_new_tokens` more (capped by the model's context). Errors name the sequence: unknown,
  // released, not parked, or a context that would not fit the model or the pool.
  void resume(SequenceId sequence, const TokenIds& appended, int64_t max_new_tokens);
  // Ends a parked sequence; its blocks go back to the pool.
  void release(SequenceId sequence);

  // The sequence's whole context: prompt, every turn's ids and every appended id.
  const TokenIds& context(SequenceId sequence) const;
  // Whether the sequence is parked (its turn ended, not released).
  bool is_parked(SequenceId sequence) const;
  int64_t num_waiting() const;
  int64_t num_running() const;
  int64_t num_parked() const;
  // KV blocks free in the pool now (all of them once every sequence is released).
  int64_t num_free_blocks() const;
  // The decode graphs' block tables hold contexts up to `max_tokens` tokens from now on (set
  // before submitting, it spares rebuilding them when a longer sequence arrives).
  void reserve_context(int64_t max_tokens);
  SessionStats stats() const;

 private:
  // Refuses `call` after a step failed (the session's state is then unknown).
  void check_usable(const char* call) const;
  Sequence& parked(SequenceId sequence, const char* call);
  Sequence& known(SequenceId sequence, const char* call) const;
  int64_t capped_budget(int64_t context_tokens, int64_t max_new_tokens) const;

  RolloutEngine& engine_;
  std::unique_ptr<BlockManager> blocks_;
  std::unique_ptr<Scheduler> scheduler_;
  std::vector<std::unique_ptr<Sequence>> sequences_;  // by SequenceId; null once released
  std::vector<int64_t> turns_;                        // by SequenceId: turns begun
  std::deque<TokenIds> stop_lists_;                   // per request (sequences point into it)
  SessionStats stats_;
  std::string failed_;  // why a step failed ("" = usable)
  // The decode graphs' counters when the session opened (stats() reports the difference).
  int64_t captures_at_open_ = 0, overlapped_at_open_ = 0, discarded_at_open_ = 0, early_edges_at_open_ = 0;
  double capture_seconds_at_open_ = 0;
  std::vector<int64_t> token_ids_;  // a step's sampled ids and log-probs (reused)
  std::vector<float> logprobs_;
};

}  // namespace verlpp::rollout
