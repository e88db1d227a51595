// A rollout engine split over the ranks of a process group (tensor parallelism): the group's
// collectives as model::TensorParallelGroup, and the engine's model for this rank. Every rank of
// the group gives its engine the same requests with the same seeds; each rank's logits are the
// whole vocabulary's, gathered bit for bit alike on every rank, so every rank samples the same
// tokens and its scheduler makes the same decisions (block tables, preemptions) without
// exchanging them. See model/tensor_parallel.hpp for the split itself.
#pragma once

#include <verlpp/model/tensor_parallel.hpp>

#include <memory>
#include <string>

namespace verlpp::hw {
class ProcessGroup;
}

namespace verlpp::rollout {

// model::TensorParallelGroup over every rank of `group` (which must outlive it), on tensors of
// the group's device.
class ProcessGroupTensorParallel : public model::TensorParallelGroup {
 public:
  explicit ProcessGroupTensorParallel(const hw::ProcessGroup& group) : group_(group) {}
  int64_t rank() const override;
  int64_t size() const override;
  void all_reduce_sum(at::Tensor& t) const override;
  at::Tensor all_gather_columns(const at::Tensor& t) const override;

 private:
  const hw::ProcessGroup& group_;
};

// This rank's part of `whole` for an engine split over every rank of `group`
// (model::tensor_parallel_model with a ProcessGroupTensorParallel). Errors name the dimension
// that does not split over the group's size.
model::DecoderLM tensor_parallel_engine_model(const model::DecoderLM& whole, const hw::ProcessGroup& group);
// This rank's part of a model of shape `whole` split over every rank of `group`, with its own
// (unset) weights in `options`' dtype and device: no rank builds the whole model. An engine over
// it takes whole tensors in update_weights and keeps its slice of each (the trainer's sync).
model::DecoderLM tensor_parallel_engine_model(const model::ModelConfig& whole, const model::ModelOptions& options,
                                              const hw::ProcessGroup& group);

// With `group`'s ranks as engines of `size` consecutive ranks (ranks [e size, (e + 1) size) split
// engine e), this rank's engine group, named "<name>/engine<e>"; null when size is 1 (whole
// engines need none). Collective over the engine's ranks; an Error when size does not divide
// the group.
std::unique_ptr<hw::ProcessGroup> engine_group(const hw::ProcessGroup& group, int64_t size, const std::string& name);

}  // namespace verlpp::rollout
