// DecodeGraphs: the engine's decode steps replayed as device graphs. A decode step of a 24-layer
// model is ~600 small LibTorch ops and plugin kernels; launched one by one the host, not the
// device, sets the pace (the H200 profile showed the device ~7% busy). Here a whole step
// (embedding, layers with the plugin's rotary and paged-attention kernels, LM head, the
// plugin's sampler) is captured once per batch-size bucket and then replayed with one launch.
//
// A graph reads fixed addresses, so each bucket owns static inputs (one device byte buffer:
// ids, positions, KV slots, context lengths, top-k, seeds, block tables, temperatures, top-p)
// filled from pinned host memory with one copy per step. A step of b sequences runs in the
// smallest bucket B >= b; rows b..B-1 are padding that writes to and reads from a scratch KV
// block no sequence owns. Block tables are `table_width` blocks wide for every bucket.
//
// Whatever a captured graph baked in must stay put: the weights' and the KV pool's storage.
// The engine drops its DecodeGraphs when either moves (update_weights re-pointing a parameter,
// sleep/wake re-creating the pool).
//
// Overlap: after queuing a step, run() may queue the next one too, before the host has the
// tokens (predict_next: the sequences that continue, each feeding the token this step samples,
// which a device copy moves into the next step's inputs). The host then reads this step's
// tokens and schedules while the device already computes the next step, so the device does not
// wait for the host's bookkeeping between steps. When the scheduler's next step is the queued
// one less sequences that sampled a stop token (queued_rows), the queued outputs of its rows are
// read; otherwise the queued step is discarded and the real one runs after it. A queued step
// writes K/V only at the next position of its own sequences, in blocks they hold (taken ahead by
// the scheduler's reserve_ahead) or have just freed, before any later step in stream order: a
// stopped or discarded row changes nothing another sequence reads.
#pragma once

#include "../hw/device_graph.hpp"

#include <verlpp/model/decoder.hpp>
#include <verlpp/model/kv_cache.hpp>
#include <verlpp/rollout/sampling.hpp>
#include <verlpp/rollout/scheduler.hpp>

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace verlpp::hw {
class Kernels;
}

namespace verlpp::rollout::detail {

// A decode step known before the step ahead of it has sampled: its sequences in order, with the
// position each feeds, the KV block that position lies in, each sequence's sampling step, and
// the row of the step ahead whose sampled token it feeds.
struct NextDecode {
  std::vector<const Sequence*> seqs;
  std::vector<int64_t> positions, blocks, sample_steps, source_rows;
};

// The decode step after decode step `step` if no sequence of it samples a stop token: the
// sequences whose token of this step is not their last, in order. nullopt when there are none,
// when `step` is not one token per sequence sampled in its own row, or when a sequence's next
// position has no block yet (the scheduler would have to find one, maybe by preempting).
std::optional<NextDecode> predict_next(const ScheduledStep& step, int64_t block_size);
// For each row of the scheduler's `step` (the tokens of the step before recorded), the row of
// `next` that computed it, when `step` is `next` less some of its sequences (those that stopped)
// in the same order with nothing else changed; nullopt otherwise.
std::optional<std::vector<int64_t>> queued_rows(const NextDecode& next, const ScheduledStep& step, int64_t block_size);

class DecodeGraphs {
 public:
  // "" when decode steps of `model` can run as graphs with `kernels`; otherwise why not (no
  // CUDA LibTorch, a CPU model, a plugin without the sample / paged-attention kernels, ...).
  static std::string unavailable_reason(const model::DecoderLM& model, const hw::Kernels* kernels);
  // The batch-size buckets up to `max_batch`: 1, 2, 4, ..., 32, then multiples of 32, then max_batch.
  static std::vector<int64_t> buckets(int64_t max_batch);

  // Graphs on `device` for batches up to `max_batch` and block tables `table_width` wide.
  // `scratch_block`: a block of the pool that no sequence owns (padding rows use it).
  // `rotary_attention`: the engine's option of that name (RolloutAttention).
  DecodeGraphs(const c10::Device& device, int64_t scratch_block, const hw::Kernels& kernels, int64_t max_batch,
               int64_t table_width, bool rotary_attention = true);

  ~DecodeGraphs();

  // Runs decode `step` through the graph of its bucket, capturing that graph first when new;
  // token_ids / logprobs get one entry per sampler of the step. Returns false, having done
  // nothing, when the step does not fit (more sequences than the largest bucket, a block table
  // wider than table_width, samplers not one per sequence); the caller runs it eagerly then.
  // `queue_next`: also queue predict_next(step) when there is one (the caller knows nothing
  // else, such as a waiting prefill, will come first). Throws Error when a capture fails.
  // The model and the pool must be the ones of every earlier call (their storage is baked in).
  bool run(const model::DecoderLM& model, model::PagedKvCache& cache, const ScheduledStep& step,
           std::vector<int64_t>& token_ids, std::vector<float>& logprobs, bool queue_next = false);
  // Waits for a step queued ahead (and one discarded) and drops it (the end of a generation:
  // its sequences go away; the destructor too: a replay must not outlive its graph).
  void settle();

  int64_t table_width() const { return table_width_; }
  int64_t num_captures() const { return num_captures_; }
  int64_t num_overlapped() const { return num_overlapped_; }  // steps that had been queued ahead
  int64_t num_discarded() const { return num_discarded_; }    // queued steps the scheduler did not choose
  double capture_seconds() const { return capture_seconds_; }
  // hw::DeviceGraphs::early_launch_edges of the graphs captured so far.
  int64_t early_launch_edges() const { return graphs_.early_launch_edges(); }

 private:
  struct Bucket {
    int64_t size = 0;
    at::Tensor inputs;            // device bytes: the static inputs (DecodeInputLayout)
    DeviceSamples samples;        // the graph's outputs [size], rewritten by every replay
    std::vector<int64_t> tables;  // the block tables last copied into `inputs` (in stream order)
  };
  // Pinned host bytes a launch's inputs are written to, and the mark after their copy.
  struct Staging {
    at::Tensor bytes;
    hw::DeviceEvent copied;
  };
  // A replay whose outputs the host has not read yet.
  struct Launch {
    int64_t bucket = 0;    // its bucket's size (whose samples hold its outputs until the next replay there)
    int output = 0;        // which of outputs_ its samples are copied to
    hw::DeviceEvent done;  // after that copy
  };
  Bucket& bucket_for(int64_t batch);
  void capture(const model::DecoderLM& model, model::PagedKvCache& cache, Bucket& bucket);
  // Queues the step of `rows` (row i feeds positions[i] in blocks[i], sampling step
  // sample_steps[i]) through its bucket's graph. With `tokens_from`, row i's id is the token
  // that launch sampled in row source_rows[i] (still on the device); else the sequence's own.
  Launch launch(const model::DecoderLM& model, model::PagedKvCache& cache, const NextDecode& rows,
                const Launch* tokens_from);

  c10::Device device_;
  int64_t scratch_block_;
  const hw::Kernels& kernels_;
  int64_t table_width_;
  bool rotary_attention_;
  hw::DeviceGraphs graphs_;
  std::map<int64_t, Bucket> buckets_;  // by size
  Staging staging_[2];                 // alternate launches write alternate buffers
  int next_staging_ = 0;
  at::Tensor outputs_[2];  // pinned host copies of the samples, alternate launches
  int next_output_ = 0;
  std::optional<Launch> queued_;  // the step queued ahead of the host, and what it is
  std::optional<NextDecode> queued_step_;
  std::optional<Launch> discarded_;  // the last queued step not read (its graph may still run)
  int64_t num_captures_ = 0, num_overlapped_ = 0, num_discarded_ = 0;
  double capture_seconds_ = 0;
};

}  // namespace verlpp::rollout::detail
