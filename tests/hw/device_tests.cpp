// The host's C++ wrappers on the cpu_ref plugin: device facts, buffers, streams and events,
// kernels through the wrapper against plain loops, key-value stores and a communicator.
#include <catch2/catch.hpp>

#include "test_paths.hpp"

#include <verlpp/hw/communicator.hpp>
#include <verlpp/hw/device.hpp>
#include <verlpp/hw/kernels.hpp>
#include <verlpp/hw/kv_store.hpp>
#include <verlpp/hw/plugin_registry.hpp>
#include <verlpp/hw/torch_device.hpp>

#include <c10/core/Device.h>

#include <cmath>
#include <cstring>
#include <thread>

using namespace verlpp;

namespace {

const hw::Plugin& cpu_ref_plugin() {
  static const hw::Plugin p = hw::load_plugin_file(test::cpu_ref_path());
  return p;
}

// Whether this build's cpu_ref has its Gloo communicator (see plugins/cpu_ref/CMakeLists.txt).
constexpr bool kHasGloo = VERLPP_CPU_REF_HAS_GLOO;

// Without Gloo, a communicator must be refused as UNSUPPORTED (and the case ends there).
bool communicator_refused_without_gloo() {
  if (kHasGloo) return false;
  try {
    hw::Communicator::create(hw::Device(cpu_ref_plugin(), 0), nullptr, {});
    FAIL("cpu_ref built without Gloo created a communicator");
  } catch (const hw::PluginCallError& e) {
    CHECK(e.code() == VERLPP_STATUS_UNSUPPORTED);
  }
  return true;
}

const hw::Plugin& cpu_ref() { return cpu_ref_plugin(); }

DLTensor host_view(void* data, std::vector<int64_t>& shape, DLDataType dtype) {
  DLTensor t{};
  t.data = data;
  t.device = {kDLCPU, 0};
  t.ndim = int(shape.size());
  t.dtype = dtype;
  t.shape = shape.data();
  return t;
}

}  // namespace

TEST_CASE("cpu_ref device facts", "[hw][device]") {
  hw::Device d(cpu_ref(), 0);
  auto props = d.properties();
  CHECK(props.torch_device_type == "cpu");
  CHECK(props.dl_device_type == kDLCPU);
  CHECK(props.total_memory_bytes > 0);
  CHECK(props.has(VERLPP_DEVICE_CAP_COMMUNICATOR) == kHasGloo);
  CHECK_FALSE(props.has(VERLPP_DEVICE_CAP_PINNED_HOST_MEMORY));
  auto [free_bytes, total] = d.memory_info();
  CHECK(free_bytes <= total);
  CHECK((hw::capability_names(props.capabilities).find("communicator") != std::string::npos) == kHasGloo);
  CHECK(hw::torch_placement_problem("cpu").empty());
  CHECK_THROWS_WITH(hw::Device(cpu_ref(), 1), Catch::Contains("device index 1 out of range"));
}

TEST_CASE("plugin errors become exceptions naming the plugin and the call", "[hw][device]") {
  hw::Device d(cpu_ref(), 0);
  try {
    d.allocate(SIZE_MAX / 2);
    FAIL("allocation succeeded");
  } catch (const hw::PluginCallError& e) {
    CHECK(e.code() == VERLPP_STATUS_OUT_OF_MEMORY);
    CHECK_THAT(e.what(), Catch::Contains("plugin cpu_ref: mem_alloc") && Catch::Contains("OUT_OF_MEMORY"));
  }
}

TEST_CASE("buffers, streams and events on cpu_ref", "[hw][device]") {
  hw::Device d(cpu_ref(), 0);
  hw::Stream s = d.create_stream();
  CHECK(s.handle() != nullptr);
  hw::Event a = d.create_event(), b = d.create_event();
  std::vector<float> in(1000), out(1000, 0.0f);
  for (size_t i = 0; i < in.size(); ++i) in[i] = float(i) * 0.5f;
  hw::DeviceBuffer buf = d.allocate(in.size() * sizeof(float));
  a.record(s);
  d.copy(buf.data(), in.data(), in.size() * sizeof(float), VERLPP_COPY_HOST_TO_DEVICE, &s);
  d.copy(out.data(), buf.data(), out.size() * sizeof(float), VERLPP_COPY_DEVICE_TO_HOST, &s);
  b.record(s);
  s.synchronize();
  CHECK(out == in);
  CHECK(b.is_complete());
  CHECK(b.elapsed_ms_since(a) >= 0.0f);
  // Moving a buffer transfers ownership (one free, no double free).
  hw::DeviceBuffer moved = std::move(buf);
  CHECK(buf.data() == nullptr);
  CHECK(moved.size() == in.size() * sizeof(float));
}

TEST_CASE("kernels through the wrapper match plain loops", "[hw][kernels]") {
  hw::Kernels k(cpu_ref());
  CHECK(k.available() == std::vector<std::string>{"logprob_entropy", "rms_norm", "rotary_embedding",
                                                  "paged_attention_decode", "sample", "logprob_backward", "silu_mul",
                                                  "silu_mul_backward", "add_rms_norm", "rotary_kv_store",
                                                  "adamw_update", "rotary_paged_attention_decode"});
  const int64_t n = 3, v = 6;
  std::vector<float> logits = {0.1f, -2.0f, 3.0f, 0.5f,  0.0f, 1.0f,  5.0f, 5.0f,  5.0f,
                               5.0f, 5.0f,  5.0f, -1.0f, 2.0f, -3.0f, 4.0f, -5.0f, 6.0f};
  std::vector<int64_t> labels = {2, 0, 5};
  std::vector<float> lp(3), ent(3);
  std::vector<int64_t> s_logits = {n, v}, s_n = {n};
  DLTensor tl = host_view(logits.data(), s_logits, {kDLFloat, 32, 1});
  DLTensor ty = host_view(labels.data(), s_n, {kDLInt, 64, 1});
  DLTensor tlp = host_view(lp.data(), s_n, {kDLFloat, 32, 1});
  DLTensor tent = host_view(ent.data(), s_n, {kDLFloat, 32, 1});
  k.call<hw::KernelId::logprob_entropy>(&tl, &ty, 2.0f, &tlp, &tent, nullptr);
  for (int64_t r = 0; r < n; ++r) {
    double z[6], mx = -1e300, sum = 0, weighted = 0;
    for (int j = 0; j < v; ++j) {
      z[j] = logits[size_t(r * v + j)] / 2.0;
      mx = std::max(mx, z[j]);
    }
    for (int j = 0; j < v; ++j) {
      sum += std::exp(z[j] - mx);
      weighted += std::exp(z[j] - mx) * z[j];
    }
    double lse = mx + std::log(sum);
    CHECK(lp[size_t(r)] == Approx(z[labels[size_t(r)]] - lse).margin(1e-6));
    CHECK(ent[size_t(r)] == Approx(lse - weighted / sum).margin(1e-6));
  }
  // Row 1 is uniform: entropy log(6), log-prob -log(6).
  CHECK(ent[1] == Approx(std::log(6.0)).margin(1e-6));
  CHECK(lp[1] == Approx(-std::log(6.0)).margin(1e-6));
  // A label outside the vocabulary names the row.
  labels[2] = 6;
  CHECK_THROWS_WITH(k.call<hw::KernelId::logprob_entropy>(&tl, &ty, 1.0f, &tlp, nullptr, nullptr),
                    Catch::Contains("label 6 at row 2"));
}

// L = sum_r g_lp[r] log p(label_r) + g_ent[r] H_r over softmax(logits / T), in fp64.
static double logprob_entropy_loss(const std::vector<double>& logits, int64_t n, int64_t v,
                                   const std::vector<int64_t>& labels, const std::vector<double>& g_lp,
                                   const std::vector<double>& g_ent, double t) {
  double loss = 0;
  for (int64_t r = 0; r < n; ++r) {
    double mx = -1e300, sum = 0, weighted = 0;
    for (int64_t j = 0; j < v; ++j) mx = std::max(mx, logits[size_t(r * v + j)] / t);
    for (int64_t j = 0; j < v; ++j) {
      const double z = logits[size_t(r * v + j)] / t;
      sum += std::exp(z - mx);
      weighted += std::exp(z - mx) * z;
    }
    const double lse = mx + std::log(sum);
    loss += g_lp[size_t(r)] * (logits[size_t(r * v + labels[size_t(r)])] / t - lse) +
            g_ent[size_t(r)] * (lse - weighted / sum);
  }
  return loss;
}

TEST_CASE("kernels: logprob_backward through the wrapper is the finite-difference gradient of logprob_entropy's loss",
          "[hw][kernels]") {
  hw::Kernels k(cpu_ref());
  const int64_t n = 3, v = 7;
  const double t = 0.8;
  std::vector<float> logits = {0.1f, -2.0f, 3.0f, 0.5f,  0.0f, 1.0f,  2.5f, 5.0f,  5.0f, 5.0f, 5.0f,
                               5.0f, 5.0f,  5.0f, -1.0f, 2.0f, -3.0f, 4.0f, -5.0f, 6.0f, 0.25f};
  std::vector<int64_t> labels = {2, 0, 6};
  std::vector<float> g_lp = {1.0f, -0.5f, 0.25f}, g_ent = {-0.3f, 2.0f, 0.7f}, lse(3), mean_z(3), lp(3), ent(3);
  std::vector<int64_t> s_logits = {n, v}, s_n = {n};
  DLTensor tl = host_view(logits.data(), s_logits, {kDLFloat, 32, 1}),
           ty = host_view(labels.data(), s_n, {kDLInt, 64, 1});
  DLTensor tlp = host_view(lp.data(), s_n, {kDLFloat, 32, 1}), tent = host_view(ent.data(), s_n, {kDLFloat, 32, 1});
  k.call<hw::KernelId::logprob_entropy>(&tl, &ty, float(t), &tlp, &tent, nullptr);
  // What a trainer saves from the forward: lse = z_label - log p, E_p[z] = lse - H.
  for (int64_t r = 0; r < n; ++r) {
    lse[size_t(r)] = float(logits[size_t(r * v + labels[size_t(r)])] / t - lp[size_t(r)]);
    mean_z[size_t(r)] = lse[size_t(r)] - ent[size_t(r)];
  }
  std::vector<float> grad(size_t(n * v));
  DLTensor tlse = host_view(lse.data(), s_n, {kDLFloat, 32, 1}), tmz = host_view(mean_z.data(), s_n, {kDLFloat, 32, 1});
  DLTensor tglp = host_view(g_lp.data(), s_n, {kDLFloat, 32, 1}),
           tgent = host_view(g_ent.data(), s_n, {kDLFloat, 32, 1});
  DLTensor tgrad = host_view(grad.data(), s_logits, {kDLFloat, 32, 1});
  k.call<hw::KernelId::logprob_backward>(&tl, &ty, &tlse, &tglp, &tmz, &tgent, float(t), &tgrad, nullptr);

  std::vector<double> x(logits.begin(), logits.end()), glp(g_lp.begin(), g_lp.end()), gent(g_ent.begin(), g_ent.end());
  const double h = 1e-5;
  for (size_t i = 0; i < x.size(); ++i) {
    std::vector<double> up = x, down = x;
    up[i] += h;
    down[i] -= h;
    const double numeric = (logprob_entropy_loss(up, n, v, labels, glp, gent, t) -
                            logprob_entropy_loss(down, n, v, labels, glp, gent, t)) /
                           (2 * h);
    CHECK(grad[i] == Approx(numeric).margin(2e-5));
  }
  // In place (out_grad = logits), log-prob term only: the same values as a separate output.
  std::vector<float> separate(size_t(n * v));
  DLTensor tsep = host_view(separate.data(), s_logits, {kDLFloat, 32, 1});
  k.call<hw::KernelId::logprob_backward>(&tl, &ty, &tlse, &tglp, nullptr, nullptr, float(t), &tsep, nullptr);
  k.call<hw::KernelId::logprob_backward>(&tl, &ty, &tlse, &tglp, nullptr, nullptr, float(t), &tl, nullptr);
  CHECK(logits == separate);
  // mean_z without grad_entropy is refused by name.
  CHECK_THROWS_WITH(k.call<hw::KernelId::logprob_backward>(&tl, &ty, &tlse, &tglp, &tmz, nullptr, 1.0f, &tsep, nullptr),
                    Catch::Contains("mean_z and grad_entropy"));
}

TEST_CASE("kernels wrap native streams through ABI 1.1, cached and destroyed with the object",
          "[hw][kernels][streams]") {
  const hw::Plugin& p = cpu_ref();
  const verlpp_plugin_api& api = p.api();
  REQUIRE(p.abi_minor() >= 1);
  hw::Device d(p, 0);
  hw::Stream original = d.create_stream();
  void* native = nullptr;
  p.check(api.stream_native_handle(original.handle(), &native), "stream_native_handle");
  REQUIRE(native != nullptr);
  verlpp_stream wrapper = nullptr, default_wrapper = nullptr;
  {
    hw::Kernels k(p);
    CHECK(k.wraps_native_streams());
    // LibTorch's CPU "stream" is never wrapped: the NULL stream, as before 1.1.
    CHECK(k.current_stream(c10::Device(c10::kCPU)) == nullptr);
    wrapper = k.native_stream(0, native);
    CHECK(wrapper != nullptr);
    CHECK(wrapper != original.handle());
    CHECK(k.native_stream(0, native) == wrapper);  // cached per (device, handle)
    default_wrapper = k.native_stream(0, nullptr);
    CHECK(default_wrapper != nullptr);
    CHECK(default_wrapper != wrapper);
    void* back = nullptr;
    p.check(api.stream_native_handle(wrapper, &back), "stream_native_handle");
    CHECK(back == native);
    // Work on the wrapper, through the kernel table too.
    std::vector<float> x = {1.0f, 2.0f, 3.0f, 4.0f}, w = {1.0f, 1.0f, 1.0f, 1.0f}, out(4, 0.0f);
    std::vector<int64_t> s_x = {1, 4}, s_w = {4};
    DLTensor tx = host_view(x.data(), s_x, {kDLFloat, 32, 1}), tw = host_view(w.data(), s_w, {kDLFloat, 32, 1}),
             tout = host_view(out.data(), s_x, {kDLFloat, 32, 1});
    k.call<hw::KernelId::rms_norm>(&tx, &tw, 0.0f, &tout, wrapper);
    p.check(api.stream_synchronize(wrapper), "stream_synchronize");
    CHECK(out[3] == Approx(4.0 / std::sqrt(7.5)).epsilon(1e-6));
    // A handle the plugin refuses: NULL (the synchronous stream), remembered, not retried.
    CHECK(k.native_stream(0, &x) == nullptr);
    CHECK(k.native_stream(0, &x) == nullptr);
  }
  // The wrappers are gone with the Kernels object; the stream they wrapped is not.
  void* gone = nullptr;
  verlpp_error* e = api.stream_native_handle(wrapper, &gone);
  REQUIRE(e != nullptr);
  CHECK(e->code == VERLPP_STATUS_INVALID_ARGUMENT);
  api.error_free(e);
  e = api.stream_native_handle(default_wrapper, &gone);
  REQUIRE(e != nullptr);
  api.error_free(e);
  original.synchronize();
  std::vector<uint8_t> a(64, 7), b(64, 0);
  hw::DeviceBuffer buf = d.allocate(64);
  d.copy(buf.data(), a.data(), 64, VERLPP_COPY_HOST_TO_DEVICE, &original);
  d.copy(b.data(), buf.data(), 64, VERLPP_COPY_DEVICE_TO_HOST, &original);
  original.synchronize();
  CHECK(b == a);
}

TEST_CASE("kernels never call 1.1 slots of a plugin that says minor 0", "[hw][kernels][streams]") {
  // Its table is full size with junk in the 1.1 slots: calling one would crash.
  hw::Plugin p = hw::load_plugin_file(test::plugin_case_file("minor0", "minorzero"));
  CHECK(p.abi_minor() == 0);
  hw::Kernels k(p);
  CHECK_FALSE(k.wraps_native_streams());
  CHECK(k.native_stream(0, nullptr) == nullptr);
  CHECK(k.current_stream(c10::Device(c10::kCPU)) == nullptr);
}

TEST_CASE("in-process key-value store", "[hw][kv]") {
  auto store = hw::make_memory_store();
  store->set("a", {1, 2, 3});
  CHECK(store->get("a", std::chrono::milliseconds(10)) == std::vector<uint8_t>{1, 2, 3});
  CHECK(store->add("n", 5) == 5);
  CHECK(store->add("n", -2) == 3);
  CHECK_THROWS_WITH(store->get("missing", std::chrono::milliseconds(50)),
                    Catch::Contains("'missing'") && Catch::Contains("50 ms"));
  std::thread late([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    store->set("late", {9});
  });
  CHECK(store->get("late", std::chrono::milliseconds(5000)) == std::vector<uint8_t>{9});
  late.join();
}

TEST_CASE("TCP store: server and client in one process", "[hw][kv]") {
  hw::TcpStoreOptions server;
  server.is_server = true;
  server.world_size = 2;
  server.timeout = std::chrono::milliseconds(10000);
  auto s = hw::make_tcp_store(server);
  hw::TcpStoreOptions client = server;
  client.is_server = false;
  client.port = hw::tcp_store_port(*s);
  CHECK(client.port != 0);
  auto c = hw::make_tcp_store(client);
  s->set("k", {42});
  CHECK(c->get("k", std::chrono::milliseconds(1000)) == std::vector<uint8_t>{42});
  CHECK(c->add("count", 2) == 2);
  CHECK(s->add("count", 3) == 5);
  CHECK_THROWS_WITH(c->get("never", std::chrono::milliseconds(100)), Catch::Contains("'never'"));
  hw::TcpStoreOptions nobody;
  nobody.port = 1;  // nothing listens there
  nobody.timeout = std::chrono::milliseconds(300);
  CHECK_THROWS_WITH(hw::make_tcp_store(nobody), Catch::Contains("cannot connect to the rendezvous store"));
}

TEST_CASE("communicator: two ranks in one process over the TCP store", "[hw][comm]") {
  if (communicator_refused_without_gloo()) return;
  hw::TcpStoreOptions so;
  so.is_server = true;
  so.world_size = 2;
  so.timeout = std::chrono::milliseconds(20000);
  auto server = hw::make_tcp_store(so);
  so.is_server = false;
  so.port = hw::tcp_store_port(*server);
  auto client = hw::make_tcp_store(so);
  hw::Device d(cpu_ref(), 0);
  std::vector<float> results[2];
  auto rank_main = [&](int rank, std::shared_ptr<hw::KvStore> store) {
    hw::CommunicatorOptions co;
    co.rank = rank;
    co.world_size = 2;
    co.timeout = std::chrono::milliseconds(20000);
    co.key_prefix = "unit/";
    hw::Communicator comm = hw::Communicator::create(d, store, co);
    std::vector<float> x = {float(rank + 1), float(10 * (rank + 1)), -3.0f};
    std::vector<int64_t> shape = {3};
    DLTensor t = host_view(x.data(), shape, {kDLFloat, 32, 1});
    comm.all_reduce(t, hw::ReduceOp::max);
    results[rank] = x;
  };
  std::thread r1(rank_main, 1, client);
  rank_main(0, server);
  r1.join();
  CHECK(results[0] == std::vector<float>{2.0f, 20.0f, -3.0f});
  CHECK(results[1] == results[0]);
}

TEST_CASE("communicator: a missing rank is a timeout naming the rendezvous", "[hw][comm]") {
  if (communicator_refused_without_gloo()) return;
  auto store = hw::make_memory_store();
  hw::CommunicatorOptions co;
  co.rank = 0;
  co.world_size = 2;
  co.timeout = std::chrono::milliseconds(500);
  auto start = std::chrono::steady_clock::now();
  try {
    hw::Communicator::create(hw::Device(cpu_ref(), 0), store, co);
    FAIL("communicator created without its peer");
  } catch (const hw::PluginCallError& e) {
    CHECK(e.code() == VERLPP_STATUS_TIMEOUT);
    CHECK_THAT(e.what(), Catch::Contains("rank 0/2") && Catch::Contains("rendezvous"));
  }
  CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(30));
}
