// RlTrainer setup: everything a run needs, built from the resolved config in verl's terms
// (batch sizes in prompts become sequences by multiplying with rollout.n, as verl's workers do).
#include "rl_state.hpp"

#include <verlpp/algo/advantages.hpp>
#include <verlpp/hw/device.hpp>
#include <verlpp/hw/plugin_registry.hpp>
#include <verlpp/hw/torch_device.hpp>
#include <verlpp/model/checkpoint.hpp>

#include <verlpp/core/strings.hpp>

#include "../util/files.hpp"


namespace verlpp::controller {
namespace {

using json = nlohmann::json;


// The LR schedule of `<role>.optim`, for `total_steps` optimizer updates.
train::LrSchedule schedule_of(const Config& c, const std::string& optim, int64_t total_steps) {
  train::LrScheduleOptions o;
  o.base_lr = c.get<double>(optim + ".lr");
  o.style = c.get<std::string>(optim + ".warmup_style");
  o.total_steps = c.get<int64_t>(optim + ".total_training_steps") > 0 ? c.get<int64_t>(optim + ".total_training_steps")
                                                                       : total_steps;
  o.warmup_steps = train::resolve_warmup_steps(c.get<int64_t>(optim + ".lr_warmup_steps"),
                                               c.get<double>(optim + ".lr_warmup_steps_ratio"), o.total_steps);
  o.min_lr_ratio = c.get_or<double>(optim + ".min_lr_ratio", 0.0);
  o.num_cycles = c.get<double>(optim + ".num_cycles");
  return train::LrSchedule(o);
}

c10::Device pick_device(RlTrainer::State& s) {
  std::string wanted = s.config.get<std::string>("trainer.device");
  if (wanted != "auto" && wanted != "cpu" && wanted != "cuda")
    throw Error("trainer.device", fmt::format("'{}' is not one of auto, cpu, cuda", wanted));
  const auto& found = hw::plugins();
  const hw::Plugin* chosen = nullptr;
  if (wanted == "auto") {
    // An accelerator plugin whose device this LibTorch can place tensors on, else the CPU.
    for (const auto& p : found.loaded)
      if (p.torch_device_type() != "cpu" && hw::torch_placement_problem(p.torch_device_type()).empty()) {
        chosen = &p;
        break;
      }
    wanted = chosen ? chosen->torch_device_type() : "cpu";
  }
  if (!chosen)
    for (const auto& p : found.loaded)
      if (p.torch_device_type() == wanted) {
        chosen = &p;
        break;
      }
  if (chosen) s.plugin = chosen->name();
  if (wanted == "cuda") {
    const std::string problem = hw::torch_placement_problem("cuda");
    if (!problem.empty()) throw Error("trainer.device", "cuda was asked for, but " + problem);
    // One process per device: the rank's local rank picks its GPU.
    return c10::Device(c10::kCUDA, c10::DeviceIndex(s.world.local_rank));
  }
  return c10::Device(c10::kCPU);
}

// The chosen plugin's device behind s.device (the plugin must be loaded).
hw::Device plugin_device(const RlTrainer::State& s) {
  return hw::Device(hw::plugin_named(s.plugin), int32_t(s.device.has_index() ? s.device.index() : 0));
}

// With several ranks: the rendezvous and the plugin communicator (a collective over all ranks).
void join_process_group(RlTrainer::State& s) {
  if (!s.world.is_distributed()) return;
  if (s.plugin.empty())
    throw Error("trainer.device", fmt::format("{} ranks need a plugin communicator, but no hardware plugin is loaded for {} "
                                              "(VERL_HARDWARE_PLUGIN, `verlpp plugins`)", s.world.world_size, s.device.str()));
  hw::ProcessGroupOptions options;
  options.timeout = std::chrono::milliseconds(int64_t(s.config.get<double>("trainer.dist_timeout_s") * 1000.0));
  s.group = hw::ProcessGroup::create(s.world, plugin_device(s), options);
  s.dp = train::DataParallel(s.group.get(), s.device);
}

// The accelerator plugin's kernels, for the engine (paged attention decode, sampling, RoPE,
// SwiGLU) and the trainer (LM-head log-probs, RoPE, SwiGLU). On the CPU, cpu_ref's are correctness loops, slower than
// LibTorch's path, so none are loaded there.
void load_kernels(RlTrainer::State& s) {
  if (!s.device.is_cpu() && !s.plugin.empty()) s.kernels = std::make_unique<hw::Kernels>(hw::plugin_named(s.plugin));
}

void build_actor(RlTrainer::State& s) {
  const Config& c = s.config;
  const std::string a = "actor_rollout_ref.actor";
  s.actor_model = std::make_unique<model::DecoderLM>(model::load_pretrained(s.model_path, model::ModelOptions{at::kFloat, s.device, false}));
  s.actor_model->set_gradient_checkpointing(c.get<bool>("actor_rollout_ref.model.enable_gradient_checkpointing"));
  train::ActorConfig ac;
  ac.ppo_mini_batch_size = c.get<int64_t>(a + ".ppo_mini_batch_size") * s.n;
  ac.ppo_micro_batch_size = c.get_or<int64_t>(a + ".ppo_micro_batch_size_per_gpu", 1);
  ac.use_dynamic_bsz = c.get<bool>(a + ".use_dynamic_bsz");
  ac.ppo_max_token_len = c.get<int64_t>(a + ".ppo_max_token_len_per_gpu");
  ac.ppo_epochs = c.get<int64_t>(a + ".ppo_epochs");
  ac.entropy_coeff = c.get<double>(a + ".entropy_coeff");
  ac.use_kl_loss = c.get<bool>(a + ".use_kl_loss");
  ac.kl_loss_coef = c.get<double>(a + ".kl_loss_coef");
  ac.kl_loss_type = c.get<std::string>(a + ".kl_loss_type");
  ac.loss_mode = c.get<std::string>(a + ".policy_loss.loss_mode");
  ac.policy.clip_ratio_low = c.get_or<double>(a + ".clip_ratio_low", c.get<double>(a + ".clip_ratio"));
  ac.policy.clip_ratio_high = c.get_or<double>(a + ".clip_ratio_high", c.get<double>(a + ".clip_ratio"));
  ac.policy.clip_ratio_c = c.get<double>(a + ".clip_ratio_c");
  ac.policy.loss_agg_mode = c.get<std::string>(a + ".loss_agg_mode");
  ac.policy.clip_cov_ratio = c.get<double>(a + ".policy_loss.clip_cov_ratio");
  ac.policy.clip_cov_lb = c.get<double>(a + ".policy_loss.clip_cov_lb");
  ac.policy.clip_cov_ub = c.get<double>(a + ".policy_loss.clip_cov_ub");
  ac.policy.kl_cov_ratio = c.get<double>(a + ".policy_loss.kl_cov_ratio");
  ac.policy.ppo_kl_coef = c.get<double>(a + ".policy_loss.ppo_kl_coef");
  ac.temperature = c.get<double>("actor_rollout_ref.rollout.temperature");
  if (ac.temperature <= 0) ac.temperature = 1.0;  // greedy rollouts: log-probs under softmax(logits)
  ac.optim = adamw_of(c, a + ".optim", a + ".grad_clip");
  ac.remove_padding = c.get<bool>("actor_rollout_ref.model.use_remove_padding");
  // verl's fused kernels save the logits' memory by recomputing them in the backward; without
  // them (its default) the logits stay alive until the backward, here in the compute dtype.
  ac.logits_in_backward = c.get<bool>("actor_rollout_ref.model.use_fused_kernels") ? train::LogitsInBackward::kRecompute
                                                                                   : train::LogitsInBackward::kKeep;
  ac.log_prob_chunk_rows = std::max<int64_t>(1, c.get_or<int64_t>("actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu", 8));
  ac.param_dtype = param_dtype(s, "actor_rollout_ref.actor.fsdp_config");
  ac.kernels = s.kernels.get();  // null on the CPU (see load_kernels)
  s.actor = std::make_unique<train::Actor>(*s.actor_model, ac, schedule_of(c, a + ".optim", s.total_steps));
}

void build_reference(RlTrainer::State& s) {
  // A frozen copy of the starting actor weights (verl's ref worker loads the same model path),
  // in the actor's compute dtype (verl's ref runs under the same FSDP mixed precision).
  s.ref_model = std::make_unique<model::DecoderLM>(s.actor_model->config(),
                                                   model::ModelOptions{s.actor->config().param_dtype, s.device, false});
  for (const auto& [name, p] : s.actor_model->named_parameters()) s.ref_model->parameter(name).detach().copy_(p.detach());
}

void build_critic(RlTrainer::State& s) {
  const Config& c = s.config;
  std::string path = c.is_null("critic.model.path") ? s.model_path : c.get<std::string>("critic.model.path");
  model::ModelConfig mc = model::load_model_config(path);
  if (mc.head != model::ModelHead::kTokenClassification) {
    // A causal LM checkpoint: as verl's critic, take its decoder and add a fresh value head.
    mc.head = model::ModelHead::kTokenClassification;
    mc.num_labels = 1;
    mc.score_bias = true;
    const auto at = mc.architecture.find("ForCausalLM");
    if (at != std::string::npos) mc.architecture.replace(at, std::string("ForCausalLM").size(), "ForTokenClassification");
    mc.raw["num_labels"] = 1;
  }
  s.critic_model = std::make_unique<model::DecoderLM>(mc, model::ModelOptions{at::kFloat, s.device, false});
  s.critic_model->init_weights(s.seed + 7);
  model::load_weights(*s.critic_model, path, model::LoadOptions{{"score."}});
  s.critic_model->set_gradient_checkpointing(c.get<bool>("critic.model.enable_gradient_checkpointing"));
  train::CriticConfig cc;
  cc.ppo_mini_batch_size = c.get<int64_t>("critic.ppo_mini_batch_size") * s.n;
  cc.ppo_micro_batch_size = c.get_or<int64_t>("critic.ppo_micro_batch_size_per_gpu", 1);
  cc.use_dynamic_bsz = c.get<bool>("critic.use_dynamic_bsz");
  cc.ppo_max_token_len = c.get<int64_t>("critic.ppo_max_token_len_per_gpu");
  cc.ppo_epochs = c.get<int64_t>("critic.ppo_epochs");
  cc.cliprange_value = c.get<double>("critic.cliprange_value");
  cc.loss_agg_mode = c.get<std::string>("critic.loss_agg_mode");
  cc.optim = adamw_of(c, "critic.optim", "critic.grad_clip");
  cc.param_dtype = param_dtype(s, "critic.model.fsdp_config");
  cc.kernels = s.kernels.get();  // null on the CPU (load_kernels)
  s.critic = std::make_unique<train::Critic>(*s.critic_model, cc, schedule_of(c, "critic.optim", s.total_steps));
}

void build_engine(RlTrainer::State& s) {
  const Config& c = s.config;
  const std::string r = "actor_rollout_ref.rollout";
  rollout::EngineOptions o;
  o.block_size = c.get<int64_t>(r + ".block_size");
  o.limits.max_num_seqs = c.get<int64_t>(r + ".max_num_seqs");
  o.limits.max_num_batched_tokens = c.get<int64_t>(r + ".max_num_batched_tokens");
  o.seed = s.seed;
  // Each rank generates its share of the prompts (all n samples of each).
  const int64_t world = s.world.world_size;
  const int64_t train_rows = (s.train_batch_size + world - 1) / world * s.n;
  const int64_t val_rows = s.val_set ? (int64_t(s.val_set->size()) + world - 1) / world : 0;
  const int64_t rows = std::max(train_rows, val_rows);
  const int64_t per_row = c.get<int64_t>("data.max_prompt_length") + s.response_length + o.block_size;
  if (s.device.is_cpu()) {
    // On the CPU the pool is plain memory: room for every row of a step at full length.
    o.kv_token_budget = std::min<int64_t>(rows * per_row, int64_t(1) << 22);
  } else {
    // On an accelerator: verl's gpu_memory_utilization of the device's memory (the plugin's
    // figure) for weights + pool.
    o.memory_fraction = c.get<double>(r + ".gpu_memory_utilization");
    if (!s.plugin.empty()) o.memory_total_bytes = int64_t(plugin_device(s).memory_info().second);
    if (o.memory_total_bytes <= 0)
      throw Error("trainer.device", fmt::format("{}: no plugin reports this device's memory, so the KV pool cannot be sized "
                                                "from rollout.gpu_memory_utilization", s.device.str()));
  }
  const at::ScalarType dtype = model::dtype_from_name(c.get<std::string>(r + ".dtype"));
  // The actor's compute dtype: the engine's model is a second handle on the actor's compute
  // tensors (the hybrid engine shares weights; optimizer steps show through). Another dtype: the
  // engine owns a cast copy.
  model::DecoderLM engine_model = s.actor->compute_model();
  if (dtype != engine_model.options().dtype) {
    engine_model = model::DecoderLM(s.actor_model->config(), model::ModelOptions{dtype, s.device, false});
    for (const auto& [name, p] : s.actor_model->named_parameters()) engine_model.parameter(name).detach().copy_(p.detach());
  }
  o.kernels = s.kernels.get();  // null on the CPU (load_kernels)
  s.engine = std::make_unique<rollout::RolloutEngine>(std::move(engine_model), o);
}

}  // namespace

// <fsdp_config>.mixed_precision.param_dtype; null = bfloat16 on an accelerator (verl's default)
// and float32 on the CPU (where 16-bit math is slow and the reference path should stay exact).
at::ScalarType param_dtype(const RlTrainer::State& s, const std::string& fsdp_config) {
  const std::string m = fsdp_config + ".mixed_precision";
  for (const char* key : {".reduce_dtype", ".buffer_dtype"}) {
    const std::string name = s.config.get<std::string>(m + key);
    if (model::dtype_from_name(name) != at::kFloat)
      throw Error(m + key, fmt::format("'{}': verlpp keeps gradients and master weights in fp32 (only fp32 is supported)",
                                       name));
  }
  if (s.config.is_null(m + ".param_dtype")) return s.device.is_cpu() ? at::kFloat : at::kBFloat16;
  try {
    return model::dtype_from_name(s.config.get<std::string>(m + ".param_dtype"));
  } catch (const Error& e) {
    throw Error(m + ".param_dtype", e.what());
  }
}

train::AdamWConfig adamw_of(const Config& c, const std::string& optim, const std::string& grad_clip_key) {
  train::AdamWConfig a;
  a.weight_decay = c.get<double>(optim + ".weight_decay");
  auto betas = c.get<std::vector<double>>(optim + ".betas");
  if (betas.size() != 2) throw Error(optim + ".betas", fmt::format("needs two values, got {}", betas.size()));
  a.beta1 = betas[0];
  a.beta2 = betas[1];
  a.grad_clip = c.get<double>(grad_clip_key);
  return a;
}

std::vector<std::string> file_list(const Config& c, const std::string& key) {
  const json& v = c.at(key);
  if (v.is_null()) return {};
  if (v.is_string()) return {v.get<std::string>()};
  if (v.is_array()) {
    std::vector<std::string> out;
    for (const auto& f : v) {
      if (!f.is_string()) throw Error(key, fmt::format("every entry must be a file path, got {}", f.dump()));
      out.push_back(f.get<std::string>());
    }
    return out;
  }
  throw Error(key, fmt::format("must be a file path or a list of them, got {}", v.dump()));
}

DatasetOptions dataset_options(const Config& c) {
  DatasetOptions o;
  o.prompt_key = c.get<std::string>("data.prompt_key");
  o.reward_fn_key = c.get<std::string>("data.reward_fn_key");
  o.max_prompt_length = c.get<int64_t>("data.max_prompt_length");
  o.filter_overlong_prompts = c.get<bool>("data.filter_overlong_prompts");
  o.truncation = c.get<std::string>("data.truncation");
  return o;
}

AlgorithmFamily algorithm_family(const std::string& estimator) {
  if (estimator == "gae") return AlgorithmFamily::kWithCritic;
  if (estimator == "remax") return AlgorithmFamily::kGreedyBaseline;
  const auto names = algo::advantage_estimator_names();
  if (std::find(names.begin(), names.end(), estimator) == names.end())
    throw Error("algorithm.adv_estimator", fmt::format("'{}' is not one of: {}", estimator, join(names, ", ")));
  return AlgorithmFamily::kCriticFree;
}

void setup_trainer(RlTrainer::State& s) {
  Config& c = s.config;
  s.world = hw::world_from_environment();
  c.validate(s.world.world_size, s.world.local_world_size);
  s.estimator = c.get<std::string>("algorithm.adv_estimator");
  s.family = algorithm_family(s.estimator);
  s.device = pick_device(s);
  join_process_group(s);
  s.seed = uint64_t(c.get<int64_t>("trainer.seed"));
  s.n = c.get<int64_t>("actor_rollout_ref.rollout.n");
  s.response_length = c.get<int64_t>("data.max_response_length");
  s.train_batch_size = c.get<int64_t>("data.train_batch_size");
  s.run_dir = c.get<std::string>("trainer.default_local_dir");

  if (c.is_null("actor_rollout_ref.model.path"))
    throw Error("actor_rollout_ref.model.path", "no model folder given (a Hugging Face folder with config.json)");
  s.model_path = c.get<std::string>("actor_rollout_ref.model.path");
  const std::string tokenizer_path = c.is_null("data.tokenizer") ? s.model_path : c.get<std::string>("data.tokenizer");
  s.tokenizer = model::Tokenizer::from_file(tokenizer_path);
  s.chat = model::ChatTemplate::from_config_file(tokenizer_path);
  const model::ModelConfig mc = model::load_model_config(s.model_path);
  s.eos_ids = mc.eos_token_ids;
  s.pad_id = mc.pad_token_id.value_or(s.eos_ids.empty() ? 0 : s.eos_ids.front());
  const int64_t context = c.get<int64_t>("data.max_prompt_length") + s.response_length;
  if (context > mc.max_position_embeddings)
    throw Error("data.max_prompt_length + data.max_response_length",
                fmt::format("{} tokens exceed the model's max_position_embeddings {}", context, mc.max_position_embeddings));

  // Data, and the reward check before any work: an unknown data source fails here.
  const DatasetOptions options = dataset_options(c);
  const auto train_files = file_list(c, "data.train_files");
  if (train_files.empty()) throw Error("data.train_files", "no training data given (JSONL files in verl's schema)");
  s.train_set = PromptDataset::load(train_files, *s.tokenizer, *s.chat, options);
  const auto val_files = file_list(c, "data.val_files");
  if (!val_files.empty()) s.val_set = PromptDataset::load(val_files, *s.tokenizer, *s.chat, options);
  if (!c.is_null("custom_reward_function.path"))
    s.scorer = RewardScorer::from_library(c.get<std::string>("custom_reward_function.path"),
                                          c.get<std::string>("custom_reward_function.name"));
  s.scorer.check_data_sources(s.train_set->data_sources());
  if (s.val_set) s.scorer.check_data_sources(s.val_set->data_sources());

  s.loader = std::make_unique<DataLoader>(s.train_set->size(), s.train_batch_size, c.get<bool>("data.shuffle"),
                                          uint64_t(c.get<int64_t>("data.seed")));
  s.total_steps = c.is_null("trainer.total_training_steps")
                      ? s.loader->batches_per_epoch() * c.get<int64_t>("trainer.total_epochs")
                      : c.get<int64_t>("trainer.total_training_steps");
  if (s.total_steps < 1) throw Error("trainer.total_training_steps", fmt::format("{} steps: nothing to train", s.total_steps));

  s.use_kl_in_reward = c.get<bool>("algorithm.use_kl_in_reward");
  s.use_reference = s.use_kl_in_reward || c.get<bool>("actor_rollout_ref.actor.use_kl_loss");
  s.use_critic = c.at("critic.enable").is_boolean() ? c.get<bool>("critic.enable") : s.family == AlgorithmFamily::kWithCritic;
  if (s.family == AlgorithmFamily::kWithCritic && !s.use_critic)
    throw Error("critic.enable", "algorithm.adv_estimator = gae needs the critic");
  s.kl_ctrl = algo::make_kl_controller(c.get<std::string>("algorithm.kl_ctrl.type"), c.get<double>("algorithm.kl_ctrl.kl_coef"),
                                       c.get<double>("algorithm.kl_ctrl.target_kl"), c.get<double>("algorithm.kl_ctrl.horizon"));

  const bool zero1 = c.get<int64_t>("trainer.zero_stage") == 1;
  load_kernels(s);
  build_actor(s);
  s.actor->set_data_parallel(s.dp, zero1);
  if (s.use_reference) build_reference(s);
  if (s.use_critic) {
    build_critic(s);
    s.critic->set_data_parallel(s.dp, zero1);
  }
  build_engine(s);
  int64_t keep = c.get_or<int64_t>("trainer.max_actor_ckpt_to_keep", 0);
  s.checkpoints = std::make_unique<CheckpointManager>(s.run_dir, keep);
  files::make_dirs(s.run_dir);
  if (s.world.is_distributed()) s.message(fmt::format("{} ranks: {}", s.world.world_size, hw::describe(s.world)));
  s.message(fmt::format("device {} ({}), model {} ({:.2f}M parameters), {} train / {} val prompts, {} steps of {} x {} "
                        "sequences, estimator {}", s.device.str(), s.plugin.empty() ? "no plugin" : "plugin " + s.plugin,
                        s.model_path, double(model::parameter_count(mc)) / 1e6, s.train_set->size(),
                        s.val_set ? s.val_set->size() : 0, s.total_steps, s.train_batch_size, s.n, s.estimator));
}

}  // namespace verlpp::controller
