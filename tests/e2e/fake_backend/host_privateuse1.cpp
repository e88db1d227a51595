// A vendor's LibTorch extension in miniature, for the privateuseone tests: it registers a
// PrivateUse1 backend whose "device memory" is host memory. It provides what LibTorch needs
// from every backend itself (a device guard, an allocator, tensor creation, views, resizing and
// copies to and from the CPU) and sends every other operator to LibTorch's boxed CPU fallback
// (at::native::cpu_fallback: inputs copied to the CPU, the CPU kernel run, results copied back),
// as out-of-tree backends do for the operators they have not written yet. A run on
// privateuseone:N therefore computes what a CPU run computes, through a device of its own
// type: a tensor that reached the wrong device would fail LibTorch's device checks.
//
// Built with FAKE_BACKEND_GUARD_ONLY it registers the device guard alone: LibTorch then counts
// the backend as registered although no tensor can be made on it.
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <c10/core/DeviceGuard.h>
#include <c10/core/impl/FakeGuardImpl.h>

C10_REGISTER_GUARD_IMPL(PrivateUse1, c10::impl::FakeGuardImpl<c10::DeviceType::PrivateUse1>);

#ifndef FAKE_BACKEND_GUARD_ONLY

#include <ATen/EmptyTensor.h>
#include <ATen/native/CPUFallback.h>
#include <ATen/native/Resize.h>
#include <ATen/ops/as_strided_native.h>
#include <ATen/ops/from_blob.h>
#include <ATen/ops/resize_native.h>
#include <ATen/ops/view_native.h>
#include <ATen/ops/_reshape_alias_native.h>
#include <c10/core/Allocator.h>
#include <c10/core/CPUAllocator.h>
#include <torch/library.h>

#include <cstdlib>
#include <cstring>

namespace {

constexpr c10::DeviceType kType = c10::DeviceType::PrivateUse1;

// Host memory tagged with the PrivateUse1 device of the current guard.
struct HostMemoryAllocator final : c10::Allocator {
  c10::DataPtr allocate(size_t bytes) const override {
    const c10::DeviceIndex index = c10::impl::getDeviceGuardImpl(kType)->getDevice().index();
    void* data = bytes == 0 ? nullptr : std::aligned_alloc(64, (bytes + 63) / 64 * 64);
    TORCH_CHECK(bytes == 0 || data != nullptr, "host_privateuse1: out of host memory allocating ", bytes, " bytes");
    return {data, data, &release, c10::Device(kType, index)};
  }
  static void release(void* data) { std::free(data); }
  c10::DeleterFnPtr raw_deleter() const override { return &release; }
};

HostMemoryAllocator g_allocator;

const c10::DispatchKeySet kKeys{c10::DispatchKey::PrivateUse1};

at::Tensor empty_memory_format(c10::IntArrayRef size, c10::optional<at::ScalarType> dtype, c10::optional<at::Layout>,
                               c10::optional<at::Device> device, c10::optional<bool>,
                               c10::optional<at::MemoryFormat> memory_format) {
  c10::OptionalDeviceGuard guard(device);
  return at::detail::empty_generic(size, &g_allocator, kKeys, c10::dtype_or_default(dtype), memory_format);
}

at::Tensor empty_strided(c10::IntArrayRef size, c10::IntArrayRef stride, c10::optional<at::ScalarType> dtype,
                         c10::optional<at::Layout>, c10::optional<at::Device> device, c10::optional<bool>) {
  c10::OptionalDeviceGuard guard(device);
  return at::detail::empty_strided_generic(size, stride, &g_allocator, kKeys, c10::dtype_or_default(dtype));
}

// The same memory seen as a CPU tensor (the device's memory is host memory).
at::Tensor host_alias(const at::Tensor& t) {
  if (t.is_cpu()) return t;
  return at::from_blob(t.data_ptr(), t.sizes(), t.strides(), t.options().device(c10::kCPU));
}

at::Tensor copy_from(const at::Tensor& self, const at::Tensor& dst, bool) {
  TORCH_CHECK(self.is_cpu() || self.device().type() == kType, "host_privateuse1: cannot copy from ", self.device());
  TORCH_CHECK(dst.is_cpu() || dst.device().type() == kType, "host_privateuse1: cannot copy to ", dst.device());
  host_alias(dst).copy_(host_alias(self));
  return dst;
}

at::Tensor copy_from_and_resize(const at::Tensor& self, const at::Tensor& dst) {
  at::native::resize_(dst, self.sizes(), c10::nullopt);
  return copy_from(self, dst, false);
}

const at::Tensor& resize(const at::Tensor& self, c10::IntArrayRef size, c10::optional<at::MemoryFormat> memory_format) {
  return at::native::resize_(self, size, memory_format);
}

void fallback(const c10::OperatorHandle& op, torch::jit::Stack* stack) { at::native::cpu_fallback(op, stack); }

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("empty.memory_format", &empty_memory_format);
  m.impl("empty_strided", &empty_strided);
  m.impl("as_strided", &at::native::as_strided_tensorimpl);
  m.impl("view", &at::native::view);
  m.impl("_reshape_alias", &at::native::_reshape_alias);
  m.impl("resize_", &resize);
  m.impl("_copy_from", &copy_from);
  m.impl("_copy_from_and_resize", &copy_from_and_resize);
}

TORCH_LIBRARY_IMPL(_, PrivateUse1, m) { m.fallback(torch::CppFunction::makeFromBoxedFunction<&fallback>()); }

#endif  // FAKE_BACKEND_GUARD_ONLY
