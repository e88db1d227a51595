// DeviceSums: per-micro-batch scalar metrics (losses, clip fractions) summed where they are
// computed. Reading each with .item() made the host wait for the device after every
// micro-batch, so the next micro-batch's launches started from an idle GPU; here adding never
// waits, and values() reads every sum back with one copy. The sums are fp64 in the order of
// add(), as the host's double sums were: the metrics do not change by a bit.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstddef>
#include <cstdint>
#include <vector>

namespace verlpp::train {
class DataParallel;
}

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

// Each sum of `sums` (one term per micro-batch, `micro_batches` of them on this rank) divided by
// the number of micro-batches, both summed over dp's ranks first: the mean over every rank's
// micro-batches, the same on every rank (the same on one rank as the plain mean).
std::vector<double> micro_batch_means(const DeviceSums& sums, int64_t micro_batches, const DataParallel& dp);

}  // namespace verlpp::train::detail
