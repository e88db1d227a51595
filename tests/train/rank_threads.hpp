// Ranks as threads of one test process, for the data-parallel and sharded-training tests: each
// thread joins one process group over cpu_ref's Gloo communicator with its own TCPStore
// connection, and bodies record their results (Catch2's assertions are not thread-safe).
#pragma once

#include <verlpp/controller/launcher.hpp>
#include <verlpp/hw/device.hpp>
#include <verlpp/hw/plugin_registry.hpp>
#include <verlpp/hw/process_group.hpp>
#include <verlpp/train/actor.hpp>
#include <verlpp/train/data_parallel.hpp>

#include "tiny_fixture.hpp"

#include <fmt/format.h>

#include <ATen/core/Tensor.h>

#include <algorithm>
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

// Runs `body(dp)` on `world` threads, each a rank of one process group; throws the first error
// (the test fails with it). Bodies only record results: Catch2's assertions are not thread-safe.
inline void run_ranks(int32_t world, const std::function<void(const train::DataParallel&)>& body) {
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
        options.timeout = std::chrono::milliseconds(60000);
        auto group = hw::ProcessGroup::create(w, hw::Device(cpu_ref(), 0), options);
        body(train::DataParallel(group.get(), c10::Device(c10::kCPU)));
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

inline double worst_diff(const std::vector<at::Tensor>& a, const std::vector<at::Tensor>& b) {
  double worst = 0;
  for (size_t i = 0; i < a.size(); ++i) worst = std::max(worst, a[i].sub(b[i]).abs().max().item<double>());
  return worst;
}

// max |a - b| / max |b| over all parameters.
inline double worst_relative(const std::vector<at::Tensor>& a, const std::vector<at::Tensor>& b) {
  double scale = 0;
  for (const auto& t : b) scale = std::max(scale, t.abs().max().item<double>());
  return worst_diff(a, b) / scale;
}

// The batch the data-parallel and sharded tests split: 16 rows with ragged prompts (5) and
// responses (4), so that partitions have work to do.
constexpr int64_t kRanksRows = 16, kRanksPrompt = 5, kRanksResponse = 4;
inline data::Batch ranks_batch(const model::DecoderLM& m) {
  return policy_batch(
      m, kRanksRows, kRanksPrompt, kRanksResponse, 11, [](int64_t r) { return r % 4; },
      [](int64_t r) { return (r * 7) % 4; });
}

// Two optimizer steps of four micro-batches each per update over ranks_batch, entropy in the loss.
inline train::ActorConfig ranks_actor_config() {
  train::ActorConfig c;
  c.ppo_mini_batch_size = 8;
  c.ppo_micro_batch_size = 2;
  c.optim.eps = 1e-3;
  c.entropy_coeff = 0.01;
  return c;
}

}  // namespace verlpp::test
