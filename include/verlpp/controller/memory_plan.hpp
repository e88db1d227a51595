// The memory planner behind `verlpp plan` and the start-of-run check of `verlpp train`: the
// bytes one rank holds during each stage of an RL step (generation, reference, old log-probs,
// update, sync), from the model's shape and the run's settings. Resident items (weights, fp32
// masters, gradients kept between updates, AdamW moments, the reference) follow from the tensors
// the trainer allocates and are exact up to allocator rounding; the per-stage transients
// (activations, logits chunks, the KV pool) are estimates, labelled so (docs/scale-out.md gives
// the formulas).
#pragma once

#include <verlpp/config/run_settings.hpp>
#include <verlpp/model/model_config.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace verlpp::controller {

// How one role's state is held (ShardingSettings, as the run resolves them).
struct RoleLayout {
  int64_t zero_stage = 0;  // 0-3; with one rank every stage holds what 0 holds (offload aside)
  bool param_offload = false, optimizer_offload = false;
  bool forward_prefetch = false;  // ZeRO-3: forwards hold a second, prefetched layer
};

// What the plan is computed from (plan_inputs fills it from a run's settings).
struct MemoryPlanInputs {
  model::ModelConfig model;                // the actor's shape
  int64_t world_size = 1;                  // data-parallel ranks
  RoleLayout actor_layout, critic_layout;  // trainer.zero_stage and each role's fsdp_config
  // The reference: zero_stage 3 = sharded like the actor's ZeRO-3 (0: whole on every rank).
  RoleLayout ref_layout;
  at::ScalarType param_dtype = at::kBFloat16;
  at::ScalarType rollout_dtype = at::kBFloat16;
  int64_t rollout_tp = 1;  // rollout.tensor_model_parallel_size: ranks each engine is split over
  bool reference = false, critic = false;
  bool actor_checkpointing = false, critic_checkpointing = false;
  int64_t sequence_tokens = 1024;       // max_prompt_length + max_response_length
  int64_t response_tokens = 512;        // max_response_length (the positions the update's LM head scores)
  int64_t update_micro_batch = 1;       // ppo_micro_batch_size_per_gpu (rows)
  int64_t update_tokens_per_micro = 0;  // use_dynamic_bsz: ppo_max_token_len_per_gpu (0: rows x sequence)
  int64_t log_prob_chunk_rows = 4;      // rows per LM-head chunk in the update (train::ActorConfig)
  bool update_logits_kept = true;       // the LM head's logits kept for the backward (no use_fused_kernels)
  bool plugin_kernels = true;           // the plugin's kernels run the LM head's softmax math and SwiGLU
  int64_t log_prob_micro_batch = 8;     // rollout.log_prob_micro_batch_size_per_gpu
  int64_t forward_rows = 1;             // rows a rank's log-prob forward takes at once (its share of the batch)
  // Generation: the engine's budget, gpu_memory_utilization of the device (accelerators), or the
  // KV tokens of every row at full length (CPU).
  double gpu_memory_utilization = 0.5;
  bool accelerator = true;
  int64_t kv_tokens_cpu = 0;  // CPU only
  uint64_t device_total_bytes = 0;
};

struct MemoryItem {
  std::string name;  // "actor AdamW moments"
  uint64_t bytes = 0;
  bool resident = true;  // held in every stage (false: this stage only; an estimate unless the stage
                         // brings back exact resident weights from host memory)
  std::string formula;   // how the bytes were counted
};

struct StagePlan {
  std::string stage;  // generation | reference | old_log_probs | update | sync
  std::vector<MemoryItem> items;
  uint64_t total() const;
};

struct MemoryPlan {
  std::vector<StagePlan> stages;
  std::vector<MemoryItem> resident;  // the items every stage holds on the device
  std::vector<MemoryItem> host;      // offloaded state in host memory (pinned where the plugin has it)
  uint64_t device_total_bytes = 0;
  uint64_t resident_bytes() const;
  uint64_t host_bytes() const;
  const StagePlan& peak_stage() const;  // the stage with the largest total
  // The largest single item of the resident state.
  const MemoryItem& largest_resident() const;
};

// The inputs of a run of `world_size` ranks. With resource pools (settings.pools) they are the
// actor's pool's: its ranks, with the reference and the critic only where they share it.
MemoryPlanInputs plan_inputs(const config::RunSettings& settings, const model::ModelConfig& model, int64_t world_size,
                             bool accelerator, uint64_t device_total_bytes);
MemoryPlan plan_memory(const MemoryPlanInputs& inputs);

// The plan as the table `verlpp plan` prints (GiB per stage and item, fits / does not fit).
std::string format_memory_plan(const MemoryPlan& plan, const std::string& device_name);
// Settings that would make the plan's peak stage fit the device, as override text (offload, a
// smaller micro-batch or gpu_memory_utilization on these ranks, else ZeRO-3 on more ranks);
// empty when none does within 4096 ranks.
std::string memory_fix_hint(const MemoryPlanInputs& inputs);
// Throws an Error naming the stage, its largest item and memory_fix_hint when the plan's peak
// stage exceeds the device's memory (nothing when the device's size is unknown).
void check_memory_plan(const MemoryPlanInputs& inputs, const std::string& device_name);

}  // namespace verlpp::controller
