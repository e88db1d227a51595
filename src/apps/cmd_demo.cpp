// `verlpp demo`: for each loaded plugin: device facts, a host -> device -> device -> host round
// trip checked byte for byte, every kernel it offers run once on its device against the host's
// own path (ops::demo_kernels), and a one-rank all-reduce. Exit 1 if any check fails.
#include "commands.hpp"

#include "../core/ops/kernel_demo.hpp"

#include <verlpp/hw/communicator.hpp>
#include <verlpp/hw/device.hpp>
#include <verlpp/hw/kernels.hpp>
#include <verlpp/hw/plugin_registry.hpp>
#include <verlpp/hw/torch_device.hpp>

#include <c10/core/Device.h>
#include <fmt/format.h>

#include <chrono>
#include <cmath>
#include <cstring>
#include <iostream>
#include <numeric>
#include <vector>

namespace verlpp::apps {
namespace {

bool round_trip(const hw::Device& device) {
  constexpr size_t kBytes = size_t(8) << 20;
  std::vector<uint8_t> host(kBytes), back(kBytes, 0);
  std::iota(host.begin(), host.end(), uint8_t(7));
  hw::DeviceBuffer a = device.allocate(kBytes), b = device.allocate(kBytes);
  hw::Stream stream = device.create_stream();
  auto start = std::chrono::steady_clock::now();
  device.copy(a.data(), host.data(), kBytes, VERLPP_COPY_HOST_TO_DEVICE, &stream);
  device.copy(b.data(), a.data(), kBytes, VERLPP_COPY_DEVICE_TO_DEVICE, &stream);
  device.copy(back.data(), b.data(), kBytes, VERLPP_COPY_DEVICE_TO_HOST, &stream);
  stream.synchronize();
  double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  bool ok = std::memcmp(host.data(), back.data(), kBytes) == 0;
  std::cout << fmt::format("  round trip  host -> device -> device -> host, {} MiB: {} ({:.2f} ms)\n", kBytes >> 20,
                           ok ? "identical" : "MISMATCH", ms);
  return ok;
}

// Every kernel the plugin offers, once, against the host's own path on the same device.
bool kernel_check(const hw::Plugin& plugin) {
  hw::Kernels kernels(plugin);
  const std::vector<std::string> offered = kernels.available();
  if (offered.empty()) {
    std::cout << "  kernels     none offered (the host's LibTorch path runs instead)\n";
    return true;
  }
  c10::Device device(c10::kCPU);
  std::string why;
  if (hw::device_count(plugin) < 1 || !(why = hw::ready_torch_device(plugin, 0, &device)).empty()) {
    std::cout << fmt::format("  kernels     {} offered, not run here: {}\n", offered.size(),
                             why.empty() ? std::string("the plugin has no device") : why);
    return true;
  }
  bool all_ok = true;
  for (const ops::KernelDemoResult& r : ops::demo_kernels(kernels, device)) {
    if (!r.offered) {
      std::cout << fmt::format("  kernel      {}: not offered (the host's path runs instead)\n", r.kernel);
      continue;
    }
    all_ok &= r.ok;
    if (!r.error.empty()) {
      std::cout << fmt::format("  kernel      {} {} on {}: FAILED: {}\n", r.kernel, r.shape, device.str(), r.error);
      continue;
    }
    std::cout << fmt::format(
        "  kernel      {} {} on {} vs the host's path: max |diff| {:.2e} {}\n", r.kernel, r.shape, device.str(),
        r.worst, r.ok ? "(ok)" : fmt::format("(TOO LARGE: bound {:g} + {:g} |host|)", r.tolerance, r.tolerance));
  }
  return all_ok;
}

bool comm_check(const hw::Device& device) {
  if (!device.plugin().api().comm_create) {
    std::cout << "  collective  not offered\n";
    return true;
  }
  hw::Communicator comm = hw::Communicator::create(device, nullptr, {});
  std::vector<float> values = {1.5f, -2.0f, 3.25f};
  std::vector<int64_t> shape = {3};
  DLTensor t{};
  hw::DeviceBuffer buf = device.allocate(sizeof(float) * values.size());
  device.copy(buf.data(), values.data(), sizeof(float) * values.size(), VERLPP_COPY_HOST_TO_DEVICE);
  t.data = buf.data();
  t.device = {DLDeviceType(device.properties().dl_device_type), device.index()};
  t.ndim = 1;
  t.dtype = {kDLFloat, 32, 1};
  t.shape = shape.data();
  comm.all_reduce(t, hw::ReduceOp::sum);
  std::vector<float> back(values.size());
  device.copy(back.data(), buf.data(), sizeof(float) * back.size(), VERLPP_COPY_DEVICE_TO_HOST);
  bool ok = back == values;
  std::cout << fmt::format("  collective  all_reduce(sum) over 1 rank: {}\n", ok ? "ok" : "WRONG");
  return ok;
}

int run_demo() {
  const hw::DiscoveryResult& result = hw::plugins();
  if (result.loaded.empty()) {
    std::cout << "No plugins loaded (see `verlpp plugins`); nothing to demonstrate.\n";
    return result.disabled ? 0 : 1;
  }
  bool all_ok = true;
  for (const auto& plugin : result.loaded) {
    int32_t n = hw::device_count(plugin);
    std::cout << fmt::format("plugin {} {} ({} device(s), torch device type '{}')\n", plugin.display_name(),
                             plugin.version(), n, plugin.torch_device_type());
    for (int32_t d = 0; d < n; ++d) {
      hw::Device device(plugin, d);
      auto props = device.properties();
      auto [free_bytes, total] = device.memory_info();
      std::cout << fmt::format("  device {}    {} | {:.1f} of {:.1f} GiB free | {}\n", d, props.name,
                               double(free_bytes) / double(1ull << 30), double(total) / double(1ull << 30),
                               hw::capability_names(props.capabilities));
      device.health_check();
      all_ok &= round_trip(device);
      if (d == 0) all_ok &= comm_check(device);
    }
    all_ok &= kernel_check(plugin);
  }
  std::cout << (all_ok ? "demo: all checks passed\n" : "demo: SOME CHECKS FAILED\n");
  return all_ok ? 0 : 1;
}

}  // namespace

void register_demo_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("demo", "Round-trip data through every loaded plugin and check it");
  cmd->callback([] {
    int rc = run_demo();
    if (rc != 0) throw CLI::RuntimeError(rc);
  });
}

}  // namespace verlpp::apps
