// ShardedWeights (see the header): the unit layout, gathering and releasing, gradient sums, offload.
// Gathers write full buffers through the communicator only (ProcessGroup::all_gather_into), never
// through a LibTorch op, so the version counters of the parameter views that an autograd graph
// saved stay as they were saved.
#include <verlpp/train/sharded_weights.hpp>

#include "sharded_units.hpp"

#include <verlpp/core/error.hpp>
#include <verlpp/hw/process_group.hpp>
#include <verlpp/hw/tensor_storage.hpp>

#include <ATen/core/grad_mode.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/zeros.h>

#include <algorithm>

namespace verlpp::train {
namespace detail {

void ShardedUnits::gather(size_t u) const {
  VERLPP_CHECK(!offloaded, "the sharded weights are offloaded to host memory: reload them before a forward");
  UnitState& unit = units[u];
  if (!per_use || unit.gathered) return;
  if (unit.prefetch.active()) {
    unit.prefetch.wait();
  } else {
    hw::restore_storage(unit.full);
    options.dp.group()->all_gather_into(unit.local, unit.full);
  }
  unit.gathered = true;
}

void ShardedUnits::prefetch(size_t u) const {
  if (!per_use || offloaded || u == 0 || u >= units.size()) return;
  UnitState& unit = units[u];
  if (unit.gathered || unit.prefetch.active()) return;
  hw::restore_storage(unit.full);
  unit.prefetch = options.dp.group()->start_all_gather_into(unit.local, unit.full);
  ++prefetched;
}

void ShardedUnits::release(size_t u) const {
  UnitState& unit = units[u];
  if (unit.prefetch.active()) {
    // Started but never used (a pass that ended early): the collective writes `full` until done.
    unit.prefetch.wait();
    unit.gathered = true;
  }
  if (!per_use || !unit.gathered) return;
  hw::release_storage(unit.full);
  unit.gathered = false;
}

at::Tensor ShardedUnits::run_layer(int64_t index, const model::LayerFn& layer, const at::Tensor& hidden,
                                   bool recompute) const {
  const size_t u = size_t(index) + 1;
  if (!at::GradMode::is_enabled()) {  // a forward without a backward: gather, run, free
    gather(u);
    if (options.forward_prefetch) prefetch(u + 1);
    at::Tensor out = layer(hidden);
    release(u);
    return out;
  }
  return gathered_layer(*this, u, layer, hidden, recompute);
}

void ShardedUnits::add_flat(size_t u, const at::Tensor& target, const std::vector<at::Tensor>& grads) const {
  const UnitState& unit = units[u];
  for (size_t k = 0; k < unit.params.size(); ++k) {
    if (!grads[k].defined()) continue;
    target.narrow(0, unit.offsets[k], grads[k].numel()).add_(grads[k].reshape({-1}));
  }
}

void ShardedUnits::reduce_gradients(size_t u, const std::vector<at::Tensor>& grads) const {
  at::NoGradGuard no_grad;
  const UnitState& unit = units[u];
  // Room first: the oldest reductions finish before this one's buffer is allocated.
  finish_reductions(options.overlap_reduce ? kReductionsInFlight - 1 : 0);
  Reduction r;
  r.unit = u;
  r.flat = at::zeros({unit.padded}, unit.full.options().dtype(at::kFloat));
  add_flat(u, r.flat, grads);
  r.mine = at::empty({unit.shard}, r.flat.options());
  if (options.overlap_reduce) {
    r.done = options.dp.group()->start_reduce_scatter_sum(r.flat, r.mine);
    ++overlapped_reductions;
  } else {
    options.dp.group()->reduce_scatter_sum(r.flat, r.mine);
  }
  reductions.push_back(std::move(r));
  if (!options.overlap_reduce) finish_reductions();
}

void ShardedUnits::finish_reductions(size_t keep) const {
  while (reductions.size() > keep) {
    Reduction& r = reductions.front();
    r.done.wait();
    UnitState& unit = units[r.unit];
    if (unit.grad.defined()) {
      unit.grad.add_(r.mine);
    } else {
      unit.grad = r.mine;
    }
    reductions.pop_front();
  }
}

}  // namespace detail

namespace {

using detail::UnitState;

// The unit of a parameter: 0 outside the decoder layers, 1 + i inside layer i.
size_t unit_of(const std::string& name, int64_t num_layers) {
  static const std::string prefix = "model.layers.";
  if (name.rfind(prefix, 0) != 0) return 0;
  const size_t dot = name.find('.', prefix.size());
  const int64_t layer = std::stoll(name.substr(prefix.size(), dot - prefix.size()));
  VERLPP_CHECK(layer >= 0 && layer < num_layers, "parameter '{}' names layer {} of a {}-layer model", name, layer,
               num_layers);
  return size_t(layer) + 1;
}

int64_t round_up(int64_t n, int64_t multiple) { return (n + multiple - 1) / multiple * multiple; }

// The units of `model` for `ranks` ranks: layout only, no tensors.
std::vector<UnitState> layout_units(const model::DecoderLM& model, int64_t ranks) {
  const int64_t layers = model.config().num_hidden_layers;
  std::vector<UnitState> units(size_t(layers) + 1);
  units[0].name = "outer";
  for (int64_t i = 0; i < layers; ++i) units[size_t(i) + 1].name = "model.layers." + std::to_string(i);
  std::vector<int64_t> used(units.size(), 0);
  const auto& named = model.named_parameters();
  for (size_t p = 0; p < named.size(); ++p) {
    const size_t u = unit_of(named[p].first, layers);
    UnitState& unit = units[u];
    unit.params.push_back(p);
    unit.offsets.push_back(used[u]);
    unit.shapes.emplace_back(named[p].second.sizes().begin(), named[p].second.sizes().end());
    used[u] = round_up(used[u] + named[p].second.numel(), detail::kUnitAlignment);
  }
  for (size_t u = 0; u < units.size(); ++u) {
    units[u].shard =
        std::max<int64_t>(round_up((used[u] + ranks - 1) / ranks, detail::kUnitAlignment), detail::kUnitAlignment);
    units[u].padded = units[u].shard * ranks;
  }
  return units;
}

// `source`'s parameters of `unit`, flat in `dtype` ([padded], zeros in the gaps), on `device`.
// `tensor_of(position)` gives parameter `position`'s values.
template <class TensorOf>
at::Tensor flat_unit(const UnitState& unit, TensorOf&& tensor_of, at::ScalarType dtype, c10::Device device) {
  at::Tensor flat = at::zeros({unit.padded}, at::TensorOptions().dtype(dtype).device(device));
  for (size_t k = 0; k < unit.params.size(); ++k) {
    const at::Tensor src = tensor_of(unit.params[k]);
    flat.narrow(0, unit.offsets[k], src.numel()).copy_(src.reshape({-1}));
  }
  return flat;
}

}  // namespace

ShardedWeights::ShardedWeights(const model::DecoderLM& source, ShardedWeightsOptions options)
    : options_(std::move(options)), units_(std::make_shared<detail::ShardedUnits>()), model_([&] {
        at::NoGradGuard no_grad;
        detail::ShardedUnits& s = *units_;
        s.options = options_;
        s.rank = options_.dp.rank();
        s.ranks = options_.shard ? options_.dp.world_size() : 1;
        s.shard_index = s.ranks > 1 ? s.rank : 0;
        s.per_use = options_.gather_per_use && options_.shard && options_.dp.world_size() > 1;
        s.reduces_in_backward = options_.trainable && s.ranks > 1;
        const c10::Device device = source.options().device;
        s.anchor = at::zeros({1}, at::TensorOptions().dtype(at::kFloat).device(device)).requires_grad_(true);
        s.units = layout_units(source, s.ranks);
        const auto& named = source.named_parameters();
        std::vector<at::Tensor> params(named.size());
        for (UnitState& unit : s.units) {
          at::Tensor flat = flat_unit(
              unit, [&](size_t p) { return named[p].second.detach(); }, options_.dtype, device);
          unit.full = flat;
          if (s.per_use) {
            unit.local = flat.narrow(0, int64_t(s.shard_index) * unit.shard, unit.shard).clone();
          } else {
            unit.local = flat.narrow(0, int64_t(s.shard_index) * unit.shard, unit.shard);
          }
          for (size_t k = 0; k < unit.params.size(); ++k) {
            at::Tensor view =
                unit.full.narrow(0, unit.offsets[k], named[unit.params[k]].second.numel()).view(unit.shapes[k]);
            if (options_.trainable) view.requires_grad_(true);
            unit.views.push_back(view);
            params[unit.params[k]] = view;
          }
          if (s.per_use) hw::release_storage(unit.full);
        }
        model::ModelOptions mo = source.options();
        mo.dtype = options_.dtype;
        mo.requires_grad = options_.trainable;
        model::DecoderLM m = model::DecoderLM::over(source.config(), mo, std::move(params));
        m.set_gradient_checkpointing(source.gradient_checkpointing());
        m.set_parameter_gather(units_);  // resident units too: a forward while offloaded is refused
        return m;
      }()) {
  VERLPP_CHECK(!options_.shard || options_.dp.world_size() == 1 || options_.dp.group() != nullptr,
               "sharded weights over {} ranks need a process group", options_.dp.world_size());
}

ShardedWeights::~ShardedWeights() = default;

bool ShardedWeights::gathers_per_use() const { return units_->per_use; }

int64_t ShardedWeights::prefetched_units() const { return units_->prefetched; }

int64_t ShardedWeights::overlapped_reductions() const { return units_->overlapped_reductions; }

int64_t ShardedWeights::num_units() const { return int64_t(units_->units.size()); }

std::string ShardedWeights::unit_name(int64_t unit) const { return units_->units.at(size_t(unit)).name; }

std::vector<std::string> ShardedWeights::unit_parameter_names(int64_t unit) const {
  std::vector<std::string> names;
  for (size_t p : units_->units.at(size_t(unit)).params) names.push_back(model_.named_parameters()[p].first);
  return names;
}

int64_t ShardedWeights::shard_elements(int64_t unit) const { return units_->units.at(size_t(unit)).shard; }

int64_t ShardedWeights::padded_elements(int64_t unit) const { return units_->units.at(size_t(unit)).padded; }

at::Tensor ShardedWeights::compute_shard(int64_t unit) const { return units_->units.at(size_t(unit)).local; }

std::vector<ShardedWeights::Placement> ShardedWeights::placements(int64_t unit) const {
  const UnitState& u = units_->units.at(size_t(unit));
  std::vector<Placement> out;
  for (size_t k = 0; k < u.params.size(); ++k) out.push_back({u.params[k], u.offsets[k], u.views[k].numel()});
  return out;
}

void ShardedWeights::release_gathered() {
  for (size_t u = 0; u < units_->units.size(); ++u) units_->release(u);
}

void ShardedWeights::publish() {
  at::NoGradGuard no_grad;
  detail::ShardedUnits& s = *units_;
  if (s.per_use) {
    release_gathered();
  } else if (s.ranks > 1) {
    // Resident and sharded (ZeRO-2): every rank's updated part into every full buffer.
    for (UnitState& unit : s.units) s.options.dp.group()->all_gather_into(unit.local.clone(), unit.full);
  }
  model_.note_weights_changed();
}

void ShardedWeights::collect_gradients() {
  at::NoGradGuard no_grad;
  detail::ShardedUnits& s = *units_;
  for (size_t u = 0; u < s.units.size(); ++u) {
    if (s.reduces_in_backward && u != 0) continue;  // the layers' gradients went during the backward
    UnitState& unit = s.units[u];
    std::vector<at::Tensor> grads;
    for (at::Tensor& view : unit.views) {
      grads.push_back(view.grad());
      if (view.grad().defined()) view.mutable_grad() = at::Tensor();
    }
    if (std::none_of(grads.begin(), grads.end(), [](const at::Tensor& g) { return g.defined(); })) continue;
    if (s.reduces_in_backward) {
      s.reduce_gradients(u, grads);
      continue;
    }
    // Whole units: a local sum per unit, summed over the ranks by finish_gradients.
    if (!unit.grad.defined()) unit.grad = at::zeros({unit.padded}, unit.full.options().dtype(at::kFloat));
    s.add_flat(u, unit.grad, grads);
  }
  // Nothing runs past the backward: the next micro-batch starts with no reduction buffer held.
  s.finish_reductions();
}

void ShardedWeights::finish_gradients() {
  at::NoGradGuard no_grad;
  detail::ShardedUnits& s = *units_;
  s.finish_reductions();
  const bool distributed = s.options.dp.is_distributed();
  for (UnitState& unit : s.units) {
    if (s.reduces_in_backward) {
      if (!unit.grad.defined()) unit.grad = at::zeros({unit.shard}, unit.full.options().dtype(at::kFloat));
      continue;
    }
    if (!unit.grad.defined()) unit.grad = at::zeros({unit.padded}, unit.full.options().dtype(at::kFloat));
    if (distributed) s.options.dp.group()->all_reduce_sum(unit.grad);  // whole units on every rank
  }
}

at::Tensor ShardedWeights::gradient_shard(int64_t unit) const { return units_->units.at(size_t(unit)).grad; }

void ShardedWeights::drop_gradients() {
  units_->finish_reductions();  // their buffers are the communicator's until they finish
  for (UnitState& unit : units_->units) {
    unit.grad = at::Tensor();
    for (at::Tensor& view : unit.views)
      if (view.grad().defined()) view.mutable_grad() = at::Tensor();
  }
}

void ShardedWeights::offload() {
  if (offloaded_) return;
  at::NoGradGuard no_grad;
  release_gathered();
  for (size_t u = 0; u < units_->units.size(); ++u) {
    UnitState& unit = units_->units[u];
    const at::Tensor& resident = units_->resident(u);
    if (!unit.host_copy.defined()) {
      std::vector<int64_t> shape(resident.sizes().begin(), resident.sizes().end());
      unit.host_copy = options_.host_memory != nullptr
                           ? hw::pinned_host_tensor(*options_.host_memory, shape, resident.scalar_type())
                           : at::empty(shape, resident.options().device(c10::kCPU));
    }
    unit.host_copy.copy_(resident);
    hw::release_storage(resident);
  }
  units_->offloaded = true;
  offloaded_ = true;
}

void ShardedWeights::reload() {
  if (!offloaded_) return;
  at::NoGradGuard no_grad;
  for (size_t u = 0; u < units_->units.size(); ++u) {
    const at::Tensor& resident = units_->resident(u);
    hw::restore_storage(resident);
    // No autograd graph is alive between stages, so the version bump of this copy is harmless.
    resident.detach().copy_(units_->units[u].host_copy);
  }
  units_->offloaded = false;
  offloaded_ = false;
}

void ShardedWeights::for_each_unit(const UnitFn& fn) {
  at::NoGradGuard no_grad;
  const auto& named = model_.named_parameters();
  for (size_t u = 0; u < units_->units.size(); ++u) {
    UnitState& unit = units_->units[u];
    const bool was_gathered = unit.gathered;
    units_->gather(u);
    std::vector<std::pair<std::string, at::Tensor>> tensors;
    for (size_t k = 0; k < unit.params.size(); ++k) tensors.emplace_back(named[unit.params[k]].first, unit.views[k]);
    fn(tensors);
    if (!was_gathered) units_->release(u);
  }
}

void ShardedWeights::import(const model::DecoderLM& source) {
  at::NoGradGuard no_grad;
  VERLPP_CHECK(source.named_parameters().size() == model_.named_parameters().size(),
               "ShardedWeights::import: the source has {} parameters, these weights {}",
               source.named_parameters().size(), model_.named_parameters().size());
  release_gathered();
  const bool was_offloaded = offloaded_;
  reload();
  detail::ShardedUnits& s = *units_;
  const auto& named = source.named_parameters();
  for (size_t u = 0; u < s.units.size(); ++u) {
    UnitState& unit = s.units[u];
    const at::Tensor& resident = s.resident(u);
    at::Tensor flat = flat_unit(
        unit, [&](size_t p) { return named[p].second.detach(); }, options_.dtype, resident.device());
    if (s.per_use) {
      unit.local.detach().copy_(flat.narrow(0, int64_t(s.shard_index) * unit.shard, unit.shard));
    } else {
      unit.full.detach().copy_(flat);
    }
  }
  if (was_offloaded) offload();
  model_.note_weights_changed();
}

int64_t ShardedWeights::resident_weight_bytes() const {
  int64_t bytes = 0;
  for (size_t u = 0; u < units_->units.size(); ++u) {
    const at::Tensor& resident = units_->resident(u);
    bytes += hw::storage_bytes(resident);
  }
  return bytes;
}

int64_t ShardedWeights::gradient_bytes() const {
  int64_t bytes = 0;
  for (const UnitState& unit : units_->units) bytes += hw::storage_bytes(unit.grad);
  for (const detail::ShardedUnits::Reduction& r : units_->reductions)
    bytes += hw::storage_bytes(r.flat) + hw::storage_bytes(r.mine);
  return bytes;
}

}  // namespace verlpp::train
