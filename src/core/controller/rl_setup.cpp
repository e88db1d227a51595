// RlTrainer setup: everything a run needs, built from the run's settings (parsed once from the
// resolved config) in verl's terms (batch sizes in prompts become sequences by multiplying with
// rollout.n, as verl's workers do).
#include "rl_state.hpp"

#include <verlpp/config/keys.hpp>
#include <verlpp/algo/advantages.hpp>
#include <verlpp/controller/device_choice.hpp>
#include <verlpp/controller/memory_plan.hpp>
#include <verlpp/core/strings.hpp>
#include <verlpp/hw/device.hpp>
#include <verlpp/hw/plugin_registry.hpp>
#include <verlpp/hw/tensor_storage.hpp>
#include <verlpp/train/sharded_weights.hpp>
#include <verlpp/model/checkpoint.hpp>
#include <verlpp/model/tensor_parallel.hpp>
#include <verlpp/rollout/tensor_parallel.hpp>

#include "../util/files.hpp"

namespace verlpp::controller {
namespace {

// The fields train::ActorConfig and train::CriticConfig share, from the role's settings
// (mini-batches count prompts in verl; the trainers count sequences).
template <class RoleConfig>
void set_ppo_update(RoleConfig& out, const config::PpoRoleSettings& role, const RlTrainer::State& s) {
  out.ppo_mini_batch_size = role.ppo_mini_batch_size * s.n;
  out.ppo_micro_batch_size = role.ppo_micro_batch_size_per_gpu;
  out.use_dynamic_bsz = role.use_dynamic_bsz;
  out.ppo_max_token_len = role.ppo_max_token_len_per_gpu;
  out.ppo_epochs = role.ppo_epochs;
  out.optim = adamw_of(role.optim);
  out.param_dtype = role.precision.resolve(s.device.is_cpu());
  out.kernels = s.kernels.get();  // null on the CPU (see load_kernels)
}

// The chosen plugin's device behind s.device (the plugin must be loaded).
hw::Device plugin_device(const RlTrainer::State& s) {
  return hw::Device(hw::plugin_named(s.plugin), int32_t(s.device.has_index() ? s.device.index() : 0));
}

}  // namespace

// The LR schedule of `<role>.optim`, for `total_steps` optimizer updates.
train::LrSchedule schedule_of(const config::OptimSettings& optim, int64_t total_steps) {
  train::LrScheduleOptions o;
  o.base_lr = optim.lr;
  o.style = optim.lr_scheduler_type;
  o.total_steps = optim.total_training_steps > 0 ? optim.total_training_steps : total_steps;
  o.warmup_steps = train::resolve_warmup_steps(optim.lr_warmup_steps, optim.lr_warmup_steps_ratio, o.total_steps);
  o.min_lr_ratio = optim.min_lr_ratio;
  o.num_cycles = optim.num_cycles;
  return train::LrSchedule(o);
}

train::ShardingOptions sharding_options(const RlTrainer::State& s, const config::ShardingSettings& role) {
  train::ShardingOptions o;
  o.zero_stage = int(role.zero_stage);
  o.param_offload = role.param_offload;
  o.optimizer_offload = role.optimizer_offload;
  o.offloaded_step = s.settings.paths.offloaded_step;
  o.forward_prefetch = role.forward_prefetch;
  // Pinned memory where the plugin has it (check_offload refused an accelerator without).
  if (!s.plugin.empty() && hw::has_pinned_host_memory(hw::plugin_named(s.plugin)))
    o.host_memory = &hw::plugin_named(s.plugin);
  return o;
}

void check_offload(const RlTrainer::State& s) {
  const config::RunSettings& rs = s.settings;
  std::vector<std::string> asked;
  if (rs.actor.sharding.param_offload) asked.push_back(config::keys::kActorFsdpConfigParamOffload);
  if (rs.actor.sharding.optimizer_offload) asked.push_back(config::keys::kActorFsdpConfigOptimizerOffload);
  if (s.use_reference && rs.ref.sharding.param_offload) asked.push_back(config::keys::kRefFsdpConfigParamOffload);
  if (s.use_critic && rs.critic.sharding.param_offload)
    asked.push_back(config::keys::kCriticModelFsdpConfigParamOffload);
  if (s.use_critic && rs.critic.sharding.optimizer_offload)
    asked.push_back(config::keys::kCriticModelFsdpConfigOptimizerOffload);
  if (asked.empty() || s.device.is_cpu()) return;  // the host's memory is the device's: nothing to pin
  if (s.plugin.empty() || !hw::has_pinned_host_memory(hw::plugin_named(s.plugin)))
    throw Error(asked.front(),
                fmt::format("offload to host memory needs the device's plugin to give pinned host memory, but {} "
                            "does not (VERLPP_DEVICE_CAP_PINNED_HOST_MEMORY; `verlpp plugins`); turn off: {}",
                            s.plugin.empty() ? "no plugin is loaded for " + s.device.str() : "plugin " + s.plugin,
                            join(asked, ", ")));
}

// Whether the reference is sharded: ZeRO-3 over the several ranks of its pool (shard_reference).
bool reference_sharded(const RlTrainer::State& s) {
  return s.settings.ref.sharding.zero_stage == 3 && s.settings.pools.pool_of(config::RlRole::kReference).size() > 1;
}

// The reference's layout as a ShardingOptions (for the start-up line): stage 3 when sharded.
train::ShardingOptions reference_sharding(const RlTrainer::State& s) {
  train::ShardingOptions o = sharding_options(s, s.settings.ref.sharding);
  o.zero_stage = reference_sharded(s) ? 3 : 0;
  return o;
}

// The start-up line saying how a role's state is held ("" for the default: one rank, nothing offloaded).
std::string sharding_line(const std::string& role, const train::ShardingOptions& o, int64_t world) {
  std::vector<std::string> parts;
  if (world > 1) {
    static const char* kStages[] = {"replicated", "optimizer state sharded",
                                    "gradients, fp32 masters and optimizer state sharded; each layer's gradients "
                                    "reduce-scattered during the backward",
                                    "parameters, gradients and optimizer state sharded; each layer gathered while it "
                                    "runs"};
    parts.push_back(fmt::format("ZeRO-{} over {} ranks ({})", o.zero_stage, world, kStages[o.zero_stage]));
    const bool trained = role != "reference";  // the reference runs forwards only
    if (o.zero_stage == 3 && (o.forward_prefetch || trained))
      parts.push_back(
          fmt::format("the next layer's gather started during each layer's {}", !o.forward_prefetch ? "backward"
                                                                                : trained ? "forward and backward"
                                                                                          : "forward"));
  }
  if (o.optimizer_offload)
    parts.push_back(
        fmt::format("fp32 masters and AdamW moments in host memory (AdamW {})",
                    o.offloaded_step == train::OffloadedStep::kHost ? "on the host" : "streamed through the device"));
  if (o.param_offload) parts.push_back("weights in host memory between its stages");
  return parts.empty() ? std::string() : role + ": " + join(parts, ", ");
}

bool engine_shares_actor_weights(const RlTrainer::State& s) {
  const train::TrainedModel& t = s.actor->trained_model();
  if (!t.sharded_weights()) return true;
  return !t.sharded_weights()->gathers_per_use() && !t.sharding().param_offload;
}

const model::DecoderLM& reference_model(const RlTrainer::State& s) {
  return s.ref_weights ? s.ref_weights->model() : *s.ref_model;
}

// The options every model of the run is built with: its dtype and the run's path choices.
model::ModelOptions model_options(const RlTrainer::State& s, at::ScalarType dtype) {
  model::ModelOptions o;
  o.dtype = dtype;
  o.device = s.device;
  o.forward = s.settings.paths.forward;
  return o;
}

// With several ranks: the rendezvous and the plugin communicator (a collective over all ranks).
void join_process_group(RlTrainer::State& s) {
  if (!s.world.is_distributed()) return;
  if (s.plugin.empty())
    throw Error(config::keys::kTrainerDevice,
                fmt::format("{} ranks need a plugin communicator, but no hardware plugin is loaded for {} "
                            "(VERL_HARDWARE_PLUGIN, `verlpp plugins`)",
                            s.world.world_size, s.device.str()));
  hw::ProcessGroupOptions options;
  options.timeout = std::chrono::milliseconds(int64_t(s.settings.trainer.dist_timeout_s * 1000.0));
  s.group = hw::ProcessGroup::create(s.world, plugin_device(s), options);
  s.dp = train::DataParallel(s.group.get(), s.device);
}

// The device's plugin's kernels, for the engine (paged attention decode, sampling, RoPE,
// SwiGLU) and the trainer (LM-head log-probs, RoPE, SwiGLU, AdamW), on any device type, unless
// the plugin marks them a reference (cpu_ref's loops, slower than LibTorch's path).
void load_kernels(RlTrainer::State& s) {
  hw::KernelsOptions options;
  options.native_streams = s.settings.paths.kernel_streams;
  if (!s.plugin.empty() && hw::run_uses_kernels(hw::plugin_named(s.plugin)))
    s.kernels = std::make_unique<hw::Kernels>(hw::plugin_named(s.plugin), options);
}

// The start-up line naming the kernels the run calls.
std::string kernels_line(const RlTrainer::State& s) {
  if (s.kernels) {
    const std::vector<std::string> names = s.kernels->available();
    return fmt::format("kernels from plugin {}: {}", s.plugin, names.empty() ? "none offered" : join(names, ", "));
  }
  if (s.plugin.empty()) return "kernels: none (no plugin); LibTorch runs every operation";
  return fmt::format("kernels: none called (plugin {}'s are a reference implementation); LibTorch runs every operation",
                     s.plugin);
}

train::ActorConfig actor_config(const RlTrainer::State& s) {
  const config::ActorSettings& a = s.settings.actor;
  const config::ActorModelSettings& m = s.settings.model;
  train::ActorConfig ac;
  set_ppo_update(ac, a, s);
  ac.entropy_coeff = a.entropy_coeff;
  ac.use_kl_loss = a.use_kl_loss;
  ac.kl_loss_coef = a.kl_loss_coef;
  ac.kl_loss_type = a.kl_loss_type;
  ac.loss_mode = a.loss_mode;
  ac.policy.clip_ratio_low = a.clip_ratio_low;
  ac.policy.clip_ratio_high = a.clip_ratio_high;
  ac.policy.clip_ratio_c = a.clip_ratio_c;
  ac.policy.loss_agg_mode = a.loss_agg_mode;
  ac.policy.clip_cov_ratio = a.clip_cov_ratio;
  ac.policy.clip_cov_lb = a.clip_cov_lb;
  ac.policy.clip_cov_ub = a.clip_cov_ub;
  ac.policy.kl_cov_ratio = a.kl_cov_ratio;
  ac.policy.ppo_kl_coef = a.ppo_kl_coef;
  ac.temperature = s.settings.rollout.temperature;
  if (ac.temperature <= 0) ac.temperature = 1.0;  // greedy rollouts: log-probs under softmax(logits)
  ac.remove_padding = m.use_remove_padding;
  // verl's fused kernels save the logits' memory by recomputing them in the backward; without
  // them (its default) the logits stay alive until the backward, here in the compute dtype.
  ac.logits_in_backward = m.use_fused_kernels ? train::LogitsInBackward::kRecompute : train::LogitsInBackward::kKeep;
  ac.log_prob_chunk_rows = s.settings.rollout.log_prob_micro_batch_size_per_gpu;
  ac.rotate_qkv = s.settings.paths.train_rotary_qkv;
  return ac;
}

void build_actor(RlTrainer::State& s) {
  s.actor_config = actor_config(s);
  s.actor_model =
      std::make_unique<model::DecoderLM>(model::load_pretrained(s.model_path, model_options(s, at::kFloat)));
  s.actor_model->set_gradient_checkpointing(s.settings.model.enable_gradient_checkpointing);
  s.actor = std::make_unique<train::Actor>(*s.actor_model, s.actor_config,
                                           schedule_of(s.settings.actor.optim, s.total_steps));
}

namespace {

void build_reference(RlTrainer::State& s) {
  // A frozen copy of the starting actor weights (verl's ref worker loads the same model path),
  // in the actor's compute dtype (verl's ref runs under the same FSDP mixed precision). On a pool
  // without the actor it reads them from the model folder as the actor does (fp32, then cast).
  std::optional<model::DecoderLM> loaded;
  if (!s.actor_model) loaded.emplace(model::load_pretrained(s.model_path, model_options(s, at::kFloat)));
  const model::DecoderLM& start = s.actor_model ? *s.actor_model : *loaded;
  s.ref_model = std::make_unique<model::DecoderLM>(start.config(), model_options(s, s.actor_config.param_dtype));
  at::NoGradGuard no_grad;
  for (const auto& [name, p] : start.named_parameters()) s.ref_model->parameter(name).detach().copy_(p.detach());
}

// The reference in flat units when the run shards it (ZeRO-3 on several ranks, unless its
// fsdp_config.reshard_after_forward is false) or offloads it between its forwards.
void shard_reference(RlTrainer::State& s) {
  const config::ShardingSettings& ref = s.settings.ref.sharding;
  const bool sharded = reference_sharded(s);
  if (!sharded && !ref.param_offload) return;
  train::ShardedWeightsOptions o;
  o.dtype = s.ref_model->options().dtype;
  o.dp = s.place(config::RlRole::kReference).dp;
  o.shard = sharded;
  o.gather_per_use = sharded;
  o.trainable = false;
  o.forward_prefetch = ref.forward_prefetch;
  o.host_memory = sharding_options(s, ref).host_memory;
  s.ref_weights = std::make_unique<train::ShardedWeights>(*s.ref_model, o);
  s.ref_model.reset();
  if (ref.param_offload) s.ref_weights->offload();
}

void build_critic(RlTrainer::State& s) {
  const config::CriticSettings& cs = s.settings.critic;
  const std::string path = cs.model_path.value_or(s.model_path);
  model::ModelConfig mc = model::load_model_config(path);
  if (mc.head != model::ModelHead::kTokenClassification) {
    // A causal LM checkpoint: as verl's critic, take its decoder and add a fresh value head.
    mc.head = model::ModelHead::kTokenClassification;
    mc.num_labels = 1;
    mc.score_bias = true;
    const auto at = mc.architecture.find("ForCausalLM");
    if (at != std::string::npos)
      mc.architecture.replace(at, std::string("ForCausalLM").size(), "ForTokenClassification");
    mc.raw["num_labels"] = 1;
  }
  s.critic_model = std::make_unique<model::DecoderLM>(mc, model_options(s, at::kFloat));
  s.critic_model->init_weights(s.seed + 7);
  model::load_weights(*s.critic_model, path, model::LoadOptions{{"score."}});
  s.critic_model->set_gradient_checkpointing(cs.enable_gradient_checkpointing);
  train::CriticConfig cc;
  set_ppo_update(cc, cs, s);
  cc.cliprange_value = cs.cliprange_value;
  cc.loss_agg_mode = cs.loss_agg_mode;
  s.critic = std::make_unique<train::Critic>(*s.critic_model, cc, schedule_of(cs.optim, s.total_steps));
}

// The reward manager (verl's load_reward_manager): the batch manager calls the shared object's
// batch symbol or a registered batch function named custom_reward_function.name; the others
// score item by item with the shared object's function or the rules.
std::unique_ptr<reward::RewardManager> make_reward_manager(const RlTrainer::State& s, const config::RunSettings& rs) {
  const config::CustomRewardSettings& custom = rs.custom_reward;
  // The reward layer's errors name the file or the function; here they get the key they came from.
  const auto at_key = [](const char* key, const auto& make) {
    try {
      return make();
    } catch (const Error& e) {
      throw Error(std::string(key) + "=" + e.where(), e.message());
    }
  };
  if (reward::reward_managers().get(rs.reward_manager.name).batch) {
    reward::BatchRewardFn fn =
        custom.path ? at_key(config::keys::kCustomRewardFunctionPath,
                             [&] { return reward::batch_reward_function_from_library(*custom.path, custom.name); })
                    : at_key(config::keys::kCustomRewardFunctionName,
                             [&] { return reward::registered_batch_reward_function(custom.name); });
    return std::make_unique<reward::RewardManager>(rs.reward_manager, std::move(fn));
  }
  reward::RewardScorer scorer =
      custom.path ? at_key(config::keys::kCustomRewardFunctionPath,
                           [&] { return reward::RewardScorer::from_library(*custom.path, custom.name); })
                  : reward::RewardScorer();
  // The text decoding leaves at the end when eos is not a special token (verl's tokenizer.eos_token).
  const std::string eos = s.eos_ids.empty() ? std::string() : s.tokenizer->decode({s.eos_ids.front()});
  return std::make_unique<reward::RewardManager>(rs.reward_manager, std::move(scorer), eos);
}

// rollout.tensor_model_parallel_size = t: checks that t splits the model (heads, KV heads, MLP)
// and, with t > 1, joins this rank's engine group (ranks [e t, (e + 1) t) of the actor's pool).
// Config::validate has checked that t divides the pool's ranks.
void join_rollout_group(RlTrainer::State& s, const model::ModelConfig& mc) {
  config::check_rollout_split(s.settings, mc);
  s.rollout_tp = s.settings.rollout.tensor_model_parallel_size;
  if (s.rollout_tp > 1 && s.runs(config::RlRole::kActorRollout))
    s.rollout_group = rollout::engine_group(*s.place(config::RlRole::kActorRollout).group, s.rollout_tp, "rollout");
}

void build_engine(RlTrainer::State& s) {
  const config::RolloutSettings& r = s.settings.rollout;
  rollout::EngineOptions o;
  o.block_size = r.block_size;
  o.limits.max_num_seqs = r.max_num_seqs;
  o.limits.max_num_batched_tokens = r.max_num_batched_tokens;
  o.seed = s.seed;
  o.device_graphs = s.settings.paths.device_graphs;
  o.overlap_decode = s.settings.paths.decode_overlap;
  o.rotary_attention = s.settings.paths.rotary_attention;
  // Each engine generates its share of the prompts (all n samples of each).
  const int64_t engines = s.num_engines();
  const int64_t train_rows = (s.train_batch_size + engines - 1) / engines * s.n;
  const int64_t val_rows = s.val_set ? (int64_t(s.val_set->size()) + engines - 1) / engines : 0;
  const int64_t rows = std::max(train_rows, val_rows);
  const int64_t per_row = s.settings.data.max_prompt_length + s.response_length + o.block_size;
  if (s.device.is_cpu()) {
    // On the CPU the pool is plain memory: room for every row of a step at full length.
    o.kv_token_budget = std::min<int64_t>(rows * per_row, int64_t(1) << 22);
  } else {
    // On an accelerator: verl's gpu_memory_utilization of the device's memory (the plugin's
    // figure) for weights + pool.
    o.memory_fraction = r.gpu_memory_utilization;
    if (!s.plugin.empty()) o.memory_total_bytes = int64_t(plugin_device(s).memory_info().second);
    if (o.memory_total_bytes <= 0)
      throw Error(config::keys::kTrainerDevice,
                  fmt::format("{}: no plugin reports this device's memory, so the KV pool cannot be sized "
                              "from rollout.gpu_memory_utilization",
                              s.device.str()));
  }
  const at::ScalarType dtype = r.dtype;
  // The actor's compute dtype: the engine's model is a second handle on the actor's compute
  // tensors (the hybrid engine shares weights; optimizer steps show through) and tracks their
  // version. Another dtype, or actor weights that come and go (gathered per use, offloaded): the
  // engine owns its weights, filled by sync_rollout_weights after each update.
  // A split engine (rollout_group) holds only this rank's slices, in buffers of its own that the
  // sync fills from whole tensors: no rank builds a second whole model.
  const bool own = dtype != s.actor->compute_model().options().dtype || !engine_shares_actor_weights(s);
  model::DecoderLM engine_model =
      s.rollout_group
          ? rollout::tensor_parallel_engine_model(s.actor_model->config(), model_options(s, dtype), *s.rollout_group)
      : own ? model::DecoderLM(s.actor_model->config(), model_options(s, dtype))
            : s.actor->compute_model();
  o.kernels = s.kernels.get();  // null without a plugin, or with a reference one (load_kernels)
  s.engine = std::make_unique<rollout::RolloutEngine>(std::move(engine_model), o);
  // Also when it shares: the sync tells the engine which tensors are the actor's, so that
  // release_weights frees only its own (the fused projections).
  nlohmann::json ignored;
  sync_rollout_weights(s, ignored);
}

}  // namespace

train::AdamWConfig adamw_of(const config::OptimSettings& optim) {
  train::AdamWConfig a;
  a.weight_decay = optim.weight_decay;
  a.beta1 = optim.beta1;
  a.beta2 = optim.beta2;
  a.grad_clip = optim.grad_clip;
  return a;
}

DatasetOptions dataset_options(const RlTrainer::State& s) {
  const config::DataSettings& data = s.settings.data;
  DatasetOptions o;
  o.prompt_key = data.prompt_key;
  o.reward_fn_key = data.reward_fn_key;
  o.max_prompt_length = data.max_prompt_length;
  o.filter_overlong_prompts = data.filter_overlong_prompts;
  o.truncation = data.truncation;
  o.chat.template_kwargs = data.apply_chat_template_kwargs;
  // Which agent loop a row runs, and the tools its prompt is rendered with (setup_agent_loop).
  o.default_agent_name = s.settings.rollout.agent.default_agent_loop;
  o.agent_loops = &s.agent_loops;
  o.tool_schemas = s.tools.schemas();
  o.interactions = &s.interactions;
  return o;
}

AlgorithmFamily algorithm_family(const std::string& estimator) {
  if (estimator == "gae") return AlgorithmFamily::kWithCritic;
  if (estimator == "remax") return AlgorithmFamily::kGreedyBaseline;
  const auto names = algo::advantage_estimator_names();
  if (std::find(names.begin(), names.end(), estimator) == names.end())
    throw Error(config::keys::kAlgorithmAdvEstimator,
                fmt::format("'{}' is not one of: {}", estimator, join(names, ", ")));
  return AlgorithmFamily::kCriticFree;
}

void setup_trainer(RlTrainer::State& s) {
  s.world = hw::world_from_environment();
  s.settings = config::parse_run_settings(s.config, s.world.world_size, s.world.local_world_size);
  const config::RunSettings& rs = s.settings;
  s.estimator = rs.algorithm.adv_estimator;
  s.family = algorithm_family(s.estimator);
  const DeviceChoice device = choose_device(rs.trainer.device, s.world.local_rank, config::keys::kTrainerDevice);
  s.device = device.device;
  s.plugin = device.plugin;
  join_process_group(s);
  join_resource_pools(s);
  s.seed = uint64_t(rs.trainer.seed);
  s.n = rs.rollout.n;
  s.response_length = rs.data.max_response_length;
  s.train_batch_size = rs.data.train_batch_size;
  s.run_dir = rs.trainer.default_local_dir;

  if (!rs.model.path)
    throw Error(config::keys::kModelPath, "no model folder given (a Hugging Face folder with config.json)");
  s.model_path = *rs.model.path;
  const std::string tokenizer_path = rs.data.tokenizer.value_or(s.model_path);
  s.tokenizer = model::Tokenizer::from_file(tokenizer_path);
  // verl's custom_chat_template replaces the tokenizer's template; its special tokens stay.
  if (rs.model.custom_chat_template)
    s.chat = model::ChatTemplate::from_jinja(*rs.model.custom_chat_template, tokenizer_path,
                                             config::keys::kModelCustomChatTemplate);
  else
    s.chat = model::ChatTemplate::from_config_file(tokenizer_path);
  const model::ModelConfig mc = model::load_model_config(s.model_path);
  s.eos_ids = mc.eos_token_ids;
  s.pad_id = mc.pad_token_id.value_or(s.eos_ids.empty() ? 0 : s.eos_ids.front());
  join_rollout_group(s, mc);
  const int64_t context = rs.data.max_prompt_length + s.response_length;
  if (context > mc.max_position_embeddings)
    throw Error(
        std::string(config::keys::kDataMaxPromptLength) + " + data.max_response_length",
        fmt::format("{} tokens exceed the model's max_position_embeddings {}", context, mc.max_position_embeddings));
  // A run whose resident training state cannot fit the device is refused before anything is
  // built (memory_plan.hpp; `verlpp plan` prints the whole plan).
  check_memory_plan(plan_inputs(rs, mc, s.world.world_size, !s.device.is_cpu(),
                                s.plugin.empty() ? 0 : plugin_device(s).memory_info().second),
                    s.device.str());

  // Data, and the reward check before any work: an unknown data source fails here.
  setup_agent_loop(s);
  const DatasetOptions options = dataset_options(s);
  if (rs.data.train_files.empty())
    throw Error(config::keys::kDataTrainFiles, "no training data given (JSONL files in verl's schema)");
  s.train_set = PromptDataset::load(rs.data.train_files, *s.tokenizer, *s.chat, options);
  if (!rs.data.val_files.empty()) s.val_set = PromptDataset::load(rs.data.val_files, *s.tokenizer, *s.chat, options);
  s.rewards = make_reward_manager(s, rs);
  // With a reward model the training rows are scored by it alone (as verl's managers return
  // rm_scores), so only validation needs a rule for its data sources.
  if (rs.reward_model.enable)
    build_reward_model(s);
  else
    s.rewards->check_data_sources(s.train_set->data_sources());
  if (s.val_set) s.rewards->check_data_sources(s.val_set->data_sources());

  s.loader =
      std::make_unique<DataLoader>(s.train_set->size(), s.train_batch_size, rs.data.shuffle, uint64_t(rs.data.seed));
  s.total_steps = rs.trainer.total_training_steps.value_or(s.loader->batches_per_epoch() * rs.trainer.total_epochs);
  if (s.total_steps < 1)
    throw Error(config::keys::kTrainerTotalTrainingSteps, fmt::format("{} steps: nothing to train", s.total_steps));

  s.use_kl_in_reward = rs.algorithm.use_kl_in_reward;
  s.use_reference = s.use_kl_in_reward || rs.actor.use_kl_loss;
  s.use_critic = rs.critic.enable.value_or(s.family == AlgorithmFamily::kWithCritic);
  if (s.family == AlgorithmFamily::kWithCritic && !s.use_critic)
    throw Error(config::keys::kCriticEnable,
                std::string(config::keys::kAlgorithmAdvEstimator) + " = gae needs the critic");
  s.kl_ctrl = algo::make_kl_controller(rs.algorithm.kl_ctrl_type, rs.algorithm.kl_coef, rs.algorithm.target_kl,
                                       rs.algorithm.horizon);

  load_kernels(s);
  check_offload(s);
  s.actor_config = actor_config(s);
  // Each rank builds the roles of its pools only (every role when colocated).
  const bool actor_here = s.runs(config::RlRole::kActorRollout);
  const bool ref_here = s.use_reference && s.runs(config::RlRole::kReference);
  if (actor_here) build_actor(s);
  // The reference copies the actor's weights before they move into sharded units.
  if (ref_here) build_reference(s);
  if (actor_here)
    s.actor->set_data_parallel(s.place(config::RlRole::kActorRollout).dp, sharding_options(s, rs.actor.sharding));
  if (ref_here) shard_reference(s);
  if (s.use_critic && s.runs(config::RlRole::kCritic)) {
    build_critic(s);
    s.critic->set_data_parallel(s.place(config::RlRole::kCritic).dp, sharding_options(s, rs.critic.sharding));
  }
  if (actor_here) build_engine(s);
  const config::PoolLayout& pools = rs.pools;
  const bool ref_line = s.use_reference && (reference_sharded(s) || rs.ref.sharding.param_offload);
  for (const std::string& line :
       {sharding_line("actor", sharding_options(s, rs.actor.sharding),
                      pools.pool_of(config::RlRole::kActorRollout).size()),
        s.use_critic ? sharding_line("critic", sharding_options(s, rs.critic.sharding),
                                     pools.pool_of(config::RlRole::kCritic).size())
                     : "",
        ref_line ? sharding_line("reference", reference_sharding(s), pools.pool_of(config::RlRole::kReference).size())
                 : ""})
    if (!line.empty()) s.message(line);
  if (!pools.colocated()) s.message("resource pools: " + pools.describe(config::active_roles(s.config)));
  s.checkpoints = std::make_unique<CheckpointManager>(s.run_dir, rs.trainer.max_actor_ckpt_to_keep);
  files::make_dirs(s.run_dir);
  if (s.world.is_distributed()) s.message(fmt::format("{} ranks: {}", s.world.world_size, hw::describe(s.world)));
  if (s.rollout_tp > 1)
    s.message(
        fmt::format("rollout: {} engine(s), each split over {} ranks (tensor_model_parallel_size {}; engine e "
                    "on ranks e x {} .. e x {} + {})",
                    s.num_engines(), s.rollout_tp, s.rollout_tp, s.rollout_tp, s.rollout_tp, s.rollout_tp - 1));
  s.message(
      fmt::format("device {} ({}), model {} ({:.2f}M parameters), {} train / {} val prompts, {} steps of {} x {} "
                  "sequences, estimator {}",
                  s.device.str(), s.plugin.empty() ? "no plugin" : "plugin " + s.plugin, s.model_path,
                  double(model::parameter_count(mc)) / 1e6, s.train_set->size(), s.val_set ? s.val_set->size() : 0,
                  s.total_steps, s.train_batch_size, s.n, s.estimator));
  s.message(kernels_line(s));
}

}  // namespace verlpp::controller
