// DecodeGraphs: buckets, the static-input layout, capture and replay of a decode step.
#include "decode_graphs.hpp"

#include "attention.hpp"
#include "decode_inputs.hpp"
#include "../ops/layer_kernels.hpp"

#include <verlpp/core/error.hpp>
#include <verlpp/hw/kernels.hpp>
#include <verlpp/rollout/sampling.hpp>

#include <ATen/ops/empty.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <utility>

namespace verlpp::rollout::detail {

std::optional<NextDecode> predict_next(const ScheduledStep& step, int64_t block_size) {
  if (step.is_prefill || step.compute.empty() || step.samplers.size() != step.compute.size()) return std::nullopt;
  NextDecode next;
  for (size_t i = 0; i < step.compute.size(); ++i) {
    const Sequence* s = step.compute[i];
    if (step.samplers[i].first != s || step.samplers[i].second != int64_t(i)) return std::nullopt;
    if (s->num_tokens() - s->num_cached_tokens != 1) return std::nullopt;
    if (s->next_token_is_last()) continue;  // nothing to feed after this step's token
    const int64_t p = s->num_tokens();      // where the token this step samples sits, fed next step
    if (p / block_size >= int64_t(s->block_table.size())) return std::nullopt;  // no block there yet
    next.seqs.push_back(s);
    next.positions.push_back(p);
    next.blocks.push_back(s->block_table[size_t(p / block_size)]);
    next.sample_steps.push_back(s->sampling.step + 1);
    next.source_rows.push_back(int64_t(i));
  }
  if (next.seqs.empty()) return std::nullopt;
  return next;
}

std::optional<std::vector<int64_t>> queued_rows(const NextDecode& next, const ScheduledStep& step, int64_t block_size) {
  if (step.is_prefill || !step.copies.empty() || step.compute.empty() || step.compute.size() > next.seqs.size() ||
      step.samplers.size() != step.compute.size())
    return std::nullopt;
  std::vector<int64_t> rows;
  size_t q = 0;  // the queued row tried next: the scheduler keeps its sequences in order
  for (size_t i = 0; i < step.compute.size(); ++i) {
    const Sequence* s = step.compute[i];
    if (step.samplers[i].first != s || step.samplers[i].second != int64_t(i)) return std::nullopt;
    while (q < next.seqs.size() && next.seqs[q] != s) ++q;
    if (q == next.seqs.size()) return std::nullopt;  // not queued, or out of order
    const int64_t p = next.positions[q];
    if (s->num_tokens() != p + 1 || s->num_cached_tokens != p || s->sampling.step != next.sample_steps[q])
      return std::nullopt;
    if (p / block_size >= int64_t(s->block_table.size()) || s->block_table[size_t(p / block_size)] != next.blocks[q])
      return std::nullopt;
    rows.push_back(int64_t(q++));
  }
  return rows;
}

std::string DecodeGraphs::unavailable_reason(const model::DecoderLM& model, const hw::Kernels* kernels) {
  const c10::Device device = model.options().device;
  // The plugin communicators wait for each collective on the host, which a capture cannot hold.
  if (model.tensor_parallel() != nullptr)
    return "tensor parallelism: the group's collectives run between the kernels, on the host";
  std::string why = hw::DeviceGraphs::unavailable_reason(device);
  if (!why.empty()) return why;
  if (kernels == nullptr)
    return "no plugin kernels (a decode graph runs the plugin's paged_attention_decode and sample)";
  if (!kernels->offers(hw::KernelId::paged_attention_decode) || !kernels->offers(hw::KernelId::sample))
    return "plugin " + kernels->plugin().display_name() + " lacks paged_attention_decode or sample";
  if (!kernels->wraps_native_streams())
    return "plugin " + kernels->plugin().display_name() +
           "'s kernels do not run on LibTorch's stream (plugin ABI minor < 1 without stream_from_native, or "
           "hw::KernelsOptions::native_streams off), and kernels on the NULL stream cannot be captured";
  const at::ScalarType dtype = model.options().dtype;
  if (dtype != at::kFloat && dtype != at::kBFloat16 && dtype != at::kHalf)
    return std::string("the model's dtype ") + c10::toString(dtype) + " has no plugin attention kernel";
  return "";
}

std::vector<int64_t> DecodeGraphs::buckets(int64_t max_batch) {
  // Small batches in powers of two (the tail of a generation, as sequences finish), larger ones
  // in steps of 32: at most 31 padding rows, which cost the device little next to a launch.
  std::vector<int64_t> sizes;
  for (int64_t b = 1; b < max_batch; b = b < 32 ? b * 2 : b + 32) sizes.push_back(b);
  sizes.push_back(max_batch);
  return sizes;
}

DecodeGraphs::DecodeGraphs(const c10::Device& device, int64_t scratch_block, const hw::Kernels& kernels,
                           int64_t max_batch, int64_t table_width, bool rotary_attention)
    : device_(device),
      scratch_block_(scratch_block),
      kernels_(kernels),
      table_width_(table_width),
      rotary_attention_(rotary_attention),
      graphs_(device) {
  VERLPP_CHECK(max_batch > 0 && table_width > 0, "DecodeGraphs: max_batch {} and table_width {} must be positive",
               max_batch, table_width);
  for (int64_t size : buckets(max_batch)) buckets_[size].size = size;
  const auto pinned = at::TensorOptions().dtype(at::kByte).pinned_memory(true);
  const int64_t staging_bytes = DecodeInputLayout(max_batch, table_width).total_bytes();
  for (Staging& s : staging_) s.bytes = at::empty({staging_bytes}, pinned);
  for (at::Tensor& o : outputs_)
    o = at::empty({max_batch + (max_batch + 1) / 2}, at::TensorOptions().dtype(at::kLong).pinned_memory(true));
}

DecodeGraphs::~DecodeGraphs() {
  try {
    settle();  // a queued replay must not outlive its graph and buffers
  } catch (...) {
  }
}

DecodeGraphs::Bucket& DecodeGraphs::bucket_for(int64_t batch) { return buckets_.lower_bound(batch)->second; }

void DecodeGraphs::settle() {
  if (queued_) queued_->done.synchronize();
  if (discarded_) discarded_->done.synchronize();
  queued_.reset();
  queued_step_.reset();
  discarded_.reset();
}

bool DecodeGraphs::run(const model::DecoderLM& model, model::PagedKvCache& cache, const ScheduledStep& step,
                       std::vector<int64_t>& token_ids, std::vector<float>& logprobs, bool queue_next) {
  VERLPP_CHECK(scratch_block_ < cache.num_blocks(), "DecodeGraphs: scratch block {} is outside the pool of {} blocks",
               scratch_block_, cache.num_blocks());
  const int64_t bs = cache.block_size();
  // The step queued ahead by the previous call holds this one's rows, or is never read.
  std::optional<Launch> current;
  std::vector<int64_t> rows_of;  // for each row of `step`, its row in `current`
  if (queued_) {
    if (std::optional<std::vector<int64_t>> rows = queued_rows(*queued_step_, step, bs)) {
      current = std::move(queued_);
      rows_of = std::move(*rows);
      ++num_overlapped_;
    } else {
      ++num_discarded_;
      discarded_ = std::move(queued_);  // still in flight: settle() and the destructor wait for it
    }
    queued_.reset();
    queued_step_.reset();
  }
  if (!current) {
    const int64_t b = int64_t(step.compute.size());
    if (step.is_prefill || b == 0 || b > buckets_.rbegin()->first || int64_t(step.samplers.size()) != b) return false;
    NextDecode rows;
    for (int64_t i = 0; i < b; ++i) {
      const Sequence* s = step.compute[size_t(i)];
      if (step.samplers[size_t(i)].first != s || step.samplers[size_t(i)].second != i) return false;
      if (s->num_tokens() - s->num_cached_tokens != 1 || int64_t(s->block_table.size()) > table_width_) return false;
      const int64_t p = s->num_tokens() - 1;
      rows.seqs.push_back(s);
      rows.positions.push_back(p);
      rows.blocks.push_back(s->block_table[size_t(p / bs)]);
      rows.sample_steps.push_back(s->sampling.step);
      rows.source_rows.push_back(i);
    }
    current = launch(model, cache, rows, /*tokens_from=*/nullptr);
    rows_of = rows.source_rows;  // 0 .. b-1
  }
  if (queue_next) {
    std::optional<NextDecode> next = predict_next(step, bs);
    bool fits = next.has_value();
    for (size_t i = 0; fits && i < next->seqs.size(); ++i)
      fits = int64_t(next->seqs[i]->block_table.size()) <= table_width_;
    if (fits) {
      // predict_next numbers rows of `step`; the tokens sit in `current`'s rows.
      for (int64_t& r : next->source_rows) r = rows_of[size_t(r)];
      queued_ = launch(model, cache, *next, &*current);
      queued_step_ = std::move(next);
    }
  }
  current->done.synchronize();  // this step's samples are on the host; the next step may be running
  const int64_t* tokens = outputs_[current->output].data_ptr<int64_t>();
  const float* lps = reinterpret_cast<const float*>(tokens + current->bucket);
  token_ids.resize(rows_of.size());
  logprobs.resize(rows_of.size());
  for (size_t i = 0; i < rows_of.size(); ++i) token_ids[i] = tokens[rows_of[i]], logprobs[i] = lps[rows_of[i]];
  return true;
}

DecodeGraphs::Launch DecodeGraphs::launch(const model::DecoderLM& model, model::PagedKvCache& cache,
                                          const NextDecode& rows, const Launch* tokens_from) {
  const int64_t b = int64_t(rows.seqs.size());
  Bucket& bucket = bucket_for(b);
  const int64_t B = bucket.size, W = table_width_, bs = cache.block_size();
  const DecodeInputLayout layout(B, W);
  Staging& staging = staging_[next_staging_];
  next_staging_ ^= 1;
  staging.copied.synchronize();  // the copy that last read these bytes is done
  void* bytes = staging.bytes.data_ptr();
  using In = DecodeInput;
  int64_t* ids = layout.host<int64_t>(bytes, In::ids);
  int64_t* positions = layout.host<int64_t>(bytes, In::positions);
  int64_t* slots = layout.host<int64_t>(bytes, In::slots);
  int64_t* context_lens = layout.host<int64_t>(bytes, In::context_lens);
  int64_t* top_k = layout.host<int64_t>(bytes, In::top_k);
  int64_t* seeds = layout.host<int64_t>(bytes, In::seeds);
  int64_t* source_rows = layout.host<int64_t>(bytes, In::source_rows);
  float* temperature = layout.host<float>(bytes, In::temperature);
  float* top_p = layout.host<float>(bytes, In::top_p);
  int64_t* tables = layout.host<int64_t>(bytes, In::block_tables);
  bool identity = true;  // the ids come from rows 0 .. b-1 of tokens_from
  for (int64_t i = 0; i < B; ++i) {
    int64_t* row = tables + i * W;
    if (i >= b) {  // padding: token 0 at position 0 in the scratch block, greedy
      ids[i] = 0, positions[i] = 0, slots[i] = scratch_block_ * bs, context_lens[i] = 1;
      top_k[i] = 0, seeds[i] = 0, source_rows[i] = 0, temperature[i] = 0.0f, top_p[i] = 1.0f;
      std::fill(row, row + W, scratch_block_);
      continue;
    }
    const Sequence* s = rows.seqs[size_t(i)];
    const int64_t p = rows.positions[size_t(i)];
    ids[i] = tokens_from ? 0 : s->token_ids[size_t(p)];  // with tokens_from: written on the device
    positions[i] = p;
    slots[i] = rows.blocks[size_t(i)] * bs + p % bs;
    context_lens[i] = p + 1;
    top_k[i] = s->sampling.top_k > 0 ? s->sampling.top_k : 0;
    seeds[i] = int64_t(sample_seed(s->sampling.seed, rows.sample_steps[size_t(i)]));
    source_rows[i] = rows.source_rows[size_t(i)];
    identity = identity && rows.source_rows[size_t(i)] == i;
    temperature[i] = float(s->sampling.temperature);
    top_p[i] = float(s->sampling.top_p);
    std::copy(s->block_table.begin(), s->block_table.end(), row);
    std::fill(row + s->block_table.size(), row + W, scratch_block_);
  }
  if (!bucket.inputs.defined())
    bucket.inputs = at::empty({layout.total_bytes()}, at::TensorOptions().dtype(at::kByte).device(device_));
  const int64_t head = layout.head_bytes(), table_bytes = layout.bytes(In::block_tables);
  bucket.inputs.narrow(0, 0, head).copy_(staging.bytes.narrow(0, 0, head), /*non_blocking=*/true);
  // Block tables change only when a sequence gets a block or the batch changes: most steps
  // copy the head alone (72 bytes a row; the tables are 8 W bytes a row, 512 at W = 64).
  if (bucket.tables.size() != size_t(B * W) || !std::equal(tables, tables + B * W, bucket.tables.begin())) {
    bucket.inputs.narrow(0, head, table_bytes).copy_(staging.bytes.narrow(0, head, table_bytes), /*non_blocking=*/true);
    bucket.tables.assign(tables, tables + B * W);
  }
  staging.copied.record(device_);
  if (tokens_from != nullptr) {
    // The ids of this step are the tokens the launch before sampled, still on the device.
    const at::Tensor sampled = buckets_.at(tokens_from->bucket).samples.tokens;
    at::Tensor fed = layout.view_rows(bucket.inputs, In::ids, b);
    if (identity) {
      fed.copy_(sampled.narrow(0, 0, b));
    } else {
      fed.copy_(sampled.index_select(0, layout.view_rows(bucket.inputs, In::source_rows, b)));
    }
  }
  if (!graphs_.contains(B)) capture(model, cache, bucket);
  graphs_.replay(B);
  Launch launched;
  launched.bucket = B;
  launched.output = next_output_;
  next_output_ ^= 1;
  outputs_[launched.output]
      .narrow(0, 0, bucket.samples.packed.numel())
      .copy_(bucket.samples.packed, /*non_blocking=*/true);
  launched.done.record(device_);
  return launched;
}

void DecodeGraphs::capture(const model::DecoderLM& model, model::PagedKvCache& cache, Bucket& bucket) {
  const auto start = std::chrono::steady_clock::now();
  const int64_t B = bucket.size, W = table_width_;
  auto body = [&]() {
    // The warm-up runs this for real on the step's inputs: its KV writes are the same the
    // replay then makes, so running it twice changes nothing.
    const DecodeInputLayout layout(B, W);
    using In = DecodeInput;
    auto in = [&](In f) { return layout.view(bucket.inputs, f); };
    const at::Tensor ids = in(In::ids), positions = in(In::positions);
    model::PagedStep paged{in(In::slots), at::Tensor(), in(In::context_lens), in(In::block_tables)};
    DeviceSampling rows{in(In::temperature), in(In::top_k).to(at::kInt), in(In::top_p), in(In::seeds)};
    RolloutAttention attention(cache, std::move(paged), /*is_decode=*/true, &kernels_, rotary_attention_);
    VERLPP_CHECK(attention.uses_kernel(), "DecodeGraphs: the decode step would not use the plugin's attention kernel");
    const at::Tensor hidden = model.forward_cached(
        ids, positions, attention, ops::layer_kernels_for(&kernels_, ops::LayerKernelsOptions{/*fuse_adds=*/true}));
    bucket.samples = sample_on_device(model.logits(hidden), rows, kernels_);
  };
  graphs_.capture(B, body);
  ++num_captures_;
  capture_seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace verlpp::rollout::detail
