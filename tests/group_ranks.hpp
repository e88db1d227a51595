// Ranks as threads of one test process (the data-parallel, sharded-training and tensor-parallel
// tests): each thread joins one process group over cpu_ref's Gloo communicator with its own
// TCPStore connection. Bodies record their results; Catch2's assertions are not thread-safe.
#pragma once

#include <verlpp/controller/launcher.hpp>
#include <verlpp/hw/device.hpp>
#include <verlpp/hw/plugin_registry.hpp>
#include <verlpp/hw/process_group.hpp>

#include <fmt/format.h>

#include <chrono>
#include <functional>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace verlpp::test {

inline const hw::Plugin& cpu_ref() {
  static const hw::Plugin plugin = hw::load_plugin_file(std::string(VERLPP_BIN_DIR) + "/libverlpp-plugin-cpu_ref.so");
  return plugin;
}

// Runs `body(group)` on `world` threads, each a rank of one process group whose collectives
// time out after `timeout`; throws the first error (the test fails with it).
inline void run_group_ranks(int32_t world, const std::function<void(const hw::ProcessGroup&)>& body,
                            std::chrono::milliseconds timeout = std::chrono::milliseconds(60000)) {
  const uint16_t port = controller::pick_free_port();
  std::vector<std::thread> threads;
  std::mutex mutex;
  std::string first_error;
  for (int32_t r = 0; r < world; ++r) {
    threads.emplace_back([&, r] {
      try {
        hw::WorldInfo w;
        w.rank = r;
        w.world_size = w.local_world_size = world;
        w.local_rank = r;
        w.master_port = port;
        hw::ProcessGroupOptions options;
        options.timeout = timeout;
        auto group = hw::ProcessGroup::create(w, hw::Device(cpu_ref(), 0), options);
        body(*group);
        group->barrier();
      } catch (const std::exception& e) {
        std::lock_guard<std::mutex> lock(mutex);
        if (first_error.empty()) first_error = fmt::format("rank {}: {}", r, e.what());
      }
    });
  }
  for (auto& t : threads) t.join();
  if (!first_error.empty()) throw std::runtime_error(first_error);
}

}  // namespace verlpp::test
