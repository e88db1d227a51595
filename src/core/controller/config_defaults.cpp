// The default configuration tree: verl's ppo_trainer.yaml key names and default values, as
// JSON, plus the few keys verlpp adds (docs/training.md, "verlpp's own keys"; the verlpp.*
// section holds the choices between equivalent compute paths). Keys verl has for
// FSDP, vLLM or Ray are accepted (so a verl config loads) but listed in ignored_config_keys().
#include <verlpp/controller/config.hpp>

namespace verlpp::controller {

namespace detail {

// Raw JSON text of the defaults; parsed once by Config::defaults().
const char* default_config_text() {
  return R"json({
  "data": {
    "tokenizer": null,
    "train_files": null,
    "val_files": null,
    "prompt_key": "prompt",
    "reward_fn_key": "data_source",
    "max_prompt_length": 512,
    "max_response_length": 512,
    "train_batch_size": 1024,
    "val_batch_size": null,
    "return_raw_input_ids": false,
    "return_raw_chat": false,
    "shuffle": true,
    "seed": 1,
    "filter_overlong_prompts": false,
    "filter_overlong_prompts_workers": 1,
    "truncation": "error",
    "image_key": "images",
    "video_key": "videos",
    "custom_cls": {"path": null, "name": null}
  },
  "actor_rollout_ref": {
    "hybrid_engine": true,
    "model": {
      "path": null,
      "external_lib": null,
      "override_config": {},
      "enable_gradient_checkpointing": false,
      "use_remove_padding": true,
      "use_liger": false,
      "return_last_hidden_state": false,
      "use_fused_loss": false,
      "use_fused_kernels": false
    },
    "actor": {
      "strategy": "fsdp",
      "ppo_mini_batch_size": 256,
      "ppo_micro_batch_size": null,
      "ppo_micro_batch_size_per_gpu": null,
      "use_dynamic_bsz": false,
      "ppo_max_token_len_per_gpu": 16384,
      "grad_clip": 1.0,
      "clip_ratio": 0.2,
      "clip_ratio_low": 0.2,
      "clip_ratio_high": 0.2,
      "clip_ratio_c": 3.0,
      "loss_agg_mode": "token-mean",
      "entropy_coeff": 0.0,
      "use_kl_loss": false,
      "use_torch_compile": true,
      "kl_loss_coef": 0.001,
      "kl_loss_type": "low_var_kl",
      "ppo_epochs": 1,
      "shuffle": false,
      "ulysses_sequence_parallel_size": 1,
      "policy_loss": {
        "loss_mode": "vanilla",
        "clip_cov_ratio": 0.0002,
        "clip_cov_lb": 1.0,
        "clip_cov_ub": 5.0,
        "kl_cov_ratio": 0.0002,
        "ppo_kl_coef": 0.1
      },
      "checkpoint": {"contents": ["model", "optimizer", "extra"]},
      "optim": {
        "lr": 1e-6,
        "lr_warmup_steps": -1,
        "lr_warmup_steps_ratio": 0.0,
        "min_lr_ratio": null,
        "warmup_style": "constant",
        "num_cycles": 0.5,
        "total_training_steps": -1,
        "weight_decay": 0.01,
        "betas": [0.9, 0.999]
      },
      "fsdp_config": {
        "wrap_policy": {"min_num_params": 0},
        "param_offload": false,
        "optimizer_offload": false,
        "offload_policy": false,
        "reshard_after_forward": true,
        "fsdp_size": -1,
        "mixed_precision": {"param_dtype": null, "reduce_dtype": "fp32", "buffer_dtype": "fp32"}
      }
    },
    "ref": {
      "strategy": "fsdp",
      "fsdp_config": {"param_offload": false, "reshard_after_forward": true, "wrap_policy": {"min_num_params": 0}},
      "use_torch_compile": "${actor_rollout_ref.actor.use_torch_compile}",
      "log_prob_micro_batch_size": null,
      "log_prob_micro_batch_size_per_gpu": null,
      "log_prob_use_dynamic_bsz": "${actor_rollout_ref.actor.use_dynamic_bsz}",
      "log_prob_max_token_len_per_gpu": "${actor_rollout_ref.actor.ppo_max_token_len_per_gpu}",
      "ulysses_sequence_parallel_size": "${actor_rollout_ref.actor.ulysses_sequence_parallel_size}"
    },
    "rollout": {
      "name": "verlpp",
      "mode": "sync",
      "chat_scheduler": null,
      "temperature": 1.0,
      "top_k": -1,
      "top_p": 1.0,
      "use_fire_sampling": false,
      "prompt_length": "${data.max_prompt_length}",
      "response_length": "${data.max_response_length}",
      "dtype": "bfloat16",
      "gpu_memory_utilization": 0.5,
      "ignore_eos": false,
      "enforce_eager": true,
      "free_cache_engine": true,
      "load_format": "dummy_dtensor",
      "tensor_model_parallel_size": 1,
      "max_num_batched_tokens": 8192,
      "max_model_len": null,
      "max_num_seqs": 1024,
      "block_size": 16,
      "seed": 0,
      "log_prob_micro_batch_size": null,
      "log_prob_micro_batch_size_per_gpu": null,
      "log_prob_use_dynamic_bsz": "${actor_rollout_ref.actor.use_dynamic_bsz}",
      "log_prob_max_token_len_per_gpu": "${actor_rollout_ref.actor.ppo_max_token_len_per_gpu}",
      "disable_log_stats": true,
      "enable_chunked_prefill": true,
      "do_sample": true,
      "n": 1,
      "engine_kwargs": {"swap_space": null},
      "val_kwargs": {"top_k": -1, "top_p": 1.0, "temperature": 0.0, "n": 1, "do_sample": false},
      "multi_turn": {"enable": false, "max_turns": null, "tool_config_path": null, "format": "chatml"}
    }
  },
  "critic": {
    "enable": null,
    "rollout_n": "${actor_rollout_ref.rollout.n}",
    "strategy": "fsdp",
    "optim": {
      "lr": 1e-5,
      "lr_warmup_steps": -1,
      "lr_warmup_steps_ratio": 0.0,
      "min_lr_ratio": null,
      "warmup_style": "constant",
      "num_cycles": 0.5,
      "total_training_steps": -1,
      "weight_decay": 0.01,
      "betas": [0.9, 0.999]
    },
    "model": {
      "path": null,
      "tokenizer_path": "${actor_rollout_ref.model.path}",
      "override_config": {},
      "external_lib": "${actor_rollout_ref.model.external_lib}",
      "enable_gradient_checkpointing": false,
      "use_remove_padding": true,
      "fsdp_config": {
        "param_offload": false,
        "optimizer_offload": false,
        "offload_policy": false,
        "reshard_after_forward": true,
        "wrap_policy": {"min_num_params": 0},
        "fsdp_size": -1,
        "mixed_precision": {"param_dtype": null, "reduce_dtype": "fp32", "buffer_dtype": "fp32"}
      }
    },
    "ppo_mini_batch_size": "${actor_rollout_ref.actor.ppo_mini_batch_size}",
    "ppo_micro_batch_size": null,
    "ppo_micro_batch_size_per_gpu": null,
    "forward_micro_batch_size": "${critic.ppo_micro_batch_size}",
    "forward_micro_batch_size_per_gpu": "${critic.ppo_micro_batch_size_per_gpu}",
    "use_dynamic_bsz": "${actor_rollout_ref.actor.use_dynamic_bsz}",
    "ppo_max_token_len_per_gpu": 32768,
    "forward_max_token_len_per_gpu": "${critic.ppo_max_token_len_per_gpu}",
    "ulysses_sequence_parallel_size": 1,
    "ppo_epochs": "${actor_rollout_ref.actor.ppo_epochs}",
    "shuffle": "${actor_rollout_ref.actor.shuffle}",
    "grad_clip": 1.0,
    "cliprange_value": 0.5,
    "loss_agg_mode": "${actor_rollout_ref.actor.loss_agg_mode}",
    "checkpoint": {"contents": ["model", "optimizer", "extra"]}
  },
  "reward_model": {
    "enable": false,
    "strategy": "fsdp",
    "model": {
      "input_tokenizer": "${actor_rollout_ref.model.path}",
      "path": null,
      "external_lib": "${actor_rollout_ref.model.external_lib}",
      "use_remove_padding": true,
      "fsdp_config": {"wrap_policy": {"min_num_params": 0}, "param_offload": false, "reshard_after_forward": true, "fsdp_size": -1}
    },
    "micro_batch_size": null,
    "micro_batch_size_per_gpu": null,
    "max_length": null,
    "ulysses_sequence_parallel_size": 1,
    "use_dynamic_bsz": "${critic.use_dynamic_bsz}",
    "forward_max_token_len_per_gpu": "${critic.forward_max_token_len_per_gpu}",
    "reward_manager": "naive",
    "launch_reward_fn_async": false
  },
  "custom_reward_function": {"path": null, "name": "compute_score"},
  "algorithm": {
    "gamma": 1.0,
    "lam": 1.0,
    "adv_estimator": "gae",
    "norm_adv_by_std_in_grpo": true,
    "use_kl_in_reward": false,
    "kl_penalty": "kl",
    "kl_ctrl": {"type": "fixed", "kl_coef": 0.001, "horizon": 10000, "target_kl": 0.1}
  },
  "trainer": {
    "balance_batch": true,
    "total_epochs": 30,
    "total_training_steps": null,
    "project_name": "verlpp_examples",
    "experiment_name": "default",
    "logger": ["console"],
    "log_val_generations": 0,
    "rollout_data_dir": null,
    "validation_data_dir": null,
    "nnodes": null,
    "n_gpus_per_node": null,
    "dist_timeout_s": 600,
    "zero_stage": 0,
    "device": "auto",
    "save_freq": -1,
    "resume_mode": "auto",
    "resume_from_path": null,
    "val_before_train": true,
    "val_only": false,
    "test_freq": -1,
    "critic_warmup": 0,
    "default_hdfs_dir": null,
    "del_local_ckpt_after_load": false,
    "default_local_dir": "checkpoints/${trainer.project_name}/${trainer.experiment_name}",
    "max_actor_ckpt_to_keep": null,
    "max_critic_ckpt_to_keep": null,
    "ray_wait_register_center_timeout": 300,
    "seed": 1
  },
  "ray_init": {"num_cpus": null},
  "sft": {
    "enable": false,
    "train_files": null,
    "response_key": "response",
    "total_steps": 100,
    "batch_size": 64,
    "micro_batch_size_per_gpu": 64,
    "test_freq": -1,
    "seed": 1,
    "optim": {"lr": 1e-4, "lr_warmup_steps_ratio": 0.1, "warmup_style": "cosine", "min_lr_ratio": 0.1,
              "weight_decay": 0.0, "betas": [0.9, 0.999], "grad_clip": 1.0}
  },
  "verlpp": {
    "model": {"fused_training_projections": null, "sdpa_gqa": true},
    "rollout": {"device_graphs": true, "decode_overlap": true, "rotary_attention": true},
    "train": {"rotary_qkv": true},
    "kernels": {"streams": true}
  }
})json";
}

}  // namespace detail

const std::vector<std::string>& ignored_config_keys() {
  static const std::vector<std::string> keys = {"data.return_raw_input_ids",
                                                "data.filter_overlong_prompts_workers",
                                                "data.image_key",
                                                "data.video_key",
                                                "data.custom_cls",
                                                "actor_rollout_ref.model.external_lib",
                                                "actor_rollout_ref.model.use_liger",
                                                "actor_rollout_ref.model.return_last_hidden_state",
                                                "actor_rollout_ref.model.use_fused_loss",
                                                "actor_rollout_ref.actor.strategy",
                                                "actor_rollout_ref.actor.use_torch_compile",
                                                "actor_rollout_ref.actor.ulysses_sequence_parallel_size",
                                                "actor_rollout_ref.actor.fsdp_config",
                                                "actor_rollout_ref.ref.strategy",
                                                "actor_rollout_ref.ref.fsdp_config",
                                                "actor_rollout_ref.ref.use_torch_compile",
                                                "actor_rollout_ref.ref.ulysses_sequence_parallel_size",
                                                "actor_rollout_ref.rollout.mode",
                                                "actor_rollout_ref.rollout.chat_scheduler",
                                                "actor_rollout_ref.rollout.use_fire_sampling",
                                                "actor_rollout_ref.rollout.enforce_eager",
                                                "actor_rollout_ref.rollout.load_format",
                                                "actor_rollout_ref.rollout.tensor_model_parallel_size",
                                                "actor_rollout_ref.rollout.disable_log_stats",
                                                "actor_rollout_ref.rollout.enable_chunked_prefill",
                                                "actor_rollout_ref.rollout.engine_kwargs",
                                                "actor_rollout_ref.rollout.multi_turn",
                                                "critic.strategy",
                                                "critic.model.external_lib",
                                                "critic.model.fsdp_config",
                                                "critic.ulysses_sequence_parallel_size",
                                                "reward_model.strategy",
                                                "reward_model.model.external_lib",
                                                "reward_model.model.fsdp_config",
                                                "reward_model.ulysses_sequence_parallel_size",
                                                "reward_model.launch_reward_fn_async",
                                                "trainer.default_hdfs_dir",
                                                "trainer.del_local_ckpt_after_load",
                                                "trainer.ray_wait_register_center_timeout",
                                                "ray_init"};
  return keys;
}

}  // namespace verlpp::controller
