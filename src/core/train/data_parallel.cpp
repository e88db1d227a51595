// DataParallel: dispatch, gather and gradient all-reduce over a ProcessGroup (see the header).
#include <ATen/core/grad_mode.h>
#include <verlpp/core/error.hpp>
#include <verlpp/hw/process_group.hpp>
#include <verlpp/train/data_parallel.hpp>
#include <verlpp/train/partition.hpp>

#include <ATen/ops/cat.h>
#include <ATen/ops/empty_like.h>
#include <ATen/ops/from_blob.h>
#include <ATen/ops/full.h>
#include <ATen/ops/zeros.h>

#include <algorithm>

namespace verlpp::train {

int32_t DataParallel::rank() const { return group_ ? group_->rank() : 0; }
int32_t DataParallel::world_size() const { return group_ ? group_->world_size() : 1; }

std::vector<std::vector<int64_t>> DataParallel::partition(const data::Batch& batch) const {
  const int64_t rows = batch.size(), world = world_size();
  if (world == 1) {
    std::vector<int64_t> all(size_t(rows), 0);
    for (int64_t i = 0; i < rows; ++i) all[size_t(i)] = i;
    return {all};
  }
  if (rows % world != 0)
    throw Error("data-parallel dispatch",
                fmt::format("a batch of {} rows does not split evenly over {} ranks", rows, world));
  at::Tensor lens = batch.tensor("attention_mask").sum(1).to(at::kLong).cpu().contiguous();
  std::vector<int64_t> seq_lens(lens.data_ptr<int64_t>(), lens.data_ptr<int64_t>() + rows);
  return balanced_partitions(seq_lens, world, /*equal_size=*/true);
}

data::Batch DataParallel::local_rows(const data::Batch& batch, const std::vector<std::vector<int64_t>>& parts) const {
  if (world_size() == 1) return batch;
  return batch.rows(parts.at(size_t(rank())));
}

data::Batch DataParallel::local_rows(const data::Batch& batch) const {
  return world_size() == 1 ? batch : local_rows(batch, partition(batch));
}

at::Tensor DataParallel::gather(const at::Tensor& local, const std::vector<std::vector<int64_t>>& parts) const {
  if (world_size() == 1) return local;
  at::Tensor gathered = group_->all_gather(local);  // rank-major: rank r's rows in parts[r] order
  std::vector<int64_t> order;
  for (const auto& part : parts) order.insert(order.end(), part.begin(), part.end());
  at::Tensor index = at::from_blob(order.data(), {int64_t(order.size())}, at::TensorOptions().dtype(at::kLong))
                         .clone()
                         .to(gathered.device());
  at::Tensor out = at::empty_like(gathered);
  out.index_copy_(0, index, gathered);
  return out;
}

void DataParallel::all_reduce_gradients(const std::vector<at::Tensor>& params, int64_t bucket_elements) const {
  if (world_size() == 1 || params.empty()) return;
  size_t begin = 0;
  while (begin < params.size()) {
    // A bucket of consecutive parameters (at least one), flattened into one buffer.
    size_t end = begin;
    int64_t elements = 0;
    while (end < params.size() && (end == begin || elements + params[end].numel() <= bucket_elements))
      elements += params[end++].numel();
    std::vector<at::Tensor> flat;
    for (size_t i = begin; i < end; ++i) {
      const at::Tensor& g = params[i].grad();
      flat.push_back(g.defined() ? g.reshape({-1}).to(at::kFloat)
                                 : at::zeros({params[i].numel()}, params[i].options().dtype(at::kFloat)));
    }
    at::Tensor buffer = at::cat(flat);
    group_->all_reduce_sum(buffer);
    int64_t offset = 0;
    for (size_t i = begin; i < end; ++i) {
      const at::Tensor& p = params[i];
      at::Tensor summed = buffer.narrow(0, offset, p.numel()).view(p.sizes()).to(p.scalar_type());
      offset += p.numel();
      if (p.grad().defined()) {
        p.mutable_grad().copy_(summed);
      } else {
        p.mutable_grad() = summed.clone();
      }
    }
    begin = end;
  }
}

int64_t DataParallel::max_over_ranks(int64_t value) const {
  if (world_size() == 1) return value;
  at::Tensor t = at::full({1}, double(value), at::TensorOptions().dtype(at::kDouble).device(device_));
  group_->all_reduce_max(t);
  return int64_t(t.item<double>());
}

void DataParallel::all_reduce_sum(std::vector<double>& values) const {
  if (world_size() == 1 || values.empty()) return;
  at::Tensor t =
      at::from_blob(values.data(), {int64_t(values.size())}, at::TensorOptions().dtype(at::kDouble)).to(device_);
  group_->all_reduce_sum(t);
  t = t.cpu();
  for (size_t i = 0; i < values.size(); ++i) values[i] = t.data_ptr<double>()[i];
}

void DataParallel::broadcast(at::Tensor& t, int32_t root) const {
  if (world_size() > 1) group_->broadcast(t, root);
}

std::vector<int32_t> DataParallel::owners(const std::vector<at::Tensor>& params) const {
  std::vector<int64_t> sizes;
  for (const auto& p : params) sizes.push_back(p.numel());
  return owners_by_size(sizes, world_size());
}

void DataParallel::broadcast_from_owners(const std::vector<at::Tensor>& params,
                                         const std::vector<int32_t>& owners) const {
  if (world_size() == 1) return;
  VERLPP_CHECK(owners.size() == params.size(), "{} owners for {} parameters", owners.size(), params.size());
  at::NoGradGuard no_grad;
  for (int32_t r = 0; r < world_size(); ++r) {
    std::vector<at::Tensor> mine;
    for (size_t i = 0; i < params.size(); ++i)
      if (owners[i] == r) mine.push_back(params[i].detach().reshape({-1}));
    if (mine.empty()) continue;
    at::Tensor flat = at::cat(mine);
    group_->broadcast(flat, r);
    if (r == rank()) continue;  // the owner's values are already in place
    int64_t offset = 0;
    for (size_t i = 0; i < params.size(); ++i)
      if (owners[i] == r) {
        params[i].detach().copy_(flat.narrow(0, offset, params[i].numel()).view(params[i].sizes()));
        offset += params[i].numel();
      }
  }
}

}  // namespace verlpp::train
