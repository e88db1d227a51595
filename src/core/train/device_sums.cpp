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
  std::vector<at::Tensor> parts;
  at::Tensor zero;
  for (const at::Tensor& s : sums_) {
    if (s.defined()) {
      parts.push_back(s);
      continue;
    }
    if (!zero.defined()) {
      c10::Device device(c10::kCPU);
      for (const at::Tensor& t : sums_)
        if (t.defined()) device = t.device();
      zero = at::zeros({}, at::TensorOptions().dtype(at::kDouble).device(device));
    }
    parts.push_back(zero);
  }
  if (parts.empty()) return {};
  const at::Tensor host = at::stack(parts).to(at::kCPU).contiguous();
  const double* v = host.data_ptr<double>();
  return std::vector<double>(v, v + host.numel());
}

}  // namespace verlpp::train::detail
