// The one table deciding what each config key does in verlpp (config_key_states.hpp). Rows are
// checked in order and the first match decides, so exceptions come before the section they sit
// in. A key no row matches has its effect, and tests/controller/test_config_key_states.cpp checks
// that a reader really reads each of those, and that no reader reads a key listed here.
#include <verlpp/config/config_key_states.hpp>

namespace verlpp::config {
namespace {

constexpr KeyState kNone = KeyState::no_effect;
constexpr KeyState kRefused = KeyState::refused;

// Reasons shared by many rows.
constexpr const char* kHydraTarget = "Hydra's class to instantiate; verlpp reads the keys itself";
constexpr const char* kFsdp = "FSDP's module wrapping: verlpp's sharding units are the decoder layers";
constexpr const char* kStrategy = "verlpp trains with its own data-parallel engine, whatever the strategy name";
constexpr const char* kEngineStrategy = "the engine's copy of the role's strategy; verlpp reads <role>.strategy";
constexpr const char* kRewardModelFsdp =
    "the reward model is replicated on every rank and stays on the device; its FSDP settings do nothing";
constexpr const char* kCompile = "torch.compile: verlpp runs LibTorch's eager passes";
constexpr const char* kEntropyMemory = "a memory-saving way to compute entropy; verlpp computes it its own way";
constexpr const char* kUlysses = "sequence parallelism (Ulysses) is not implemented: only 1";
constexpr const char* kMicroGlobal = "the global micro-batch size is not taken: set the matching _per_gpu key";
constexpr const char* kProfilerOn = "verl's profilers are not in verlpp (time steps with timing_s/* or verlpp-bench-*)";
constexpr const char* kProfiler = "profiler setting; verl's profilers are not in verlpp";
constexpr const char* kFollowsRolloutN = "follows actor_rollout_ref.rollout.n; set that";
constexpr const char* kDtype =
    "the passes' dtype is fsdp_config.mixed_precision.param_dtype (null: bf16 on an accelerator, fp32 on the CPU)";
constexpr const char* kModelDtype = "verlpp keeps master weights in fp32";
constexpr const char* kVllm = "an inference-engine (vLLM/SGLang) setting; verlpp generates with its own engine";
constexpr const char* kLogProbBatch = "verlpp's log-prob passes batch by rollout.log_prob_micro_batch_size_per_gpu";
constexpr const char* kRouterReplay = "MoE routing replay is not implemented";
constexpr const char* kRouterFile = "used only with router_replay.mode, which verlpp refuses";
constexpr const char* kCheckpointContents = "verlpp saves and loads model, optimizer and extra state together";
constexpr const char* kAsyncSave = "checkpoints are written synchronously";
constexpr const char* kClipGrad = "verl's new-engine clipping key; verlpp clips by the role's grad_clip (set that)";
constexpr const char* kOptimizer = "verlpp's optimizer is its own AdamW";
constexpr const char* kOptimizerOverride = "extra optimizer arguments are not taken";
constexpr const char* kLora = "LoRA is not implemented (full fine-tuning only)";
constexpr const char* kLoraDetail = "used only with lora_rank > 0, which verlpp refuses";
constexpr const char* kOverrideConfig = "not implemented: the model folder's config.json is used as it is";
constexpr const char* kPython = "loads Python code; verlpp runs no Python";
constexpr const char* kShm = "loads the model through /dev/shm; verlpp reads the folder directly";
constexpr const char* kRemoteCode = "verlpp runs no model code from the folder (its own decoder)";
constexpr const char* kActivationOffload = "activation offload is not implemented (memory only)";
constexpr const char* kTiledMlp = "tiled MLP (a memory saving) is not implemented";
constexpr const char* kDataSeedOnly = "used only with shuffle = true, which verlpp refuses";

// Keeps the rows short: {pattern, state, reason}.
constexpr KeyRule none(const char* pattern, const char* reason) { return {pattern, kNone, reason}; }
constexpr KeyRule refused(const char* pattern, const char* reason) { return {pattern, kRefused, reason}; }

}  // namespace

const std::vector<KeyRule>& config_key_rules() {
  static const std::vector<KeyRule> rules = {
      none("**._target_", kHydraTarget),

      // Profilers, wherever they sit.
      refused("*.*.profiler.enable", kProfilerOn),
      refused("*.profiler.enable", kProfilerOn),
      none("*.*.profiler", kProfiler),
      none("*.profiler", kProfiler),
      refused("global_profiler.tool", kProfilerOn),
      refused("global_profiler.steps", kProfilerOn),
      none("global_profiler", kProfiler),

      // Every role's Ulysses size and FSDP engine settings.
      refused("*.*.ulysses_sequence_parallel_size", kUlysses),
      refused("*.*.fsdp_config.ulysses_sequence_parallel_size", kUlysses),
      refused("*.ulysses_sequence_parallel_size", kUlysses),
      refused("*.*.fsdp_config.dtype", kDtype),
      refused("*.*.fsdp_config.model_dtype", kModelDtype),
      none("*.*.fsdp_config.entropy_from_logits_with_chunking", kEntropyMemory),
      none("*.*.fsdp_config.entropy_checkpointing", kEntropyMemory),
      none("*.*.fsdp_config.use_torch_compile", kCompile),
      none("*.*.fsdp_config.strategy", kEngineStrategy),
      none("*.*.fsdp_config.seed", "verlpp seeds everything from trainer.seed"),
      none("*.*.fsdp_config.full_determinism", "verlpp has no separate determinism switch"),
      none("*.*.fsdp_config.forward_only", "set by verl for the reference worker; verlpp knows its roles"),
      // The actor's, reference's and critic's sharding and offload keys have their effect
      // (ShardingSettings), and so has mixed_precision; the rest of fsdp_config is FSDP's wrapping.
      none("reward_model.model.fsdp_config", kRewardModelFsdp),
      none("actor_rollout_ref.ref.fsdp_config.optimizer_offload", "the reference has no optimizer"),
      {"actor_rollout_ref.actor.fsdp_config.mixed_precision", KeyState::effect, ""},
      {"critic.model.fsdp_config.mixed_precision", KeyState::effect, ""},
      {"actor_rollout_ref.actor.fsdp_config.param_offload", KeyState::effect, ""},
      {"actor_rollout_ref.actor.fsdp_config.optimizer_offload", KeyState::effect, ""},
      {"actor_rollout_ref.actor.fsdp_config.offload_policy", KeyState::effect, ""},
      {"actor_rollout_ref.actor.fsdp_config.reshard_after_forward", KeyState::effect, ""},
      {"actor_rollout_ref.actor.fsdp_config.fsdp_size", KeyState::effect, ""},
      {"actor_rollout_ref.actor.fsdp_config.forward_prefetch", KeyState::effect, ""},
      {"actor_rollout_ref.ref.fsdp_config.param_offload", KeyState::effect, ""},
      {"actor_rollout_ref.ref.fsdp_config.offload_policy", KeyState::effect, ""},
      {"actor_rollout_ref.ref.fsdp_config.reshard_after_forward", KeyState::effect, ""},
      {"actor_rollout_ref.ref.fsdp_config.fsdp_size", KeyState::effect, ""},
      {"actor_rollout_ref.ref.fsdp_config.forward_prefetch", KeyState::effect, ""},
      {"critic.model.fsdp_config.param_offload", KeyState::effect, ""},
      {"critic.model.fsdp_config.optimizer_offload", KeyState::effect, ""},
      {"critic.model.fsdp_config.offload_policy", KeyState::effect, ""},
      {"critic.model.fsdp_config.reshard_after_forward", KeyState::effect, ""},
      {"critic.model.fsdp_config.fsdp_size", KeyState::effect, ""},
      {"critic.model.fsdp_config.forward_prefetch", KeyState::effect, ""},
      none("*.*.fsdp_config.use_orig_params", "verlpp's parameters are always the model's own tensors (views)"),
      none("*.*.fsdp_config", kFsdp),

      // Both optimizers.
      refused("*.*.optim.optimizer", kOptimizer),
      none("*.*.optim.optimizer_impl", kOptimizer),
      refused("*.*.optim.clip_grad", kClipGrad),
      refused("*.*.optim.override_optimizer_config", kOptimizerOverride),
      refused("critic.optim.optimizer", kOptimizer),
      none("critic.optim.optimizer_impl", kOptimizer),
      refused("critic.optim.clip_grad", kClipGrad),
      refused("critic.optim.override_optimizer_config", kOptimizerOverride),

      // actor_rollout_ref.actor
      refused("actor_rollout_ref.actor.rollout_n", kFollowsRolloutN),
      refused("actor_rollout_ref.actor.ppo_micro_batch_size", kMicroGlobal),
      none("actor_rollout_ref.actor.tau_pos", "a parameter of policy losses verlpp does not have (sapo)"),
      none("actor_rollout_ref.actor.tau_neg", "a parameter of policy losses verlpp does not have (sapo)"),
      none("actor_rollout_ref.actor.freeze_vision_tower", "verlpp trains text-only decoders"),
      refused("actor_rollout_ref.actor.loss_scale_factor", "not implemented: the loss is aggregated by loss_agg_mode"),
      refused("actor_rollout_ref.actor.calculate_entropy",
              "not implemented: actor/entropy is computed when entropy_coeff != 0"),
      none("actor_rollout_ref.actor.use_prefix_grouper", "a speed-up for shared prompts; verlpp forwards each row"),
      none("actor_rollout_ref.actor.use_torch_compile", kCompile),
      refused("actor_rollout_ref.actor.shuffle", "verlpp's PPO update walks the mini-batches in rollout order"),
      none("actor_rollout_ref.actor.data_loader_seed", kDataSeedOnly),
      none("actor_rollout_ref.actor.checkpoint.async_save", kAsyncSave),
      refused("actor_rollout_ref.actor.checkpoint", kCheckpointContents),
      refused("actor_rollout_ref.actor.use_fused_kernels",
              "follows actor_rollout_ref.model.use_fused_kernels; set that"),
      refused("actor_rollout_ref.actor.router_replay.mode", kRouterReplay),
      none("actor_rollout_ref.actor.router_replay", kRouterFile),
      none("actor_rollout_ref.actor.entropy_from_logits_with_chunking", kEntropyMemory),
      none("actor_rollout_ref.actor.entropy_checkpointing", kEntropyMemory),
      refused("actor_rollout_ref.actor.use_remove_padding",
              "follows actor_rollout_ref.model.use_remove_padding; set that"),
      refused("actor_rollout_ref.actor.calculate_sum_pi_squared", "not implemented"),
      none("actor_rollout_ref.actor.sum_pi_squared_checkpointing", "used only with calculate_sum_pi_squared"),

      // actor_rollout_ref.ref
      refused("actor_rollout_ref.ref.rollout_n", kFollowsRolloutN),
      none("actor_rollout_ref.ref.use_torch_compile", kCompile),
      refused("actor_rollout_ref.ref.log_prob_micro_batch_size", kMicroGlobal),
      none("actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu", kLogProbBatch),
      none("actor_rollout_ref.ref.log_prob_use_dynamic_bsz", kLogProbBatch),
      none("actor_rollout_ref.ref.log_prob_max_token_len_per_gpu", kLogProbBatch),
      refused("actor_rollout_ref.ref.router_replay.mode", kRouterReplay),
      none("actor_rollout_ref.ref.router_replay", kRouterFile),
      none("actor_rollout_ref.ref.entropy_from_logits_with_chunking", kEntropyMemory),
      none("actor_rollout_ref.ref.entropy_checkpointing", kEntropyMemory),

      // actor_rollout_ref.rollout
      none("actor_rollout_ref.rollout.name",
           "verlpp generates with its own engine (paged KV cache, continuous batching)"),
      none("actor_rollout_ref.rollout.mode", "verlpp's engine serves a step's requests together, sync or async alike"),
      refused("actor_rollout_ref.rollout.prompt_length", "verlpp's prompt budget is data.max_prompt_length; set that"),
      refused("actor_rollout_ref.rollout.response_length",
              "verlpp generates up to data.max_response_length tokens; set that"),
      none("actor_rollout_ref.rollout.enforce_eager", "verlpp.rollout.device_graphs is verlpp's switch"),
      none("actor_rollout_ref.rollout.cudagraph_capture_sizes", "verlpp.rollout.device_graphs is verlpp's switch"),
      none("actor_rollout_ref.rollout.data_parallel_size",
           "verlpp's engines are the ranks / tensor_model_parallel_size groups of ranks"),
      none("actor_rollout_ref.rollout.expert_parallel_size", "verlpp's engines split no experts (dense models)"),
      none("actor_rollout_ref.rollout.pipeline_model_parallel_size",
           "verlpp's engines split by tensor parallelism only"),
      none("actor_rollout_ref.rollout.max_model_len",
           "verlpp sizes sequences by max_prompt_length + max_response_length"),
      none("actor_rollout_ref.rollout.enable_chunked_prefill", kVllm),
      none("actor_rollout_ref.rollout.enable_prefix_caching", kVllm),
      none("actor_rollout_ref.rollout.logprobs_mode", "verlpp recomputes the old log-probs with the actor"),
      none("actor_rollout_ref.rollout.scheduling_policy", kVllm),
      none("actor_rollout_ref.rollout.load_format", "verlpp's engine shares the actor's weights in memory"),
      refused("actor_rollout_ref.rollout.log_prob_micro_batch_size", kMicroGlobal),
      none("actor_rollout_ref.rollout.log_prob_use_dynamic_bsz", kLogProbBatch),
      none("actor_rollout_ref.rollout.log_prob_max_token_len_per_gpu", kLogProbBatch),
      none("actor_rollout_ref.rollout.disable_log_stats", kVllm),
      refused("actor_rollout_ref.rollout.over_sample_rate", "not implemented: every request is completed"),
      none("actor_rollout_ref.rollout.multi_stage_wake_up", kVllm),
      none("actor_rollout_ref.rollout.engine_kwargs", kVllm),
      none("actor_rollout_ref.rollout.multi_turn.enable",
           "SGLang's switch for its own multi-turn rollout; verlpp runs the agent loop each row's agent_name (or "
           "rollout.agent.default_agent_loop) names, and every loss term always reads response_mask"),
      none("actor_rollout_ref.rollout.multi_turn.use_inference_chat_template",
           "verlpp's agent loop never re-tokenizes a trajectory: the ids trained on are the ids generated"),
      none("actor_rollout_ref.rollout.multi_turn.tokenization_sanity_check_mode",
           "verlpp's agent loop never re-tokenizes a trajectory, so there is nothing to check"),
      none("actor_rollout_ref.rollout.multi_turn.num_repeat_rollouts", "SGLang's multi-turn setting; set rollout.n"),
      refused("actor_rollout_ref.rollout.calculate_log_probs", "verlpp's engine does not return its own log-probs"),
      refused("actor_rollout_ref.rollout.agent.custom_async_server",
              "a custom (Python) inference server; verlpp generates with its own engine"),
      none("actor_rollout_ref.rollout.checkpoint_engine", "verlpp's engine shares the actor's weights in memory"),
      refused("actor_rollout_ref.rollout.trace.backend", "rollout tracing is not implemented"),
      none("actor_rollout_ref.rollout.trace", "used only with trace.backend, which verlpp refuses"),
      refused("actor_rollout_ref.rollout.skip_rollout", "not implemented: every step generates"),
      none("actor_rollout_ref.rollout.skip_dump_dir", "used only with skip_rollout, which verlpp refuses"),
      none("actor_rollout_ref.rollout.skip_tokenizer_init", kVllm),
      refused("actor_rollout_ref.rollout.enable_rollout_routing_replay", kRouterReplay),
      refused("actor_rollout_ref.rollout.prometheus.enable", "a Prometheus server is not implemented"),
      none("actor_rollout_ref.rollout.prometheus", "used only with prometheus.enable, which verlpp refuses"),
      refused("actor_rollout_ref.rollout.quantization", "quantized rollout is not implemented"),
      refused("actor_rollout_ref.rollout.quantization_config_file", "quantized rollout is not implemented"),
      refused("actor_rollout_ref.rollout.mtp", "multi-token prediction is not implemented"),
      none("actor_rollout_ref.rollout.layered_summon",
           "verl's layer-by-layer weight gathering for the rollout; verlpp's sync of sharded weights always goes "
           "unit by unit"),

      // actor_rollout_ref.model
      refused("actor_rollout_ref.model.hf_config_path", "the config is read from model.path"),
      none("actor_rollout_ref.model.use_shm", kShm),
      none("actor_rollout_ref.model.trust_remote_code", kRemoteCode),
      refused("actor_rollout_ref.model.external_lib", kPython),
      refused("actor_rollout_ref.model.override_config", kOverrideConfig),
      none("actor_rollout_ref.model.enable_activation_offload", kActivationOffload),
      refused("actor_rollout_ref.model.lora_rank", kLora),
      refused("actor_rollout_ref.model.lora_adapter_path", kLora),
      none("actor_rollout_ref.model.lora_alpha", kLoraDetail),
      none("actor_rollout_ref.model.target_modules", kLoraDetail),
      none("actor_rollout_ref.model.exclude_modules", kLoraDetail),
      none("actor_rollout_ref.model.use_liger", "Liger kernels: verlpp's kernels come from its plugins"),
      none("actor_rollout_ref.model.fused_kernel_options", "verlpp's fused-kernel path has one backend"),
      none("actor_rollout_ref.model.tiled_mlp", kTiledMlp),
      refused("actor_rollout_ref.model.mtp.enable", "multi-token prediction is not implemented"),
      none("actor_rollout_ref.model.mtp", "used only with mtp.enable, which verlpp refuses"),
      none("actor_rollout_ref.hybrid_engine", "verlpp's actor and engine always share one copy of the weights"),
      refused("actor_rollout_ref.nccl_timeout", "verlpp's collective timeout is trainer.dist_timeout_s; set that"),

      // data
      none("data.use_shm", kShm),
      refused("data.train_max_samples", "not implemented: every row of data.train_files is used"),
      refused("data.val_max_samples", "not implemented: every row of data.val_files is used"),
      none("data.tool_config_path",
           "verlpp renders tool_agent prompts with actor_rollout_ref.rollout.multi_turn.tool_config_path's schemas"),
      none("data.return_raw_input_ids", "what verl's Python dataset returns; verlpp's loader keeps what it needs"),
      none("data.return_raw_chat", "what verl's Python dataset returns; verlpp's loader keeps what it needs"),
      none("data.return_full_prompt", "what verl's Python dataset returns; verlpp's loader keeps what it needs"),
      none("data.dataloader_num_workers", "verlpp's loader runs in the trainer process"),
      none("data.image_patch_size", "verlpp trains text-only decoders"),
      none("data.validation_shuffle", "validation runs over the whole set; the order does not change its metrics"),
      none("data.filter_overlong_prompts_workers", "verlpp's loader runs in the trainer process"),
      none("data.image_key", "verlpp trains text-only decoders"),
      none("data.video_key", "verlpp trains text-only decoders"),
      none("data.trust_remote_code", kRemoteCode),
      refused("data.custom_cls.path", kPython),
      none("data.custom_cls.name", "used only with custom_cls.path, which verlpp refuses"),
      none("data.return_multi_modal_inputs", "verlpp trains text-only decoders"),
      refused("data.sampler.class_path", kPython),
      none("data.sampler.class_name", "used only with sampler.class_path, which verlpp refuses"),
      refused("data.datagen.path", kPython),
      none("data.datagen.name", "used only with datagen.path, which verlpp refuses"),

      // reward_manager.name has its effect (it follows reward_model.reward_manager).
      refused("reward_manager.source",
              "importlib loads a Python class; verlpp's managers are registered (reward_manager.name)"),
      none("reward_manager.module", "used only with reward_manager.source = importlib, which verlpp refuses"),

      // critic
      refused("critic.model.tokenizer_path", "the critic reads the actor's tokens"),
      refused("critic.model.override_config", kOverrideConfig),
      refused("critic.model.external_lib", kPython),
      none("critic.model.trust_remote_code", kRemoteCode),
      none("critic.model.use_shm", kShm),
      none("critic.model.enable_activation_offload", kActivationOffload),
      none("critic.model.use_remove_padding", "the critic's passes run padded"),
      refused("critic.model.lora_rank", kLora),
      none("critic.model.lora_alpha", kLoraDetail),
      none("critic.model.target_modules", kLoraDetail),
      none("critic.model.tiled_mlp", kTiledMlp),
      refused("critic.rollout_n", kFollowsRolloutN),
      refused("critic.ppo_micro_batch_size", kMicroGlobal),
      refused("critic.forward_micro_batch_size", kMicroGlobal),
      none("critic.forward_micro_batch_size_per_gpu", kLogProbBatch),
      none("critic.forward_max_token_len_per_gpu", kLogProbBatch),
      refused("critic.shuffle", "verlpp's PPO update walks the mini-batches in rollout order"),
      none("critic.data_loader_seed", kDataSeedOnly),
      none("critic.checkpoint.async_save", kAsyncSave),
      refused("critic.checkpoint", kCheckpointContents),

      // reward_model: enable, model.path, model.input_tokenizer, micro_batch_size_per_gpu,
      // use_dynamic_bsz, forward_max_token_len_per_gpu, max_length, reward_manager and
      // reward_kwargs have their effect; enable_resource_pool with n_gpus_per_node and nnodes
      // puts it on a pool of its own (resource_pools.hpp).
      refused("reward_model.sandbox_fusion.url", "a code sandbox is not implemented"),
      none("reward_model.sandbox_fusion", "used only with sandbox_fusion.url, which verlpp refuses"),
      none("reward_model.launch_reward_fn_async", "verlpp scores in the trainer process"),
      none("reward_model.strategy", kStrategy),
      refused("reward_model.model.external_lib", kPython),
      none("reward_model.model.trust_remote_code", kRemoteCode),
      refused("reward_model.model.override_config", kOverrideConfig),
      none("reward_model.model.use_shm", kShm),
      none("reward_model.model.use_remove_padding", "the reward model's forwards run padded"),
      none("reward_model.model.use_fused_kernels", "a training-memory saving; the reward model runs forwards only"),
      refused("reward_model.micro_batch_size", kMicroGlobal),
      none("reward_model.use_reward_loop", "verl's asynchronous reward workers; verlpp scores in the trainer process"),
      none("reward_model.num_workers", "verl's asynchronous reward workers; verlpp scores in the trainer process"),
      none("reward_model.reward_loop_source",
           "verl's asynchronous reward workers; verlpp scores in the trainer process"),
      refused("reward_model.reward_loop_module_path", kPython),
      none("reward_model.reward_loop_class_name", "used only with reward_loop_module_path, which verlpp refuses"),
      none("reward_model.rollout",
           "a generative reward model's inference engine; verlpp's reward models are "
           "classifiers (a score head)"),

      // algorithm
      refused("algorithm.rollout_correction",
              "rollout correction (importance sampling / rejection) is not implemented"),
      refused("algorithm.use_pf_ppo", "PF-PPO reweighting is not implemented"),
      none("algorithm.pf_ppo", "used only with use_pf_ppo, which verlpp refuses"),

      // trainer
      none("trainer.balance_batch", "verlpp splits a step's sequences evenly over the ranks"),
      none("trainer.esi_redundant_time", "for verl's elastic-server save timing; verlpp saves at save_freq"),
      refused("trainer.default_hdfs_dir", "copying checkpoints to HDFS is not implemented"),
      none("trainer.del_local_ckpt_after_load", "verlpp leaves checkpoints in place"),
      refused("trainer.max_critic_ckpt_to_keep",
              "verlpp keeps actor and critic in one checkpoint: set trainer.max_actor_ckpt_to_keep"),
      none("trainer.ray_wait_register_center_timeout", "Ray: verlpp runs without Ray"),
      none("trainer.use_legacy_worker_impl", "verl's choice between its worker implementations"),

      none("transfer_queue", "verl's data transfer service; verlpp passes batches in memory"),
      none("ray_kwargs", "Ray: verlpp runs without Ray"),
  };
  return rules;
}

}  // namespace verlpp::config
