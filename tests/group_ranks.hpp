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
#include <memory>
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

// Rank `rank` of `world` ranks on this host (rendezvous at 127.0.0.1:`port`), with cpu_ref's
// device 0; collective over the ranks' threads.
inline std::unique_ptr<hw::ProcessGroup> join_local_group(int32_t rank, int32_t world, uint16_t port,
                                                          const hw::ProcessGroupOptions& options) {
  hw::WorldInfo w;
  w.rank = rank;
  w.world_size = w.local_world_size = world;
  w.local_rank = rank;
  w.master_port = port;
  return hw::ProcessGroup::create(w, hw::Device(cpu_ref(), 0), options);
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
        hw::ProcessGroupOptions options;
        options.timeout = timeout;
        auto group = join_local_group(r, world, port, options);
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
