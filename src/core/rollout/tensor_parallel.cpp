// ProcessGroupTensorParallel (see the header): the model's collectives as process-group calls.
#include <verlpp/rollout/tensor_parallel.hpp>

#include <verlpp/core/error.hpp>
#include <verlpp/hw/process_group.hpp>

#include <fmt/format.h>

#include <vector>

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

std::unique_ptr<hw::ProcessGroup> engine_group(const hw::ProcessGroup& group, int64_t size, const std::string& name) {
  if (size < 1 || group.world_size() % size != 0)
    throw Error(name, fmt::format("engines of {} ranks do not split a group of {}", size, group.world_size()));
  if (size == 1) return nullptr;
  const int64_t engine = group.rank() / size;
  std::vector<int32_t> members;
  for (int64_t r = engine * size; r < (engine + 1) * size; ++r) members.push_back(int32_t(r));
  return group.subgroup(members, fmt::format("{}/engine{}", name, engine));
}

}  // namespace verlpp::rollout
