// TrainingRole: the base of Actor, Critic and SftTrainer — the one TrainedModel each holds, and
// the accessors their callers (the RL loop's setup and checkpoints, benchmarks) share. A role
// adds its loss and its micro-batch loops; everything about the model under training is here.
#pragma once

#include <verlpp/model/decoder.hpp>
#include <verlpp/train/data_parallel.hpp>
#include <verlpp/train/lr_schedule.hpp>
#include <verlpp/train/optimizer.hpp>
#include <verlpp/train/trained_model.hpp>

#include <cstdint>
#include <string>
#include <utility>

namespace verlpp::train {

class TrainingRole {
 public:
  // The model being trained: precision, optimizer, data parallelism, files (trained_model.hpp).
  TrainedModel& trained_model() { return trained_; }
  const TrainedModel& trained_model() const { return trained_; }

  // Shorthands for trained_model()'s members of the same meaning.
  void set_data_parallel(DataParallel dp, int zero_stage = 0) { trained_.set_data_parallel(dp, zero_stage); }
  void set_data_parallel(DataParallel dp, const ShardingOptions& sharding) { trained_.set_data_parallel(dp, sharding); }
  const OptimizerStep& optimizer() const { return trained_.optimizer(); }
  int64_t steps() const { return trained_.steps(); }
  int64_t skipped_steps() const { return trained_.skipped_steps(); }
  int64_t updates() const { return trained_.updates(); }
  void set_updates(int64_t updates) { trained_.set_updates(updates); }
  // The optimizer state file alone (TrainedModel::save_optimizer_state); collective when sharded.
  void save_state(const std::string& path) const { trained_.save_optimizer_state(path); }
  void load_state(const std::string& path) { trained_.load_optimizer_state(path); }

 protected:
  TrainingRole(model::DecoderLM& model, const TrainedModelOptions& options, LrSchedule schedule)
      : trained_(model, options, std::move(schedule)) {}
  ~TrainingRole() = default;

  TrainedModel trained_;
};

}  // namespace verlpp::train
