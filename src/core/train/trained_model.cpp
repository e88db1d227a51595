// TrainedModel: the update sequence and the checkpoint files of a model under training (see the
// header). The order inside step() is the numerics: gradients are summed over the ranks in fp32
// before the norm is taken, so every rank clips by the same factor and stays a replica.
#include <verlpp/train/trained_model.hpp>

#include <verlpp/train/parameters.hpp>

#include "../util/files.hpp"

#include <ATen/core/grad_mode.h>

#include <utility>

namespace verlpp::train {
namespace {

// The model's parameters with requires_grad turned on (the optimizer's list, in HF order).
std::vector<at::Tensor> trainable_parameters(model::DecoderLM& model) {
  model.set_requires_grad(true);
  return parameter_tensors(model);
}

}  // namespace

TrainedModel::TrainedModel(model::DecoderLM& model, const TrainedModelOptions& options, LrSchedule schedule)
    : master_(model),
      precision_(master_, options.param_dtype),
      params_(trainable_parameters(master_)),
      optimizer_(params_, options.optim, std::move(schedule)),
      kernels_(options.kernels) {
  optimizer_.use_kernels(kernels_);
}

TrainedModel::~TrainedModel() = default;

void TrainedModel::set_data_parallel(DataParallel dp, int zero_stage) {
  dp_ = dp;
  optimizer_.shard(dp_, zero_stage);
}

double TrainedModel::begin_update() {
  const double lr = optimizer_.set_lr_for_update(updates_++);
  norm_sum_ = 0;
  steps_in_update_ = 0;
  // 16-bit gradients straight into the plugin's AdamW, unless a data-parallel sum needs fp32 ones.
  precision_.defer_casts(optimizer_.updates_through_plugin() && !dp_.is_distributed());
  return lr;
}

void TrainedModel::backward(const at::Tensor& loss) {
  loss.backward();
  precision_.accumulate_gradients();
}

double TrainedModel::step() {
  if (!optimizer_.sums_gradients()) dp_.all_reduce_gradients(params_);
  const double norm = optimizer_.clip_and_step(precision_);
  if (!optimizer_.last_step_skipped()) {
    norm_sum_ += norm;
    ++steps_in_update_;
    // Holders of these weights (a rollout engine) see that they changed (weights_version()).
    master_.note_weights_changed();
    if (&precision_.compute() != &master_) precision_.compute().note_weights_changed();
  }
  return norm;
}

void TrainedModel::save_optimizer_state(const std::string& path) const {
  optimizer_.save_state(path, parameter_names(master_));
}

void TrainedModel::load_optimizer_state(const std::string& path) {
  optimizer_.load_state(path, parameter_names(master_));
  precision_.refresh_compute();  // the caller may have loaded new master weights too
}

void TrainedModel::save(const std::string& dir, const model::SaveOptions& options) const {
  // Every rank holds the whole model, so rank 0 writes it alone; a sharded optimizer state is
  // gathered to rank 0 by every rank's save_state.
  const bool writer = dp_.rank() == 0;
  if (writer) model::save_pretrained(master_, dir, options);
  if (writer || optimizer_.is_sharded()) save_optimizer_state(files::join(dir, kOptimizerStateFile));
}

void TrainedModel::load(const std::string& dir) {
  {
    at::NoGradGuard no_grad;
    model::load_weights(master_, dir);
  }
  load_optimizer_state(files::join(dir, kOptimizerStateFile));
}

}  // namespace verlpp::train
