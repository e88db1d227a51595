#include "device_sums.hpp"

#include <ATen/TensorOperators.h>
#include <ATen/ops/stack.h>
#include <ATen/ops/zeros.h>

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

}  // namespace verlpp::train::detail
