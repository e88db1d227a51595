// DecodeGraphs: buckets, the static-input layout, capture and replay of a decode step.
#include "decode_graphs.hpp"

#include "attention.hpp"
#include "../train/layer_kernels.hpp"

#include <verlpp/core/error.hpp>
#include <verlpp/hw/kernels.hpp>
#include <verlpp/rollout/sampling.hpp>

#include <ATen/ops/empty.h>

#include <algorithm>
#include <chrono>
#include <cstring>

namespace verlpp::rollout::detail {
namespace {

// A bucket's static inputs, in one byte buffer: int64 [ids | positions | slots | context lens |
// top-k | seeds] (B each), int64 block tables [B, W], then float [temperatures | top-p] (B each).
constexpr int64_t kInt64Rows = 6;
constexpr int64_t kFloatRows = 2;

}  // namespace

std::string DecodeGraphs::unavailable_reason(const model::DecoderLM& model, const hw::Kernels* kernels) {
  const c10::Device device = model.options().device;
  std::string why = hw::DeviceGraphs::unavailable_reason(device);
  if (!why.empty()) return why;
  if (kernels == nullptr) return "no plugin kernels (a decode graph runs the plugin's paged_attention_decode and sample)";
  if (kernels->table().paged_attention_decode == nullptr || kernels->table().sample == nullptr)
    return "plugin " + kernels->plugin().display_name() + " lacks paged_attention_decode or sample";
  if (!kernels->wraps_native_streams())
    return "plugin " + kernels->plugin().display_name() +
           "'s kernels do not run on LibTorch's stream (plugin ABI minor < 1 without stream_from_native, or "
           "VERLPP_KERNEL_STREAMS=0), and kernels on the NULL stream cannot be captured";
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
                           int64_t max_batch, int64_t table_width)
    : device_(device), scratch_block_(scratch_block), kernels_(kernels), table_width_(table_width), graphs_(device) {
  VERLPP_CHECK(max_batch > 0 && table_width > 0, "DecodeGraphs: max_batch {} and table_width {} must be positive",
               max_batch, table_width);
  for (int64_t size : buckets(max_batch)) buckets_[size].size = size;
  staging_ = at::empty({input_bytes(max_batch)}, at::TensorOptions().dtype(at::kByte).pinned_memory(true));
}

int64_t DecodeGraphs::input_bytes(int64_t size) const {
  return size * (kInt64Rows + table_width_) * int64_t(sizeof(int64_t)) + size * kFloatRows * int64_t(sizeof(float));
}

DecodeGraphs::Bucket& DecodeGraphs::bucket_for(int64_t batch) { return buckets_.lower_bound(batch)->second; }

bool DecodeGraphs::run(const model::DecoderLM& model, model::PagedKvCache& cache, const ScheduledStep& step,
                       std::vector<int64_t>& token_ids, std::vector<float>& logprobs) {
  VERLPP_CHECK(scratch_block_ < cache.num_blocks(), "DecodeGraphs: scratch block {} is outside the pool of {} blocks",
               scratch_block_, cache.num_blocks());
  const int64_t b = int64_t(step.compute.size());
  if (step.is_prefill || b == 0 || b > buckets_.rbegin()->first || int64_t(step.samplers.size()) != b) return false;
  const int64_t bs = cache.block_size();
  for (int64_t i = 0; i < b; ++i) {
    const Sequence* s = step.compute[size_t(i)];
    if (step.samplers[size_t(i)].first != s || step.samplers[size_t(i)].second != i) return false;
    if (s->num_tokens() - s->num_cached_tokens != 1 || int64_t(s->block_table.size()) > table_width_) return false;
  }
  Bucket& bucket = bucket_for(b);
  const int64_t B = bucket.size, W = table_width_;
  auto* bytes = static_cast<uint8_t*>(staging_.data_ptr());
  auto* i64 = reinterpret_cast<int64_t*>(bytes);
  auto* f32 = reinterpret_cast<float*>(bytes + B * (kInt64Rows + W) * int64_t(sizeof(int64_t)));
  int64_t* tables = i64 + kInt64Rows * B;
  for (int64_t i = 0; i < B; ++i) {
    int64_t* row = tables + i * W;
    if (i >= b) {  // padding: token 0 at position 0 in the scratch block, greedy
      i64[i] = 0, i64[B + i] = 0, i64[2 * B + i] = scratch_block_ * bs, i64[3 * B + i] = 1;
      i64[4 * B + i] = 0, i64[5 * B + i] = 0, f32[i] = 0.0f, f32[B + i] = 1.0f;  // temperature 0: greedy
      std::fill(row, row + W, scratch_block_);
      continue;
    }
    const Sequence* s = step.compute[size_t(i)];
    const int64_t p = s->num_tokens() - 1;
    i64[i] = s->token_ids[size_t(p)];
    i64[B + i] = p;
    i64[2 * B + i] = s->block_table[size_t(p / bs)] * bs + p % bs;
    i64[3 * B + i] = s->num_tokens();
    i64[4 * B + i] = s->sampling.top_k > 0 ? s->sampling.top_k : 0;
    i64[5 * B + i] = int64_t(sample_seed(s->sampling.seed, s->sampling.step));
    f32[i] = float(s->sampling.temperature);
    f32[B + i] = float(s->sampling.top_p);
    std::copy(s->block_table.begin(), s->block_table.end(), row);
    std::fill(row + s->block_table.size(), row + W, scratch_block_);
  }
  if (!bucket.inputs.defined())
    bucket.inputs = at::empty({input_bytes(B)}, at::TensorOptions().dtype(at::kByte).device(device_));
  // The staging buffer is rewritten only after this step's outputs were read back below, by
  // which time this asynchronous copy has long finished.
  bucket.inputs.copy_(staging_.narrow(0, 0, input_bytes(B)), /*non_blocking=*/true);
  if (!graphs_.contains(B)) capture(model, cache, bucket);
  graphs_.replay(B);
  const SampleResult out = read_samples(bucket.samples, b);  // also the step's one wait
  token_ids.assign(out.token_ids.data_ptr<int64_t>(), out.token_ids.data_ptr<int64_t>() + b);
  logprobs.assign(out.logprobs.data_ptr<float>(), out.logprobs.data_ptr<float>() + b);
  return true;
}

void DecodeGraphs::capture(const model::DecoderLM& model, model::PagedKvCache& cache, Bucket& bucket) {
  const auto start = std::chrono::steady_clock::now();
  const int64_t B = bucket.size, W = table_width_;
  auto body = [&]() {
    // The warm-up runs this for real on the step's inputs: its KV writes are the same the
    // replay then makes, so running it twice changes nothing.
    const int64_t n64 = B * (kInt64Rows + W);
    at::Tensor i64 = bucket.inputs.narrow(0, 0, n64 * int64_t(sizeof(int64_t))).view(at::kLong);
    at::Tensor f32 = bucket.inputs.narrow(0, n64 * int64_t(sizeof(int64_t)), B * kFloatRows * int64_t(sizeof(float)))
                         .view(at::kFloat);
    const at::Tensor ids = i64.narrow(0, 0, B), positions = i64.narrow(0, B, B);
    model::PagedStep paged{i64.narrow(0, 2 * B, B), at::Tensor(), i64.narrow(0, 3 * B, B),
                           i64.narrow(0, kInt64Rows * B, B * W).view({B, W})};
    DeviceSampling rows{f32.narrow(0, 0, B), i64.narrow(0, 4 * B, B).to(at::kInt), f32.narrow(0, B, B),
                        i64.narrow(0, 5 * B, B)};
    RolloutAttention attention(cache, std::move(paged), /*is_decode=*/true, &kernels_);
    VERLPP_CHECK(attention.uses_kernel(), "DecodeGraphs: the decode step would not use the plugin's attention kernel");
    const at::Tensor hidden = model.forward_cached(ids, positions, attention, train::detail::layer_kernels_for(&kernels_, /*fuse_adds=*/true));
    bucket.samples = sample_on_device(model.logits(hidden), rows, kernels_);
  };
  graphs_.capture(B, body);
  ++num_captures_;
  capture_seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace verlpp::rollout::detail
