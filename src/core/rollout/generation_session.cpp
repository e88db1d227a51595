// GenerationSession: the engine's scheduler in park mode (FinishedBlocks::kPark) driven one step
// at a time. A session owns its sequences and their stop lists; the engine lends it the KV pool,
// the decode graphs and the runner (RolloutEngine::run_step) for as long as it is open.
#include <verlpp/rollout/generation_session.hpp>

#include <verlpp/core/error.hpp>
#include <verlpp/rollout/block_manager.hpp>
#include <verlpp/rollout/scheduler.hpp>

#include "decode_graphs.hpp"

#include <ATen/core/grad_mode.h>

#include <algorithm>
#include <chrono>

namespace verlpp::rollout {
namespace {

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace

GenerationSession::GenerationSession(RolloutEngine& engine) : engine_(engine) {
  engine_.prepare_to_generate("GenerationSession");
  blocks_ = std::make_unique<BlockManager>(engine_.num_blocks_, engine_.options_.block_size);
  // Overlapped decode steps need the next position's block before the step that feeds it.
  const bool reserve_ahead = engine_.graphs_off_reason_.empty() && engine_.options_.overlap_decode;
  scheduler_ = std::make_unique<Scheduler>(*blocks_, engine_.options_.limits, reserve_ahead, FinishedBlocks::kPark);
  const RolloutEngine::GraphCounters at_open = engine_.graph_counters();
  captures_at_open_ = at_open.captures;
  overlapped_at_open_ = at_open.overlapped;
  discarded_at_open_ = at_open.discarded;
  early_edges_at_open_ = at_open.early_launch_edges;
  capture_seconds_at_open_ = at_open.capture_seconds;
  engine_.session_open_ = true;  // last: a constructor that throws leaves the engine free
}

GenerationSession::~GenerationSession() {
  // A decode step queued ahead writes into this session's blocks: it must be done before they
  // go back to anyone.
  try {
    if (engine_.graphs_) engine_.graphs_->settle();
  } catch (...) {
    // A destructor cannot report; the next use of the graphs reports the device's error.
  }
  engine_.session_open_ = false;
}

void GenerationSession::check_usable(const char* call) const {
  if (!failed_.empty())
    VERLPP_FAIL_AT(call, "the session failed in an earlier step ({}); its sequences are lost: open a new session",
                   failed_);
}

Sequence& GenerationSession::known(SequenceId sequence, const char* call) const {
  check_usable(call);
  if (sequence < 0 || sequence >= SequenceId(sequences_.size()))
    VERLPP_FAIL_AT(call, "unknown sequence {} (this session has {})", sequence, sequences_.size());
  if (sequences_[size_t(sequence)] == nullptr) VERLPP_FAIL_AT(call, "sequence {} was released", sequence);
  return *sequences_[size_t(sequence)];
}

Sequence& GenerationSession::parked(SequenceId sequence, const char* call) {
  Sequence& seq = known(sequence, call);
  if (!seq.finished)
    VERLPP_FAIL_AT(call,
                   "sequence {} is still generating (waiting or running); only a parked sequence (its turn "
                   "ended) can be resumed or released",
                   sequence);
  return seq;
}

int64_t GenerationSession::capped_budget(int64_t context_tokens, int64_t max_new_tokens) const {
  const int64_t context = engine_.model_.config().max_position_embeddings;
  return context > 0 ? std::min(max_new_tokens, context - context_tokens) : max_new_tokens;
}

std::vector<SequenceId> GenerationSession::submit(const GenerateRequest& request, int64_t request_index) {
  check_usable("GenerationSession::submit");
  const std::string problem = engine_.check_request(request);
  if (!problem.empty()) VERLPP_FAIL_AT("GenerationSession::submit", "request {}: {}", request_index, problem);
  TokenIds& stops = stop_lists_.emplace_back(request.sampling.stop_token_ids);
  if (!request.sampling.ignore_eos) {
    const TokenIds& eos = engine_.model_.config().eos_token_ids;
    stops.insert(stops.end(), eos.begin(), eos.end());
  }
  const uint64_t seed = request.sampling.seed.value_or(engine_.options_.seed + uint64_t(request_index));
  const int64_t len = int64_t(request.prompt_ids.size());
  const int64_t budget = capped_budget(len, request.sampling.max_new_tokens);
  engine_.ensure_graph_width(blocks_->blocks_for(len + budget - 1));
  std::vector<Sequence*> group;
  std::vector<SequenceId> ids;
  for (int64_t j = 0; j < request.sampling.n; ++j) {
    auto seq = std::make_unique<Sequence>();
    seq->id = SequenceId(sequences_.size());
    seq->request_index = request_index;
    seq->sample_index = j;
    seq->token_ids = request.prompt_ids;
    seq->num_prompt_tokens = len;
    seq->max_new_tokens = budget;
    const SamplingParams& p = request.sampling;
    seq->sampling = RowSampling{p.temperature, p.top_k, p.top_p, sample_seed(seed, j), 0};
    seq->stop_ids = &stops;
    ids.push_back(seq->id);
    group.push_back(seq.get());
    sequences_.push_back(std::move(seq));
    turns_.push_back(0);
  }
  scheduler_->add_group(std::move(group));
  return ids;
}

bool GenerationSession::has_work() const { return failed_.empty() && scheduler_->has_work(); }

std::vector<TurnOutput> GenerationSession::step() {
  check_usable("GenerationSession::step");
  if (!scheduler_->has_work()) return {};
  at::NoGradGuard no_grad;
  const auto start = std::chrono::steady_clock::now();
  GenerateStats& s = stats_.steps;
  std::vector<Sequence*> ended;
  try {
    const ScheduledStep step = scheduler_->schedule();
    VERLPP_CHECK(!step.empty(),
                 "GenerationSession: the scheduler made no progress ({} waiting, {} running, {} free blocks)",
                 scheduler_->num_waiting(), scheduler_->num_running(), blocks_->num_free_blocks());
    if (step.is_prefill) {
      ++s.num_prefill_steps;
      for (const Sequence* seq : step.compute) s.num_prompt_tokens += seq->num_tokens() - seq->num_cached_tokens;
    } else {
      ++s.num_decode_steps;
    }
    const auto run_start = std::chrono::steady_clock::now();
    if (engine_.run_step(step, token_ids_, logprobs_, scheduler_->num_waiting() == 0)) ++s.num_graph_steps;
    (step.is_prefill ? s.prefill_seconds : s.decode_seconds) += seconds_since(run_start);
    s.num_generated_tokens += int64_t(token_ids_.size());
    ended = scheduler_->postprocess(step, token_ids_, logprobs_);
  } catch (const std::exception& e) {
    // The scheduler's and the pool's state may be half-updated: nothing of this session can be
    // trusted after this, so every later call says so.
    failed_ = e.what();
    throw;
  }
  std::vector<TurnOutput> out;
  out.reserve(ended.size());
  for (Sequence* seq : ended) {
    TurnOutput turn;
    turn.sequence = seq->id;
    turn.request_index = seq->request_index;
    turn.sample_index = seq->sample_index;
    turn.turn = turns_[size_t(seq->id)];
    turn.token_ids.assign(seq->token_ids.begin() + seq->num_prompt_tokens, seq->token_ids.end());
    turn.logprobs = std::move(seq->logprobs);
    seq->logprobs.clear();
    turn.finish_reason = seq->finish_reason;
    turn.num_preemptions = seq->num_preemptions;
    out.push_back(std::move(turn));
  }
  s.seconds += seconds_since(start);
  return out;
}

void GenerationSession::resume(SequenceId sequence, const TokenIds& appended, int64_t max_new_tokens) {
  const char* call = "GenerationSession::resume";
  Sequence& seq = parked(sequence, call);
  if (max_new_tokens < 1)
    VERLPP_FAIL_AT(call, "sequence {}: max_new_tokens is {}; a turn generates at least 1 token", sequence,
                   max_new_tokens);
  const int64_t vocab = engine_.model_.vocab_size();
  for (size_t i = 0; i < appended.size(); ++i)
    if (appended[i] < 0 || appended[i] >= vocab)
      VERLPP_FAIL_AT(call, "sequence {}: appended token {} at position {} is outside the vocabulary [0, {})", sequence,
                     appended[i], i, vocab);
  const int64_t len = seq.num_tokens() + int64_t(appended.size());
  const int64_t context = engine_.model_.config().max_position_embeddings;
  if (context > 0 && len >= context)
    VERLPP_FAIL_AT(call,
                   "sequence {}: {} tokens appended to its {} make {}; the model's context is {} "
                   "(max_position_embeddings), leaving no room to generate",
                   sequence, appended.size(), seq.num_tokens(), len, context);
  const int64_t budget = capped_budget(len, max_new_tokens);
  const int64_t pool = engine_.num_blocks_ * engine_.options_.block_size;
  if (len + budget - 1 > pool)
    VERLPP_FAIL_AT(call,
                   "sequence {}: its context ({} tokens) + max_new_tokens ({}) needs {} tokens of KV cache; the whole "
                   "pool holds {}",
                   sequence, len, budget, len + budget - 1, pool);
  engine_.ensure_graph_width(blocks_->blocks_for(len + budget - 1));
  seq.token_ids.insert(seq.token_ids.end(), appended.begin(), appended.end());
  seq.num_prompt_tokens = len;  // this turn's "prompt": everything before its first generated token
  seq.max_new_tokens = budget;
  seq.logprobs.clear();
  seq.finish_reason = FinishReason::kLength;
  seq.num_preemptions = 0;
  ++turns_[size_t(sequence)];
  ++stats_.num_resumes;
  stats_.num_resumed_tokens += int64_t(appended.size());
  scheduler_->resume(&seq);
}

void GenerationSession::release(SequenceId sequence) {
  Sequence& seq = parked(sequence, "GenerationSession::release");
  scheduler_->release(&seq);
  sequences_[size_t(sequence)].reset();
}

const TokenIds& GenerationSession::context(SequenceId sequence) const {
  return known(sequence, "GenerationSession::context").token_ids;
}

bool GenerationSession::is_parked(SequenceId sequence) const {
  return known(sequence, "GenerationSession::is_parked").finished;
}

int64_t GenerationSession::num_waiting() const { return scheduler_->num_waiting(); }
int64_t GenerationSession::num_running() const { return scheduler_->num_running(); }
int64_t GenerationSession::num_parked() const { return scheduler_->num_parked(); }
int64_t GenerationSession::num_free_blocks() const { return blocks_->num_free_blocks(); }

void GenerationSession::reserve_context(int64_t max_tokens) {
  check_usable("GenerationSession::reserve_context");
  engine_.ensure_graph_width(blocks_->blocks_for(std::max<int64_t>(1, max_tokens)));
}

SessionStats GenerationSession::stats() const {
  SessionStats out = stats_;
  out.steps.num_preemptions = scheduler_->num_preemptions();
  out.num_parked_evictions = scheduler_->num_parked_evictions();
  const RolloutEngine::GraphCounters now = engine_.graph_counters();
  out.steps.num_graph_captures = now.captures - captures_at_open_;
  out.steps.graph_capture_seconds = now.capture_seconds - capture_seconds_at_open_;
  out.steps.graph_early_launch_edges = now.early_launch_edges - early_edges_at_open_;
  out.steps.num_overlapped_steps = now.overlapped - overlapped_at_open_;
  out.steps.num_discarded_steps = now.discarded - discarded_at_open_;
  return out;
}

}  // namespace verlpp::rollout
