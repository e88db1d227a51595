// choose_device over made-up plugin lists: auto prefers the best accelerator plugin, an explicit
// type picks its plugin, and a type this LibTorch cannot place tensors on (privateuseone without a
// registered backend, cuda on a CPU build, an unknown type) is an error naming the plugin, never
// the CPU instead. With a PrivateUse1 device guard registered, privateuseone is the device chosen.
#include <verlpp/controller/device_choice.hpp>
#include <verlpp/core/error.hpp>
#include <verlpp/hw/torch_device.hpp>

#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <c10/core/impl/FakeGuardImpl.h>

#include <atomic>
// Catch2 last: LibTorch 2.x headers define glog's CHECK, which would otherwise replace Catch's.
#include <catch2/catch.hpp>

using namespace verlpp::controller;
using Catch::Contains;

namespace {

const DeviceCandidate kCpuRef{"cpu_ref", "cpu", 10};
const DeviceCandidate kAcme{"acme", "privateuseone", 5};
const DeviceCandidate kCudaLike{"cudalike", "cuda", 7};
const DeviceCandidate kOdd{"odd", "tpu", 9};

std::string error_of(const std::string& wanted, const std::vector<DeviceCandidate>& candidates, int32_t rank = 0) {
  try {
    choose_device(wanted, candidates, rank, "trainer.device");
  } catch (const verlpp::Error& e) {
    return e.what();
  }
  return "";
}

// Registers a PrivateUse1 device guard for the test's scope and restores what was there.
struct PrivateUse1Registered {
  static std::atomic<const c10::impl::DeviceGuardImplInterface*>& slot() {
    return c10::impl::device_guard_impl_registry[static_cast<size_t>(c10::DeviceType::PrivateUse1)];
  }
  const c10::impl::DeviceGuardImplInterface* before = slot().load();
  PrivateUse1Registered() {
    // Leaked on purpose: the registry does not own its entries (their destructor is deleted).
    static const auto* fake = new c10::impl::FakeGuardImpl<c10::DeviceType::PrivateUse1>();
    slot().store(fake);
  }
  ~PrivateUse1Registered() { slot().store(before); }
};

}  // namespace

TEST_CASE("choose_device: cpu plugins and no plugin run on the host", "[device]") {
  DeviceChoice none = choose_device("auto", {}, 3, "trainer.device");
  CHECK(none.device == c10::Device(c10::kCPU));
  CHECK(none.plugin.empty());
  DeviceChoice cpu = choose_device("auto", {kCpuRef}, 3, "trainer.device");
  CHECK(cpu.device == c10::Device(c10::kCPU));
  CHECK(cpu.plugin == "cpu_ref");
  // Asked for the host beside an accelerator plugin: the cpu plugin, on the CPU.
  DeviceChoice host = choose_device("cpu", {kAcme, kCpuRef, kCudaLike}, 1, "trainer.device");
  CHECK(host.device == c10::Device(c10::kCPU));
  CHECK(host.plugin == "cpu_ref");
}

TEST_CASE("choose_device: privateuseone without a registered backend is refused, naming the plugin", "[device]") {
  REQUIRE_FALSE(c10::impl::hasDeviceGuardImpl(c10::DeviceType::PrivateUse1));
  const std::string problem = verlpp::hw::torch_placement_problem("privateuseone");
  CHECK_THAT(problem, Contains("this LibTorch has no PrivateUse1 backend registered"));
  // auto prefers acme over cpu_ref (its devices are not the host's), whatever the scores.
  CHECK_THAT(error_of("auto", {kCpuRef, kAcme}),
             Contains("trainer.device: auto chose plugin acme, whose devices are privateuseone, but " + problem) &&
                 Contains("trainer.device=cpu runs on the host without it"));
  CHECK_THAT(error_of("privateuseone", {kCpuRef, kAcme}),
             Contains("'privateuseone' chose plugin acme, whose devices are privateuseone, but " + problem));
  CHECK_THAT(error_of("privateuseone", {kCpuRef}), Contains("privateuseone was asked for, but " + problem));
}

TEST_CASE("choose_device: with a PrivateUse1 backend registered the run goes to the plugin's device", "[device]") {
  PrivateUse1Registered registered;
  REQUIRE(verlpp::hw::torch_placement_problem("privateuseone").empty());
  DeviceChoice a = choose_device("auto", {kCpuRef, kAcme}, 3, "trainer.device");
  CHECK(a.device == c10::Device(c10::DeviceType::PrivateUse1, 3));  // one process per device: the local rank's
  CHECK(a.plugin == "acme");
  DeviceChoice b = choose_device("privateuseone:1", {kCpuRef, kAcme}, 3, "trainer.device");
  CHECK(b.device == c10::Device(c10::DeviceType::PrivateUse1, 1));
  CHECK(b.plugin == "acme");
}

TEST_CASE("choose_device: cuda lands on the local rank's GPU, or is refused on a CPU LibTorch", "[device]") {
  const std::string problem = verlpp::hw::torch_placement_problem("cuda");
  if (problem.empty()) {
    DeviceChoice c = choose_device("auto", {kCpuRef, kCudaLike}, 2, "trainer.device");
    CHECK(c.device == c10::Device(c10::kCUDA, 2));
    CHECK(c.plugin == "cudalike");
    CHECK(choose_device("cuda", {}, 1, "trainer.device").device == c10::Device(c10::kCUDA, 1));
  } else {
    CHECK_THAT(problem, Contains("this LibTorch build has no CUDA"));
    CHECK_THAT(error_of("auto", {kCpuRef, kCudaLike}),
               Contains("auto chose plugin cudalike, whose devices are cuda, but " + problem));
    CHECK_THAT(error_of("cuda", {kCpuRef}), Contains("cuda was asked for, but " + problem));
  }
  // Of two accelerator plugins, the better-scoring one.
  CHECK_THAT(error_of("auto", {kAcme, kCudaLike}), problem.empty() ? Contains("") : Contains("plugin cudalike"));
}

TEST_CASE("choose_device: unknown types and malformed requests are errors", "[device]") {
  CHECK_THAT(error_of("auto", {kCpuRef, kOdd}),
             Contains("auto chose plugin odd, whose devices are tpu, but unknown torch device type 'tpu'"));
  CHECK_THAT(error_of("tpu", {kCpuRef}),
             Contains("trainer.device: 'tpu' is not one of auto, cpu, cuda, privateuseone"));
  CHECK_THAT(error_of("cuda:x", {}), Contains("expected a device type, optionally with a device index"));
  CHECK_THAT(error_of("auto:1", {}), Contains("expected a device type"));
}
