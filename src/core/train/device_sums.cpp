// DeviceSums: adds on the device, one read-back (see the header).
#include "device_sums.hpp"

#include <verlpp/train/data_parallel.hpp>

#include <ATen/TensorOperators.h>
#include <ATen/ops/stack.h>
#include <ATen/ops/zeros.h>

#include <algorithm>

namespace verlpp::train::detail {

void DeviceSums::add(size_t index, const at::Tensor& scalar) {
  at::Tensor x = scalar.detach().to(at::kDouble).reshape({});
  at::Tensor& sum = sums_.at(index);
  sum = sum.defined() ? sum + x : x;
}

std::vector<double> DeviceSums::values() const {
  // Sums never added to are zeros on the device of those that were (the CPU if none was).
  auto opts = at::TensorOptions().dtype(at::kDouble);
  for (const at::Tensor& s : sums_)
    if (s.defined()) opts = opts.device(s.device());
  std::vector<at::Tensor> parts;
  for (const at::Tensor& s : sums_) parts.push_back(s.defined() ? s : at::zeros({}, opts));
  if (parts.empty()) return {};
  const at::Tensor host = at::stack(parts).to(at::kCPU).contiguous();
  const double* v = host.data_ptr<double>();
  return std::vector<double>(v, v + host.numel());
}

std::vector<double> micro_batch_means(const DeviceSums& sums, int64_t micro_batches, const DataParallel& dp) {
  std::vector<double> values = sums.values();
  values.push_back(double(micro_batches));
  dp.all_reduce_sum(values);
  const double count = std::max(values.back(), 1.0);
  values.pop_back();
  for (double& v : values) v /= count;
  return values;
}

}  // namespace verlpp::train::detail
