// The SFT warm start (verlpp's sft.* section): before RL, the actor is fine-tuned on
// (prompt, response) rows so that it starts from a policy that already answers in the task's
// format, as RL recipes start from an instruct model. Its result is saved as
// <run_dir>/sft_model (a Hugging Face folder) and is the reference policy of the RL phase.
#include <ATen/core/grad_mode.h>

#include "rl_state.hpp"

#include <verlpp/tracking/metrics_log.hpp>
#include <verlpp/model/checkpoint.hpp>
#include <verlpp/train/sft.hpp>

#include "../util/files.hpp"

#include <chrono>
#include <optional>

namespace verlpp::controller {

void run_sft_warm_start(RlTrainer::State& s) {
  const config::SftSettings& sft = s.settings.sft;
  if (!sft.enable) return;
  const auto start = std::chrono::steady_clock::now();
  // The SFT trains the actor, on its pool's ranks. Ranks of other pools take part in the
  // validations only (they receive the samples), and a reference of its own pool then reads the
  // result from sft_model.
  const bool actor_here = s.runs(config::RlRole::kActorRollout);
  DatasetOptions options = dataset_options(s);  // a tool_agent row's prompt as its rollout sees it
  options.response_key = sft.response_key;
  options.messages_key = sft.messages_key;
  // The response ends the assistant turn: the first EOS id (ChatML's <|im_end|>) closes it.
  if (!s.eos_ids.empty()) options.response_suffix_ids = {s.eos_ids.front()};
  std::optional<PromptDataset> data;
  if (actor_here) data = PromptDataset::load(sft.train_files, *s.tokenizer, *s.chat, options);

  const int64_t steps = sft.total_steps;
  train::LrScheduleOptions lr;
  lr.base_lr = sft.optim.lr;
  lr.style = sft.optim.lr_scheduler_type;
  lr.total_steps = steps;
  lr.warmup_steps = train::resolve_warmup_steps(-1, sft.optim.lr_warmup_steps_ratio, steps);
  lr.min_lr_ratio = sft.optim.min_lr_ratio;
  train::SftConfig config;
  config.micro_batch_size = sft.micro_batch_size_per_gpu;
  config.remove_padding = s.settings.model.use_remove_padding;
  config.logits_in_backward = s.actor_config.logits_in_backward;
  config.optim = adamw_of(sft.optim);
  config.param_dtype = s.actor_config.param_dtype;  // SFT trains the actor, in its compute dtype
  config.kernels = s.actor_config.kernels;
  config.rotate_qkv = s.actor_config.rotate_qkv;
  std::optional<train::SftTrainer> trainer;
  std::optional<DataLoader> loader;
  if (actor_here) {
    // The SFT trains the actor's model object: with sharded actor weights they are gathered into
    // it first, and the SFT's own optimizer shards them again the same way.
    s.actor->trained_model().materialize_master();
    trainer.emplace(*s.actor_model, config, train::LrSchedule(lr));
    trainer->set_data_parallel(s.place(config::RlRole::kActorRollout).dp,
                               sharding_options(s, s.settings.actor.sharding));
    loader.emplace(data->size(), sft.batch_size, /*shuffle=*/true, uint64_t(sft.seed));
  }
  // Rank 0 writes the files. The SFT runs only in a run that starts from scratch (a resumed run
  // restores its result from sft_model), so its rows are rewritten whole, never appended to; a
  // row is handed to the system when its step ends.
  files::OutputFile log;
  const std::string log_path = files::join(s.run_dir, "sft_metrics.jsonl");
  if (s.is_writer()) {
    files::remove_file(log_path);
    log = files::OutputFile(log_path, files::OutputFile::Mode::kAppend);
  }
  double first_loss = 0, last_loss = 0;
  const int64_t test_freq = sft.test_freq;
  for (int64_t step = 1; step <= steps; ++step) {
    if (s.group) s.group->set_stage(fmt::format("sft step {}", step));
    nlohmann::json m = nlohmann::json::object();
    if (actor_here) {
      Batch batch = collate_sft(*data, loader->next(), s.pad_id, s.response_length);
      move_to(batch, s.device);
      m = trainer->train_step(batch);
      if (step == 1) first_loss = m["sft/loss"].get<double>();
      last_loss = m["sft/loss"].get<double>();
    }
    m["step"] = step;
    if (test_freq > 0 && s.val_set && (step % test_freq == 0 || step == steps)) {
      nlohmann::json sync;
      // The engine may hold a copy of the weights.
      if (actor_here) sync_rollout_weights(s, sync, &trainer->trained_model());
      const nlohmann::json val = validate_model(s);
      for (const auto& [key, value] : val.items()) m["sft/" + key] = value;
      s.message(fmt::format("SFT step {}/{}: loss {:.3f}, val/acc {:.3f}", step, steps, last_loss,
                            val.value("val/acc", 0.0)));
    }
    if (log.is_open()) {
      log.write(m.dump() + "\n");
      log.flush();
    }
    s.progress("sft", step, steps);
  }
  if (log.is_open()) {
    log.commit();
    tracking::sync_file(log_path);  // on disk before any checkpoint of the RL phase exists
  }
  const std::string out = files::join(s.run_dir, "sft_model");
  if (actor_here) {
    model::SaveOptions save;
    save.source_dir = s.model_path;
    trainer->trained_model().materialize_master();  // collective with sharded weights
    if (s.is_writer()) {
      files::remove_tree(out);
      model::save_pretrained(*s.actor_model, out, save);
    }
    if (s.ref_weights) {
      s.ref_weights->import(*s.actor_model);
    } else if (s.ref_model) {
      at::NoGradGuard no_grad;
      for (const auto& [name, p] : s.actor_model->named_parameters()) s.ref_model->parameter(name).copy_(p.detach());
    }
    // The actor continues from the fine-tuned weights (its units take them; nothing without units).
    s.actor->trained_model().import_master();
    // The engine generates with the fine-tuned weights from here on (validation before RL
    // included): with mixed precision or a 16-bit engine it holds a copy, which SFT did not touch.
    nlohmann::json sync;
    sync_rollout_weights(s, sync);
  }
  if (!s.settings.pools.colocated()) {
    // A reference on a pool without the actor reads the fine-tuned policy once rank 0 wrote it
    // (the other pools wait for that without a timeout: the SFT may take long).
    pools_barrier(s, "sft/saved");
    if (!actor_here && (s.ref_model || s.ref_weights)) load_reference_weights(s, out);
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  s.message(fmt::format("SFT warm start: {} steps on {} rows, loss {:.3f} -> {:.3f} ({:.0f} s); saved {}", steps,
                        data ? data->size() : 0, first_loss, last_loss, seconds, out));
}

}  // namespace verlpp::controller
