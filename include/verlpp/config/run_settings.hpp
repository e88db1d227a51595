// RunSettings: the resolved Config read once into plain typed fields, after Config::validate,
// so a run's stages read fields (`settings.actor.ppo_epochs`) and never look keys up again. Each
// field names its key in verl's tree; verl's "null = unset" becomes std::optional where the
// stages tell unset apart, and the fallback verlpp has always applied elsewhere. A value the
// checks cannot accept is an Error naming the key, the value and why, before any work.
#pragma once

#include <verlpp/config/config.hpp>
#include <verlpp/config/resource_pools.hpp>
#include <verlpp/reward/reward_manager.hpp>
#include <verlpp/model/forward_options.hpp>
#include <verlpp/train/sharding.hpp>

#include <c10/core/ScalarType.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace verlpp::model {
struct ModelConfig;
}

namespace verlpp::config {

// <role>.optim (and sft.optim): AdamW and its learning-rate schedule.
struct OptimSettings {
  double lr = 1e-6;                            // lr
  int64_t lr_warmup_steps = -1;                // lr_warmup_steps (-1: from the ratio)
  double lr_warmup_steps_ratio = 0.0;          // lr_warmup_steps_ratio
  double min_lr_ratio = 0.0;                   // min_lr_ratio (null: 0)
  std::string lr_scheduler_type = "constant";  // lr_scheduler_type: constant | cosine (warmup_style, set, wins)
  double num_cycles = 0.5;                     // num_cycles (cosine)
  int64_t total_training_steps = -1;           // total_training_steps (<= 0: the run's optimizer steps)
  double weight_decay = 0.01;                  // weight_decay
  double beta1 = 0.9, beta2 = 0.999;           // betas
  double grad_clip = 1.0;                      // <role>.grad_clip (sft.optim.grad_clip)
};

// <fsdp_config>.mixed_precision: the dtype the passes run in (reduce/buffer must be fp32).
struct PrecisionSettings {
  std::optional<at::ScalarType> param_dtype;  // param_dtype (null: bf16 on an accelerator, fp32 on the CPU)
  at::ScalarType resolve(bool on_cpu) const { return param_dtype.value_or(on_cpu ? at::kFloat : at::kBFloat16); }
};

// data.*
struct DataSettings {
  std::optional<std::string> tokenizer;       // tokenizer (null: model.tokenizer_path, then the model folder)
  std::vector<std::string> train_files;       // train_files (a path or a list)
  std::vector<std::string> val_files;         // val_files
  std::string prompt_key = "prompt";          // prompt_key
  std::string reward_fn_key = "data_source";  // reward_fn_key
  int64_t max_prompt_length = 512;            // max_prompt_length
  int64_t max_response_length = 512;          // max_response_length
  int64_t train_batch_size = 1024;            // train_batch_size (prompts per step)
  std::optional<int64_t> val_batch_size;      // val_batch_size (null: the whole val set at once)
  bool shuffle = true;                        // shuffle
  int64_t seed = 1;                           // seed (data order; null: 1)
  bool filter_overlong_prompts = false;       // filter_overlong_prompts
  std::string truncation = "error";           // truncation: error | left | right | middle
  // apply_chat_template_kwargs: extra variables of every chat-template rendering (prompts, tool
  // and interaction turns), e.g. {"enable_thinking": false}; {} when unset.
  nlohmann::ordered_json apply_chat_template_kwargs = nlohmann::ordered_json::object();
};

// actor_rollout_ref.model.*
struct ActorModelSettings {
  std::optional<std::string> path;                  // path (a Hugging Face folder; required to train)
  std::optional<std::string> custom_chat_template;  // custom_chat_template (Jinja text replacing the folder's)
  bool enable_gradient_checkpointing = false;       // enable_gradient_checkpointing
  bool use_remove_padding = true;                   // use_remove_padding (packed forwards)
  bool use_fused_kernels = false;                   // use_fused_kernels (recompute the logits in the backward)
};

// How a role's model is held over the ranks and in host memory: <role>.strategy (fsdp, fsdp2),
// <fsdp_config>.{param_offload, optimizer_offload, offload_policy, reshard_after_forward,
// forward_prefetch} and
// trainer.zero_stage (docs/scale-out.md).
struct ShardingSettings {
  // The ZeRO stage: trainer.zero_stage when set, else verl's FSDP: reshard_after_forward = true is
  // FULL_SHARD (3), false SHARD_GRAD_OP (2). With one rank every stage runs as 0 (no offload).
  int64_t zero_stage = 3;
  bool param_offload = false;      // param_offload, or offload_policy (FSDP2's CPU offload)
  bool optimizer_offload = false;  // optimizer_offload, or offload_policy
  bool forward_prefetch = false;   // forward_prefetch (ZeRO-3 on several ranks: the next layer's gather)
};

// What actor_rollout_ref.actor.* and critic.* both have: the PPO update's batching, the loss
// aggregation, the optimizer and the precision of the passes.
struct PpoRoleSettings {
  int64_t ppo_mini_batch_size = 256;          // ppo_mini_batch_size (prompts)
  int64_t ppo_micro_batch_size_per_gpu = 1;   // ppo_micro_batch_size_per_gpu (null: 1)
  bool use_dynamic_bsz = false;               // use_dynamic_bsz
  int64_t ppo_max_token_len_per_gpu = 16384;  // ppo_max_token_len_per_gpu
  int64_t ppo_epochs = 1;                     // ppo_epochs
  std::string loss_agg_mode = "token-mean";   // loss_agg_mode
  OptimSettings optim;                        // optim, grad_clip
  PrecisionSettings precision;                // (model.)fsdp_config.mixed_precision
  ShardingSettings sharding;                  // strategy, (model.)fsdp_config, trainer.zero_stage
};

// actor_rollout_ref.ref.* (the frozen reference)
struct ReferenceSettings {
  // fsdp_config.param_offload; zero_stage 3 (sharded when the run is) unless
  // fsdp_config.reshard_after_forward = false (whole on every rank). No optimizer: never offloaded.
  ShardingSettings sharding;
};

// actor_rollout_ref.actor.*
struct ActorSettings : PpoRoleSettings {
  double entropy_coeff = 0.0;               // entropy_coeff
  bool use_kl_loss = false;                 // use_kl_loss
  double kl_loss_coef = 0.001;              // kl_loss_coef
  std::string kl_loss_type = "low_var_kl";  // kl_loss_type
  std::string loss_mode = "vanilla";        // policy_loss.loss_mode
  double clip_ratio_low = 0.2;              // clip_ratio_low (null: clip_ratio)
  double clip_ratio_high = 0.2;             // clip_ratio_high (null: clip_ratio)
  double clip_ratio_c = 3.0;                // clip_ratio_c
  double clip_cov_ratio = 0.0002;           // policy_loss.clip_cov_ratio
  double clip_cov_lb = 1.0;                 // policy_loss.clip_cov_lb
  double clip_cov_ub = 5.0;                 // policy_loss.clip_cov_ub
  double kl_cov_ratio = 0.0002;             // policy_loss.kl_cov_ratio
  double ppo_kl_coef = 0.1;                 // policy_loss.ppo_kl_coef
};

// actor_rollout_ref.rollout.val_kwargs.* (how validation samples)
struct ValKwargsSettings {
  int64_t n = 1;             // n (responses per validation prompt)
  bool do_sample = false;    // do_sample (false: greedy)
  double temperature = 0.0;  // temperature (0: greedy)
  int64_t top_k = -1;        // top_k (-1: off)
  double top_p = 1.0;        // top_p
};

// actor_rollout_ref.rollout.multi_turn.* (verl's agent loop; docs/agent.md)
struct MultiTurnSettings {
  int64_t max_assistant_turns = 0;                     // max_assistant_turns (null: 0, no limit)
  int64_t max_user_turns = 0;                          // max_user_turns (null: 0, no limit)
  int64_t max_parallel_calls = 1;                      // max_parallel_calls (calls of one turn run)
  int64_t max_tool_response_length = 256;              // max_tool_response_length (characters)
  std::string tool_response_truncate_side = "middle";  // tool_response_truncate_side: left | right | middle
  std::optional<std::string> tool_config_path;         // tool_config_path (verl's tool YAML)
  std::optional<std::string> interaction_config_path;  // interaction_config_path (verl's interaction YAML)
  std::string format = "hermes";                       // format (the tool-call parser: hermes)
};

// actor_rollout_ref.rollout.agent.* (which loop runs a row, and the tools' thread pool)
struct AgentSettings {
  int64_t num_workers = 8;                               // num_workers (verlpp: threads running tool calls)
  std::string default_agent_loop = "single_turn_agent";  // default_agent_loop (rows without agent_name)
  std::optional<std::string> agent_loop_config_path;     // agent_loop_config_path (verl's agent loop YAML)
};

// actor_rollout_ref.rollout.*
struct RolloutSettings {
  double temperature = 1.0;                       // temperature (0: greedy)
  int64_t top_k = -1;                             // top_k (-1: off)
  double top_p = 1.0;                             // top_p
  bool do_sample = true;                          // do_sample (false: greedy)
  bool ignore_eos = false;                        // ignore_eos
  bool free_cache_engine = true;                  // free_cache_engine (release the KV pool after generating)
  int64_t n = 1;                                  // n (samples per prompt)
  at::ScalarType dtype = at::kBFloat16;           // dtype
  double gpu_memory_utilization = 0.5;            // gpu_memory_utilization
  int64_t block_size = 16;                        // block_size (verlpp: KV block tokens)
  int64_t max_num_seqs = 1024;                    // max_num_seqs
  int64_t max_num_batched_tokens = 8192;          // max_num_batched_tokens
  int64_t tensor_model_parallel_size = 1;         // tensor_model_parallel_size (ranks per engine)
  int64_t log_prob_micro_batch_size_per_gpu = 8;  // log_prob_micro_batch_size_per_gpu (null: 8; rows per LM-head chunk)
  ValKwargsSettings val_kwargs;                   // val_kwargs.*
  MultiTurnSettings multi_turn;                   // multi_turn.*
  AgentSettings agent;                            // agent.*
};

// critic.* (read only when the run has a critic)
struct CriticSettings : PpoRoleSettings {
  std::optional<bool> enable;                  // enable (null: with gae)
  std::optional<std::string> model_path;       // model.path (null: the actor's folder + a value head)
  bool enable_gradient_checkpointing = false;  // model.enable_gradient_checkpointing
  double cliprange_value = 0.5;                // cliprange_value
};

// algorithm.*
struct AlgorithmSettings {
  std::string adv_estimator = "gae";    // adv_estimator
  double gamma = 1.0;                   // gamma
  double lam = 1.0;                     // lam
  bool norm_adv_by_std_in_grpo = true;  // norm_adv_by_std_in_grpo
  bool use_kl_in_reward = false;        // use_kl_in_reward
  std::string kl_penalty = "kl";        // kl_penalty
  std::string kl_ctrl_type = "fixed";   // kl_ctrl.type: fixed | adaptive
  double kl_coef = 0.001;               // kl_ctrl.kl_coef
  double target_kl = 0.1;               // kl_ctrl.target_kl
  double horizon = 10000;               // kl_ctrl.horizon
};

// trainer.*
struct TrainerSettings {
  std::string device = "auto";                     // device (verlpp: auto | cpu | cuda | privateuseone)
  int64_t seed = 1;                                // seed
  std::string project_name = "verlpp_examples";    // project_name
  std::string experiment_name = "default";         // experiment_name
  std::vector<std::string> logger = {"console"};   // logger (a name or a list; loggers.hpp)
  int64_t log_val_generations = 0;                 // log_val_generations (samples per evaluation)
  std::optional<std::string> rollout_data_dir;     // rollout_data_dir (null: no dump)
  std::optional<std::string> validation_data_dir;  // validation_data_dir (null: no dump)
  std::string default_local_dir;                   // default_local_dir (the run folder)
  int64_t total_epochs = 30;                       // total_epochs
  std::optional<int64_t> total_training_steps;     // total_training_steps (null: epochs x batches)
  std::optional<int64_t> zero_stage;               // zero_stage (verlpp: 0-3; null: from fsdp_config)
  int64_t max_actor_ckpt_to_keep = 0;              // max_actor_ckpt_to_keep (null: all)
  std::string resume_mode = "auto";                // resume_mode: auto | disable | resume_path
  std::string resume_from_path;                    // resume_from_path (null: "")
  bool val_before_train = true;                    // val_before_train
  bool val_only = false;                           // val_only
  int64_t test_freq = -1;                          // test_freq (-1: never)
  int64_t save_freq = -1;                          // save_freq (-1: never)
  int64_t critic_warmup = 0;                       // critic_warmup (steps before the actor updates)
  double dist_timeout_s = 600;                     // dist_timeout_s (verlpp)
};

// custom_reward_function.*
struct CustomRewardSettings {
  std::optional<std::string> path;     // path (a shared object; null: the built-in rules)
  std::string name = "compute_score";  // name (its C function; with the batch manager and no path,
                                       // the registered batch function)
};

// reward_model.* (a model-based reward; read only with enable = true)
struct RewardModelSettings {
  bool enable = false;  // enable
  std::string path;     // model.path (required with enable)
  // model.input_tokenizer: set (verl's default: the actor's model path), each response is decoded
  // with the policy's tokenizer and re-encoded with the reward model's tokenizer and chat template
  // (verl's _switch_chat_template); null, the policy's tokens go to the reward model as they are.
  std::optional<std::string> input_tokenizer;
  int64_t micro_batch_size_per_gpu = 1;           // micro_batch_size_per_gpu (required unless use_dynamic_bsz)
  bool use_dynamic_bsz = false;                   // use_dynamic_bsz
  int64_t forward_max_token_len_per_gpu = 32768;  // forward_max_token_len_per_gpu
  std::optional<int64_t> max_length;              // max_length (null: prompt + response length)
};

// rm_train.* (verlpp: `verlpp train-rm`, a reward model fitted on preference pairs)
struct RmTrainSettings {
  std::vector<std::string> train_files;   // train_files (JSONL or parquet: prompt, chosen, rejected)
  std::vector<std::string> val_files;     // val_files (held-out pairs; empty: no evaluation)
  std::string prompt_key = "prompt";      // prompt_key (chat messages or a string)
  std::string chosen_key = "chosen";      // chosen_key (the preferred response's text)
  std::string rejected_key = "rejected";  // rejected_key
  int64_t max_length = 512;               // max_length (tokens of prompt + response)
  std::string truncation = "error";       // truncation: error | left | right
  std::string model_path;                 // model_path (the decoder to start from)
  bool sft_warm_start = false;            // sft_warm_start: run sft.* on model_path first
  int64_t total_steps = 500;              // total_steps
  int64_t batch_size = 64;                // batch_size (pairs per step)
  int64_t micro_batch_size_per_gpu = 32;  // micro_batch_size_per_gpu (pairs per forward)
  int64_t test_freq = 100;                // test_freq (-1: only at the end)
  int64_t save_freq = -1;                 // save_freq (-1: only the final model)
  int64_t seed = 1;                       // seed (pair order)
  std::string default_local_dir;          // default_local_dir (the run folder)
  OptimSettings optim;                    // optim.{lr, lr_warmup_steps_ratio, lr_scheduler_type, ...}
};

// sft.* (verlpp: the SFT warm start before RL)
struct SftSettings {
  bool enable = false;                    // enable
  std::vector<std::string> train_files;   // train_files
  std::string response_key = "response";  // response_key
  std::string messages_key = "messages";  // messages_key (a row with it and no response: a whole conversation)
  int64_t total_steps = 100;              // total_steps
  int64_t batch_size = 64;                // batch_size
  int64_t micro_batch_size_per_gpu = 64;  // micro_batch_size_per_gpu
  int64_t test_freq = -1;                 // test_freq
  int64_t seed = 1;                       // seed
  OptimSettings optim;                    // optim.{lr, lr_warmup_steps_ratio, lr_scheduler_type, min_lr_ratio, ...}
};

// verlpp.* : the paths to compute by, chosen once at start (docs/training.md). Each choice is
// between paths that agree to rounding; the defaults are the fast ones.
struct PathSettings {
  model::ForwardOptions forward;  // verlpp.model.{fused_training_projections, sdpa_gqa}
  bool device_graphs = true;      // verlpp.rollout.device_graphs
  bool decode_overlap = true;     // verlpp.rollout.decode_overlap
  // Read here for the layers that take them as options (hw::Kernels' streams, the rollout's
  // fused RoPE + attention decode, the trainer's RoPE through rotary_kv_store).
  bool kernel_streams = true;    // verlpp.kernels.streams
  bool rotary_attention = true;  // verlpp.rollout.rotary_attention
  bool train_rotary_qkv = true;  // verlpp.train.rotary_qkv
  // verlpp.train.offloaded_adamw: where AdamW runs over offloaded optimizer state (host | device).
  train::OffloadedStep offloaded_step = train::OffloadedStep::kDevice;
};

// verlpp.demo.*: whether `verlpp train` writes the embedded demo's inputs (the arithmetic task of
// tasks/), the tiny model's init seed and the task's options.
struct DemoSettings {
  bool enabled = false;          // verlpp.demo.enabled
  std::string task = "arith";    // verlpp.demo.task: arith, or multiply_tool (the agentic demo)
  uint64_t init_seed = 1;        // verlpp.demo.init_seed
  int64_t max_operand = 99;      // verlpp.demo.max_operand: operands are 0..max_operand
  std::string operators = "+";   // verlpp.demo.operators: any of "+-*"
  uint64_t seed = 1;             // verlpp.demo.seed: the shuffle that assigns problems to splits
  int64_t sft_count = 2000;      // verlpp.demo.sft_count
  int64_t train_count = 2000;    // verlpp.demo.train_count
  int64_t val_count = 200;       // verlpp.demo.val_count
  double sft_carry_error = 0.0;  // verlpp.demo.sft_carry_error: the sloppy teacher's rate
  std::string run_dir;           // trainer.default_local_dir: its inputs go under it
};

struct RunSettings {
  DataSettings data;
  ActorModelSettings model;
  ActorSettings actor;
  ReferenceSettings ref;
  RolloutSettings rollout;
  CriticSettings critic;
  AlgorithmSettings algorithm;
  TrainerSettings trainer;
  CustomRewardSettings custom_reward;
  // reward_manager.name, reward_model.reward_kwargs, custom_reward_function.reward_kwargs and
  // verlpp.reward.* (reward_manager.hpp).
  reward::RewardManagerSettings reward_manager;
  RewardModelSettings reward_model;
  SftSettings sft;
  PathSettings paths;
  // trainer.resource_pools, trainer.role_pools, reward_model.enable_resource_pool: which ranks
  // run which role (every role on every rank by default).
  PoolLayout pools;
  DemoSettings demo;
};

// Checks `config` (resolved) for a run of `world_size` ranks, `ranks_per_node` per machine
// (Config::validate, every problem at once), then reads every field. Errors name the key.
RunSettings parse_run_settings(const Config& config, int world_size = 1, int ranks_per_node = 0);

// The rollout's engine split (rollout.tensor_model_parallel_size) against the model's shape: an
// Error naming the key, the model folder and the dimension that does not split (heads, KV
// heads, MLP width; only language models split).
void check_rollout_split(const RunSettings& settings, const model::ModelConfig& model);

// verlpp.demo.* alone (the demo's inputs are written before the rest of the run is read).
DemoSettings parse_demo_settings(const Config& config);

// rm_train.* (`verlpp train-rm` also reads parse_run_settings' data.tokenizer, trainer.* and
// sft.*). Errors name the key.
RmTrainSettings parse_rm_train_settings(const Config& config);

}  // namespace verlpp::config
