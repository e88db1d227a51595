// train_reward_model: `verlpp train-rm`'s run (see rm_training.hpp). It reuses the RL run's
// state and setup pieces (device and ranks, kernels, the actor for the optional SFT step), so a
// reward model trains on the same devices, paths and files as a policy.
#include <ATen/core/grad_mode.h>
#include <verlpp/config/keys.hpp>
#include <verlpp/controller/rm_training.hpp>

#include "rl_state.hpp"

#include <verlpp/controller/device_choice.hpp>
#include <verlpp/tracking/metrics_log.hpp>
#include <verlpp/controller/preference_data.hpp>
#include <verlpp/tracking/report.hpp>
#include <verlpp/model/checkpoint.hpp>
#include <verlpp/train/reward_model.hpp>
#include <verlpp/train/reward_model_trainer.hpp>

#include "../util/files.hpp"

#include <algorithm>
#include <chrono>

namespace verlpp::controller {
namespace {

using json = nlohmann::json;

// Inside a global_step_N checkpoint: the reward model (a Hugging Face folder with the optimizer
// state). Beside the checkpoints: the final model.
constexpr const char* kCheckpointModel = "reward_model";
constexpr const char* kFinalModel = "rm_model";

// The pairwise sums over `pairs`, each rank taking every world-th pair, summed over the ranks.
train::PairwiseSums evaluate_pairs(const RlTrainer::State& s, const train::RewardModelTrainer& trainer,
                                   const PreferenceDataset& pairs, int64_t chunk) {
  train::PairwiseSums sums;
  std::vector<size_t> mine;
  for (size_t i = size_t(s.world.rank); i < pairs.size(); i += size_t(s.world.world_size)) mine.push_back(i);
  for (size_t start = 0; start < mine.size(); start += size_t(chunk)) {
    const std::vector<size_t> part(mine.begin() + std::ptrdiff_t(start),
                                   mine.begin() + std::ptrdiff_t(std::min(mine.size(), start + size_t(chunk))));
    Batch batch = collate_preference_pairs(pairs, part, s.pad_id);
    move_to(batch, s.device);
    const train::PairwiseSums part_sums = trainer.evaluate(batch);
    sums.loss += part_sums.loss;
    sums.correct += part_sums.correct;
    sums.margin += part_sums.margin;
    sums.pairs += part_sums.pairs;
  }
  std::vector<double> v = {sums.loss, sums.correct, sums.margin, double(sums.pairs)};
  s.dp.all_reduce_sum(v);
  return {v[0], v[1], v[2], int64_t(v[3])};
}

json val_metrics(const train::PairwiseSums& sums) {
  return {{"val/rm/loss", sums.mean_loss()},
          {"val/rm/accuracy", sums.accuracy()},
          {"val/rm/margin", sums.pairs > 0 ? sums.margin / double(sums.pairs) : 0.0}};
}

// The reward model to train, in fp32 (the optimizer's masters): a folder that already has a
// one-label score head loads whole; a causal LM's decoder gets a fresh score head (its lm_head
// unused), as verl's critic starts from an actor checkpoint. `decoder`, when given, replaces the
// folder's decoder weights (the SFT step's result).
std::unique_ptr<model::DecoderLM> make_reward_model(const RlTrainer::State& s, const std::string& path,
                                                    const model::DecoderLM* decoder) {
  const model::ModelConfig mc = train::sequence_classification_config(model::load_model_config(path));
  train::check_reward_model_config(mc, fmt::format("rm_train.model_path ({})", path));
  auto rm = std::make_unique<model::DecoderLM>(mc, model_options(s, at::kFloat));
  rm->init_weights(s.seed + 11);
  if (decoder == nullptr) {
    model::load_weights(*rm, path, model::LoadOptions{{"score."}});
  } else {
    at::NoGradGuard no_grad;
    for (const auto& [name, p] : rm->named_parameters())
      if (name.rfind("score.", 0) != 0) p.detach().copy_(decoder->parameter(name).detach());
    rm->note_weights_changed();
  }
  return rm;
}

}  // namespace

RmTrainingResult train_reward_model(const config::Config& config, const TrainerHooks& hooks) {
  const auto start = std::chrono::steady_clock::now();
  RlTrainer::State s;
  s.config = config;
  s.hooks = hooks;
  s.world = hw::world_from_environment();
  s.settings = config::parse_run_settings(s.config, s.world.world_size, s.world.local_world_size);
  const config::RmTrainSettings rm = config::parse_rm_train_settings(s.config);
  const config::TrainerSettings& t = s.settings.trainer;
  const DeviceChoice device = choose_device(t.device, s.world.local_rank, config::keys::kTrainerDevice);
  s.device = device.device;
  s.plugin = device.plugin;
  join_process_group(s);
  if (!s.settings.pools.colocated())
    throw Error(config::keys::kTrainerResourcePools,
                "verlpp train-rm trains one model on every rank; resource pools are "
                "for the roles of verlpp train (leave trainer.resource_pools null)");
  join_resource_pools(s);  // one pool of every rank, as the SFT warm start reads the actor's place
  s.seed = uint64_t(t.seed);
  s.run_dir = rm.default_local_dir;
  s.model_path = rm.model_path;
  s.response_length = s.settings.data.max_response_length;
  s.n = s.settings.rollout.n;  // the actor's batch sizes count sequences (the SFT step's actor)
  const std::string tokenizer_path = s.settings.data.tokenizer.value_or(s.model_path);
  s.tokenizer = model::Tokenizer::from_file(tokenizer_path);
  s.chat = model::ChatTemplate::from_config_file(tokenizer_path);
  const model::ModelConfig mc = model::load_model_config(s.model_path);
  s.eos_ids = mc.eos_token_ids;
  s.pad_id = mc.pad_token_id.value_or(s.eos_ids.empty() ? 0 : s.eos_ids.front());

  PreferenceDataOptions data;
  data.prompt_key = rm.prompt_key;
  data.chosen_key = rm.chosen_key;
  data.rejected_key = rm.rejected_key;
  data.max_length = rm.max_length;
  data.truncation = rm.truncation;
  const PreferenceDataset train_pairs = PreferenceDataset::load(rm.train_files, *s.tokenizer, *s.chat, data);
  std::optional<PreferenceDataset> val_pairs;
  if (!rm.val_files.empty()) val_pairs = PreferenceDataset::load(rm.val_files, *s.tokenizer, *s.chat, data);
  if (rm.batch_size > int64_t(train_pairs.size()))
    throw Error(config::keys::kRmTrainBatchSize, fmt::format("{} pairs per step, but rm_train.train_files hold only {}",
                                                             rm.batch_size, train_pairs.size()));
  if (rm.batch_size % s.world.world_size != 0)
    throw Error(config::keys::kRmTrainBatchSize,
                fmt::format("{} pairs per step do not divide over {} ranks", rm.batch_size, s.world.world_size));
  if (rm.sft_warm_start) {
    // The warm start takes the config's sft.* section whether or not sft.enable asks `verlpp train`
    // to run it too: a chain's policy run can start from this run's sft_model instead.
    const nlohmann::json& files = s.config.at(config::keys::kSftTrainFiles);
    if (files.is_null() || (files.is_array() && files.empty()))
      throw Error(config::keys::kRmTrainSftWarmStart,
                  "is true but sft.train_files is not set: the warm start trains on the config's sft.* section "
                  "(or set rm_train.sft_warm_start=false to start from rm_train.model_path)");
    config::Config with_sft = s.config;
    with_sft.set(config::keys::kSftEnable, true);
    s.settings.sft = config::parse_run_settings(with_sft, s.world.world_size, s.world.local_world_size).sft;
  }

  CheckpointManager checkpoints(s.run_dir, t.max_actor_ckpt_to_keep);
  const ResumePlan plan = checkpoints.plan_resume(t.resume_mode, t.resume_from_path, {"metrics.jsonl"});
  if (s.group) s.group->barrier();  // every rank has looked at the folder before rank 0 changes it
  for (const std::string& note : plan.notes) s.message(note);
  if (s.is_writer()) files::make_dirs(s.run_dir);
  s.message(fmt::format("reward model training on {} ({}): {} pairs ({} held out), {} steps of {} pairs, from {}{}",
                        s.device.str(), s.plugin.empty() ? "no plugin" : "plugin " + s.plugin, train_pairs.size(),
                        val_pairs ? val_pairs->size() : 0, rm.total_steps, rm.batch_size, s.model_path,
                        rm.sft_warm_start && !plan.folder ? " after the SFT warm start" : ""));
  if (train_pairs.truncated() > 0)
    s.message(fmt::format("{} sides cut to rm_train.max_length = {} (rm_train.truncation = {})",
                          train_pairs.truncated(), rm.max_length, rm.truncation));

  load_kernels(s);
  std::unique_ptr<model::DecoderLM> rm_model;
  if (rm.sft_warm_start && !plan.folder) {
    build_actor(s);
    s.actor->set_data_parallel(s.dp, sharding_options(s, s.settings.actor.sharding));
    try {
      run_sft_warm_start(s);
    } catch (const std::exception& e) {
      throw Error(fmt::format("rank {} of {}, SFT warm start", s.world.rank, s.world.world_size), e.what());
    }
    s.actor->trained_model().materialize_master();  // the reward model starts from these weights
    rm_model = make_reward_model(s, s.model_path, s.actor_model.get());
    s.actor.reset();
    s.actor_model.reset();
  } else {
    rm_model = make_reward_model(s, s.model_path, nullptr);
  }
  train::RewardModelTrainerConfig tc;
  tc.micro_batch_size = rm.micro_batch_size_per_gpu;
  tc.optim = adamw_of(rm.optim);
  tc.param_dtype = s.settings.actor.precision.resolve(s.device.is_cpu());
  tc.kernels = s.kernels.get();
  train::RewardModelTrainer trainer(*rm_model, tc, schedule_of(rm.optim, rm.total_steps));
  trainer.set_data_parallel(s.dp, sharding_options(s, s.settings.actor.sharding));
  DataLoader loader(train_pairs.size(), rm.batch_size, /*shuffle=*/true, uint64_t(rm.seed));

  const std::string metrics_path = files::join(s.run_dir, "metrics.jsonl");
  int64_t step = 0;
  if (plan.folder) {
    const std::string state_path = files::join(*plan.folder, CheckpointManager::kStateFile);
    step = CheckpointManager::check_state(*plan.folder);  // JSON holding its own step, or an Error
    const json state = json::parse(files::read_text(state_path));
    if (!state.contains("updates") || !state["updates"].is_number_integer() || !state.contains("dataloader"))
      throw Error(state_path,
                  "not a reward-model checkpoint (no integer 'updates' or no 'dataloader'): a folder "
                  "`verlpp train-rm` wrote holds both");
    trainer.trained_model().load(files::join(*plan.folder, kCheckpointModel));
    trainer.set_updates(state["updates"].get<int64_t>());
    loader.load_state(state["dataloader"]);
    if (s.is_writer())
      for (const std::string& note : tracking::trim_metrics(metrics_path, step).notes(metrics_path, step))
        s.message(note);
    s.message(fmt::format("resumed from {} (step {} of {})", *plan.folder, step, rm.total_steps));
  } else if (s.is_writer()) {
    files::remove_file(metrics_path);
  }
  if (s.is_writer()) {
    s.metrics_out = files::OutputFile(metrics_path, files::OutputFile::Mode::kAppend);
    // trainer.logger's backends but the console (the lines below are this command's own), under
    // the experiment name with "_rm", so the reward model's run sits beside the policy's.
    std::vector<std::string> names;
    for (const std::string& name : t.logger)
      if (name != "console") names.push_back(name);
    tracking::LoggerRun run;
    run.project = t.project_name;
    run.experiment = t.experiment_name + "_rm";
    run.run_dir = s.run_dir;
    run.config = s.config.tree();
    run.total_steps = rm.total_steps;
    if (plan.folder) run.resumed_step = step;
    run.message = [&s](const std::string& text) { s.message(text); };
    s.loggers = tracking::make_loggers(names, run);
  }
  auto write_row = [&](const json& row) {
    if (!s.is_writer()) return;
    s.metrics_out.write(row.dump() + "\n");
    s.metrics_out.flush();
    for (const auto& logger : s.loggers) logger->log(row, row.value("step", int64_t(0)));
    if (s.hooks.on_step) s.hooks.on_step(row);
  };

  RmTrainingResult result;
  result.run_dir = s.run_dir;
  result.model_dir = files::join(s.run_dir, kFinalModel);
  const int64_t eval_chunk = std::max<int64_t>(rm.micro_batch_size_per_gpu, 1);
  if (val_pairs && !plan.folder) {
    json row = val_metrics(evaluate_pairs(s, trainer, *val_pairs, eval_chunk));
    row["step"] = 0;
    result.val_accuracy_before = row["val/rm/accuracy"].get<double>();
    s.message(fmt::format("before training: held-out pairwise accuracy {:.1f}% ({} pairs), loss {:.4f}",
                          *result.val_accuracy_before * 100, val_pairs->size(), row["val/rm/loss"].get<double>()));
    write_row(row);
  }
  json last = json::object();
  while (step < rm.total_steps) {
    const auto step_start = std::chrono::steady_clock::now();
    if (s.group) s.group->set_stage(fmt::format("reward model step {}", step + 1));
    Batch batch = collate_preference_pairs(train_pairs, loader.next(), s.pad_id);
    move_to(batch, s.device);
    json m = trainer.train_step(batch);
    ++step;
    const bool is_last = step == rm.total_steps;
    const bool evaluated = val_pairs && (every(rm.test_freq, step, is_last) || is_last);
    if (evaluated) {
      const json v = val_metrics(evaluate_pairs(s, trainer, *val_pairs, eval_chunk));
      for (const auto& [key, value] : v.items()) m[key] = value;
    }
    const bool save = every(rm.save_freq, step, is_last);
    std::string tmp;
    if (save) {
      tmp = s.is_writer() ? checkpoints.begin(step) : std::string();
      model::SaveOptions options;
      options.source_dir = tokenizer_path;
      trainer.trained_model().save(files::join(tmp, kCheckpointModel), options);  // collective when sharded
      if (s.is_writer()) {
        const json state = {{"global_step", step},
                            {"dataloader", loader.state()},
                            {"updates", trainer.updates()},
                            {"world_size", s.world.world_size},
                            {"config", s.config.tree()}};
        files::write_text(files::join(tmp, CheckpointManager::kStateFile), state.dump(2) + "\n");
      }
    }
    m["timing_s/step"] = std::chrono::duration<double>(std::chrono::steady_clock::now() - step_start).count();
    m["training/epoch"] = loader.epoch();
    m["step"] = step;
    try {
      write_row(m);
      if (save && s.is_writer()) {
        tracking::sync_file(metrics_path);
        for (const auto& logger : s.loggers) logger->sync();
      }
    } catch (...) {
      if (save && s.is_writer()) checkpoints.abort(step);
      throw;
    }
    if (save) {
      if (s.is_writer()) s.message(fmt::format("checkpoint saved: {}", checkpoints.commit(step)));
      if (s.group) s.group->barrier();
    }
    if (evaluated || step == 1)
      s.message(fmt::format("step {:>5}/{}: loss {:.4f}, pairwise accuracy {:.1f}%{}", step, rm.total_steps,
                            m["rm/loss"].get<double>(), m["rm/accuracy"].get<double>() * 100,
                            evaluated
                                ? fmt::format(", held-out {:.1f}% (loss {:.4f})",
                                              m["val/rm/accuracy"].get<double>() * 100, m["val/rm/loss"].get<double>())
                                : std::string()));
    s.progress("train-rm", step, rm.total_steps);
    last = m;
  }
  if (last.contains("val/rm/accuracy")) result.val_accuracy_after = last["val/rm/accuracy"].get<double>();
  result.steps = step;
  result.last_metrics = last;

  trainer.trained_model().materialize_master();  // collective with sharded weights: the folder below
  if (s.is_writer()) {
    s.metrics_out.commit();
    tracking::sync_file(metrics_path);
    for (const auto& logger : s.loggers) logger->finish();
    // The deliverable: written beside, then renamed over the previous one, so a crash never
    // leaves a half folder under the name a PPO run reads.
    const std::string tmp = result.model_dir + ".tmp";
    files::remove_tree(tmp);
    model::SaveOptions options;
    options.source_dir = tokenizer_path;
    model::save_pretrained(trainer.trained_model().master(), tmp, options);
    files::remove_tree(result.model_dir);
    files::rename_path(tmp, result.model_dir);
    tracking::ReportInfo info;
    info.title = fmt::format("verlpp train-rm: {}", t.experiment_name);
    const double minutes = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() / 60.0;
    info.summary = {
        {"steps", fmt::format("{} of {}", step, rm.total_steps)},
        {"pairs", fmt::format("{} train, {} held out", train_pairs.size(), val_pairs ? val_pairs->size() : 0)},
        {"wall time (this invocation)", fmt::format("{:.1f} min", minutes)},
        {"reward model", result.model_dir}};
    if (result.val_accuracy_before)
      info.summary.push_back({"held-out accuracy before", fmt::format("{:.1f}%", *result.val_accuracy_before * 100)});
    if (result.val_accuracy_after)
      info.summary.push_back({"held-out accuracy after", fmt::format("{:.1f}%", *result.val_accuracy_after * 100)});
    info.config = s.config.tree();
    tracking::write_report(tracking::read_metrics(metrics_path), files::join(s.run_dir, "report.html"), info);
  }
  if (s.group) s.group->barrier();  // no rank leaves while another still needs the store
  return result;
}

}  // namespace verlpp::controller
