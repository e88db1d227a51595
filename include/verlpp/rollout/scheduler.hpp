// Continuous batching over a BlockManager. Each step is either a prefill (newly admitted
// sequences, whole context computed) or a decode (one token for every running sequence).
// Admission is by free blocks, max_num_seqs and max_num_batched_tokens; when a decode step
// cannot get a block, the most recently admitted sequences are preempted by recompute (their
// blocks freed, they go back to the front of the queue and later re-prefill prompt + output).
// The n samples of a prompt are admitted together: the prompt is computed once, then forked.
// For an incremental caller (GenerationSession) a finished sequence can be parked instead of
// freed: it keeps its blocks until it is resumed with more tokens (a prefill of those alone) or
// released, and parked blocks are taken back, longest-parked first, before anything waits or is
// preempted for want of a block.
#pragma once

#include <verlpp/core/token_id.hpp>
#include <verlpp/rollout/block_manager.hpp>
#include <verlpp/rollout/sampling.hpp>

#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <vector>

namespace verlpp::rollout {

// One sample being generated.
struct Sequence {
  int64_t id = 0;             // unique, in submission order
  int64_t request_index = 0;  // which request
  int64_t sample_index = 0;   // which of its n samples
  TokenIds token_ids;         // prompt + generated
  int64_t num_prompt_tokens = 0;
  int64_t num_cached_tokens = 0;       // leading tokens whose K/V sit in the cache
  int64_t max_new_tokens = 0;          // after capping by the context
  std::vector<int64_t> block_table;    // block ids, in order
  std::vector<float> logprobs;         // one per generated token
  RowSampling sampling;                // temperature, top-k/p, seed (step = generated count)
  const TokenIds* stop_ids = nullptr;  // EOS + stop ids (owned by the engine)
  bool finished = false;
  FinishReason finish_reason = FinishReason::kLength;
  int64_t num_preemptions = 0;

  int64_t num_tokens() const { return int64_t(token_ids.size()); }
  int64_t num_generated() const { return num_tokens() - num_prompt_tokens; }
  // Whether the token sampled next is this sample's last by length (max_new_tokens).
  bool next_token_is_last() const { return num_generated() + 1 >= max_new_tokens; }
};

// Limits of one step.
struct SchedulerLimits {
  int64_t max_num_seqs = 256;             // sequences in one step
  int64_t max_num_batched_tokens = 8192;  // tokens computed in one prefill step
};

// What postprocess does with a finished sequence's blocks.
enum class FinishedBlocks {
  kFree,  // back to the pool at once (generate's batch)
  kPark,  // kept: the sequence is parked until resume() or release()
};

// What the runner computes this step.
struct ScheduledStep {
  bool is_prefill = false;
  // Sequences whose uncached tokens are fed, in this order (flat batch = their concatenation).
  std::vector<Sequence*> compute;
  // For each sampling sequence, the index into `compute` whose last logits row it samples
  // from (several samples of one prompt share one row at their first token).
  std::vector<std::pair<Sequence*, int64_t>> samplers;
  std::vector<BlockCopy> copies;  // copy-on-write block copies to do before the forward
  bool empty() const { return compute.empty(); }
};

class Scheduler {
 public:
  // `reserve_ahead`: a decode step also takes, where a block is free, the block of the position
  // each sequence feeds in the step after it (the token sampled now, unless it is the last), so
  // that step is known before this one's tokens are (rollout decode graphs queue it ahead). The
  // required blocks of a step are taken first: this never preempts a sequence.
  Scheduler(BlockManager& blocks, SchedulerLimits limits, bool reserve_ahead = false,
            FinishedBlocks finished = FinishedBlocks::kFree);

  // Queues a group of samples of one prompt (all with the same token_ids, nothing cached).
  // The group must fit the whole pool alone (the engine checks before adding).
  void add_group(std::vector<Sequence*> group);
  // Queues a parked sequence again after its caller appended tokens to token_ids (and set its
  // turn's num_prompt_tokens and max_new_tokens): the next prefill computes what its blocks do not
  // hold. It must fit the whole pool alone.
  void resume(Sequence* seq);
  // Frees a parked sequence's blocks and forgets it.
  void release(Sequence* seq);
  bool has_work() const { return !waiting_.empty() || !running_.empty(); }
  int64_t num_waiting() const;
  int64_t num_running() const { return int64_t(running_.size()); }
  int64_t num_parked() const { return int64_t(parked_.size()); }
  int64_t num_preemptions() const { return num_preemptions_; }
  // Parked (or resumed, still waiting) sequences whose blocks were taken back for others (they
  // recompute when admitted).
  int64_t num_parked_evictions() const { return num_parked_evictions_; }

  // The next step (empty only when there is no work).
  ScheduledStep schedule();
  // Records the sampled token and its log-prob for each sampling sequence of `step`, marks the
  // computed tokens cached, finishes sequences (freeing their blocks). Returns the finished.
  std::vector<Sequence*> postprocess(const ScheduledStep& step, const std::vector<int64_t>& token_ids,
                                     const std::vector<float>& logprobs);

 private:
  ScheduledStep schedule_prefill();
  ScheduledStep schedule_decode();
  void preempt(Sequence* seq);
  // Takes the blocks of the longest-parked sequence still holding some; false when none does.
  bool evict_parked();
  // Takes the blocks of the waiting sequence furthest back that holds some (a resumed one),
  // other than `keep`; false when none does.
  bool evict_waiting(const Sequence* keep);

  BlockManager& blocks_;
  SchedulerLimits limits_;
  bool reserve_ahead_;
  FinishedBlocks finished_;
  std::deque<std::vector<Sequence*>> waiting_;  // groups (size n when fresh, 1 when preempted or resumed)
  std::deque<Sequence*> running_;
  std::deque<Sequence*> parked_;  // in the order they were parked
  int64_t num_preemptions_ = 0;
  int64_t num_parked_evictions_ = 0;
};

}  // namespace verlpp::rollout
