// ProcessGroupTensorParallel (see the header): the model's collectives as process-group calls.
#include <verlpp/rollout/tensor_parallel.hpp>

#include <verlpp/hw/process_group.hpp>

namespace verlpp::rollout {

int64_t ProcessGroupTensorParallel::rank() const { return group_.rank(); }

int64_t ProcessGroupTensorParallel::size() const { return group_.world_size(); }

void ProcessGroupTensorParallel::all_reduce_sum(at::Tensor& t) const { group_.all_reduce_sum(t); }

at::Tensor ProcessGroupTensorParallel::all_gather_columns(const at::Tensor& t) const {
  // The communicator gathers rows: [size * rows, n], rank-major; the columns side by side are
  // that as [size, rows, n] with the first two dimensions swapped.
  const int64_t rows = t.size(0), n = t.size(1), ranks = size();
  return group_.all_gather(t.contiguous()).view({ranks, rows, n}).transpose(0, 1).reshape({rows, ranks * n});
}

model::DecoderLM tensor_parallel_engine_model(const model::DecoderLM& whole, const hw::ProcessGroup& group) {
  return model::tensor_parallel_model(whole, std::make_shared<ProcessGroupTensorParallel>(group));
}

model::DecoderLM tensor_parallel_engine_model(const model::ModelConfig& whole, const model::ModelOptions& options,
                                              const hw::ProcessGroup& group) {
  const model::TensorParallelLayout layout = model::tensor_parallel_layout(whole, group.world_size());
  model::ModelOptions o = options;
  o.requires_grad = false;
  model::DecoderLM part(model::rank_config(whole, layout), o);
  part.set_tensor_parallel(std::make_shared<ProcessGroupTensorParallel>(group), whole);
  return part;
}

}  // namespace verlpp::rollout
