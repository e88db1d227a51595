// verlpp-plugin-check, groups "memory", "streams" and "tensor_copy": allocation sizes and
// alignments, host/device round trips at offsets, memset, pinned staging, memory figures,
// streams and events, and strided tensor copies — each checked byte for byte on the host.
#include "check_context.hpp"

#include <cstring>
#include <numeric>
#include <thread>

namespace verlpp::conformance {
namespace {

std::vector<uint8_t> pattern(size_t n, uint8_t seed) {
  std::vector<uint8_t> v(n);
  uint32_t x = 2166136261u ^ seed;
  for (size_t i = 0; i < n; ++i) {
    x = (x ^ uint32_t(i)) * 16777619u;
    v[i] = uint8_t(x >> 24);
  }
  return v;
}

size_t first_difference(const std::vector<uint8_t>& a, const std::vector<uint8_t>& b) {
  for (size_t i = 0; i < a.size(); ++i)
    if (a[i] != b[i]) return i;
  return a.size();
}

void memory_cases(CheckContext& ctx) {
  ctx.run("memory", "memory figures", [&] {
    auto [free_bytes, total] = ctx.device().memory_info();
    CHECK_THAT(total > 0, "total memory is 0");
    CHECK_THAT(free_bytes <= total, "free {} > total {}", free_bytes, total);
  });
  ctx.run("memory", "allocation sizes and alignments", [&] {
    const size_t sizes[] = {0, 1, 7, 4096, (size_t(1) << 20) + 3, size_t(64) << 20};
    const size_t aligns[] = {0, 64, 256, 4096};
    std::vector<void*> seen;
    std::vector<hw::DeviceBuffer> keep;
    for (size_t s : sizes)
      for (size_t a : aligns) {
        hw::DeviceBuffer b = ctx.device().allocate(s, a);
        CHECK_THAT(b.data() != nullptr, "allocate({}, {}) returned NULL", s, a);
        CHECK_THAT(a == 0 || reinterpret_cast<uintptr_t>(b.data()) % a == 0, "allocate({}, {}) gave a misaligned {}", s, a, b.data());
        for (void* p : seen) CHECK_THAT(p != b.data(), "allocate({}, {}) returned a live pointer again", s, a);
        seen.push_back(b.data());
        keep.push_back(std::move(b));
      }
  });
  ctx.run("memory", "host->device->device->host round trip", [&] {
    for (size_t n : {size_t(1), size_t(4093), size_t(3) << 20}) {
      auto src = pattern(n, uint8_t(n)), back = std::vector<uint8_t>(n, 0);
      hw::Device d = ctx.device();
      hw::DeviceBuffer a = d.allocate(n), b = d.allocate(n);
      d.copy(a.data(), src.data(), n, VERLPP_COPY_HOST_TO_DEVICE);
      d.copy(b.data(), a.data(), n, VERLPP_COPY_DEVICE_TO_DEVICE);
      d.copy(back.data(), b.data(), n, VERLPP_COPY_DEVICE_TO_HOST);
      d.synchronize();
      size_t at = first_difference(src, back);
      CHECK_THAT(at == n, "{} bytes: first difference at byte {}", n, at);
    }
  });
  ctx.run("memory", "copies at offsets and memset", [&] {
    hw::Device d = ctx.device();
    const size_t n = 10007;
    auto src = pattern(n, 3);
    hw::DeviceBuffer a = d.allocate(n);
    CheckContext::need(reinterpret_cast<const void*>(ctx.api().memset_async), "memset_async");
    d.fill(a.data(), 0x5A, n);
    d.copy(static_cast<char*>(a.data()) + 101, src.data() + 7, 5000, VERLPP_COPY_HOST_TO_DEVICE);
    std::vector<uint8_t> back(n), want(n, 0x5A);
    std::memcpy(want.data() + 101, src.data() + 7, 5000);
    d.copy(back.data(), a.data(), n, VERLPP_COPY_DEVICE_TO_HOST);
    d.synchronize();
    size_t at = first_difference(want, back);
    CHECK_THAT(at == n, "first difference at byte {} (got {:#x}, want {:#x})", at, back[at], want[at]);
  });
  ctx.run("memory", "pinned host staging", [&] {
    CheckContext::need(reinterpret_cast<const void*>(ctx.api().host_alloc_pinned), "pinned host memory");
    hw::Device d = ctx.device();
    const size_t n = size_t(1) << 20;
    hw::PinnedBuffer stage = d.allocate_pinned(n);
    CHECK_THAT(stage.is_pinned() && stage.data() != nullptr, "pinned allocation failed");
    auto src = pattern(n, 9);
    std::memcpy(stage.data(), src.data(), n);
    hw::DeviceBuffer a = d.allocate(n);
    d.copy(a.data(), stage.data(), n, VERLPP_COPY_HOST_TO_DEVICE);
    std::memset(stage.data(), 0, n);
    d.copy(stage.data(), a.data(), n, VERLPP_COPY_DEVICE_TO_HOST);
    d.synchronize();
    CHECK_THAT(std::memcmp(stage.data(), src.data(), n) == 0, "pinned round trip differs");
  });
  ctx.run("memory", "health check and synchronize", [&] {
    for (int32_t i = 0; i < ctx.device_count(); ++i) {
      ctx.device(i).health_check();
      ctx.device(i).synchronize();
    }
  });
}

void stream_cases(CheckContext& ctx) {
  const auto& api = ctx.api();
  ctx.run("streams", "copies on two streams", [&] {
    CheckContext::need(reinterpret_cast<const void*>(api.stream_create), "streams");
    hw::Device d = ctx.device();
    hw::Stream s1 = d.create_stream(), s2 = d.create_stream();
    CHECK_THAT(s1.handle() != nullptr && s1.handle() != s2.handle(), "streams are not distinct");
    const size_t n = size_t(2) << 20;
    auto src = pattern(n, 5);
    std::vector<uint8_t> back1(n), back2(n);
    hw::DeviceBuffer a = d.allocate(n), b = d.allocate(n);
    d.copy(a.data(), src.data(), n, VERLPP_COPY_HOST_TO_DEVICE, &s1);
    d.copy(b.data(), src.data(), n, VERLPP_COPY_HOST_TO_DEVICE, &s2);
    d.copy(back1.data(), a.data(), n, VERLPP_COPY_DEVICE_TO_HOST, &s1);
    d.copy(back2.data(), b.data(), n, VERLPP_COPY_DEVICE_TO_HOST, &s2);
    s1.synchronize();
    s2.synchronize();
    CHECK_THAT(back1 == src && back2 == src, "stream copies differ");
  });
  ctx.run("streams", "events: record, wait, query, elapsed", [&] {
    CheckContext::need(reinterpret_cast<const void*>(api.event_create), "events");
    hw::Device d = ctx.device();
    hw::Stream s1 = d.create_stream(), s2 = d.create_stream();
    hw::Event start = d.create_event(), end = d.create_event();
    const size_t n = size_t(8) << 20;
    hw::DeviceBuffer a = d.allocate(n), b = d.allocate(n);
    start.record(s1);
    d.fill(a.data(), 0x11, n, &s1);
    end.record(s1);
    // s2 must see s1's fill before copying out of a.
    s2.wait(end);
    d.copy(b.data(), a.data(), n, VERLPP_COPY_DEVICE_TO_DEVICE, &s2);
    std::vector<uint8_t> back(n);
    d.copy(back.data(), b.data(), n, VERLPP_COPY_DEVICE_TO_HOST, &s2);
    s2.synchronize();
    end.synchronize();
    CHECK_THAT(end.is_complete(), "event not complete after synchronize");
    CHECK_THAT(std::all_of(back.begin(), back.end(), [](uint8_t x) { return x == 0x11; }), "the wait did not order the streams");
    if (api.event_elapsed_ms != nullptr) {
      float ms = end.elapsed_ms_since(start);
      CHECK_THAT(ms >= 0.0f && ms < 60000.0f, "elapsed {} ms", ms);
    }
  });
  ctx.run("streams", "bad handles are errors", [&] {
    CheckContext::need(reinterpret_cast<const void*>(api.event_create), "events");
    ctx.expect_error(api.event_record(nullptr, nullptr), VERLPP_STATUS_INVALID_ARGUMENT, "event_record(NULL)");
    ctx.expect_error(api.event_query(nullptr, nullptr), VERLPP_STATUS_INVALID_ARGUMENT, "event_query(NULL, NULL)");
    verlpp_stream s = nullptr;
    if (api.stream_create != nullptr)
      ctx.expect_error(api.stream_create(ctx.device_count(), &s), VERLPP_STATUS_INVALID_ARGUMENT, "stream_create(device count)");
  });
}

void tensor_copy_cases(CheckContext& ctx) {
  ctx.run("tensor_copy", "strided host tensor to device and back", [&] {
    CheckContext::need(reinterpret_cast<const void*>(ctx.api().tensor_copy), "tensor_copy");
    hw::Device d = ctx.device();
    const int64_t rows = 5, cols = 7;
    std::vector<float> host(size_t(rows * cols));
    std::iota(host.begin(), host.end(), 1.0f);
    // A transposed view: shape [cols, rows], strides [1, cols].
    std::vector<int64_t> shape = {cols, rows}, strides = {1, cols};
    DLTensor src{};
    src.data = host.data();
    src.device = {kDLCPU, 0};
    src.ndim = 2;
    src.dtype = dl_f32();
    src.shape = shape.data();
    src.strides = strides.data();
    DeviceTensor dst(d, {cols, rows}, dl_f32());
    d.copy_tensor(src, dst.dl(), VERLPP_COPY_HOST_TO_DEVICE);
    auto back = dst.to_host<float>();
    for (int64_t i = 0; i < cols; ++i)
      for (int64_t j = 0; j < rows; ++j)
        CHECK_THAT(back[size_t(i * rows + j)] == host[size_t(j * cols + i)], "element [{}, {}] = {}, want {}", i, j,
                   back[size_t(i * rows + j)], host[size_t(j * cols + i)]);
  });
  ctx.run("tensor_copy", "strided device tensor to host, and device to device", [&] {
    CheckContext::need(reinterpret_cast<const void*>(ctx.api().tensor_copy), "tensor_copy");
    hw::Device d = ctx.device();
    // A [3, 4, 5] int32 device tensor holding 0..59, read through a permuted view [5, 3, 4]
    // (strides [1, 20, 5]) that starts one element in (byte_offset) of a 61-element buffer.
    const int64_t a = 3, b = 4, c = 5;
    std::vector<int32_t> values(size_t(a * b * c + 1));
    std::iota(values.begin(), values.end(), -1);  // element 0 is padding (-1), then 0..59
    DeviceTensor buf(d, {a * b * c + 1}, dl_i32());
    buf.upload(values.data());
    std::vector<int64_t> shape = {c, a, b}, strides = {1, b * c, c};
    DLTensor view = buf.dl();
    view.ndim = 3;
    view.shape = shape.data();
    view.strides = strides.data();
    view.byte_offset = sizeof(int32_t);
    auto want = [&](int64_t k, int64_t i, int64_t j) { return int32_t(i * b * c + j * c + k); };  // view[k, i, j] = x[i, j, k]
    // device (strided) -> host (contiguous)
    std::vector<int32_t> host(size_t(a * b * c), 0);
    DLTensor dst{};
    dst.data = host.data();
    dst.device = {kDLCPU, 0};
    dst.ndim = 3;
    dst.dtype = dl_i32();
    dst.shape = shape.data();
    d.copy_tensor(view, dst, VERLPP_COPY_DEVICE_TO_HOST);
    d.synchronize();
    for (int64_t k = 0; k < c; ++k)
      for (int64_t i = 0; i < a; ++i)
        for (int64_t j = 0; j < b; ++j) {
          int32_t got = host[size_t((k * a + i) * b + j)];
          CHECK_THAT(got == want(k, i, j), "device->host element [{}, {}, {}] = {}, want {}", k, i, j, got, want(k, i, j));
        }
    // device (strided) -> device (contiguous), then back to the host contiguously
    DeviceTensor packed(d, {c, a, b}, dl_i32());
    d.copy_tensor(view, packed.dl(), VERLPP_COPY_DEVICE_TO_DEVICE);
    auto back = packed.to_host<int32_t>();
    CHECK_THAT(back == host, "device->device packed copy differs from the device->host one");
    // device (contiguous) -> device (strided): scatter the packed copy into a fresh buffer
    // through the same permuted view; the buffer must come back as the original.
    DeviceTensor again(d, {a * b * c + 1}, dl_i32());
    std::vector<int32_t> minus(values.size(), -1);
    again.upload(minus.data());
    DLTensor again_view = view;
    again_view.data = again.dl().data;
    d.copy_tensor(packed.dl(), again_view, VERLPP_COPY_DEVICE_TO_DEVICE);
    CHECK_THAT(again.to_host<int32_t>() == values, "device->device strided scatter did not restore the original buffer");
  });
  ctx.run("tensor_copy", "mismatched shapes are errors", [&] {
    CheckContext::need(reinterpret_cast<const void*>(ctx.api().tensor_copy), "tensor_copy");
    hw::Device d = ctx.device();
    DeviceTensor a(d, {4}, dl_f32()), b(d, {5}, dl_f32());
    ctx.expect_error(ctx.api().tensor_copy(&a.dl(), &b.dl(), nullptr), VERLPP_STATUS_INVALID_ARGUMENT, "tensor_copy([4] -> [5])");
    DeviceTensor c(d, {4}, dl_i32());
    ctx.expect_error(ctx.api().tensor_copy(&a.dl(), &c.dl(), nullptr), VERLPP_STATUS_INVALID_ARGUMENT, "tensor_copy(f32 -> i32)");
  });
}

}  // namespace

void run_memory_cases(CheckContext& ctx) {
  memory_cases(ctx);
  tensor_copy_cases(ctx);
}

void run_stream_cases(CheckContext& ctx) { stream_cases(ctx); }

}  // namespace verlpp::conformance
