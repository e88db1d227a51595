// Ranks as threads of one test process, for the data-parallel and sharded-training tests
// (../group_ranks.hpp), with the trainer's view of them (DataParallel), the comparisons those
// tests make, and the batch and actor settings they share.
#pragma once

#include <verlpp/train/actor.hpp>
#include <verlpp/train/data_parallel.hpp>

#include "../group_ranks.hpp"
#include "tiny_fixture.hpp"

#include <fmt/format.h>

#include <ATen/core/Tensor.h>

#include <algorithm>
#include <functional>
#include <vector>

namespace verlpp::test {

// Runs `body(dp)` on `world` threads, each a rank of one process group (run_group_ranks).
inline void run_ranks(int32_t world, const std::function<void(const train::DataParallel&)>& body) {
  run_group_ranks(world,
                  [&](const hw::ProcessGroup& group) { body(train::DataParallel(&group, c10::Device(c10::kCPU))); });
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
