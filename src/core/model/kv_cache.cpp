// PagedKvCache and the reference PagedAttention backend. Slot lists per sequence are computed
// once per step (in the constructor) and reused by every layer; the host reads cu_seqlens_q
// and context_lens once per step, which is the only synchronisation.
#include <verlpp/model/kv_cache.hpp>

#include <verlpp/model/layers.hpp>

#include <verlpp/core/error.hpp>

#include "shape_string.hpp"

#include <ATen/TensorOperators.h>

#include <ATen/ops/arange.h>
#include <ATen/ops/cat.h>
#include <ATen/ops/from_blob.h>
#include <ATen/ops/tensor.h>
#include <ATen/ops/zeros.h>

namespace verlpp::model {
namespace {

std::vector<int64_t> host_values(const at::Tensor& t) {
  at::Tensor h = t.to(at::kCPU).to(at::kLong).contiguous();
  return std::vector<int64_t>(h.data_ptr<int64_t>(), h.data_ptr<int64_t>() + h.numel());
}

}  // namespace

PagedKvCache::PagedKvCache(const ModelConfig& config, int64_t num_blocks, int64_t block_size, at::ScalarType dtype,
                           c10::Device device)
    : num_blocks_(num_blocks), block_size_(block_size) {
  VERLPP_CHECK(num_blocks > 0 && block_size > 0, "PagedKvCache: num_blocks {} and block_size {} must be positive",
               num_blocks, block_size);
  auto opts = at::TensorOptions().dtype(dtype).device(device);
  for (int64_t l = 0; l < config.num_hidden_layers; ++l) {
    k_.push_back(at::zeros({num_blocks, block_size, config.num_key_value_heads, config.head_dim}, opts));
    v_.push_back(at::zeros({num_blocks, block_size, config.num_key_value_heads, config.head_dim}, opts));
  }
}

PagedAttention::PagedAttention(PagedKvCache& cache, PagedStep step, AttentionOptions options)
    : cache_(cache), step_(std::move(step)), options_(options) {
  cu_q_ = host_values(step_.cu_seqlens_q);
  context_lens_ = host_values(step_.context_lens);
  const int64_t S = int64_t(context_lens_.size());
  VERLPP_CHECK(int64_t(cu_q_.size()) == S + 1 && cu_q_.front() == 0,
               "PagedAttention: cu_seqlens_q has {} entries starting at {}, want S + 1 = {} starting at 0",
               cu_q_.size(), cu_q_.empty() ? -1 : cu_q_.front(), S + 1);
  VERLPP_CHECK(step_.block_tables.dim() == 2 && step_.block_tables.size(0) == S,
               "PagedAttention: block_tables {} is not [S = {}, max_blocks]", shape_string(step_.block_tables.sizes()),
               S);
  VERLPP_CHECK(step_.slot_mapping.dim() == 1 && step_.slot_mapping.size(0) == cu_q_.back(),
               "PagedAttention: slot_mapping {} is not [N = {}]", shape_string(step_.slot_mapping.sizes()),
               cu_q_.back());
  const int64_t bs = cache_.block_size();
  for (int64_t s = 0; s < S; ++s) {
    const int64_t n = cu_q_[size_t(s) + 1] - cu_q_[size_t(s)], len = context_lens_[size_t(s)];
    VERLPP_CHECK(n >= 0 && n <= len, "PagedAttention: sequence {} has {} new tokens but a context of {}", s, n, len);
    VERLPP_CHECK((len + bs - 1) / bs <= step_.block_tables.size(1),
                 "PagedAttention: sequence {} needs {} blocks of {} for {} tokens, block_tables has {} columns", s,
                 (len + bs - 1) / bs, bs, len, step_.block_tables.size(1));
  }
  // Chunks of consecutive cached sequences, each padded gather at most options.cached_chunk_pairs
  // query x key pairs (the masked call's scores), built on the host and copied once for every layer.
  const auto cached = [&](int64_t s) {
    const int64_t n = cu_q_[size_t(s) + 1] - cu_q_[size_t(s)];
    return n > 0 && n < context_lens_[size_t(s)];
  };
  std::vector<int64_t> tables;
  const int64_t width = step_.block_tables.size(1);
  for (int64_t s = 0; s < S; ++s) {
    if (!cached(s)) continue;
    if (tables.empty()) tables = host_values(step_.block_tables);
    int64_t end = s, queries = 0, keys = 0;
    while (end < S && cached(end)) {
      const int64_t q = std::max(queries, cu_q_[size_t(end) + 1] - cu_q_[size_t(end)]);
      const int64_t k = std::max(keys, context_lens_[size_t(end)]);
      if (end > s && (end - s + 1) * q * k > int64_t(options_.cached_chunk_pairs)) break;
      queries = q;
      keys = k;
      ++end;
    }
    CachedChunk chunk;
    chunk.first = s;
    chunk.count = end - s;
    chunk.queries = queries;
    chunk.keys = keys;
    std::vector<int64_t> slots, rows, kept;
    std::vector<uint8_t> allowed(size_t(chunk.count * queries * keys), 0);
    for (int64_t c = 0; c < chunk.count; ++c) {
      const int64_t seq = s + c, start = cu_q_[size_t(seq)], n = cu_q_[size_t(seq) + 1] - start;
      const int64_t len = context_lens_[size_t(seq)];
      const int64_t* table = tables.data() + seq * width;
      for (int64_t p = 0; p < keys; ++p) {
        const int64_t at = p < len ? p : 0;
        slots.push_back(table[at / bs] * bs + at % bs);
      }
      for (int64_t i = 0; i < queries; ++i) {
        rows.push_back(start + (i < n ? i : 0));
        uint8_t* row = allowed.data() + (c * queries + i) * keys;
        if (i >= n) {
          row[0] = 1;  // a padded query sees one real key: no empty softmax
          continue;
        }
        kept.push_back(c * queries + i);
        for (int64_t j = 0; j <= len - n + i; ++j) row[j] = 1;
      }
    }
    const auto device = step_.block_tables.device();
    auto to_device = [&](const std::vector<int64_t>& v) {
      return at::tensor(v, at::TensorOptions().dtype(at::kLong)).to(device);
    };
    chunk.slots = to_device(slots);
    chunk.query_rows = to_device(rows);
    chunk.kept_rows = to_device(kept);
    chunk.allowed = at::from_blob(allowed.data(), {chunk.count, queries, keys}, at::TensorOptions().dtype(at::kByte))
                        .to(device)
                        .to(at::kBool);
    chunks_.push_back(std::move(chunk));
    s = end - 1;
  }
}

at::Tensor PagedAttention::attend(int64_t layer, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                  double scale) {
  at::Tensor& kc = cache_.k(layer);
  at::Tensor& vc = cache_.v(layer);
  const int64_t KV = kc.size(2), D = kc.size(3);
  at::Tensor kflat = kc.view({-1, KV, D}), vflat = vc.view({-1, KV, D});
  kflat.index_copy_(0, step_.slot_mapping, k.to(kc.scalar_type()));
  vflat.index_copy_(0, step_.slot_mapping, v.to(vc.scalar_type()));
  std::vector<at::Tensor> outs;
  const int64_t S = int64_t(context_lens_.size()), H = q.size(1);
  size_t chunk = 0;
  for (int64_t s = 0; s < S; ++s) {
    const int64_t start = cu_q_[size_t(s)], n = cu_q_[size_t(s) + 1] - start, len = context_lens_[size_t(s)];
    if (n == 0) continue;
    if (n == len) {
      // Fresh sequences (nothing cached before this step: a first prefill, a recompute after
      // preemption) see only their own new tokens, so their k/v need no gather from the cache;
      // a run of consecutive ones of one length goes through one batched causal attention
      // (on a GPU in 16-bit: the flash kernel) instead of one call per sequence.
      int64_t end = s + 1;
      while (end < S && cu_q_[size_t(end) + 1] - cu_q_[size_t(end)] == n && context_lens_[size_t(end)] == n) ++end;
      const int64_t g = end - s;
      auto batch = [&](const at::Tensor& t, int64_t heads) {  // via the cache's dtype, as the gather path
        return t.narrow(0, start, g * n).to(kc.scalar_type()).to(q.scalar_type()).reshape({g, n, heads, D});
      };
      outs.push_back(
          causal_attention(q.narrow(0, start, g * n).reshape({g, n, H, D}), batch(k, KV), batch(v, KV), scale, options_)
              .reshape({g * n, H, D}));
      s = end - 1;
      continue;
    }
    // The cached chunk that starts here (chunks_ is in sequence order).
    while (chunk < chunks_.size() && chunks_[chunk].first < s) ++chunk;
    VERLPP_CHECK(chunk < chunks_.size() && chunks_[chunk].first == s,
                 "PagedAttention: sequence {} has a cached prefix but no chunk", s);
    const CachedChunk& c = chunks_[chunk];
    const at::Tensor ks = kflat.index_select(0, c.slots).view({c.count, c.keys, KV, D}).to(q.scalar_type());
    const at::Tensor vs = vflat.index_select(0, c.slots).view({c.count, c.keys, KV, D}).to(q.scalar_type());
    const at::Tensor qs = q.index_select(0, c.query_rows).view({c.count, c.queries, H, D});
    outs.push_back(attention(qs, ks, vs, c.allowed, scale, options_)
                       .reshape({c.count * c.queries, H, D})
                       .index_select(0, c.kept_rows));
    s = c.first + c.count - 1;
  }
  return outs.empty() ? q.narrow(0, 0, 0) : at::cat(outs, 0);
}

}  // namespace verlpp::model
