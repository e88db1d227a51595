// DeviceSums (src/core/train/device_sums.hpp): the per-micro-batch metric sums the trainers keep
// on the device must equal the host's double sums of .item() exactly, in add() order.
#include "../../src/core/train/device_sums.hpp"

#include <ATen/ops/randn.h>
#include <ATen/ops/tensor.h>
#include <catch2/catch.hpp>

#include <vector>

TEST_CASE("DeviceSums: fp64 sums in add() order, bit for bit the host's; 0 where nothing was added",
          "[train][metrics]") {
  verlpp::train::detail::DeviceSums sums(3);
  double host0 = 0, host2 = 0;
  for (int i = 0; i < 17; ++i) {
    const at::Tensor a = at::randn({}).mul(1e3), b = at::randn({1}).div(7);  // fp32 scalars, 0-d and [1]
    sums.add(0, a);
    sums.add(2, b);
    host0 += a.item<double>();
    host2 += b.item<double>();
  }
  const std::vector<double> v = sums.values();
  REQUIRE(v.size() == 3);
  CHECK(v[0] == host0);
  CHECK(v[1] == 0.0);
  CHECK(v[2] == host2);
  CHECK(verlpp::train::detail::DeviceSums(2).values() == std::vector<double>{0.0, 0.0});
}
