// Scheduler: prefill when something waiting fits, otherwise decode every running sequence,
// preempting from the back of the running queue (the most recently admitted) when a block is
// missing. A group is split into chunks of max_num_seqs so that it can always be admitted.
// Parked sequences (FinishedBlocks::kPark) give their blocks back before a group waits or a
// running sequence is preempted.
#include <verlpp/rollout/scheduler.hpp>

#include <verlpp/core/error.hpp>

#include <algorithm>

namespace verlpp::rollout {

Scheduler::Scheduler(BlockManager& blocks, SchedulerLimits limits, bool reserve_ahead, FinishedBlocks finished)
    : blocks_(blocks), limits_(limits), reserve_ahead_(reserve_ahead), finished_(finished) {
  VERLPP_CHECK(limits.max_num_seqs > 0 && limits.max_num_batched_tokens > 0,
               "Scheduler: max_num_seqs {} and max_num_batched_tokens {} must be positive", limits.max_num_seqs,
               limits.max_num_batched_tokens);
}

void Scheduler::add_group(std::vector<Sequence*> group) {
  for (size_t start = 0; start < group.size(); start += size_t(limits_.max_num_seqs)) {
    const size_t end = std::min(group.size(), start + size_t(limits_.max_num_seqs));
    waiting_.emplace_back(group.begin() + int64_t(start), group.begin() + int64_t(end));
  }
}

void Scheduler::resume(Sequence* seq) {
  const auto it = std::find(parked_.begin(), parked_.end(), seq);
  VERLPP_CHECK(it != parked_.end(), "Scheduler::resume: sequence {} is not parked", seq->id);
  parked_.erase(it);
  seq->finished = false;
  waiting_.push_back({seq});
}

void Scheduler::release(Sequence* seq) {
  const auto it = std::find(parked_.begin(), parked_.end(), seq);
  VERLPP_CHECK(it != parked_.end(), "Scheduler::release: sequence {} is not parked", seq->id);
  parked_.erase(it);
  blocks_.free(seq->block_table);
}

bool Scheduler::evict_parked() {
  for (Sequence* seq : parked_)
    if (!seq->block_table.empty()) {
      blocks_.free(seq->block_table);
      seq->num_cached_tokens = 0;
      ++num_parked_evictions_;
      return true;
    }
  return false;
}

bool Scheduler::evict_waiting(const Sequence* keep) {
  for (auto group = waiting_.rbegin(); group != waiting_.rend(); ++group)
    for (Sequence* seq : *group)
      if (seq != keep && !seq->block_table.empty()) {
        blocks_.free(seq->block_table);
        seq->num_cached_tokens = 0;
        ++num_parked_evictions_;
        return true;
      }
  return false;
}

int64_t Scheduler::num_waiting() const {
  int64_t n = 0;
  for (const auto& g : waiting_) n += int64_t(g.size());
  return n;
}

ScheduledStep Scheduler::schedule() {
  if (!waiting_.empty()) {
    ScheduledStep step = schedule_prefill();
    if (!step.empty()) return step;
  }
  return schedule_decode();
}

ScheduledStep Scheduler::schedule_prefill() {
  ScheduledStep step;
  step.is_prefill = true;
  int64_t num_seqs = int64_t(running_.size()), num_tokens = 0;
  while (!waiting_.empty()) {
    std::vector<Sequence*>& group = waiting_.front();
    Sequence* leader = group.front();
    // A fresh or preempted group holds no block; a resumed sequence may hold its earlier turns'.
    const bool holds_blocks = !leader->block_table.empty();
    const int64_t tokens = leader->num_tokens() - leader->num_cached_tokens;
    const bool first = step.compute.empty();
    if (num_seqs + int64_t(group.size()) > limits_.max_num_seqs) break;
    if (!first && num_tokens + tokens > limits_.max_num_batched_tokens) break;
    auto fits = [&] {
      return holds_blocks ? blocks_.blocks_to_extend(leader->block_table, leader->num_cached_tokens,
                                                     leader->num_tokens()) <= blocks_.num_free_blocks()
                          : blocks_.can_allocate(tokens);
    };
    while (!fits() && evict_parked()) {
    }
    // Nothing runs that could free blocks: resumed sequences further back in the queue give
    // theirs up (they recompute when admitted), so that the head always gets in eventually.
    while (!fits() && first && running_.empty() && evict_waiting(leader)) {
    }
    if (!fits()) break;
    if (!holds_blocks) {
      blocks_.allocate(leader->block_table, tokens);
    } else if (auto copy = blocks_.extend(leader->block_table, leader->num_cached_tokens, leader->num_tokens())) {
      step.copies.push_back(*copy);
    }
    const int64_t row = int64_t(step.compute.size());
    step.compute.push_back(leader);
    for (Sequence* seq : group) {
      if (seq != leader) blocks_.fork(leader->block_table, seq->block_table);
      step.samplers.emplace_back(seq, row);
      running_.push_back(seq);
    }
    num_seqs += int64_t(group.size());
    num_tokens += tokens;
    waiting_.pop_front();
  }
  return step;
}

ScheduledStep Scheduler::schedule_decode() {
  ScheduledStep step;
  std::deque<Sequence*> remaining;
  remaining.swap(running_);
  while (!remaining.empty()) {
    Sequence* seq = remaining.front();
    remaining.pop_front();
    const int64_t position = seq->num_tokens() - 1;  // the token fed this step
    bool keep = true;
    while (!blocks_.can_append(seq->block_table, position)) {
      if (evict_parked()) continue;
      if (remaining.empty()) {
        preempt(seq);
        keep = false;
        break;
      }
      preempt(remaining.back());
      remaining.pop_back();
    }
    if (!keep) break;
    if (auto copy = blocks_.append(seq->block_table, position)) step.copies.push_back(*copy);
    step.samplers.emplace_back(seq, int64_t(step.compute.size()));
    step.compute.push_back(seq);
    running_.push_back(seq);
  }
  if (reserve_ahead_) {
    // After every required block: the next position's block for sequences that will feed one
    // there (their token of this step is not their last) and start a block with it.
    for (Sequence* seq : step.compute) {
      const int64_t next = seq->num_tokens();
      if (next % blocks_.block_size() != 0 || seq->next_token_is_last()) continue;
      if (blocks_.num_free_blocks() == 0) break;
      blocks_.append(seq->block_table, next);
    }
  }
  return step;
}

void Scheduler::preempt(Sequence* seq) {
  blocks_.free(seq->block_table);
  seq->num_cached_tokens = 0;
  ++seq->num_preemptions;
  ++num_preemptions_;
  waiting_.push_front({seq});
}

std::vector<Sequence*> Scheduler::postprocess(const ScheduledStep& step, const std::vector<int64_t>& token_ids,
                                              const std::vector<float>& logprobs) {
  VERLPP_CHECK(token_ids.size() == step.samplers.size() && logprobs.size() == step.samplers.size(),
               "Scheduler::postprocess: {} tokens and {} log-probs for {} sampling sequences", token_ids.size(),
               logprobs.size(), step.samplers.size());
  std::vector<Sequence*> finished;
  for (size_t i = 0; i < step.samplers.size(); ++i) {
    Sequence* seq = step.samplers[i].first;
    seq->num_cached_tokens = seq->num_tokens();
    seq->token_ids.push_back(token_ids[i]);
    seq->logprobs.push_back(logprobs[i]);
    ++seq->sampling.step;
    const bool stop = seq->stop_ids != nullptr &&
                      std::find(seq->stop_ids->begin(), seq->stop_ids->end(), token_ids[i]) != seq->stop_ids->end();
    if (stop || seq->num_generated() >= seq->max_new_tokens) {
      seq->finished = true;
      seq->finish_reason = stop ? FinishReason::kStop : FinishReason::kLength;
      if (finished_ == FinishedBlocks::kPark)
        parked_.push_back(seq);
      else
        blocks_.free(seq->block_table);
      finished.push_back(seq);
    }
  }
  if (!finished.empty())
    running_.erase(std::remove_if(running_.begin(), running_.end(), [](Sequence* s) { return s->finished; }),
                   running_.end());
  return finished;
}

}  // namespace verlpp::rollout
