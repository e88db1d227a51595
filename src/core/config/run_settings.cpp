// parse_run_settings: Config::validate's cross-field checks, then one typed read per key. A
// section only one role uses (critic.*, sft.*) is read when that role runs, so a run without it
// is not refused for a value it never uses; every read names its key when the value does not fit.
#include <verlpp/config/run_settings.hpp>

#include <verlpp/tracking/loggers.hpp>
#include <verlpp/core/error.hpp>
#include <verlpp/core/strings.hpp>
#include <verlpp/model/decoder.hpp>
#include <verlpp/model/tensor_parallel.hpp>

#include <algorithm>
#include <cmath>
#include <type_traits>

namespace verlpp::config {
namespace {

using json = nlohmann::json;

// The value at `key` as T; Error naming the key and the value when it is not one (e.g. null).
template <class T>
T read(const Config& c, const std::string& key) {
  const json& v = c.at(key);
  try {
    return v.get<T>();
  } catch (const json::exception&) {
    throw Error(key, fmt::format("{} is not {}", v.dump(), detail::json_kind<T>()));
  }
}

// The value at `key`, or nullopt when it is null (verl's "unset").
template <class T>
std::optional<T> read_optional(const Config& c, const std::string& key) {
  if (c.is_null(key)) return std::nullopt;
  return read<T>(c, key);
}

// Whether the tree has `dotted` (looked up in the tree, so not counted as a read of the key).
bool has_key(const Config& c, const std::string& dotted) {
  const json* node = &c.tree();
  size_t start = 0;
  while (true) {
    const size_t dot = dotted.find('.', start);
    const std::string part = dotted.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
    if (!node->is_object() || !node->contains(part)) return false;
    node = &(*node)[part];
    if (dot == std::string::npos) return true;
    start = dot + 1;
  }
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

at::ScalarType dtype_at(const Config& c, const std::string& key) {
  const std::string name = read<std::string>(c, key);
  try {
    return model::dtype_from_name(name);
  } catch (const Error& e) {
    throw Error(key, e.what());
  }
}

// AdamW's settings at `optim` and the clipping norm at `grad_clip_key`; the schedule's keys only
// where the section has them (sft.optim has neither lr_warmup_steps nor num_cycles). As verl:
// the schedule is lr_scheduler_type, unless the deprecated warmup_style is set; an unset
// min_lr_ratio is 0.
OptimSettings optim_at(const Config& c, const std::string& optim, const std::string& grad_clip_key) {
  OptimSettings o;
  o.lr = read<double>(c, optim + ".lr");
  o.lr_scheduler_type = read_optional<std::string>(c, optim + ".warmup_style")
                            .value_or(read<std::string>(c, optim + ".lr_scheduler_type"));
  o.lr_warmup_steps_ratio = read<double>(c, optim + ".lr_warmup_steps_ratio");
  o.weight_decay = read<double>(c, optim + ".weight_decay");
  const auto betas = read<std::vector<double>>(c, optim + ".betas");
  if (betas.size() != 2) throw Error(optim + ".betas", fmt::format("needs two values, got {}", betas.size()));
  o.beta1 = betas[0];
  o.beta2 = betas[1];
  o.grad_clip = read<double>(c, grad_clip_key);
  o.min_lr_ratio = read_optional<double>(c, optim + ".min_lr_ratio").value_or(0.0);
  if (has_key(c, optim + ".lr_warmup_steps")) o.lr_warmup_steps = read<int64_t>(c, optim + ".lr_warmup_steps");
  if (has_key(c, optim + ".num_cycles")) o.num_cycles = read<double>(c, optim + ".num_cycles");
  if (has_key(c, optim + ".total_training_steps"))
    o.total_training_steps = read<int64_t>(c, optim + ".total_training_steps");
  return o;
}

// <fsdp_config>.mixed_precision; verlpp keeps gradients and master weights in fp32.
PrecisionSettings precision_at(const Config& c, const std::string& fsdp_config) {
  const std::string m = fsdp_config + ".mixed_precision";
  for (const char* key : {".reduce_dtype", ".buffer_dtype"}) {
    const std::string name = read<std::string>(c, m + key);
    if (dtype_at(c, m + key) != at::kFloat)
      throw Error(
          m + key,
          fmt::format("'{}': verlpp keeps gradients and master weights in fp32 (only fp32 is supported)", name));
  }
  PrecisionSettings p;
  if (!c.is_null(m + ".param_dtype")) p.param_dtype = dtype_at(c, m + ".param_dtype");
  return p;
}

// <role>.strategy and <fsdp_config>'s sharding and offload keys (the strategy names were checked
// by validate: fsdp or fsdp2).
ShardingSettings sharding_at(const Config& c, const std::string& strategy, const std::string& fsdp_config,
                             bool has_optimizer) {
  (void)read<std::string>(c, strategy);
  ShardingSettings s;
  const std::optional<int64_t> stage = read_optional<int64_t>(c, "trainer.zero_stage");
  const bool reshard = read<bool>(c, fsdp_config + ".reshard_after_forward");
  s.zero_stage = stage.value_or(reshard ? 3 : 2);
  const bool policy = read<bool>(c, fsdp_config + ".offload_policy");
  s.param_offload = read<bool>(c, fsdp_config + ".param_offload") || policy;
  if (has_optimizer) s.optimizer_offload = read<bool>(c, fsdp_config + ".optimizer_offload") || policy;
  s.forward_prefetch = read<bool>(c, fsdp_config + ".forward_prefetch");
  (void)read<int64_t>(c, fsdp_config + ".fsdp_size");  // -1 or the world size (validate)
  return s;
}

DataSettings data_at(const Config& c) {
  DataSettings d;
  // verl: data.tokenizer, else the model's tokenizer_path, else the model folder.
  d.tokenizer = read_optional<std::string>(c, "data.tokenizer");
  if (!d.tokenizer) d.tokenizer = read_optional<std::string>(c, "actor_rollout_ref.model.tokenizer_path");
  d.train_files = file_list(c, "data.train_files");
  d.val_files = file_list(c, "data.val_files");
  d.prompt_key = read<std::string>(c, "data.prompt_key");
  d.reward_fn_key = read<std::string>(c, "data.reward_fn_key");
  d.max_prompt_length = read<int64_t>(c, "data.max_prompt_length");
  d.max_response_length = read<int64_t>(c, "data.max_response_length");
  d.train_batch_size = read<int64_t>(c, "data.train_batch_size");
  d.val_batch_size = read_optional<int64_t>(c, "data.val_batch_size");
  d.shuffle = read<bool>(c, "data.shuffle");
  d.seed = read_optional<int64_t>(c, "data.seed").value_or(1);
  d.filter_overlong_prompts = read<bool>(c, "data.filter_overlong_prompts");
  d.truncation = read<std::string>(c, "data.truncation");
  const json& kwargs = c.at("data.apply_chat_template_kwargs");
  if (!kwargs.is_null() && !kwargs.is_object())
    throw Error("data.apply_chat_template_kwargs",
                fmt::format("must be a mapping of template variables (e.g. {{enable_thinking: false}}), got {}",
                            kwargs.dump()));
  if (kwargs.is_object()) d.apply_chat_template_kwargs = nlohmann::ordered_json::parse(kwargs.dump());
  return d;
}

ActorModelSettings model_at(const Config& c) {
  const std::string m = "actor_rollout_ref.model.";
  ActorModelSettings s;
  s.path = read_optional<std::string>(c, m + "path");
  s.custom_chat_template = read_optional<std::string>(c, m + "custom_chat_template");
  s.enable_gradient_checkpointing = read<bool>(c, m + "enable_gradient_checkpointing");
  s.use_remove_padding = read<bool>(c, m + "use_remove_padding");
  s.use_fused_kernels = read<bool>(c, m + "use_fused_kernels");
  return s;
}

// `role` ("actor_rollout_ref.actor", "critic") and its `fsdp_config` section.
void read_ppo_role(const Config& c, const std::string& role, const std::string& fsdp_config, PpoRoleSettings& s) {
  s.ppo_mini_batch_size = read<int64_t>(c, role + ".ppo_mini_batch_size");
  s.ppo_micro_batch_size_per_gpu = read_optional<int64_t>(c, role + ".ppo_micro_batch_size_per_gpu").value_or(1);
  s.use_dynamic_bsz = read<bool>(c, role + ".use_dynamic_bsz");
  s.ppo_max_token_len_per_gpu = read<int64_t>(c, role + ".ppo_max_token_len_per_gpu");
  s.ppo_epochs = read<int64_t>(c, role + ".ppo_epochs");
  s.loss_agg_mode = read<std::string>(c, role + ".loss_agg_mode");
  s.optim = optim_at(c, role + ".optim", role + ".grad_clip");
  s.precision = precision_at(c, fsdp_config);
  s.sharding = sharding_at(c, role == "critic" ? "critic.strategy" : role + ".strategy", fsdp_config, true);
}

ReferenceSettings ref_at(const Config& c) {
  ReferenceSettings s;
  s.sharding = sharding_at(c, "actor_rollout_ref.ref.strategy", "actor_rollout_ref.ref.fsdp_config", false);
  return s;
}

ActorSettings actor_at(const Config& c) {
  const std::string a = "actor_rollout_ref.actor.";
  ActorSettings s;
  read_ppo_role(c, "actor_rollout_ref.actor", a + "fsdp_config", s);
  s.entropy_coeff = read<double>(c, a + "entropy_coeff");
  s.use_kl_loss = read<bool>(c, a + "use_kl_loss");
  s.kl_loss_coef = read<double>(c, a + "kl_loss_coef");
  s.kl_loss_type = read<std::string>(c, a + "kl_loss_type");
  s.loss_mode = read<std::string>(c, a + "policy_loss.loss_mode");
  // verl: clip_ratio_low/high unset fall back to clip_ratio.
  const std::optional<double> low = read_optional<double>(c, a + "clip_ratio_low");
  const std::optional<double> high = read_optional<double>(c, a + "clip_ratio_high");
  if (!low || !high) {
    const double ratio = read<double>(c, a + "clip_ratio");
    s.clip_ratio_low = low.value_or(ratio);
    s.clip_ratio_high = high.value_or(ratio);
  } else {
    s.clip_ratio_low = *low;
    s.clip_ratio_high = *high;
  }
  s.clip_ratio_c = read<double>(c, a + "clip_ratio_c");
  s.clip_cov_ratio = read<double>(c, a + "policy_loss.clip_cov_ratio");
  s.clip_cov_lb = read<double>(c, a + "policy_loss.clip_cov_lb");
  s.clip_cov_ub = read<double>(c, a + "policy_loss.clip_cov_ub");
  s.kl_cov_ratio = read<double>(c, a + "policy_loss.kl_cov_ratio");
  s.ppo_kl_coef = read<double>(c, a + "policy_loss.ppo_kl_coef");
  return s;
}

// An optional count where verl's null means "no limit" (0 here); negatives are refused.
int64_t limit_at(const Config& c, const std::string& key) {
  const int64_t value = read_optional<int64_t>(c, key).value_or(0);
  if (value < 0) throw Error(key, fmt::format("{} must be >= 0 or null (no limit)", value));
  return value;
}

int64_t positive_at(const Config& c, const std::string& key) {
  const int64_t value = read<int64_t>(c, key);
  if (value < 1) throw Error(key, fmt::format("{} must be >= 1", value));
  return value;
}

MultiTurnSettings multi_turn_at(const Config& c, const std::string& m) {
  MultiTurnSettings s;
  s.max_assistant_turns = limit_at(c, m + "max_assistant_turns");
  s.max_user_turns = limit_at(c, m + "max_user_turns");
  s.max_parallel_calls = positive_at(c, m + "max_parallel_calls");
  s.max_tool_response_length = positive_at(c, m + "max_tool_response_length");
  s.tool_response_truncate_side = read<std::string>(c, m + "tool_response_truncate_side");
  if (s.tool_response_truncate_side != "left" && s.tool_response_truncate_side != "right" &&
      s.tool_response_truncate_side != "middle")
    throw Error(m + "tool_response_truncate_side",
                fmt::format("'{}' is not one of left, right, middle", s.tool_response_truncate_side));
  s.tool_config_path = read_optional<std::string>(c, m + "tool_config_path");
  s.interaction_config_path = read_optional<std::string>(c, m + "interaction_config_path");
  s.format = read<std::string>(c, m + "format");
  if (s.format != "hermes")
    throw Error(m + "format", fmt::format("'{}' is not a tool-call format verlpp parses (known: hermes)", s.format));
  return s;
}

AgentSettings agent_at(const Config& c, const std::string& a) {
  AgentSettings s;
  s.num_workers = positive_at(c, a + "num_workers");
  s.default_agent_loop = read<std::string>(c, a + "default_agent_loop");
  s.agent_loop_config_path = read_optional<std::string>(c, a + "agent_loop_config_path");
  return s;
}

RolloutSettings rollout_at(const Config& c) {
  const std::string r = "actor_rollout_ref.rollout.";
  RolloutSettings s;
  s.temperature = read<double>(c, r + "temperature");
  s.top_k = read<int64_t>(c, r + "top_k");
  s.top_p = read<double>(c, r + "top_p");
  s.do_sample = read<bool>(c, r + "do_sample");
  s.ignore_eos = read<bool>(c, r + "ignore_eos");
  s.free_cache_engine = read<bool>(c, r + "free_cache_engine");
  s.n = read<int64_t>(c, r + "n");
  s.dtype = dtype_at(c, r + "dtype");
  s.gpu_memory_utilization = read<double>(c, r + "gpu_memory_utilization");
  s.block_size = read<int64_t>(c, r + "block_size");
  s.max_num_seqs = read<int64_t>(c, r + "max_num_seqs");
  s.tensor_model_parallel_size = read<int64_t>(c, r + "tensor_model_parallel_size");
  s.max_num_batched_tokens = read<int64_t>(c, r + "max_num_batched_tokens");
  s.log_prob_micro_batch_size_per_gpu =
      std::max<int64_t>(1, read_optional<int64_t>(c, r + "log_prob_micro_batch_size_per_gpu").value_or(8));
  const std::string v = r + "val_kwargs.";
  s.val_kwargs.n = read<int64_t>(c, v + "n");
  s.val_kwargs.do_sample = read<bool>(c, v + "do_sample");
  s.val_kwargs.temperature = read<double>(c, v + "temperature");
  s.val_kwargs.top_k = read<int64_t>(c, v + "top_k");
  s.val_kwargs.top_p = read<double>(c, v + "top_p");
  s.multi_turn = multi_turn_at(c, r + "multi_turn.");
  s.agent = agent_at(c, r + "agent.");
  return s;
}

CriticSettings critic_at(const Config& c, bool used) {
  CriticSettings s;
  // critic.enable: a boolean decides; anything else (null) leaves it to the estimator.
  if (c.at("critic.enable").is_boolean()) s.enable = c.get<bool>("critic.enable");
  if (!used) return s;
  read_ppo_role(c, "critic", "critic.model.fsdp_config", s);
  s.model_path = read_optional<std::string>(c, "critic.model.path");
  s.enable_gradient_checkpointing = read<bool>(c, "critic.model.enable_gradient_checkpointing");
  s.cliprange_value = read<double>(c, "critic.cliprange_value");
  return s;
}

AlgorithmSettings algorithm_at(const Config& c) {
  AlgorithmSettings s;
  s.adv_estimator = read<std::string>(c, "algorithm.adv_estimator");
  s.gamma = read<double>(c, "algorithm.gamma");
  s.lam = read<double>(c, "algorithm.lam");
  s.norm_adv_by_std_in_grpo = read<bool>(c, "algorithm.norm_adv_by_std_in_grpo");
  s.use_kl_in_reward = read<bool>(c, "algorithm.use_kl_in_reward");
  s.kl_penalty = read<std::string>(c, "algorithm.kl_penalty");
  s.kl_ctrl_type = read<std::string>(c, "algorithm.kl_ctrl.type");
  s.kl_coef = read<double>(c, "algorithm.kl_ctrl.kl_coef");
  s.target_kl = read<double>(c, "algorithm.kl_ctrl.target_kl");
  s.horizon = read<double>(c, "algorithm.kl_ctrl.horizon");
  return s;
}

TrainerSettings trainer_at(const Config& c) {
  const std::string t = "trainer.";
  TrainerSettings s;
  s.device = read<std::string>(c, t + "device");
  s.seed = read<int64_t>(c, t + "seed");
  s.project_name = read<std::string>(c, t + "project_name");
  s.experiment_name = read<std::string>(c, t + "experiment_name");
  s.logger = tracking::logger_backends(c.at(t + "logger"), t + "logger");
  // MLFLOW_TRACKING_URI naming a server is refused here, before any work, not when fit() opens it.
  if (std::find(s.logger.begin(), s.logger.end(), "mlflow") != s.logger.end()) tracking::mlflow_root();
  s.log_val_generations = read<int64_t>(c, t + "log_val_generations");
  if (s.log_val_generations < 0)
    throw Error(t + "log_val_generations", fmt::format("{} samples: must be 0 (none) or more", s.log_val_generations));
  s.rollout_data_dir = read_optional<std::string>(c, t + "rollout_data_dir");
  s.validation_data_dir = read_optional<std::string>(c, t + "validation_data_dir");
  s.default_local_dir = read<std::string>(c, t + "default_local_dir");
  s.total_training_steps = read_optional<int64_t>(c, t + "total_training_steps");
  if (!s.total_training_steps) s.total_epochs = read<int64_t>(c, t + "total_epochs");
  s.zero_stage = read_optional<int64_t>(c, t + "zero_stage");
  s.max_actor_ckpt_to_keep = read_optional<int64_t>(c, t + "max_actor_ckpt_to_keep").value_or(0);
  s.resume_mode = read<std::string>(c, t + "resume_mode");
  s.resume_from_path = read_optional<std::string>(c, t + "resume_from_path").value_or("");
  s.val_before_train = read<bool>(c, t + "val_before_train");
  s.val_only = read<bool>(c, t + "val_only");
  s.test_freq = read<int64_t>(c, t + "test_freq");
  s.save_freq = read<int64_t>(c, t + "save_freq");
  s.critic_warmup = read<int64_t>(c, t + "critic_warmup");
  s.dist_timeout_s = read<double>(c, t + "dist_timeout_s");
  return s;
}

SftSettings sft_at(const Config& c) {
  SftSettings s;
  s.enable = read<bool>(c, "sft.enable");
  if (!s.enable) return s;
  s.train_files = file_list(c, "sft.train_files");
  s.response_key = read<std::string>(c, "sft.response_key");
  s.messages_key = read<std::string>(c, "sft.messages_key");
  s.total_steps = read<int64_t>(c, "sft.total_steps");
  s.batch_size = read<int64_t>(c, "sft.batch_size");
  s.micro_batch_size_per_gpu = read<int64_t>(c, "sft.micro_batch_size_per_gpu");
  s.test_freq = read<int64_t>(c, "sft.test_freq");
  s.seed = read<int64_t>(c, "sft.seed");
  s.optim = optim_at(c, "sft.optim", "sft.optim.grad_clip");
  s.optim.min_lr_ratio = read<double>(c, "sft.optim.min_lr_ratio");  // verlpp's own section: no null fallback
  return s;
}

RewardModelSettings reward_model_at(const Config& c) {
  RewardModelSettings s;
  s.enable = read<bool>(c, "reward_model.enable");
  if (!s.enable) return s;
  const auto path = read_optional<std::string>(c, "reward_model.model.path");
  if (!path || path->empty())
    throw Error("reward_model.model.path",
                "reward_model.enable = true needs the reward model's folder (a Hugging Face "
                "...ForSequenceClassification or ...ForTokenClassification checkpoint)");
  s.path = *path;
  s.input_tokenizer = read_optional<std::string>(c, "reward_model.model.input_tokenizer");
  s.use_dynamic_bsz = read<bool>(c, "reward_model.use_dynamic_bsz");
  const auto micro = read_optional<int64_t>(c, "reward_model.micro_batch_size_per_gpu");
  if (!s.use_dynamic_bsz && !micro)
    throw Error("reward_model.micro_batch_size_per_gpu",
                "is null: set it (rows per reward-model forward), or set reward_model.use_dynamic_bsz = true");
  s.micro_batch_size_per_gpu = micro.value_or(1);
  if (s.micro_batch_size_per_gpu < 1)
    throw Error("reward_model.micro_batch_size_per_gpu", fmt::format("{} must be >= 1", s.micro_batch_size_per_gpu));
  if (s.use_dynamic_bsz) {
    s.forward_max_token_len_per_gpu = read<int64_t>(c, "reward_model.forward_max_token_len_per_gpu");
    if (s.forward_max_token_len_per_gpu < 1)
      throw Error("reward_model.forward_max_token_len_per_gpu",
                  fmt::format("{} must be >= 1", s.forward_max_token_len_per_gpu));
  }
  s.max_length = read_optional<int64_t>(c, "reward_model.max_length");
  if (s.max_length && *s.max_length < 2)
    throw Error("reward_model.max_length", fmt::format("{} tokens: needs at least 2", *s.max_length));
  return s;
}

PathSettings paths_at(const Config& c) {
  PathSettings s;
  const std::string fused = "verlpp.model.fused_training_projections";
  const json& f = c.at(fused);
  if (f.is_null())
    s.forward.training_projections = model::TrainingProjections::kAuto;
  else if (f.is_boolean())
    s.forward.training_projections =
        f.get<bool>() ? model::TrainingProjections::kFused : model::TrainingProjections::kSplit;
  else
    throw Error(fused, fmt::format("{} is not true, false or null (null: fused on accelerators only)", f.dump()));
  s.forward.attention.sdpa_gqa = read<bool>(c, "verlpp.model.sdpa_gqa");
  s.device_graphs = read<bool>(c, "verlpp.rollout.device_graphs");
  s.decode_overlap = read<bool>(c, "verlpp.rollout.decode_overlap");
  s.rotary_attention = read<bool>(c, "verlpp.rollout.rotary_attention");
  s.train_rotary_qkv = read<bool>(c, "verlpp.train.rotary_qkv");
  s.kernel_streams = read<bool>(c, "verlpp.kernels.streams");
  const std::string where = read<std::string>(c, "verlpp.train.offloaded_adamw");
  if (where == "host") {
    s.offloaded_step = train::OffloadedStep::kHost;
  } else if (where == "device") {
    s.offloaded_step = train::OffloadedStep::kDevice;
  } else {
    throw Error("verlpp.train.offloaded_adamw",
                fmt::format("'{}' is not host (one pass over the host's memory) or device (the state streamed "
                            "through the device in chunks)",
                            where));
  }
  return s;
}

// A value inside a free-form section (reward_kwargs): the check names the dotted key and the value.
const json& kwarg(const json& section, const char* key) {
  static const json null_value;
  return section.contains(key) ? section.at(key) : null_value;
}
bool kwarg_bool(const json& section, const std::string& where, const char* key, bool fallback) {
  const json& v = kwarg(section, key);
  if (v.is_null()) return fallback;
  if (!v.is_boolean()) throw Error(where + "." + key, fmt::format("{} is not a boolean", v.dump()));
  return v.get<bool>();
}
std::optional<int64_t> kwarg_int(const json& section, const std::string& where, const char* key) {
  const json& v = kwarg(section, key);
  if (v.is_null()) return std::nullopt;
  if (!v.is_number_integer()) throw Error(where + "." + key, fmt::format("{} is not an integer", v.dump()));
  return v.get<int64_t>();
}
std::optional<double> kwarg_number(const json& section, const std::string& where, const char* key) {
  const json& v = kwarg(section, key);
  if (v.is_null()) return std::nullopt;
  if (!v.is_number() || !std::isfinite(v.get<double>()))
    throw Error(where + "." + key, fmt::format("{} is not a finite number", v.dump()));
  return v.get<double>();
}
// Errors on a key of `section` outside `known` (each manager takes its own keyword arguments).
void only_keys(const json& section, const std::string& where, const std::vector<std::string>& known,
               const std::string& why) {
  for (auto it = section.begin(); it != section.end(); ++it)
    if (std::find(known.begin(), known.end(), it.key()) == known.end())
      throw Error(where + "." + it.key(), fmt::format("{} = {}: {}", where + "." + it.key(), it.value().dump(), why));
}
const json& object_at(const Config& c, const std::string& key) {
  const json& v = c.at(key);
  if (!v.is_object()) throw Error(key, fmt::format("{} is not a section of keyword arguments", v.dump()));
  return v;
}

// verl's load_reward_manager: the manager registered as reward_manager.name, built with
// reward_model.reward_kwargs; the custom function called with custom_reward_function.reward_kwargs.
reward::RewardManagerSettings reward_manager_at(const Config& c, int64_t max_response_length, bool custom_path) {
  reward::RewardManagerSettings m;
  m.name = read<std::string>(c, "reward_manager.name");
  const std::optional<reward::RewardManagerKind> kind = reward::reward_managers().find(m.name);
  if (!kind)
    throw Error("reward_manager.name (reward_model.reward_manager)",
                fmt::format("'{}' is not a reward manager verlpp has: {}", m.name,
                            join(reward::reward_managers().names(), ", ")));
  // A manager a program registered reads its own keyword arguments (kept whole in m.kwargs).
  const bool builtin = m.name == "naive" || m.name == "dapo" || m.name == "prime" || m.name == "batch";
  const std::string kw = "reward_model.reward_kwargs", custom_kw = "custom_reward_function.reward_kwargs";
  const json& kwargs = object_at(c, kw);
  const json& custom_kwargs = object_at(c, custom_kw);
  if (m.name == "dapo") {
    only_keys(kwargs, kw, {"max_resp_len", "overlong_buffer_cfg"},
              "the dapo manager takes max_resp_len and overlong_buffer_cfg");
    m.max_resp_len = kwarg_int(kwargs, kw, "max_resp_len").value_or(max_response_length);
    const std::string ob = kw + ".overlong_buffer_cfg";
    const json& buffer = kwarg(kwargs, "overlong_buffer_cfg");
    if (!buffer.is_null() && !buffer.is_object())
      throw Error(ob, fmt::format("{} is not a section (enable, len, penalty_factor, log)", buffer.dump()));
    if (buffer.is_object()) {
      only_keys(buffer, ob, {"enable", "len", "penalty_factor", "log"},
                "overlong_buffer_cfg takes enable, len, penalty_factor and log");
      m.overlong.enable = kwarg_bool(buffer, ob, "enable", false);
      m.overlong.log = kwarg_bool(buffer, ob, "log", false);
      m.overlong.penalty_factor = kwarg_number(buffer, ob, "penalty_factor").value_or(1.0);
      const std::optional<int64_t> len = kwarg_int(buffer, ob, "len");
      if (m.overlong.enable) {
        if (!len || *len < 1)
          throw Error(ob + ".len", fmt::format("{}: the buffer needs at least one token",
                                               len ? std::to_string(*len) : std::string("not set")));
        if (m.max_resp_len < *len)
          throw Error(ob + ".len", fmt::format("{} exceeds max_resp_len {} (reward_kwargs.max_resp_len, else "
                                               "data.max_response_length)",
                                               *len, m.max_resp_len));
        if (m.overlong.penalty_factor < 0)
          throw Error(ob + ".penalty_factor",
                      fmt::format("{} is negative (it would reward overlong responses)", m.overlong.penalty_factor));
      }
      m.overlong.len = len.value_or(0);
    }
    if (m.max_resp_len < 1)
      throw Error(kw + ".max_resp_len", fmt::format("{}: needs at least one token", m.max_resp_len));
  } else if (builtin && !kind->batch) {
    only_keys(kwargs, kw, {}, fmt::format("the {} manager takes no keyword arguments", m.name));
  } else if (!kind->batch) {
    m.kwargs = kwargs;
  }
  if (kind->batch) {
    // verl merges the custom function's own arguments over the manager's.
    m.kwargs = kwargs;
    for (auto it = custom_kwargs.begin(); it != custom_kwargs.end(); ++it) m.kwargs[it.key()] = it.value();
  } else if (!custom_kwargs.empty()) {
    only_keys(custom_kwargs, custom_kw, {},
              custom_path ? "the C signature of an item-by-item function takes no keyword arguments; the batch "
                            "manager's does (reward_model.reward_manager=batch)"
                          : "used only with custom_reward_function.path");
  }

  const bool prime = m.name == "prime";
  const std::optional<int64_t> workers = read_optional<int64_t>(c, "verlpp.reward.num_workers");
  const std::optional<double> timeout = read_optional<double>(c, "verlpp.reward.timeout_s");
  m.timeout_score = read_optional<double>(c, "verlpp.reward.timeout_score");
  if (kind->batch && (workers || timeout))
    throw Error(workers ? "verlpp.reward.num_workers" : "verlpp.reward.timeout_s",
                fmt::format("the {} manager calls its function once per batch; leave it null", m.name));
  m.num_workers = workers.value_or(prime ? 64 : 1);  // verl's prime runs 64 processes
  if (m.num_workers < 1 || m.num_workers > 4096)
    throw Error("verlpp.reward.num_workers", fmt::format("{}: needs 1 to 4096 threads", m.num_workers));
  m.timeout_s = timeout;
  if (prime && !timeout) m.timeout_s = 300.0;  // verl's prime: 300 s per item
  if (m.timeout_s && !(std::isfinite(*m.timeout_s) && *m.timeout_s > 0))
    throw Error("verlpp.reward.timeout_s", fmt::format("{}: needs a positive number of seconds", *m.timeout_s));
  if (m.timeout_score && !std::isfinite(*m.timeout_score))
    throw Error("verlpp.reward.timeout_score", fmt::format("{} is not a finite number", *m.timeout_score));
  m.failure_scores = prime;
  return m;
}

}  // namespace

RunSettings parse_run_settings(const Config& config, int world_size, int ranks_per_node) {
  config.validate(world_size, ranks_per_node);
  RunSettings s;
  s.data = data_at(config);
  s.model = model_at(config);
  s.actor = actor_at(config);
  s.ref = ref_at(config);
  s.rollout = rollout_at(config);
  s.algorithm = algorithm_at(config);
  const bool enable_is_set = config.at("critic.enable").is_boolean();
  const bool critic_used = enable_is_set ? config.get<bool>("critic.enable") : s.algorithm.adv_estimator == "gae";
  s.critic = critic_at(config, critic_used);
  s.trainer = trainer_at(config);
  s.custom_reward.path = read_optional<std::string>(config, "custom_reward_function.path");
  // The batch manager names a registered batch function by custom_reward_function.name too.
  s.reward_manager = reward_manager_at(config, s.data.max_response_length, s.custom_reward.path.has_value());
  if (s.custom_reward.path || reward::reward_managers().get(s.reward_manager.name).batch)
    s.custom_reward.name = read<std::string>(config, "custom_reward_function.name");
  s.reward_model = reward_model_at(config);
  s.sft = sft_at(config);
  s.paths = paths_at(config);
  s.pools = pool_layout(config, world_size, ranks_per_node > 0 ? ranks_per_node : world_size);
  s.demo = parse_demo_settings(config);
  return s;
}

DemoSettings parse_demo_settings(const Config& config) {
  DemoSettings s;
  const std::string d = "verlpp.demo.";
  s.enabled = read<bool>(config, d + "enabled");
  s.task = read<std::string>(config, d + "task");
  if (s.task != "arith" && s.task != "multiply_tool")
    throw Error(d + "task", fmt::format("'{}' is not a demo task (arith, multiply_tool)", s.task));
  s.init_seed = read<uint64_t>(config, d + "init_seed");
  s.max_operand = read<int64_t>(config, d + "max_operand");
  s.operators = read<std::string>(config, d + "operators");
  s.seed = read<uint64_t>(config, d + "seed");
  s.sft_count = read<int64_t>(config, d + "sft_count");
  s.train_count = read<int64_t>(config, d + "train_count");
  s.val_count = read<int64_t>(config, d + "val_count");
  s.sft_carry_error = read<double>(config, d + "sft_carry_error");
  s.run_dir = read<std::string>(config, "trainer.default_local_dir");
  return s;
}

RmTrainSettings parse_rm_train_settings(const Config& c) {
  RmTrainSettings s;
  const std::string r = "rm_train.";
  s.train_files = file_list(c, r + "train_files");
  if (s.train_files.empty())
    throw Error(r + "train_files", "no preference pairs given (JSONL or parquet rows with prompt, chosen, rejected)");
  s.val_files = file_list(c, r + "val_files");
  s.prompt_key = read<std::string>(c, r + "prompt_key");
  s.chosen_key = read<std::string>(c, r + "chosen_key");
  s.rejected_key = read<std::string>(c, r + "rejected_key");
  s.max_length = read<int64_t>(c, r + "max_length");
  if (s.max_length < 2) throw Error(r + "max_length", fmt::format("{} tokens: needs at least 2", s.max_length));
  s.truncation = read<std::string>(c, r + "truncation");
  if (s.truncation != "error" && s.truncation != "left" && s.truncation != "right")
    throw Error(r + "truncation", fmt::format("'{}' is not one of: error, left, right", s.truncation));
  const auto model = read_optional<std::string>(c, r + "model_path");
  if (!model || model->empty())
    throw Error(r + "model_path",
                "no model folder to start from (a Hugging Face folder; by default "
                "actor_rollout_ref.model.path)");
  s.model_path = *model;
  s.sft_warm_start = read<bool>(c, r + "sft_warm_start");
  s.total_steps = read<int64_t>(c, r + "total_steps");
  s.batch_size = read<int64_t>(c, r + "batch_size");
  s.micro_batch_size_per_gpu = read<int64_t>(c, r + "micro_batch_size_per_gpu");
  for (const auto& [key, value] : {std::pair<const char*, int64_t>{"total_steps", s.total_steps},
                                   {"batch_size", s.batch_size},
                                   {"micro_batch_size_per_gpu", s.micro_batch_size_per_gpu}})
    if (value < 1) throw Error(r + key, fmt::format("{} must be >= 1", value));
  s.test_freq = read<int64_t>(c, r + "test_freq");
  s.save_freq = read<int64_t>(c, r + "save_freq");
  s.seed = read<int64_t>(c, r + "seed");
  s.default_local_dir = read<std::string>(c, r + "default_local_dir");
  s.optim = optim_at(c, r + "optim", r + "optim.grad_clip");
  s.optim.min_lr_ratio = read<double>(c, r + "optim.min_lr_ratio");
  return s;
}

void check_rollout_split(const RunSettings& settings, const model::ModelConfig& model) {
  const int64_t tp = settings.rollout.tensor_model_parallel_size;
  try {
    model::tensor_parallel_layout(model, tp);
  } catch (const Error& e) {
    throw Error("actor_rollout_ref.rollout.tensor_model_parallel_size",
                fmt::format("the model {} does not split over {} ranks per engine: {}",
                            settings.model.path.value_or(model.architecture), tp, e.message()));
  }
}

}  // namespace verlpp::config
