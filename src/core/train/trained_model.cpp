// TrainedModel: the update sequence and the checkpoint files of a model under training (see the
// header). The order inside step() is the numerics: gradients are summed over the ranks in fp32
// before the norm is taken, so every rank clips by the same factor and stays a replica. With
// sharded units (ZeRO-3, offload) the units and their optimizer (sharded_optimizer.hpp) hold the
// weights, and the master model is only a container that checkpoints and warm starts fill.
#include <verlpp/train/trained_model.hpp>

#include <verlpp/core/error.hpp>
#include <verlpp/hw/tensor_storage.hpp>
#include <verlpp/model/lora.hpp>
#include <verlpp/model/lora_files.hpp>
#include <verlpp/train/parameters.hpp>
#include <verlpp/train/sharded_weights.hpp>

#include "../util/files.hpp"
#include "sharded_optimizer.hpp"

#include <ATen/core/grad_mode.h>

#include <chrono>
#include <utility>

namespace verlpp::train {
namespace {

// What a master model whose weights moved into sharded units answers a forward with: an Error
// instead of a read of freed memory.
class WeightsInUnits : public model::ParameterGather {
 public:
  void gather_outer() const override { fail(); }
  at::Tensor run_layer(int64_t, const model::LayerFn&, const at::Tensor&, bool) const override {
    fail();
    return {};
  }

 private:
  [[noreturn]] static void fail() {
    throw Error("model",
                "its weights live in the trainer's sharded units (ZeRO-3 or offload), not in this model object: run "
                "forwards on TrainedModel::compute(), or call TrainedModel::materialize_master() first");
  }
};

// Frees `master`'s parameters' memory and makes its forwards refuse (the units hold the weights).
void release_master(model::DecoderLM& master) {
  for (const auto& [name, p] : master.named_parameters()) hw::release_storage(p);
  master.set_parameter_gather(std::make_shared<WeightsInUnits>());
}

// What the optimizer steps, requires_grad turned on: the model's parameters in HF order, or
// with LoRA the adapters (set on the model, whose own weights stay frozen).
std::vector<at::Tensor> trainable_parameters(model::DecoderLM& model,
                                             const std::shared_ptr<model::LoraAdapters>& lora) {
  if (!lora) {
    model.set_requires_grad(true);
    return parameter_tensors(model);
  }
  model.set_requires_grad(false);
  lora->set_requires_grad(true);
  model.set_lora(lora);
  return lora->parameters();
}

std::vector<std::string> trained_names(const model::DecoderLM& model, const model::LoraAdapters* lora) {
  if (!lora) return parameter_names(model);
  std::vector<std::string> names;
  for (const auto& [name, t] : lora->named_parameters()) names.push_back(name);
  return names;
}

// LoRA keeps the base in its own dtype: no compute copy.
at::ScalarType compute_dtype(const model::DecoderLM& model, const TrainedModelOptions& options) {
  return options.lora ? model.options().dtype : options.param_dtype;
}

}  // namespace

TrainedModel::TrainedModel(model::DecoderLM& model, const TrainedModelOptions& options, LrSchedule schedule)
    : master_(model),
      lora_(options.lora),
      precision_(master_, compute_dtype(model, options)),
      params_(trainable_parameters(master_, lora_)),
      names_(trained_names(master_, lora_.get())),
      optimizer_(params_, options.optim, std::move(schedule)),
      kernels_(options.kernels) {
  optimizer_.use_kernels(kernels_);
}

TrainedModel::~TrainedModel() = default;

void TrainedModel::set_data_parallel(DataParallel dp, int zero_stage) {
  ShardingOptions sharding;
  sharding.zero_stage = zero_stage;
  set_data_parallel(dp, sharding);
}

void TrainedModel::set_data_parallel(DataParallel dp, const ShardingOptions& sharding) {
  VERLPP_CHECK(sharding.zero_stage >= 0 && sharding.zero_stage <= 3, "ZeRO stage {} is not 0, 1, 2 or 3",
               sharding.zero_stage);
  VERLPP_CHECK(!weights_ && optimizer_.steps() == 0, "set_data_parallel must come once, before the first step");
  dp_ = dp;
  sharding_ = sharding;
  const bool offload = sharding.param_offload || sharding.optimizer_offload;
  const bool units = offload || (sharding.zero_stage >= 2 && dp.is_distributed());
  // The flat units shard a whole model's weights; the adapters are a few MB beside it.
  VERLPP_CHECK(
      !(units && lora_),
      "LoRA with {} is not supported: the frozen base is not sharded; use ZeRO stage 0 or 1 (the adapters' "
      "optimizer state is sharded at stage 1)",
      offload ? "param or optimizer offload" : fmt::format("ZeRO stage {} on several ranks", sharding.zero_stage));
  if (!units) {
    optimizer_.shard(dp_, std::min(sharding.zero_stage, 2));
    return;
  }
  ShardedWeightsOptions wo;
  wo.dtype = precision_.compute().options().dtype;
  wo.dp = dp_;
  wo.shard = sharding.zero_stage >= 2;
  wo.gather_per_use = sharding.zero_stage == 3;
  wo.trainable = true;
  wo.forward_prefetch = sharding.forward_prefetch;
  wo.backward_prefetch = sharding.backward_prefetch;
  wo.overlap_reduce = sharding.overlap_reduce;
  wo.host_memory = sharding.host_memory;
  weights_ = std::make_unique<ShardedWeights>(master_, wo);
  detail::ShardedOptimizerOptions oo;
  oo.offload = sharding.optimizer_offload;
  oo.offloaded_step = sharding.offloaded_step;
  oo.host_memory = sharding.host_memory;
  optimizer_.use_sharded_state(std::make_unique<detail::ShardedOptimizer>(*weights_, master_, oo), dp_,
                               sharding.zero_stage);
  // The units hold every weight now: the master model and the compute copy let their memory go.
  precision_.drop_compute();
  release_master(master_);
  master_present_ = false;
}

const model::DecoderLM& TrainedModel::compute() const { return weights_ ? weights_->model() : precision_.compute(); }

void TrainedModel::refresh_compute() {
  if (!weights_) precision_.refresh_compute();
}

double TrainedModel::begin_update() {
  const double lr = optimizer_.set_lr_for_update(updates_++);
  norm_sum_ = 0;
  steps_in_update_ = 0;
  step_seconds_ = 0;
  // 16-bit gradients straight into the plugin's AdamW, unless a data-parallel sum needs fp32 ones.
  if (!weights_) precision_.defer_casts(optimizer_.updates_through_plugin() && !dp_.is_distributed());
  return lr;
}

void TrainedModel::zero_grad() {
  if (weights_) {
    weights_->drop_gradients();
  } else {
    optimizer_.zero_grad();
  }
}

void TrainedModel::backward(const at::Tensor& loss) {
  loss.backward();
  if (weights_) {
    weights_->collect_gradients();
  } else {
    precision_.accumulate_gradients();
  }
}

double TrainedModel::step() {
  const auto start = std::chrono::steady_clock::now();
  if (!optimizer_.sums_gradients()) dp_.all_reduce_gradients(params_);
  const double norm = optimizer_.clip_and_step(precision_);
  if (!optimizer_.last_step_skipped()) {
    norm_sum_ += norm;
    ++steps_in_update_;
    // Holders of these weights (a rollout engine) see that they changed (weights_version()).
    master_.note_weights_changed();
    if (&compute() != &master_) compute().note_weights_changed();
  }
  release_gathered();  // a skipped step leaves the outer unit gathered otherwise
  step_seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return norm;
}

void TrainedModel::materialize_master() {
  if (!weights_ || master_present_) return;
  const std::vector<at::Tensor> masters = optimizer_.sharded_state()->gather_masters(/*everywhere=*/true);
  at::NoGradGuard no_grad;
  const auto& named = master_.named_parameters();
  for (size_t i = 0; i < named.size(); ++i) {
    hw::restore_storage(named[i].second);
    named[i].second.detach().copy_(masters[i]);
  }
  master_.set_parameter_gather(nullptr);
  master_present_ = true;
  master_.note_weights_changed();
}

void TrainedModel::import_master() {
  if (!weights_) return;
  VERLPP_CHECK(master_present_, "TrainedModel::import_master: the master model holds no weights (materialize_master)");
  weights_->import(master_);
  optimizer_.sharded_state()->import(master_);
  release_master(master_);
  master_present_ = false;
}

void TrainedModel::release_gathered() const {
  if (weights_) weights_->release_gathered();
}

void TrainedModel::offload_parameters() {
  if (weights_ && sharding_.param_offload) weights_->offload();
}

void TrainedModel::reload_parameters() {
  if (weights_ && sharding_.param_offload) weights_->reload();
}

TrainedModel::MemoryHeld TrainedModel::memory_held() const {
  MemoryHeld held;
  for (const auto& [name, p] : master_.named_parameters()) {
    held.master_weights += hw::storage_bytes(p);
    held.gradients += hw::storage_bytes(p.grad());
  }
  if (lora_)
    for (const auto& [name, p] : lora_->named_parameters()) {
      held.adapter_weights += hw::storage_bytes(p);
      held.gradients += hw::storage_bytes(p.grad());
    }
  if (weights_) {
    held.compute_weights = weights_->resident_weight_bytes();
    held.gradients += weights_->gradient_bytes();
    for (const auto& [name, p] : weights_->model().named_parameters()) held.gradients += hw::storage_bytes(p.grad());
    held.masters_in_units = optimizer_.sharded_state()->master_bytes();
    held.optimizer_states = optimizer_.sharded_state()->state_bytes();
  } else {
    if (&precision_.compute() != &master_)
      for (const auto& [name, p] : precision_.compute().named_parameters()) {
        held.compute_weights += hw::storage_bytes(p);
        held.gradients += hw::storage_bytes(p.grad());
      }
    held.gradients += optimizer_.sharded_gradient_elements() * int64_t(sizeof(float));  // ZeRO-2's shard
    held.optimizer_states = optimizer_.state_elements() * int64_t(sizeof(float));
  }
  return held;
}

void TrainedModel::save_optimizer_state(const std::string& path) const { optimizer_.save_state(path, names_); }

void TrainedModel::load_optimizer_state(const std::string& path) {
  optimizer_.load_state(path, names_);
  refresh_compute();  // the caller may have loaded new master weights too
}

void TrainedModel::save(const std::string& dir, const model::SaveOptions& options) const {
  const bool writer = dp_.rank() == 0;
  if (lora_) {
    if (writer) {
      model::LoraSaveOptions lora_options;
      lora_options.dtype = options.dtype;
      model::save_lora_adapter(*lora_, dir, lora_options);
    }
  } else if (weights_) {
    // The fp32 weights gathered to rank 0, unit by unit, and written from a host model over them.
    std::vector<at::Tensor> masters = optimizer_.sharded_state()->gather_masters(/*everywhere=*/false);
    if (writer) {
      model::ModelOptions host;
      host.dtype = at::kFloat;
      model::save_pretrained(model::DecoderLM::over(master_.config(), host, std::move(masters)), dir, options);
    }
  } else if (writer) {
    // Every rank holds the whole model, so rank 0 writes it alone.
    model::save_pretrained(master_, dir, options);
  }
  // A sharded optimizer state is gathered to rank 0 by every rank's save_state.
  if (writer || optimizer_.is_sharded()) save_optimizer_state(files::join(dir, kOptimizerStateFile));
}

void TrainedModel::load(const std::string& dir) {
  if (lora_) {
    model::load_lora_adapter(*lora_, dir);
  } else if (weights_) {
    // Read into a host model, then taken by the units (and by the master when it holds weights).
    model::ModelOptions host;
    host.dtype = at::kFloat;
    model::DecoderLM loaded(master_.config(), host);
    at::NoGradGuard no_grad;
    model::load_weights(loaded, dir);
    weights_->import(loaded);
    optimizer_.sharded_state()->import(loaded);
    if (master_present_)
      for (const auto& [name, p] : master_.named_parameters()) p.detach().copy_(loaded.parameter(name));
  } else {
    at::NoGradGuard no_grad;
    model::load_weights(master_, dir);
  }
  load_optimizer_state(files::join(dir, kOptimizerStateFile));
}

}  // namespace verlpp::train
