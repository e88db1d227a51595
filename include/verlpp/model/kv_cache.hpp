// A paged KV cache and the reference AttentionBackend over it (plain LibTorch ops, one loop
// over the step's sequences). The engine owns both: it sizes the cache, hands out blocks, and
// builds a PagedStep per forward. Slots are flat: slot = block * block_size + offset, so a
// contiguous per-sequence cache is the special case of one block per sequence. Fast kernels
// (a plugin's paged-attention decode) replace PagedAttention, not the model.
#pragma once

#include <verlpp/model/decoder.hpp>

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <vector>

namespace verlpp::model {

// Per layer K and V storage: [num_blocks, block_size, KV, D] each.
class PagedKvCache {
 public:
  PagedKvCache(const ModelConfig& config, int64_t num_blocks, int64_t block_size, at::ScalarType dtype,
               c10::Device device);

  int64_t num_blocks() const { return num_blocks_; }
  int64_t block_size() const { return block_size_; }
  int64_t num_layers() const { return int64_t(k_.size()); }
  at::Tensor& k(int64_t layer) { return k_.at(size_t(layer)); }  // [num_blocks, block_size, KV, D]
  at::Tensor& v(int64_t layer) { return v_.at(size_t(layer)); }  // [num_blocks, block_size, KV, D]

 private:
  int64_t num_blocks_, block_size_;
  std::vector<at::Tensor> k_, v_;
};

// What one engine step over the cache looks like: N new tokens from S sequences, each
// sequence's new tokens contiguous in the flat batch and the last of its context.
struct PagedStep {
  at::Tensor slot_mapping;  // [N] int64: the slot each new token's k/v is written to
  at::Tensor cu_seqlens_q;  // [S + 1] int64: sequence s owns new tokens [cu[s], cu[s+1])
  at::Tensor context_lens;  // [S] int64: tokens of sequence s in the cache after this step
  at::Tensor block_tables;  // [S, max_blocks] int64: block ids of sequence s, in order
};

// The reference backend: writes k/v at slot_mapping, then for each sequence gathers its
// context through its block table and attends causally (new token i of n sees context
// positions <= context_len - n + i). Consecutive fresh sequences of one length (nothing cached
// before the step) attend over their own new k/v in one batched call instead; consecutive
// sequences with a cached prefix (a resumed turn, a chunk of a long prompt) are gathered padded
// to their chunk's longest and attend in one masked call per chunk, not one call per sequence.
// `options`: the model's ForwardOptions::attention (how 16-bit attention takes K/V).
class PagedAttention : public AttentionBackend {
 public:
  PagedAttention(PagedKvCache& cache, PagedStep step, AttentionOptions options = {});
  at::Tensor attend(int64_t layer, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                    double scale) override;

 private:
  PagedKvCache& cache_;
  PagedStep step_;
  AttentionOptions options_;
  // Consecutive sequences [first, first + count) with a cached prefix, padded to `queries` new
  // tokens and `keys` context positions; the tensors are on the cache's device.
  struct CachedChunk {
    int64_t first = 0, count = 0, queries = 0, keys = 0;
    at::Tensor slots;       // [count * keys] int64: each context's slots, padded with its position 0's
    at::Tensor query_rows;  // [count * queries] int64: rows of q, padded with the sequence's first
    at::Tensor allowed;     // [count, queries, keys] bool: causal within the context; padded rows see key 0
    at::Tensor kept_rows;   // [new tokens] int64: the real rows of the padded [count * queries] output
  };
  std::vector<int64_t> cu_q_, context_lens_;  // host copies, read once per step
  std::vector<CachedChunk> chunks_;           // in sequence order
};

}  // namespace verlpp::model
