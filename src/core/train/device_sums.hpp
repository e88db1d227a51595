// DeviceSums: per-micro-batch scalar metrics (losses, clip fractions) summed where they are
// computed. Reading each with .item() made the host wait for the device after every
// micro-batch, so the next micro-batch's launches started from an idle GPU; here adding never
// waits, and values() reads every sum back with one copy. The sums are fp64 in the order of
// add(), as the host's double sums were: the metrics do not change by a bit.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstddef>
#include <vector>

namespace verlpp::train::detail {

class DeviceSums {
 public:
  explicit DeviceSums(size_t count) : sums_(count) {}
  // sums[index] += scalar (a one-element tensor, taken detached and as fp64).
  void add(size_t index, const at::Tensor& scalar);
  // The sums (0 where nothing was added), after one device-to-host copy.
  std::vector<double> values() const;

 private:
  std::vector<at::Tensor> sums_;
};

}  // namespace verlpp::train::detail
