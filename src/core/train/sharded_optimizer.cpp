// ShardedOptimizer (see the header). The norm: with whole units (one rank, or ZeRO-0/1 layouts
// whose gradients were all-reduced) it is clip_grad_norm's, a norm of per-parameter fp32 norms,
// so one rank steps exactly as the replicated optimizer; with sharded units each rank's sum of
// squares in fp64, summed over the ranks.
#include "sharded_optimizer.hpp"

#include "sharded_units.hpp"

#include <verlpp/core/error.hpp>
#include <verlpp/hw/process_group.hpp>
#include <verlpp/hw/tensor_storage.hpp>
#include <verlpp/train/optimizer.hpp>

#include <ATen/core/grad_mode.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/linalg_vector_norm.h>
#include <ATen/ops/stack.h>
#include <ATen/ops/zeros.h>

#include <algorithm>
#include <cmath>

namespace verlpp::train::detail {
namespace {

// A host tensor [n] fp32 in the plugin's pinned memory (plain host memory without one).
at::Tensor host_vector(const hw::Plugin* plugin, int64_t n) {
  if (plugin != nullptr) return hw::pinned_host_tensor(*plugin, {n}, at::kFloat);
  return at::empty({n}, at::TensorOptions().dtype(at::kFloat));
}

}  // namespace

ShardedOptimizer::ShardedOptimizer(ShardedWeights& weights, const model::DecoderLM& masters,
                                   ShardedOptimizerOptions options)
    : weights_(weights), options_(options), device_(weights.model().options().device) {
  at::NoGradGuard no_grad;
  const ShardedUnits& s = weights_.units();
  steps_.assign(masters.named_parameters().size(), 0);
  units_.resize(s.units.size());
  for (size_t u = 0; u < s.units.size(); ++u) {
    UnitState& unit = units_[u];
    const int64_t n = s.units[u].shard;
    const at::Tensor compute = s.units[u].local;
    unit.master_is_compute = !options_.offload && compute.scalar_type() == at::kFloat;
    if (unit.master_is_compute) {
      unit.master = compute;
    } else if (options_.offload) {
      unit.master = host_vector(options_.host_memory, n);
    } else {
      unit.master = at::empty({n}, compute.options().dtype(at::kFloat));
    }
    if (options_.offload) {
      unit.exp_avg = host_vector(options_.host_memory, n).zero_();
      unit.exp_avg_sq = host_vector(options_.host_memory, n).zero_();
    } else {
      unit.exp_avg = at::zeros({n}, compute.options().dtype(at::kFloat));
      unit.exp_avg_sq = at::zeros({n}, compute.options().dtype(at::kFloat));
    }
  }
  import(masters);
}

void ShardedOptimizer::import(const model::DecoderLM& masters) {
  at::NoGradGuard no_grad;
  std::vector<at::Tensor> per_param;
  for (const auto& [name, p] : masters.named_parameters()) per_param.push_back(p.detach());
  for (size_t u = 0; u < units_.size(); ++u) {
    if (units_[u].master_is_compute) continue;  // the compute weights are the caller's to import
    units_[u].master.copy_(shard_of(int64_t(u), per_param, masters.options().device));
  }
}

at::Tensor ShardedOptimizer::shard_of(int64_t u, const std::vector<at::Tensor>& per_param, c10::Device device) const {
  const UnitState& unit = units_[size_t(u)];
  (void)unit;
  const detail::UnitState& layout = weights_.units().units[size_t(u)];
  const int64_t begin = int64_t(weights_.units().shard_index) * layout.shard, end = begin + layout.shard;
  at::Tensor out = at::zeros({layout.shard}, at::TensorOptions().dtype(at::kFloat).device(device));
  for (size_t k = 0; k < layout.params.size(); ++k) {
    const at::Tensor& t = per_param[layout.params[k]];
    if (!t.defined()) continue;
    const int64_t from = layout.offsets[k], to = from + t.numel();
    const int64_t b = std::max(begin, from), e = std::min(end, to);
    if (b >= e) continue;
    out.narrow(0, b - begin, e - b).copy_(t.reshape({-1}).narrow(0, b - from, e - b));
  }
  return out;
}

std::vector<AdamwRun> ShardedOptimizer::runs_of(int64_t u) const {
  const detail::UnitState& layout = weights_.units().units[size_t(u)];
  const int64_t begin = int64_t(weights_.units().shard_index) * layout.shard, end = begin + layout.shard;
  std::vector<AdamwRun> runs;
  for (size_t k = 0; k < layout.params.size(); ++k) {
    // Each parameter owns the elements up to the next one's (its alignment gap); the last one
    // owns the padding to the end of the unit.
    const int64_t from = layout.offsets[k];
    const int64_t to = k + 1 < layout.params.size() ? layout.offsets[k + 1] : layout.padded;
    const int64_t b = std::max(begin, from), e = std::min(end, to);
    if (b >= e) continue;
    const int64_t step = steps_[layout.params[k]];
    if (!runs.empty() && runs.back().step == step) {
      runs.back().length += e - b;
    } else {
      runs.push_back({b - begin, e - b, step});
    }
  }
  return runs;
}

double ShardedOptimizer::global_norm() const {
  const ShardedUnits& s = weights_.units();
  if (s.ranks == 1) {
    // clip_grad_norm's: the norm of the per-parameter norms in fp32, stacked in the model's
    // parameter order (the order of a reduction is part of its rounding).
    std::vector<at::Tensor> norms(steps_.size());
    for (const detail::UnitState& unit : s.units)
      for (size_t k = 0; k < unit.params.size(); ++k)
        norms[unit.params[k]] = unit.grad.narrow(0, unit.offsets[k], unit.views[k].numel()).norm();
    if (norms.empty()) return 0.0;
    return at::stack(norms).norm().item<double>();
  }
  at::Tensor squares = at::zeros({1}, at::TensorOptions().dtype(at::kDouble).device(device_));
  for (const detail::UnitState& unit : s.units)
    squares.add_(at::linalg_vector_norm(unit.grad, 2, c10::nullopt, false, at::kDouble).pow(2));
  s.options.dp.group()->all_reduce_sum(squares);
  return std::sqrt(squares.item<double>());
}

double ShardedOptimizer::step(const AdamWConfig& config, double lr) {
  at::NoGradGuard no_grad;
  weights_.finish_gradients();
  const double norm = global_norm();
  if (!std::isfinite(norm)) {
    weights_.drop_gradients();
    return norm;
  }
  const double coef = std::min(1.0, config.grad_clip / (norm + 1e-6));
  const ShardedUnits& s = weights_.units();
  if (coef < 1.0)
    for (const detail::UnitState& unit : s.units) unit.grad.mul_(coef);
  for (auto& count : steps_) ++count;  // every parameter steps, as in the data-parallel path
  const Staging staging = make_staging();
  for (size_t u = 0; u < units_.size(); ++u) step_unit(int64_t(u), config, lr, staging);
  weights_.drop_gradients();
  weights_.publish();
  return norm;
}

ShardedOptimizer::Staging ShardedOptimizer::make_staging() const {
  Staging staging;
  if (!options_.offload || options_.offloaded_step != OffloadedStep::kHost) return staging;
  int64_t largest = 0;
  for (const detail::UnitState& unit : weights_.units().units) largest = std::max(largest, unit.shard);
  const int64_t chunk = std::max<int64_t>(1, std::min(largest, options_.chunk_elements));
  staging.host_grad = host_vector(options_.host_memory, chunk);
  if (device_.type() != c10::kCPU)
    staging.device_master = at::empty({chunk}, at::TensorOptions().dtype(at::kFloat).device(device_));
  return staging;
}

void ShardedOptimizer::step_unit(int64_t u, const AdamWConfig& config, double lr, const Staging& staging) {
  UnitState& unit = units_[size_t(u)];
  const detail::UnitState& layout = weights_.units().units[size_t(u)];
  const at::Tensor& grad = layout.grad;
  const at::Tensor& compute = layout.local;
  const std::vector<AdamwRun> runs = runs_of(u);
  if (!options_.offload) {
    adamw_flat(unit.master, grad, unit.exp_avg, unit.exp_avg_sq, runs, config, lr);
    if (!unit.master_is_compute) compute.copy_(unit.master);
    return;
  }
  // Offloaded: chunk by chunk, the state never whole on the device.
  const int64_t n = layout.shard, chunk = std::max<int64_t>(1, std::min(n, options_.chunk_elements));
  for (int64_t begin = 0; begin < n; begin += chunk) {
    const int64_t len = std::min(chunk, n - begin);
    const std::vector<AdamwRun> part = runs_within(runs, begin, len);
    at::Tensor master = unit.master.narrow(0, begin, len), m = unit.exp_avg.narrow(0, begin, len),
               v = unit.exp_avg_sq.narrow(0, begin, len);
    if (options_.offloaded_step == OffloadedStep::kHost) {
      at::Tensor g = staging.host_grad.narrow(0, 0, len);
      g.copy_(grad.narrow(0, begin, len));
      adamw_host(master, g, m, v, part, config, lr);
      // fp32 up through pinned memory, the cast on the device: a cast on the host would go
      // through a pageable temporary, several times slower to copy.
      if (compute.is_cpu()) {
        compute.narrow(0, begin, len).copy_(master);
      } else {
        at::Tensor up = staging.device_master.narrow(0, 0, len);
        up.copy_(master);
        compute.narrow(0, begin, len).copy_(up);
      }
    } else {
      // Streamed through the device: the chunk's state up, the update there, the state down.
      at::Tensor dm = master.to(device_), dx = m.to(device_), dv = v.to(device_);
      adamw_flat(dm, grad.narrow(0, begin, len), dx, dv, part, config, lr);
      master.copy_(dm);
      m.copy_(dx);
      v.copy_(dv);
      compute.narrow(0, begin, len).copy_(dm);
    }
  }
}

at::Tensor ShardedOptimizer::gather_unit(int64_t u, const at::Tensor& shard) const {
  const ShardedUnits& s = weights_.units();
  const detail::UnitState& layout = s.units[size_t(u)];
  at::Tensor local = shard.to(device_).contiguous();
  if (s.ranks == 1) return local;
  at::Tensor full = at::empty({layout.padded}, local.options());
  s.options.dp.group()->all_gather_into(local, full);
  return full;
}

std::vector<at::Tensor> ShardedOptimizer::gather_masters(bool everywhere) const {
  at::NoGradGuard no_grad;
  const ShardedUnits& s = weights_.units();
  std::vector<at::Tensor> out(steps_.size());
  const bool keep = everywhere || s.rank == 0;
  for (size_t u = 0; u < units_.size(); ++u) {
    const detail::UnitState& layout = s.units[u];
    const at::Tensor full = gather_unit(int64_t(u), units_[u].master.to(at::kFloat));
    if (!keep) continue;
    const at::Tensor host = full.to(c10::kCPU);
    for (size_t k = 0; k < layout.params.size(); ++k)
      out[layout.params[k]] = host.narrow(0, layout.offsets[k], layout.views[k].numel()).view(layout.shapes[k]).clone();
  }
  return out;
}

void ShardedOptimizer::gather_state(std::vector<at::Tensor>& exp_avg, std::vector<at::Tensor>& exp_avg_sq) const {
  at::NoGradGuard no_grad;
  const ShardedUnits& s = weights_.units();
  exp_avg.assign(steps_.size(), at::Tensor());
  exp_avg_sq.assign(steps_.size(), at::Tensor());
  for (size_t u = 0; u < units_.size(); ++u) {
    const detail::UnitState& layout = s.units[u];
    const at::Tensor m = gather_unit(int64_t(u), units_[u].exp_avg), v = gather_unit(int64_t(u), units_[u].exp_avg_sq);
    if (s.rank != 0) continue;
    const at::Tensor hm = m.to(c10::kCPU), hv = v.to(c10::kCPU);
    for (size_t k = 0; k < layout.params.size(); ++k) {
      if (steps_[layout.params[k]] == 0) continue;
      const int64_t numel = layout.views[k].numel();
      exp_avg[layout.params[k]] = hm.narrow(0, layout.offsets[k], numel).view(layout.shapes[k]).clone();
      exp_avg_sq[layout.params[k]] = hv.narrow(0, layout.offsets[k], numel).view(layout.shapes[k]).clone();
    }
  }
}

void ShardedOptimizer::set_state(const std::vector<int64_t>& steps, const std::vector<at::Tensor>& exp_avg,
                                 const std::vector<at::Tensor>& exp_avg_sq) {
  VERLPP_CHECK(steps.size() == steps_.size() && exp_avg.size() == steps_.size() && exp_avg_sq.size() == steps_.size(),
               "sharded optimizer set_state: {} parameters, {} steps, {} + {} states", steps_.size(), steps.size(),
               exp_avg.size(), exp_avg_sq.size());
  at::NoGradGuard no_grad;
  for (size_t i = 0; i < steps.size(); ++i)
    VERLPP_CHECK(exp_avg[i].defined() == (steps[i] > 0) && exp_avg_sq[i].defined() == (steps[i] > 0),
                 "sharded optimizer set_state: parameter {} has step {} but {} state", i, steps[i],
                 exp_avg[i].defined() ? "a" : "no");
  for (size_t u = 0; u < units_.size(); ++u) {
    const c10::Device where = units_[u].exp_avg.device();
    units_[u].exp_avg.copy_(shard_of(int64_t(u), exp_avg, where));
    units_[u].exp_avg_sq.copy_(shard_of(int64_t(u), exp_avg_sq, where));
  }
  steps_ = steps;
}

int64_t ShardedOptimizer::master_bytes() const {
  int64_t bytes = 0;
  for (const UnitState& unit : units_)
    if (!unit.master_is_compute) bytes += hw::storage_bytes(unit.master);
  return bytes;
}

int64_t ShardedOptimizer::state_bytes() const {
  int64_t bytes = 0;
  for (const UnitState& unit : units_) bytes += hw::storage_bytes(unit.exp_avg) + hw::storage_bytes(unit.exp_avg_sq);
  return bytes;
}

}  // namespace verlpp::train::detail
