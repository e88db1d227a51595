// The config keys that code outside config/ names: in errors (the key a bad value came from) and
// in hints (an override to try). Only config/ reads the tree; every other layer gets typed
// settings (run_settings.hpp) and, where it must point the user at a key, one of these.
#pragma once

namespace verlpp::config::keys {

inline constexpr char kActorFsdpConfigOptimizerOffload[] = "actor_rollout_ref.actor.fsdp_config.optimizer_offload";
inline constexpr char kActorFsdpConfigParamOffload[] = "actor_rollout_ref.actor.fsdp_config.param_offload";
inline constexpr char kActorPpoMicroBatchSizePerGpu[] = "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu";
inline constexpr char kModelEnableGradientCheckpointing[] = "actor_rollout_ref.model.enable_gradient_checkpointing";
inline constexpr char kModelCustomChatTemplate[] = "actor_rollout_ref.model.custom_chat_template";
inline constexpr char kModelPath[] = "actor_rollout_ref.model.path";
inline constexpr char kRefFsdpConfigParamOffload[] = "actor_rollout_ref.ref.fsdp_config.param_offload";
inline constexpr char kRolloutDtype[] = "actor_rollout_ref.rollout.dtype";
inline constexpr char kRolloutAgentDefaultAgentLoop[] = "actor_rollout_ref.rollout.agent.default_agent_loop";
inline constexpr char kRolloutAgentLoopConfigPath[] = "actor_rollout_ref.rollout.agent.agent_loop_config_path";
inline constexpr char kRolloutMultiTurnToolConfigPath[] = "actor_rollout_ref.rollout.multi_turn.tool_config_path";
inline constexpr char kRolloutMultiTurnInteractionConfigPath[] =
    "actor_rollout_ref.rollout.multi_turn.interaction_config_path";
inline constexpr char kRolloutGpuMemoryUtilization[] = "actor_rollout_ref.rollout.gpu_memory_utilization";
inline constexpr char kAlgorithmAdvEstimator[] = "algorithm.adv_estimator";
inline constexpr char kCriticEnable[] = "critic.enable";
inline constexpr char kCriticModelFsdpConfigOptimizerOffload[] = "critic.model.fsdp_config.optimizer_offload";
inline constexpr char kCriticModelFsdpConfigParamOffload[] = "critic.model.fsdp_config.param_offload";
inline constexpr char kCustomRewardFunctionName[] = "custom_reward_function.name";
inline constexpr char kCustomRewardFunctionPath[] = "custom_reward_function.path";
inline constexpr char kDataMaxPromptLength[] = "data.max_prompt_length";
inline constexpr char kDataTrainFiles[] = "data.train_files";
inline constexpr char kDataTruncation[] = "data.truncation";
inline constexpr char kRewardModelModelInputTokenizer[] = "reward_model.model.input_tokenizer";
inline constexpr char kRmTrainBatchSize[] = "rm_train.batch_size";
inline constexpr char kRmTrainChosenKey[] = "rm_train.chosen_key";
inline constexpr char kRmTrainRejectedKey[] = "rm_train.rejected_key";
inline constexpr char kRmTrainSftWarmStart[] = "rm_train.sft_warm_start";
inline constexpr char kRmTrainTrainFiles[] = "rm_train.train_files";
inline constexpr char kRmTrainTruncation[] = "rm_train.truncation";
inline constexpr char kSftEnable[] = "sft.enable";
inline constexpr char kSftTrainFiles[] = "sft.train_files";
inline constexpr char kTrainerDefaultLocalDir[] = "trainer.default_local_dir";
inline constexpr char kTrainerDevice[] = "trainer.device";
inline constexpr char kTrainerLogger[] = "trainer.logger";
inline constexpr char kTrainerNGpusPerNode[] = "trainer.n_gpus_per_node";
inline constexpr char kTrainerNnodes[] = "trainer.nnodes";
inline constexpr char kTrainerResourcePools[] = "trainer.resource_pools";
inline constexpr char kTrainerResumeFromPath[] = "trainer.resume_from_path";
inline constexpr char kTrainerResumeMode[] = "trainer.resume_mode";
inline constexpr char kTrainerTotalTrainingSteps[] = "trainer.total_training_steps";
inline constexpr char kTrainerZeroStage[] = "trainer.zero_stage";

}  // namespace verlpp::config::keys
