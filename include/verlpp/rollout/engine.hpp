// RolloutEngine: generation for RL on a DecoderLM over a paged KV cache. generate() runs the
// loop "schedule -> run -> postprocess" until every request is done; each step is one
// forward_cached over a flat batch (prefill or decode) through PagedAttention or a plugin's
// paged-attention kernel, then one sampler call. Hybrid-engine hooks: update_weights() (share
// storage when device and dtype match, else cast into the engine's buffers), sleep()/wake()
// (free and re-create the KV pool), each timed. See docs/rollout.md.
//
// The engine and a trainer's model. The engine holds a copy of the model it is given: a second
// handle on the same tensors, except the weights it fuses (EngineOptions::fuse_projections), which
// become its own buffers. After a trainer writes the weights in place (an optimizer step), the
// shared tensors show the new values and the fused ones still hold the old: the engine would
// run a mix. So the engine tracks the weights version (model::DecoderLM::weights_version) of
// the model it was built from, or of the last model given to update_weights(const DecoderLM&),
// and generate() checks it first: when it moved, the engine syncs from that model
// (StaleWeights::kSync) or refuses with an Error that says so (StaleWeights::kRefuse, the
// default). Running on stale weights therefore takes asking for it: update_weights(named) marks
// the engine current without tracking a new model.
#pragma once

#include <verlpp/core/token_id.hpp>
#include <verlpp/model/decoder.hpp>
#include <verlpp/rollout/sampling.hpp>
#include <verlpp/rollout/scheduler.hpp>

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

namespace verlpp::model {
class PagedKvCache;
}

namespace verlpp::rollout {
namespace detail {
class DecodeGraphs;
}
class GenerationSession;

// What generate() does when the weights of the model the engine tracks changed since the engine
// took them (see the top of this file).
enum class StaleWeights {
  kRefuse,  // an Error naming both versions and the call that syncs (update_weights(model))
  kSync,    // update_weights from the tracked model first (keeps a handle on its parameters)
};

// How the engine sizes its pool and batches. The pool is the first of: num_blocks,
// kv_token_budget tokens, memory_fraction of memory_total_bytes (0 = the machine's physical
// memory on CPU) less the weights; otherwise 16384 tokens.
struct EngineOptions {
  int64_t block_size = 16;               // tokens per KV block
  int64_t num_blocks = 0;                // explicit pool size in blocks (0 = derive)
  int64_t kv_token_budget = 0;           // pool size in tokens (0 = derive)
  double memory_fraction = 0.0;          // share of memory for weights + pool (0 = unused)
  int64_t memory_total_bytes = 0;        // the memory that fraction applies to (0 = physical RAM)
  SchedulerLimits limits;                // max_num_seqs, max_num_batched_tokens
  uint64_t seed = 0;                     // seeds requests that bring none (request i: seed + i)
  const hw::Kernels* kernels = nullptr;  // a plugin's kernels (sample, paged attention decode)
  // Decode steps as captured device graphs (CUDA graphs, one per batch-size bucket) where the
  // device, the LibTorch build and the plugin's kernels allow it (the trainer sets it from
  // verlpp.rollout.device_graphs). See docs/rollout.md.
  bool device_graphs = true;
  // With decode graphs: queue the next decode step before this one's tokens reach the host
  // where it is certain but for stop tokens (same sequences, no new KV block), so the device does
  // not wait for the host's bookkeeping between steps; a queued step the scheduler does not
  // choose is discarded (the trainer sets it from verlpp.rollout.decode_overlap). See docs/rollout.md.
  bool overlap_decode = true;
  // Each layer's q/k/v and gate/up weights as one buffer each (model::DecoderLM::fuse_projections):
  // two GEMMs a layer where there were five. Those weights are then the engine's own (a trainer's
  // storage is copied into them, never shared): on a hybrid engine that is ~60% of a model's
  // weights held twice. Off: every weight shareable, five GEMMs.
  bool fuse_projections = true;
  // Decode steps through the plugin's rotary_paged_attention_decode (ABI 1.5: RoPE, the KV-cache
  // stores and the attention in one kernel) where it offers it; false keeps ABI 1.3's pair
  // rotary_kv_store + paged_attention_decode (the same bits; for side-by-side timing and tests).
  bool rotary_attention = true;
  // generate() after the tracked model's weights changed: refuse (default) or sync first.
  StaleWeights stale_weights = StaleWeights::kRefuse;
};

// One prompt and how to sample it.
struct GenerateRequest {
  TokenIds prompt_ids;  // token ids, non-empty, shorter than the model's context
  SamplingParams sampling;
};

// One sample's result. A refused request yields one output (sample 0) with `error` set and
// finish_reason kAborted; the rest of the batch is unaffected.
struct GenerateOutput {
  int64_t request_index = 0;
  int64_t sample_index = 0;
  TokenIds token_ids;           // generated ids (EOS/stop id included when it ended the sample)
  std::vector<float> logprobs;  // [token_ids.size()] log-prob of each under softmax(logits / T)
  FinishReason finish_reason = FinishReason::kLength;
  std::string error;            // why the request was refused ("" = fine)
  int64_t num_preemptions = 0;  // times this sample was preempted and recomputed
};

// Counters of the last generate() call.
struct GenerateStats {
  int64_t num_prefill_steps = 0, num_decode_steps = 0, num_preemptions = 0;
  int64_t num_prompt_tokens = 0;  // tokens computed by prefills (recomputation included)
  int64_t num_generated_tokens = 0;
  int64_t num_graph_steps = 0;       // decode steps replayed from a device graph
  int64_t num_overlapped_steps = 0;  // of those, queued while the step before ran (overlap_decode)
  int64_t num_discarded_steps = 0;   // steps queued ahead that the scheduler did not choose
  int64_t num_graph_captures = 0;    // graphs captured during this call (kept for later calls)
  double graph_capture_seconds = 0;  // time those captures took
  // Edges of those graphs that launch a plugin kernel while the library kernel (a cuBLAS GEMM)
  // before it still runs (hw::DeviceGraphs::early_launch_edges).
  int64_t graph_early_launch_edges = 0;
  // Wall time of the prefill and decode steps, each up to its sampled tokens on the host (so
  // device time included); the rest of `seconds` is the host's scheduling and bookkeeping.
  double prefill_seconds = 0, decode_seconds = 0;
  double seconds = 0;
};

// Whether update_weights may keep a given tensor instead of copying it.
enum class WeightSharing {
  kShare,  // a tensor on the engine's device in its dtype is shared (the trainer's own weights)
  kCopy,   // always copied into the engine's buffers (the given tensors are transient, e.g. a
           // gathered unit of sharded weights)
};

// What update_weights() did.
struct WeightUpdateReport {
  int64_t num_shared = 0;  // parameters now sharing the given tensor's storage (no copy)
  int64_t num_copied = 0;  // parameters copied/cast into the engine's own buffers
  double seconds = 0;
};

class RolloutEngine {
 public:
  // Takes the model (its dtype and device are the engine's; a copy shares its tensors, see the
  // top of this file), allocates the KV pool and tracks the model's weights version.
  RolloutEngine(model::DecoderLM model, EngineOptions options = {});
  ~RolloutEngine();
  RolloutEngine(RolloutEngine&&) noexcept;

  // Generates every request (a GenerationSession that submits them all and steps until every
  // sample's turn ended); outputs ordered by (request, sample). Requests that fail their
  // checks become error outputs. `progress(done, total)` is called as samples finish. Stale
  // weights (weights_stale()) are synced or refused first, as options().stale_weights says.
  // With `on_output`, each output is handed over as soon as it is final instead (refused
  // requests first, then samples in the order they finish), the engine keeps none of them, and
  // the returned vector is empty: a caller can stream a long generation to disk.
  std::vector<GenerateOutput> generate(const std::vector<GenerateRequest>& requests,
                                       const std::function<void(int64_t, int64_t)>& progress = {},
                                       const std::function<void(GenerateOutput&&)>& on_output = {});

  // Loads weights from a trainer: (HF name, tensor) pairs, any subset. A tensor already on the
  // engine's device in its dtype is shared (no copy; later in-place trainer updates show
  // through), unless the engine fused it (EngineOptions::fuse_projections); otherwise it is
  // cast into the engine's buffer. Unknown names and shape
  // mismatches are Errors naming the tensor. The engine counts as current afterwards: the
  // caller vouches for the weights (the tracked model stays the same). Refused while a
  // GenerationSession is open, as are release_weights() and sleep().
  WeightUpdateReport update_weights(const std::vector<std::pair<std::string, at::Tensor>>& named,
                                    WeightSharing sharing = WeightSharing::kShare);
  // Loads every parameter of `source` (as above) and tracks its weights version from now on:
  // the call a trainer makes after its optimizer steps (its compute model, or its fp32 masters
  // for an engine of another dtype).
  WeightUpdateReport update_weights(const model::DecoderLM& source);
  // Whether the tracked model's weights changed since the engine took them.
  bool weights_stale() const;
  // Frees the memory of the weights the engine owns (not those it shares with a trainer), for a
  // trainer that needs the device while the engine is idle; returns the seconds it took. The
  // storage comes back as update_weights writes each parameter again; generate() refuses while
  // any is missing.
  double release_weights();
  // Whether some owned weight is released and not written again yet.
  bool weights_released() const { return !released_params_.empty(); }
  // The tracked model's weights version when the engine last took its weights.
  int64_t synced_weights_version() const { return synced_version_; }
  // Frees the KV pool (the weights stay); returns the seconds it took. generate() then fails.
  double sleep();
  // Re-creates the KV pool; returns the seconds it took.
  double wake();
  bool is_sleeping() const { return cache_ == nullptr; }
  // "" when decode steps run as device graphs, otherwise why they do not.
  const std::string& device_graphs_off_reason() const { return graphs_off_reason_; }

  const model::DecoderLM& model() const { return model_; }
  int64_t num_blocks() const { return num_blocks_; }
  int64_t block_size() const { return options_.block_size; }
  // Bytes of K + V storage in the pool (all layers).
  int64_t pool_bytes() const;
  const GenerateStats& last_stats() const { return stats_; }
  // The request's problem as a sentence, or "" when generate() would accept it.
  std::string check_request(const GenerateRequest& request) const;

 private:
  friend class GenerationSession;
  // The decode graphs' counters, summed over every DecodeGraphs the engine has had.
  struct GraphCounters {
    int64_t captures = 0, overlapped = 0, discarded = 0, early_launch_edges = 0;
    double capture_seconds = 0;
  };

  int64_t bytes_per_block() const;
  // Before a generation: refuses a sleeping engine, released weights or an open session, and
  // syncs or refuses stale weights; `call` names the caller in the Errors.
  void prepare_to_generate(const char* call);
  // Refuses `call` while a GenerationSession is open.
  void check_no_session(const char* call) const;
  // Decode graphs whose block tables hold `num_blocks` blocks (rebuilt wider when they are
  // narrower: a power of two from 16, so that later calls of similar lengths reuse them).
  void ensure_graph_width(int64_t num_blocks);
  // Drops the decode graphs (their counters kept in graph_totals_).
  void drop_graphs();
  GraphCounters graph_counters() const;
  // `next_is_decode`: nothing but a decode step can follow (no request waits for a prefill).
  // Returns whether the step ran as a device graph.
  bool run_step(const ScheduledStep& step, std::vector<int64_t>& token_ids, std::vector<float>& logprobs,
                bool next_is_decode);

  model::DecoderLM model_;
  EngineOptions options_;
  int64_t num_blocks_ = 0;
  std::unique_ptr<model::PagedKvCache> cache_;
  GenerateStats stats_;
  std::vector<std::string> shared_params_;  // names whose storage is a trainer's
  std::set<std::string> released_params_;   // release_weights: names not written since
  // The tracked model's version counter and its value when the weights were taken; with
  // StaleWeights::kSync also that model's parameters (handles), to sync from.
  std::shared_ptr<const std::atomic<int64_t>> source_version_;
  int64_t synced_version_ = 0;
  std::vector<std::pair<std::string, at::Tensor>> source_params_;
  // Decode graphs (null until a generate() needs them; dropped when the weights' or the pool's
  // storage moves). With graphs on, the pool has one block more than num_blocks_: the scratch
  // block that padding rows of a graph's batch write to.
  std::unique_ptr<detail::DecodeGraphs> graphs_;
  GraphCounters graph_totals_;  // of the graphs dropped so far
  std::string graphs_off_reason_;
  bool session_open_ = false;  // a GenerationSession holds the pool
  // The plugin's kernels for the MLP's product in every step (null without them), made once.
  std::shared_ptr<const model::LayerKernels> layer_kernels_;
  // A step's int64 inputs staged in one host buffer (pinned on an accelerator) and moved with
  // one asynchronous copy; reused, since each step reads its sampled tokens back before the next.
  at::Tensor staging_;
};

}  // namespace verlpp::rollout
