// RlTrainer checkpoints: global_step_N/ holds actor/ (a Hugging Face folder transformers loads
// as is, plus optimizer.safetensors), critic/ (the same, with a value head) and
// trainer_state.json (step, data loader position, KL coefficient, update counts, seed, config).
// Written through CheckpointManager's temporary folder + rename, so a crash never leaves a
// checkpoint that resume would pick up half-written; the rename (the commit) waits until the
// step's metrics row is on disk (fit() in rl_steps.cpp). Everything random in a step is a function
// of (seed, step), so these files are the whole state: a resumed run repeats the uninterrupted
// one bit for bit on the CPU.
#include <ATen/core/grad_mode.h>

#include "rl_state.hpp"

#include <verlpp/model/checkpoint.hpp>

#include "../util/files.hpp"

namespace verlpp::controller {

using json = nlohmann::json;

void write_checkpoint(RlTrainer::State& s) {
  // Each role's first rank writes its model whole (gathered from the shards: collective over the
  // role's ranks), so a checkpoint of N ranks resumes on any number of ranks and pools. With
  // sharded optimizer states saving them is collective too: each owner sends its part.
  const int64_t step = s.global_step;
  const bool writer = s.is_writer();
  const bool pools = !s.settings.pools.colocated();
  const std::string tmp = writer ? s.checkpoints->begin(step) : s.checkpoints->temporary(step);
  try {
    // The folder exists before another pool's first rank writes into it.
    if (pools) pools_barrier(s, fmt::format("checkpoint/{}/begun", step));
    model::SaveOptions options;
    options.source_dir = s.model_path;  // tokenizer files and generation_config.json travel along
    if (s.actor) s.actor->trained_model().save(files::join(tmp, "actor"), options);
    if (s.critic) s.critic->trained_model().save(files::join(tmp, "critic"), options);
    const json critic_updates =
        s.use_critic ? share_json_from_pool(s, config::RlRole::kCritic, s.critic ? json(s.critic->updates()) : json())
                     : json(0);
    // Every pool's part is written before rank 0 completes the folder.
    if (pools) pools_barrier(s, fmt::format("checkpoint/{}/written", step));
    if (writer) {
      json state = {{"global_step", step},
                    {"dataloader", s.loader->state()},
                    {"kl_coef", s.kl_ctrl->value()},
                    {"actor_updates", s.actor->updates()},
                    {"critic_updates", critic_updates},
                    {"seed", s.seed},
                    {"estimator", s.estimator},
                    {"world_size", s.world.world_size},
                    {"config", s.config.tree()}};
      files::write_text(files::join(tmp, CheckpointManager::kStateFile), state.dump(2) + "\n");
    }
  } catch (...) {
    if (writer) s.checkpoints->abort(step);
    throw;
  }
}

void commit_checkpoint(RlTrainer::State& s) {
  // The others wait here, so no rank runs ahead of a checkpoint that might still fail.
  if (s.is_writer()) {
    const std::string final_dir = s.checkpoints->commit(s.global_step);
    s.message(fmt::format("checkpoint saved: {}", final_dir));
  }
  if (s.group) s.group->barrier();
}

void load_reference_weights(RlTrainer::State& s, const std::string& folder) {
  at::NoGradGuard no_grad;
  if (s.ref_model) {
    model::load_weights(*s.ref_model, folder);
  } else if (s.ref_weights) {
    // Sharded or offloaded: read on the host in the reference's dtype, each rank taking its part.
    model::ModelOptions host;
    host.dtype = s.ref_weights->options().dtype;
    model::DecoderLM loaded(s.ref_weights->model().config(), host);
    model::load_weights(loaded, folder);
    s.ref_weights->import(loaded);
  }
}

int64_t load_checkpoint(RlTrainer::State& s, const std::string& folder) {
  const std::string state_path = files::join(folder, CheckpointManager::kStateFile);
  if (!files::is_file(state_path)) throw Error(folder, "not a verlpp checkpoint: trainer_state.json is missing");
  json state;
  try {
    state = json::parse(files::read_text(state_path));
  } catch (const json::exception& e) {
    throw Error(state_path, fmt::format("not valid JSON: {}", e.what()));
  }
  const int64_t step = state.at("global_step").get<int64_t>();
  if (state.value("estimator", s.estimator) != s.estimator)
    throw Error(state_path, fmt::format("the checkpoint was trained with adv_estimator '{}', this run uses '{}'",
                                        state.value("estimator", ""), s.estimator));
  // The reference is the policy RL started from: the SFT warm start's result when there was one.
  const std::string sft_model = files::join(s.run_dir, "sft_model");
  if ((s.ref_model || s.ref_weights) && s.settings.sft.enable) {
    if (!files::is_dir(sft_model))
      throw Error(folder, fmt::format("sft.enable is set but {} (the reference policy) is missing", sft_model));
    load_reference_weights(s, sft_model);
  }
  // Each role's ranks load its part (the others do not hold it).
  if (s.actor) {
    s.actor->trained_model().load(files::join(folder, "actor"));  // weights + optimizer state
    s.actor->set_updates(state.at("actor_updates").get<int64_t>());
  }
  if (s.critic) {
    s.critic->trained_model().load(files::join(folder, "critic"));
    s.critic->set_updates(state.at("critic_updates").get<int64_t>());
  }
  s.loader->load_state(state.at("dataloader"));
  const config::AlgorithmSettings& a = s.settings.algorithm;
  s.kl_ctrl = algo::make_kl_controller(a.kl_ctrl_type, state.at("kl_coef").get<double>(), a.target_kl, a.horizon);
  json ignored;
  sync_rollout_weights(s, ignored);
  return step;
}

}  // namespace verlpp::controller
