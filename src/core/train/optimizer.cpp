// OptimizerStep: the one train file that includes LibTorch's optimizer headers (the C++
// frontend needs full ATen), hence the #undef of the lean-include guard below. Saving and loading
// reach into AdamW's state map, whose key changed between LibTorch versions (1.x: the TensorImpl
// pointer printed as a string; 2.x: the pointer itself): state_key() picks by the map's key type.
#undef TORCH_ASSERT_ONLY_METHOD_OPERATORS
#include <verlpp/train/optimizer.hpp>

#include "plugin_adamw.hpp"
#include "sharded_adamw.hpp"
#include "sharded_optimizer.hpp"

#include <verlpp/hw/kernels.hpp>
#include <verlpp/train/mixed_precision.hpp>

#include <verlpp/core/error.hpp>
#include <verlpp/core/strings.hpp>
#include <verlpp/model/safetensors.hpp>

#include <torch/optim/adamw.h>

#include <ATen/ops/_foreach_mul.h>
#include <ATen/ops/_foreach_norm.h>
#include <ATen/ops/empty_like.h>
#include <ATen/ops/tensor.h>
#include <ATen/ops/zeros_like.h>
#include <ATen/ops/full.h>
#include <ATen/ops/stack.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <map>
#include <set>
#include <sstream>
#include <type_traits>

// LibTorch 2.x's fused multi-tensor AdamW kernel (CUDA): one launch per few hundred tensors
// instead of about ten ops per parameter.
#if __has_include(<ATen/ops/_fused_adamw.h>)
#include <ATen/ops/_fused_adamw.h>
#define VERLPP_HAVE_FUSED_ADAMW 1
#endif

namespace verlpp::train {
namespace {

using StateMap = std::decay_t<decltype(std::declval<torch::optim::AdamW&>().state())>;
// AdamWParamState::step()'s type (int64_t in LibTorch 1.13).
using StepType = std::decay_t<decltype(std::declval<const torch::optim::AdamWParamState&>().step())>;

// The key AdamW files `param`'s state under (a template so that only the branch for this
// LibTorch's key type is compiled).
template <typename Map = StateMap>
typename Map::key_type state_key(const at::Tensor& param) {
  using Key = typename Map::key_type;
  if constexpr (std::is_same_v<Key, std::string>) {
    std::ostringstream key;  // what c10::guts::to_string(param.unsafeGetTensorImpl()) writes
    key << param.unsafeGetTensorImpl();
    return key.str();
  } else {
    return static_cast<Key>(param.unsafeGetTensorImpl());
  }
}

}  // namespace

double clip_grad_norm(const std::vector<at::Tensor>& params, double max_norm) {
  // The same formula as PyTorch's clip_grad_norm_, written out: LibTorch 1.13's C++
  // torch/nn/utils/clip_grad.h does not compile on its own (it needs torch:: ops in scope).
  std::vector<at::Tensor> grads;
  for (const auto& p : params)
    if (p.grad().defined()) grads.push_back(p.grad().detach());
  if (grads.empty()) return 0.0;
  // On a GPU the multi-tensor ops (a few launches for all gradients, as PyTorch's foreach path);
  // on the CPU one op per tensor, which is what they do there anyway.
  const bool foreach = !grads.front().is_cpu();
  std::vector<at::Tensor> norms;
  if (foreach) {
    norms = at::_foreach_norm(grads, 2);
  } else {
    for (const auto& g : grads) norms.push_back(g.norm());
  }
  const double total = at::stack(norms).norm().item<double>();
  const double coef = std::min(1.0, max_norm / (total + 1e-6));
  if (std::isfinite(total) && coef < 1.0) {
    if (foreach) {
      at::_foreach_mul_(grads, coef);
    } else {
      for (auto& g : grads) g.mul_(coef);
    }
  }
  return total;
}

struct OptimizerStep::Impl {
  std::vector<at::Tensor> params;
  // AdamW over every parameter, or (sharded) over this rank's; null when it owns none.
  std::unique_ptr<torch::optim::AdamW> adamw;
  double lr = 0;
  // ZeRO-1: the owner rank of each parameter, and whether this rank owns it.
  DataParallel dp;
  const hw::Kernels* kernels = nullptr;  // use_kernels()
  std::vector<int32_t> owners;
  std::vector<bool> owned;
  bool sharded = false;
  std::unique_ptr<ShardedAdamW> zero2;  // ZeRO-2: the flat shards (then adamw is null)
  // use_sharded_state: ZeRO-3 / offloaded state (then adamw is null), and its stage.
  std::unique_ptr<detail::ShardedOptimizer> flat;
  int flat_stage = 0;

  void build(const AdamWConfig& c) {
    adamw.reset();
    if (zero2 || flat) return;
    std::vector<at::Tensor> mine;
    for (size_t i = 0; i < params.size(); ++i)
      if (!sharded || owned[i]) mine.push_back(params[i]);
    if (mine.empty()) return;
    torch::optim::AdamWOptions options(lr);
    options.betas({c.beta1, c.beta2}).eps(c.eps).weight_decay(c.weight_decay);
    adamw = std::make_unique<torch::optim::AdamW>(mine, options);
  }
  // Whether the step can go through LibTorch's fused AdamW kernel: it exists in this build and
  // every parameter this rank steps is an fp32 tensor on one CUDA device.
  bool fused_usable() const {
#ifdef VERLPP_HAVE_FUSED_ADAMW
    if (!adamw) return false;
    for (const auto& group : adamw->param_groups())
      for (const auto& p : group.params())
        if (!p.is_cuda() || p.scalar_type() != at::kFloat || p.device() != params.front().device()) return false;
    return true;
#else
    return false;
#endif
  }

  // `p`'s AdamW state, created as torch::optim::AdamW::step creates it (step 0, zero moments)
  // when it has none yet (then *created is set).
  torch::optim::AdamWParamState& state_of(const at::Tensor& p, bool* created = nullptr) {
    auto& state = adamw->state();
    const auto key = state_key(p);
    if (state.find(key) == state.end()) {
      auto fresh = std::make_unique<torch::optim::AdamWParamState>();
      fresh->step(0);
      fresh->exp_avg(at::zeros_like(p, at::MemoryFormat::Preserve));
      fresh->exp_avg_sq(at::zeros_like(p, at::MemoryFormat::Preserve));
      state[key] = std::move(fresh);
      if (created != nullptr) *created = true;
    }
    return static_cast<torch::optim::AdamWParamState&>(*state[key]);
  }

  // torch::optim::AdamW::step's math through the fused kernel, on AdamW's own state objects (so
  // save_state/load_state and the unfused path see the same state): created as its step would
  // (step 0, zero moments), and `step` advanced as its step would.
  void fused_step(const AdamWConfig& c) {
#ifdef VERLPP_HAVE_FUSED_ADAMW
    std::vector<at::Tensor> ps, gs, ms, vs;
    std::vector<float> steps;
    for (auto& group : adamw->param_groups())
      for (auto& p : group.params()) {
        if (!p.grad().defined()) continue;
        auto& st = state_of(p);
        ps.push_back(p.detach());
        gs.push_back(p.grad().detach());
        ms.push_back(st.exp_avg());
        vs.push_back(st.exp_avg_sq());
        st.step(st.step() + 1);
        steps.push_back(float(st.step()));
      }
    if (ps.empty()) return;
    // The kernel takes each parameter's step count, already advanced (PyTorch's _fused_adamw
    // adds 1 before the call), as a device tensor.
    std::vector<at::Tensor> step_list = at::tensor(steps).to(ps.front().device()).unbind(0);
    at::_fused_adamw_(ps, gs, ms, vs, {}, step_list, lr, c.beta1, c.beta2, c.weight_decay, c.eps, /*amsgrad=*/false,
                      /*maximize=*/false);
#else
    (void)c;
#endif
  }

  void zero_grad() {
    if (flat) return;  // the sharded weights keep the gradients (TrainedModel drops them)
    if (!sharded || zero2) {
      // Gradients dropped, as LibTorch 2.x's zero_grad does by default (1.13's fills zeros): the
      // next backward then starts fresh ones, and MixedPrecision can defer its casts again.
      for (auto& p : params)
        if (p.grad().defined()) p.mutable_grad() = at::Tensor();
      return;
    }
    for (auto& p : params)  // every parameter: the gradients of others' parameters are summed here too
      if (p.grad().defined()) p.mutable_grad().detach_().zero_();
  }
};

OptimizerStep::OptimizerStep(std::vector<at::Tensor> params, AdamWConfig config, LrSchedule schedule)
    : impl_(std::make_unique<Impl>()), config_(config), schedule_(std::move(schedule)) {
  VERLPP_CHECK(config_.grad_clip > 0, "grad_clip {} must be > 0", config_.grad_clip);
  impl_->params = std::move(params);
  impl_->lr = schedule_.lr(0);
  impl_->build(config_);
}

OptimizerStep::~OptimizerStep() = default;

void OptimizerStep::shard(const DataParallel& dp, int zero_stage) {
  VERLPP_CHECK(steps_ == 0 && skipped_ == 0, "OptimizerStep::shard must come before the first step ({} taken)", steps_);
  VERLPP_CHECK(zero_stage >= 0 && zero_stage <= 2, "OptimizerStep::shard: ZeRO stage {} is not 0, 1 or 2", zero_stage);
  if (!dp.is_distributed() || zero_stage == 0) return;
  impl_->dp = dp;
  impl_->sharded = true;
  if (zero_stage == 2) {
    impl_->zero2 = std::make_unique<ShardedAdamW>(impl_->params, dp);
  } else {
    impl_->owners = dp.owners(impl_->params);
    impl_->owned.assign(impl_->params.size(), false);
    for (size_t i = 0; i < impl_->params.size(); ++i) impl_->owned[i] = impl_->owners[i] == dp.rank();
  }
  impl_->build(config_);
}

void OptimizerStep::use_sharded_state(std::unique_ptr<detail::ShardedOptimizer> sharded, const DataParallel& dp,
                                      int zero_stage) {
  VERLPP_CHECK(steps_ == 0 && skipped_ == 0,
               "OptimizerStep::use_sharded_state must come before the first step ({} taken)", steps_);
  impl_->flat = std::move(sharded);
  impl_->flat_stage = zero_stage;
  impl_->dp = dp;
  impl_->sharded = dp.is_distributed();
  impl_->zero2.reset();
  impl_->build(config_);
}

bool OptimizerStep::is_sharded() const { return impl_->sharded; }

int OptimizerStep::zero_stage() const {
  if (impl_->flat) return impl_->flat_stage;
  return impl_->zero2 ? 2 : impl_->sharded ? 1 : 0;
}

bool OptimizerStep::sums_gradients() const { return impl_->zero2 != nullptr || impl_->flat != nullptr; }

const detail::ShardedOptimizer* OptimizerStep::sharded_state() const { return impl_->flat.get(); }

detail::ShardedOptimizer* OptimizerStep::sharded_state() { return impl_->flat.get(); }

int64_t OptimizerStep::state_elements() const {
  if (impl_->flat) return impl_->flat->state_bytes() / int64_t(sizeof(float));
  if (impl_->zero2) return impl_->zero2->state_elements();
  if (!impl_->adamw) return 0;
  int64_t n = 0;
  for (const auto& [key, state] : impl_->adamw->state()) {
    const auto& s = static_cast<const torch::optim::AdamWParamState&>(*state);
    n += s.exp_avg().numel() + s.exp_avg_sq().numel();
  }
  return n;
}

int64_t OptimizerStep::sharded_gradient_elements() const {
  return impl_->zero2 ? impl_->zero2->gradient_elements() : 0;
}

double OptimizerStep::set_lr_for_update(int64_t update) {
  const double lr = schedule_.lr(update);
  impl_->lr = lr;
  if (impl_->adamw)
    for (auto& group : impl_->adamw->param_groups()) static_cast<torch::optim::AdamWOptions&>(group.options()).lr(lr);
  return lr;
}

void OptimizerStep::zero_grad() { impl_->zero_grad(); }

double OptimizerStep::clip_and_step() {
  if (impl_->flat) {  // sums, clips, steps and publishes (sharded_optimizer.hpp)
    const double norm = impl_->flat->step(config_, impl_->lr);
    last_skipped_ = !std::isfinite(norm);
    ++(last_skipped_ ? skipped_ : steps_);
    return norm;
  }
  if (impl_->zero2) {  // sums, clips, steps and gathers in one (sharded_adamw.hpp)
    const double norm = impl_->zero2->step(config_, impl_->lr);
    last_skipped_ = !std::isfinite(norm);
    ++(last_skipped_ ? skipped_ : steps_);
    return norm;
  }
  // Sharded or not, the norm is over every parameter (the gradients are already summed).
  const double norm = clip_grad_norm(impl_->params, config_.grad_clip);
  last_skipped_ = !std::isfinite(norm);
  if (last_skipped_) {
    ++skipped_;
    impl_->zero_grad();
  } else {
    if (impl_->adamw) {
      if (impl_->fused_usable()) {
        impl_->fused_step(config_);
      } else {
        impl_->adamw->step();
      }
    }
    if (impl_->sharded) impl_->dp.broadcast_from_owners(impl_->params, impl_->owners);
    ++steps_;
  }
  return norm;
}

void OptimizerStep::use_kernels(const hw::Kernels* kernels) { impl_->kernels = kernels; }

bool OptimizerStep::updates_through_plugin() const {
  return impl_->kernels != nullptr && impl_->kernels->offers(hw::KernelId::adamw_update) && !impl_->sharded &&
         impl_->adamw != nullptr;
}

double OptimizerStep::clip_and_step(MixedPrecision& precision) {
  if (impl_->flat) return clip_and_step();  // the sharded weights are the compute weights
  const std::vector<at::Tensor> computes = precision.compute_parameters();
  // The plugin path pairs this optimizer's parameters with the precision's by position: they
  // must be its master model's parameters, in order, fp32 on one device.
  const auto& masters = precision.master().named_parameters();
  bool plugin = updates_through_plugin() && masters.size() == impl_->params.size() &&
                (computes.empty() || computes.size() == impl_->params.size());
  for (size_t i = 0; plugin && i < impl_->params.size(); ++i) {
    const at::Tensor& p = impl_->params[i];
    plugin = p.unsafeGetTensorImpl() == masters[i].second.unsafeGetTensorImpl() && p.scalar_type() == at::kFloat &&
             p.device() == impl_->params.front().device();
  }
  last_through_plugin_ = plugin;
  if (!plugin) {
    precision.flush_gradients();
    const double norm = clip_and_step();
    if (!last_skipped_) precision.refresh_compute();
    return norm;
  }
  std::vector<at::Tensor> deferred = precision.take_deferred_gradients();
  VERLPP_CHECK(deferred.size() == impl_->params.size(), "clip_and_step: the model has {} parameters, the optimizer {}",
               deferred.size(), impl_->params.size());
  // Each parameter's gradient: its fp32 sum, or the deferred 16-bit one (at most one of them
  // exists after accumulate_gradients; both are added should a caller have mixed the two).
  std::vector<at::Tensor> grads(impl_->params.size());
  std::vector<at::Tensor> present;
  for (size_t i = 0; i < impl_->params.size(); ++i) {
    const at::Tensor& master_grad = impl_->params[i].grad();
    if (master_grad.defined() && deferred[i].defined()) {
      const_cast<at::Tensor&>(master_grad).add_(deferred[i]);
      grads[i] = master_grad.detach();
    } else {
      grads[i] = master_grad.defined() ? master_grad.detach() : deferred[i];
    }
    if (grads[i].defined()) present.push_back(grads[i]);
  }
  if (present.empty()) {  // nothing to step: clip_and_step() reports a zero norm the same way
    last_skipped_ = false;
    ++steps_;
    return 0.0;
  }
  const detail::DeviceClip clip = detail::device_clip(present, config_.grad_clip);
  // Groups of one gradient dtype and one step count (AdamW counts steps per parameter), with
  // each parameter's state created as torch::optim::AdamW::step would create it.
  auto& state = impl_->adamw->state();
  std::map<std::pair<int, int64_t>, detail::AdamwGroup> groups;
  std::vector<torch::optim::AdamWParamState*> advanced;
  std::vector<size_t> created;
  for (size_t i = 0; i < impl_->params.size(); ++i) {
    if (!grads[i].defined()) continue;
    const at::Tensor& p = impl_->params[i];
    bool fresh = false;
    auto& st = impl_->state_of(p, &fresh);
    if (fresh) created.push_back(i);
    st.step(st.step() + 1);
    advanced.push_back(&st);
    detail::AdamwGroup& g = groups[{int(grads[i].scalar_type()), int64_t(st.step())}];
    g.step = int64_t(st.step());
    g.tensors.params.push_back(p);  // DLPack views read data pointers only: no detach needed
    g.tensors.grads.push_back(grads[i]);
    g.tensors.exp_avg.push_back(st.exp_avg());
    g.tensors.exp_avg_sq.push_back(st.exp_avg_sq());
    if (!computes.empty()) g.tensors.copies.push_back(computes[i]);
  }
  for (const auto& [key, group] : groups)
    detail::plugin_adamw_update(*impl_->kernels, group, config_, impl_->lr, clip.scale);
  const double norm = clip.norm.item<double>();  // the step's one wait, after the update is queued
  last_skipped_ = !std::isfinite(norm);
  if (last_skipped_) {
    // The kernel wrote nothing: undo the step counts and the states made for this step.
    for (auto* st : advanced) st->step(st->step() - 1);
    for (size_t i : created) state.erase(state_key(impl_->params[i]));
    ++skipped_;
    impl_->zero_grad();
  } else {
    ++steps_;
  }
  return norm;
}

namespace {

using nlohmann::json;
std::string shape_string(c10::IntArrayRef shape) {
  std::vector<std::string> parts;
  for (int64_t d : shape) parts.push_back(std::to_string(d));
  return "[" + join(parts, ", ") + "]";
}

void check_names(const std::vector<std::string>& names, size_t num_params, const std::string& where) {
  VERLPP_CHECK(names.size() == num_params, "{}: {} names given for {} parameters", where, names.size(), num_params);
  std::set<std::string> seen;
  for (const auto& name : names)
    VERLPP_CHECK(seen.insert(name).second, "{}: parameter name '{}' given twice", where, name);
}

json config_json(const AdamWConfig& c) {
  return {{"weight_decay", c.weight_decay},
          {"beta1", c.beta1},
          {"beta2", c.beta2},
          {"eps", c.eps},
          {"grad_clip", c.grad_clip}};
}

// The per-parameter fields a state file may hold ("<name>.<field>").
const std::vector<std::string> kFields = {"step", "exp_avg", "exp_avg_sq", "max_exp_avg_sq"};

}  // namespace

void OptimizerStep::save_state(const std::string& path, const std::vector<std::string>& names) const {
  check_names(names, impl_->params.size(), "OptimizerStep::save_state(" + path + ")");
  std::vector<model::NamedTensor> tensors;
  const bool writes = !impl_->sharded || impl_->dp.rank() == 0;
  // ZeRO-2 / sharded state: every parameter's state, gathered (collective).
  std::vector<at::Tensor> flat_avg, flat_avg_sq;
  if (impl_->zero2) impl_->zero2->gather_state(flat_avg, flat_avg_sq);
  if (impl_->flat) impl_->flat->gather_state(flat_avg, flat_avg_sq);
  for (size_t i = 0; i < names.size(); ++i) {
    if (impl_->zero2 || impl_->flat) {
      if (!writes) continue;
      const int64_t step = impl_->zero2 ? impl_->zero2->steps()[i] : impl_->flat->steps()[i];
      if (step == 0) continue;  // never stepped: nothing to save
      tensors.emplace_back(names[i] + ".step", at::full({1}, step, at::kLong));
      tensors.emplace_back(names[i] + ".exp_avg", flat_avg[i]);
      tensors.emplace_back(names[i] + ".exp_avg_sq", flat_avg_sq[i]);
      continue;
    }
    const torch::optim::AdamWParamState* s = nullptr;
    if (impl_->adamw && (!impl_->sharded || impl_->owned[i])) {
      auto it = impl_->adamw->state().find(state_key(impl_->params[i]));
      if (it != impl_->adamw->state().end()) s = static_cast<const torch::optim::AdamWParamState*>(it->second.get());
    }
    at::Tensor step, exp_avg, exp_avg_sq;
    if (impl_->sharded) {
      // Collective: the owner sends this parameter's state to every rank; rank 0 keeps it.
      const int32_t owner = impl_->owners[i];
      const at::Tensor& p = impl_->params[i];
      at::Tensor head = at::full({2}, 0.0, p.options().dtype(at::kDouble));  // [has state, step]
      if (s) {
        head[0] = 1.0;
        head[1] = double(s->step());
      }
      impl_->dp.broadcast(head, owner);
      if (head[0].item<double>() == 0.0) continue;  // never stepped: nothing to save
      exp_avg = s ? s->exp_avg().contiguous() : at::empty_like(p);
      exp_avg_sq = s ? s->exp_avg_sq().contiguous() : at::empty_like(p);
      impl_->dp.broadcast(exp_avg, owner);
      impl_->dp.broadcast(exp_avg_sq, owner);
      step = at::full({1}, int64_t(head[1].item<double>()), at::kLong);
    } else {
      if (!s) continue;  // never stepped: nothing to save
      step = at::full({1}, static_cast<int64_t>(s->step()), at::kLong);
      exp_avg = s->exp_avg();
      exp_avg_sq = s->exp_avg_sq();
      // amsgrad is off in verl and here; its buffer is kept only on the unsharded path.
      if (s->max_exp_avg_sq().defined()) tensors.emplace_back(names[i] + ".max_exp_avg_sq", s->max_exp_avg_sq());
    }
    tensors.emplace_back(names[i] + ".step", step);
    tensors.emplace_back(names[i] + ".exp_avg", exp_avg);
    tensors.emplace_back(names[i] + ".exp_avg_sq", exp_avg_sq);
  }
  if (!writes) return;
  const std::map<std::string, std::string> metadata = {
      {"verlpp.optimizer", "adamw"},
      {"verlpp.param_names", json(names).dump()},
      {"verlpp.config", config_json(config_).dump()},
      {"verlpp.lr", json(impl_->lr).dump()},
      {"verlpp.steps", std::to_string(steps_)},
      {"verlpp.skipped", std::to_string(skipped_)},
      {"verlpp.last_step_skipped", last_skipped_ ? "true" : "false"},
  };
  model::write_safetensors(path, tensors, metadata);
}

void OptimizerStep::load_state(const std::string& path, const std::vector<std::string>& names) {
  check_names(names, impl_->params.size(), "OptimizerStep::load_state(" + path + ")");
  model::SafetensorsFile file(path);
  auto meta = [&](const std::string& key) -> json {
    auto it = file.metadata().find(key);
    if (it == file.metadata().end())
      VERLPP_FAIL_AT(path, "no '{}' in the metadata: not an optimizer state written by save_state", key);
    try {
      return json::parse(it->second);
    } catch (const json::exception& e) {
      VERLPP_FAIL_AT(path, "metadata '{}' = '{}' is not valid: {}", key, it->second, e.what());
    }
  };
  auto optimizer = file.metadata().find("verlpp.optimizer");
  if (optimizer == file.metadata().end() || optimizer->second != "adamw")
    VERLPP_FAIL_AT(path, "not an AdamW state written by OptimizerStep::save_state (metadata verlpp.optimizer is '{}')",
                   optimizer == file.metadata().end() ? "" : optimizer->second);

  // The names: the same set (order may differ; state is matched by name).
  const json saved_names = meta("verlpp.param_names");
  std::set<std::string> saved;
  for (const auto& n : saved_names) saved.insert(n.get<std::string>());
  const std::set<std::string> given(names.begin(), names.end());
  for (const auto& name : names)
    if (!saved.count(name))
      VERLPP_FAIL_AT(path, "parameter '{}' is not in the saved optimizer state (it holds {} parameters)", name,
                     saved.size());
  for (const auto& name : saved)
    if (!given.count(name))
      VERLPP_FAIL_AT(path, "the saved optimizer state has parameter '{}', which is not among the {} given names", name,
                     names.size());
  for (const auto& entry : file.entries()) {
    const size_t dot = entry.name.rfind('.');
    const bool known = dot != std::string::npos && given.count(entry.name.substr(0, dot)) &&
                       std::count(kFields.begin(), kFields.end(), entry.name.substr(dot + 1));
    if (!known) VERLPP_FAIL_AT(path, "tensor '{}' is no parameter's optimizer state", entry.name);
  }

  // The config must be the one this optimizer was built with.
  const json saved_config = meta("verlpp.config"), config = config_json(config_);
  for (auto it = config.begin(); it != config.end(); ++it)
    if (!saved_config.contains(it.key()) || saved_config[it.key()] != it.value())
      VERLPP_FAIL_AT(path, "saved with {} = {}, but this optimizer has {}", it.key(),
                     saved_config.contains(it.key()) ? saved_config[it.key()].dump() : "nothing", it.value().dump());

  // Every tensor checked and copied before the optimizer changes (all or nothing).
  auto checked = [&](const std::string& tensor, const at::Tensor& param, const std::string& name) {
    const auto& e = file.entry(tensor);
    if (e.shape != std::vector<int64_t>(param.sizes().begin(), param.sizes().end()))
      VERLPP_FAIL_AT(path, "tensor '{}' has shape {}, but parameter '{}' has {}", tensor, shape_string(e.shape), name,
                     shape_string(param.sizes()));
    if (e.dtype != param.scalar_type())
      VERLPP_FAIL_AT(path, "tensor '{}' has dtype {}, but parameter '{}' is {}", tensor,
                     model::safetensors_dtype_name(e.dtype), name, c10::toString(param.scalar_type()));
    // Sharded state takes its part from the mapped file itself (no whole copy on the device).
    if (impl_->flat) return file.tensor(tensor);
    return at::empty_like(param).copy_(file.tensor(tensor));  // the param's device and layout
  };
  std::vector<std::unique_ptr<torch::optim::AdamWParamState>> states(names.size());
  for (size_t i = 0; i < names.size(); ++i) {
    const std::string& name = names[i];
    const at::Tensor& param = impl_->params[i];
    const bool has_any =
        file.contains(name + ".step") || file.contains(name + ".exp_avg") || file.contains(name + ".exp_avg_sq");
    if (!has_any) continue;  // never stepped when saved: stays stateless
    for (const char* field : {".step", ".exp_avg", ".exp_avg_sq"})
      if (!file.contains(name + field))
        VERLPP_FAIL_AT(path, "tensor '{}{}' is missing (parameter '{}' has part of a state)", name, field, name);
    const auto& step_entry = file.entry(name + ".step");
    if (step_entry.dtype != at::kLong || step_entry.shape != std::vector<int64_t>{1})
      VERLPP_FAIL_AT(path, "tensor '{}.step' must be int64 of shape [1], got {} {}", name,
                     model::safetensors_dtype_name(step_entry.dtype), shape_string(step_entry.shape));
    auto state = std::make_unique<torch::optim::AdamWParamState>();
    state->step(static_cast<StepType>(file.tensor(name + ".step").item<int64_t>()));
    state->exp_avg(checked(name + ".exp_avg", param, name));
    state->exp_avg_sq(checked(name + ".exp_avg_sq", param, name));
    if (file.contains(name + ".max_exp_avg_sq")) state->max_exp_avg_sq(checked(name + ".max_exp_avg_sq", param, name));
    states[i] = std::move(state);
  }
  const double lr = meta("verlpp.lr").get<double>();
  const auto steps = meta("verlpp.steps").get<int64_t>(), skipped = meta("verlpp.skipped").get<int64_t>();
  const bool last_skipped = meta("verlpp.last_step_skipped").get<bool>();

  // Commit (sharded: only the states of this rank's parameters).
  if (impl_->zero2 || impl_->flat) {
    std::vector<int64_t> steps_of(names.size(), 0);
    std::vector<at::Tensor> avg(names.size()), avg_sq(names.size());
    for (size_t i = 0; i < names.size(); ++i) {
      if (!states[i] || states[i]->step() == 0) continue;
      steps_of[i] = int64_t(states[i]->step());
      avg[i] = states[i]->exp_avg();
      avg_sq[i] = states[i]->exp_avg_sq();
    }
    if (impl_->zero2) {
      impl_->zero2->set_state(steps_of, avg, avg_sq);
    } else {
      impl_->flat->set_state(steps_of, avg, avg_sq);
    }
  }
  if (impl_->adamw) {
    auto& state_map = impl_->adamw->state();
    for (size_t i = 0; i < names.size(); ++i) {
      if (impl_->sharded && !impl_->owned[i]) continue;
      state_map.erase(state_key(impl_->params[i]));
      if (states[i]) state_map[state_key(impl_->params[i])] = std::move(states[i]);
    }
    for (auto& group : impl_->adamw->param_groups()) static_cast<torch::optim::AdamWOptions&>(group.options()).lr(lr);
  }
  impl_->lr = lr;
  steps_ = steps, skipped_ = skipped, last_skipped_ = last_skipped;
}

}  // namespace verlpp::train
