// verlpp-plugin-check, groups "memory", "streams" and "tensor_copy": allocation sizes and
// alignments, host/device round trips at offsets, memset, pinned staging, memory figures,
// streams and events, native stream interop (ABI 1.1), and strided tensor copies — each checked
// byte for byte on the host.
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
        CHECK_THAT(a == 0 || reinterpret_cast<uintptr_t>(b.data()) % a == 0, "allocate({}, {}) gave a misaligned {}", s,
                   a, b.data());
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
    CHECK_THAT(std::all_of(back.begin(), back.end(), [](uint8_t x) { return x == 0x11; }),
               "the wait did not order the streams");
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
      ctx.expect_error(api.stream_create(ctx.device_count(), &s), VERLPP_STATUS_INVALID_ARGUMENT,
                       "stream_create(device count)");
  });
}

// ABI 1.1's stream_from_native / stream_native_handle, when the plugin declares minor >= 1 and
// offers both; "not offered" otherwise (the host then keeps the NULL stream).
void need_native_streams(const CheckContext& ctx) {
  const auto& api = ctx.api();
  if (api.abi_minor < 1)
    throw NotOffered(fmt::format("native streams not offered (plugin ABI minor {} < 1)", api.abi_minor));
  CheckContext::need(reinterpret_cast<const void*>(api.stream_from_native), "native streams (stream_from_native)");
  CheckContext::need(reinterpret_cast<const void*>(api.stream_native_handle), "native streams (stream_native_handle)");
}

// Work on `stream` through the raw ABI: fill `a` with `value`, copy it to `b`, copy `b` back to
// the host, synchronise the stream, and check every byte.
void fill_copy_check(const CheckContext& ctx, verlpp_stream stream, void* a, void* b, size_t n, uint8_t value,
                     const char* what) {
  const auto& api = ctx.api();
  CheckContext::need(reinterpret_cast<const void*>(api.memset_async), "memset_async");
  std::vector<uint8_t> back(n, uint8_t(~value));
  ctx.expect_ok(api.memset_async(a, value, n, stream), "memset_async");
  ctx.expect_ok(api.memcpy_async(b, a, n, VERLPP_COPY_DEVICE_TO_DEVICE, stream), "memcpy_async(device->device)");
  ctx.expect_ok(api.memcpy_async(back.data(), b, n, VERLPP_COPY_DEVICE_TO_HOST, stream), "memcpy_async(device->host)");
  ctx.expect_ok(api.stream_synchronize(stream), "stream_synchronize");
  size_t bad = 0;
  while (bad < n && back[bad] == value) ++bad;
  CHECK_THAT(bad == n, "{}: byte {} is {:#x}, want {:#x}", what, bad, back[bad], value);
}

void native_stream_cases(CheckContext& ctx) {
  const auto& api = ctx.api();
  ctx.run("streams", "native stream: wrap, work, destroy the wrapper, original still works (1.1)", [&] {
    need_native_streams(ctx);
    hw::Device d = ctx.device();
    hw::Stream original = d.create_stream();
    void* native = reinterpret_cast<void*>(uintptr_t(0xdead));
    ctx.expect_ok(api.stream_native_handle(original.handle(), &native), "stream_native_handle(original)");
    verlpp_stream wrapper = nullptr;
    ctx.expect_ok(api.stream_from_native(0, native, &wrapper), "stream_from_native(0, native)");
    CHECK_THAT(wrapper != nullptr && wrapper != original.handle(), "stream_from_native gave {} (the original is {})",
               static_cast<void*>(wrapper), static_cast<void*>(original.handle()));
    void* again = nullptr;
    ctx.expect_ok(api.stream_native_handle(wrapper, &again), "stream_native_handle(wrapper)");
    CHECK_THAT(again == native, "the wrapper's native handle is {}, want {}", again, native);
    // A large fill queued on the original, then a copy of it queued on the wrapper and only the
    // wrapper waited for: the copy sees the whole fill only if both are one native stream.
    const size_t n = size_t(32) << 20;
    hw::DeviceBuffer a = d.allocate(n), b = d.allocate(n);
    CheckContext::need(reinterpret_cast<const void*>(api.memset_async), "memset_async");
    ctx.expect_ok(api.memset_async(a.data(), 0x3C, n, original.handle()), "memset_async(original)");
    std::vector<uint8_t> back(n, 0);
    ctx.expect_ok(api.memcpy_async(b.data(), a.data(), n, VERLPP_COPY_DEVICE_TO_DEVICE, wrapper),
                  "memcpy_async(wrapper)");
    ctx.expect_ok(api.memcpy_async(back.data(), b.data(), n, VERLPP_COPY_DEVICE_TO_HOST, wrapper),
                  "memcpy_async(wrapper)");
    ctx.expect_ok(api.stream_synchronize(wrapper), "stream_synchronize(wrapper)");
    size_t bad = 0;
    while (bad < n && back[bad] == 0x3C) ++bad;
    CHECK_THAT(bad == n, "work on the wrapper is not ordered after work on its native stream: byte {} is {:#x}", bad,
               back[bad]);
    fill_copy_check(ctx, wrapper, a.data(), b.data(), n, 0xA5, "fill and copies on the wrapper");
    ctx.expect_ok(api.stream_destroy(wrapper), "stream_destroy(wrapper)");
    // Destroying the wrapper must leave the native stream alone.
    fill_copy_check(ctx, original.handle(), a.data(), b.data(), n, 0x5A,
                    "the original stream after the wrapper was destroyed");
    void* still = nullptr;
    ctx.expect_ok(api.stream_native_handle(original.handle(), &still),
                  "stream_native_handle(original) after the wrapper went");
    CHECK_THAT(still == native, "the original's native handle changed from {} to {}", native, still);
  });
  ctx.run("streams", "native stream: the native NULL handle (1.1)", [&] {
    need_native_streams(ctx);
    // NULL is the native default stream where the native API has one (CUDA, HIP): the host's
    // LibTorch stream by default. Elsewhere INVALID_ARGUMENT is the only other answer.
    hw::Device d = ctx.device();
    verlpp_stream wrapper = nullptr;
    verlpp_error* e = api.stream_from_native(0, nullptr, &wrapper);
    if (e != nullptr) {
      ctx.expect_error(e, VERLPP_STATUS_INVALID_ARGUMENT, "stream_from_native(0, NULL)");
      return;
    }
    CHECK_THAT(wrapper != nullptr,
               "stream_from_native(0, NULL) succeeded with a NULL wrapper (NULL is the synchronous stream)");
    const size_t n = size_t(4) << 20;
    hw::DeviceBuffer a = d.allocate(n), b = d.allocate(n);
    fill_copy_check(ctx, wrapper, a.data(), b.data(), n, 0xC3, "fill and copies on the wrapped native default stream");
    ctx.expect_ok(api.stream_destroy(wrapper), "stream_destroy(wrapper of NULL)");
    fill_copy_check(ctx, nullptr, a.data(), b.data(), n, 0x3C, "the NULL stream after the wrapper went");
  });
  ctx.run("streams", "native stream: bad arguments are errors (1.1)", [&] {
    need_native_streams(ctx);
    verlpp_stream s = nullptr;
    ctx.expect_error(api.stream_from_native(ctx.device_count(), nullptr, &s), VERLPP_STATUS_INVALID_ARGUMENT,
                     "stream_from_native(device count, NULL)");
    ctx.expect_error(api.stream_from_native(0, nullptr, nullptr), VERLPP_STATUS_INVALID_ARGUMENT,
                     "stream_from_native(0, NULL, NULL)");
    void* native = nullptr;
    ctx.expect_error(api.stream_native_handle(nullptr, &native), VERLPP_STATUS_INVALID_ARGUMENT,
                     "stream_native_handle(NULL stream)");
    hw::Stream original = ctx.device().create_stream();
    ctx.expect_error(api.stream_native_handle(original.handle(), nullptr), VERLPP_STATUS_INVALID_ARGUMENT,
                     "stream_native_handle(stream, NULL)");
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
    auto want = [&](int64_t k, int64_t i, int64_t j) {
      return int32_t(i * b * c + j * c + k);
    };  // view[k, i, j] = x[i, j, k]
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
          CHECK_THAT(got == want(k, i, j), "device->host element [{}, {}, {}] = {}, want {}", k, i, j, got,
                     want(k, i, j));
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
    CHECK_THAT(again.to_host<int32_t>() == values,
               "device->device strided scatter did not restore the original buffer");
  });
  ctx.run("tensor_copy", "mismatched shapes are errors", [&] {
    CheckContext::need(reinterpret_cast<const void*>(ctx.api().tensor_copy), "tensor_copy");
    hw::Device d = ctx.device();
    DeviceTensor a(d, {4}, dl_f32()), b(d, {5}, dl_f32());
    ctx.expect_error(ctx.api().tensor_copy(&a.dl(), &b.dl(), nullptr), VERLPP_STATUS_INVALID_ARGUMENT,
                     "tensor_copy([4] -> [5])");
    DeviceTensor c(d, {4}, dl_i32());
    ctx.expect_error(ctx.api().tensor_copy(&a.dl(), &c.dl(), nullptr), VERLPP_STATUS_INVALID_ARGUMENT,
                     "tensor_copy(f32 -> i32)");
  });
}

}  // namespace

void run_memory_cases(CheckContext& ctx) {
  memory_cases(ctx);
  tensor_copy_cases(ctx);
}

void run_stream_cases(CheckContext& ctx) {
  stream_cases(ctx);
  native_stream_cases(ctx);
}

}  // namespace verlpp::conformance
