// Borrowed DLPack views of at::Tensors for plugin calls (kernels, collectives). Built by hand rather than with
// ATen/DLConvertor.h, whose own copy of dlpack.h would clash with the ABI's in one file.
#pragma once

#include <verlpp/core/error.hpp>
#include <verlpp/hw/torch_device.hpp>

#include <dlpack/dlpack.h>

#include <ATen/core/Tensor.h>

namespace verlpp::hw::detail {

// A view of `t` valid while `t` lives. `as_unsigned` marks an integer tensor as kDLUInt
// (LibTorch 1.13 has no uint64).
inline DLTensor dl_view(const at::Tensor& t, bool as_unsigned = false) {
  DLTensor d{};
  d.data = t.data_ptr();
  switch (t.device().type()) {
    case c10::DeviceType::CPU:
      d.device = {kDLCPU, 0};
      break;
    case c10::DeviceType::CUDA:
      d.device = {kDLCUDA, t.device().index()};
      break;
    case c10::DeviceType::HIP:
      d.device = {kDLROCM, t.device().index()};
      break;
    case c10::DeviceType::PrivateUse1:
      // An out-of-tree backend's tensors carry the DLPack type its plugin declares.
      VERLPP_CHECK(privateuse1_dl_device_type() != 0,
                   "dl_view: no DLPack device type is known for {} (no plugin's privateuseone device was chosen)",
                   t.device().str());
      d.device = {DLDeviceType(privateuse1_dl_device_type()), t.device().index()};
      break;
    default:
      VERLPP_FAIL_AT("dl_view", "no DLPack device type for torch device {}", t.device().str());
  }
  d.ndim = int32_t(t.dim());
  const auto st = t.scalar_type();
  uint8_t code = kDLFloat;
  if (st == at::kLong || st == at::kInt)
    code = as_unsigned ? uint8_t(kDLUInt) : uint8_t(kDLInt);
  else if (st == at::kBFloat16)
    code = kDLBfloat;
  else if (st != at::kFloat && st != at::kHalf && st != at::kDouble)
    VERLPP_FAIL_AT("dl_view", "unsupported dtype {}", c10::toString(st));
  d.dtype = {code, uint8_t(t.element_size() * 8), 1};
  d.shape = const_cast<int64_t*>(t.sizes().data());
  d.strides = const_cast<int64_t*>(t.strides().data());
  d.byte_offset = 0;
  return d;
}

}  // namespace verlpp::hw::detail
