// Tensor parallelism for inference (the rollout engine), Megatron-style: a model split over the t
// ranks of a group, each holding 1/t of every large weight. q/k/v and gate/up are column-parallel
// (each rank computes its heads and its share of the MLP width), o_proj and down_proj
// row-parallel (each rank's partial product, summed over the group by one all-reduce each); the
// embedding and the LM head are vocabulary-parallel (each rank a contiguous range of rows: a
// lookup keeps the ids in its range and is summed over the group; the logits of every rank are
// gathered, so each rank samples from the whole vocabulary's logits, bit for bit the same on
// every rank). KV heads are split over the group, or replicated when t exceeds their count (each
// rank keeps the one its query heads use, as vLLM does). Norms and the biases of row-parallel
// layers are whole on every rank (the biases are added once, after the sum).
//
// A rank's model is an ordinary DecoderLM whose config has its share of the heads, of the MLP
// width and of the vocabulary (rank_config), plus the group (DecoderLM::set_tensor_parallel)
// through which its forwards and logits() run their collectives. The group is an interface here
// (the model layer knows no communicator); rollout/tensor_parallel.hpp implements it over a
// process group.
#pragma once

#include <verlpp/model/decoder.hpp>
#include <verlpp/model/model_config.hpp>

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <memory>
#include <string>

namespace verlpp::model {

// The collectives of one tensor-parallel group. Every rank of the group calls them in the same
// order (the ranks run the same forwards).
class TensorParallelGroup {
 public:
  virtual ~TensorParallelGroup() = default;
  virtual int64_t rank() const = 0;
  virtual int64_t size() const = 0;
  // Sums `t` (contiguous) over the group's ranks, in place.
  virtual void all_reduce_sum(at::Tensor& t) const = 0;
  // Every rank's `t` [rows, n] side by side, in rank order: [rows, size() * n].
  virtual at::Tensor all_gather_columns(const at::Tensor& t) const = 0;
};

// How a model's dimensions split over `size` ranks.
struct TensorParallelLayout {
  int64_t size = 1;
  int64_t heads = 0;           // query heads per rank (H / size)
  int64_t kv_heads = 0;        // KV heads per rank (KV / size, or 1 when replicated)
  bool kv_replicated = false;  // size > KV: ranks share KV heads (size / KV ranks each)
  int64_t intermediate = 0;    // MLP width per rank (F / size)
  int64_t vocab = 0;           // vocabulary rows per rank (ceil(V / size); the last rank's padded)
};

// The layout of `config` over `size` ranks; an Error naming the dimension that does not split
// (attention heads, KV heads, MLP width, a head other than the LM head) and the sizes that would.
TensorParallelLayout tensor_parallel_layout(const ModelConfig& config, int64_t size);
// The config of one rank's model: `config` with the layout's heads, KV heads, MLP width and
// vocabulary.
ModelConfig rank_config(const ModelConfig& config, const TensorParallelLayout& layout);
// Which part of a whole parameter one rank keeps: the whole tensor (dim -1: norms, row-parallel
// biases), or `count` rows (dim 0) or columns (dim 1) from `begin`, past the tensor's end
// zero-padded (the last rank's vocabulary rows).
struct TensorParallelPart {
  int64_t dim = -1;
  int64_t begin = 0, count = 0;
};
// Rank `rank`'s part of the parameter `name` (an HF name of `config`), without the tensor: what
// tensor_parallel_slice cuts, for code that moves only those elements (the engine sync).
TensorParallelPart tensor_parallel_part(const ModelConfig& config, const TensorParallelLayout& layout,
                                        const std::string& name, int64_t rank);
// Rank `rank`'s part of the whole parameter `name` (an HF name of `config`, whole shape):
// contiguous rows (column-parallel weights and their biases, the vocabulary rows; the last
// rank's vocabulary padded with zero rows), columns (row-parallel weights), or the whole tensor
// (norms, row-parallel biases). A fresh contiguous tensor. Error for a name `config` has not.
at::Tensor tensor_parallel_slice(const ModelConfig& config, const TensorParallelLayout& layout, const std::string& name,
                                 const at::Tensor& whole, int64_t rank);
// `whole`'s model for rank `group->rank()` of `group`: every parameter sliced (copies, in
// whole's dtype on its device), forwards and logits() running their collectives through `group`.
DecoderLM tensor_parallel_model(const DecoderLM& whole, std::shared_ptr<const TensorParallelGroup> group);

}  // namespace verlpp::model
