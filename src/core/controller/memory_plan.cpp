// The memory planner (see the header). Resident bytes mirror what the trainer allocates:
// TrainedModel's fp32 masters and 16-bit compute copy, the masters' fp32 gradients (kept until
// the next update's zero_grad at ZeRO-0/1; a flat shard at ZeRO-2), AdamW's two moments
// (whole, by owner at ZeRO-1 as owners_by_size assigns them, a flat shard at ZeRO-2), the
// reference in the compute dtype, the critic alike, and the engine's own cast copy when the
// rollout dtype differs (otherwise it shares the compute copy). Transients are estimates.
#include <verlpp/controller/memory_plan.hpp>

#include <verlpp/controller/rl_trainer.hpp>

#include <verlpp/core/error.hpp>
#include <verlpp/core/strings.hpp>
#include <verlpp/model/decoder.hpp>
#include <verlpp/train/partition.hpp>

#include <fmt/format.h>

#include <algorithm>

namespace verlpp::controller {
namespace {

constexpr double kGiB = double(uint64_t(1) << 30);

uint64_t dtype_bytes(at::ScalarType t) { return t == at::kFloat ? 4 : t == at::kDouble ? 8 : 2; }

std::vector<int64_t> sizes_of(const model::ModelConfig& config) {
  std::vector<int64_t> out;
  for (const model::ParamSpec& s : model::parameter_specs(config)) {
    int64_t n = 1;
    for (int64_t d : s.shape) n *= d;
    out.push_back(n);
  }
  return out;
}

// Elements of one token's keys (= its values) over all KV heads.
uint64_t kv_width(const model::ModelConfig& m) {
  const int64_t head_dim = m.head_dim > 0 ? m.head_dim : m.hidden_size / std::max<int64_t>(m.num_attention_heads, 1);
  return uint64_t(m.num_key_value_heads) * uint64_t(head_dim);
}

// The critic's shape: the actor's decoder with a one-label token-classification head.
model::ModelConfig critic_shape(model::ModelConfig c) {
  c.head = model::ModelHead::kTokenClassification;
  c.num_labels = 1;
  return c;
}

// Bytes of one training role's resident state (masters, compute copy, gradients kept, moments).
void add_trained_model(std::vector<MemoryItem>& items, const std::string& role, const std::vector<int64_t>& sizes,
                       const MemoryPlanInputs& in) {
  int64_t total = 0;
  for (int64_t s : sizes) total += s;
  const uint64_t p = uint64_t(total), compute = dtype_bytes(in.param_dtype);
  const int64_t world = in.world_size, stage = world > 1 ? in.zero_stage : 0;
  items.push_back({role + " fp32 master weights", 4 * p, true, fmt::format("4 B x {} parameters", p)});
  if (in.param_dtype != at::kFloat)
    items.push_back({role + " compute copy (" + model::dtype_name(in.param_dtype) + ")", compute * p, true,
                     fmt::format("{} B x {} parameters", compute, p)});
  const uint64_t shard = uint64_t((total + world - 1) / world);
  if (stage == 2) {
    items.push_back(
        {role + " gradient shard (fp32)", 4 * shard, true, fmt::format("4 B x ceil({} / {} ranks)", p, world)});
    items.push_back(
        {role + " AdamW moments, shard", 8 * shard, true, fmt::format("2 x 4 B x ceil({} / {} ranks)", p, world)});
    return;
  }
  items.push_back({role + " fp32 gradients", 4 * p, true, fmt::format("4 B x {} parameters", p)});
  if (stage == 1) {
    const std::vector<int32_t> owner = train::owners_by_size(sizes, int32_t(world));
    std::vector<uint64_t> load(size_t(world), 0);
    for (size_t i = 0; i < sizes.size(); ++i) load[size_t(owner[i])] += uint64_t(sizes[i]);
    const uint64_t most = *std::max_element(load.begin(), load.end());
    items.push_back({role + " AdamW moments, owned parameters", 8 * most, true,
                     fmt::format("2 x 4 B x {} elements (the most any of {} ranks owns)", most, world)});
  } else {
    items.push_back({role + " AdamW moments", 8 * p, true, fmt::format("2 x 4 B x {} parameters", p)});
  }
}

// Saved activations per layer and token: the 16-bit inputs of the projections, attention and
// MLP, plus the fp32 RMSNorm internals.
uint64_t layer_bytes_per_token(const model::ModelConfig& m, at::ScalarType dtype) {
  const uint64_t b = dtype_bytes(dtype), h = uint64_t(m.hidden_size), f = uint64_t(m.intermediate_size);
  return b * (6 * h + 2 * kv_width(m) + 4 * f) + 4 * 2 * h;
}

// Saved activations of one training micro-batch of `tokens` tokens; with checkpointing only each
// layer's input is kept and one layer is recomputed at a time.
uint64_t activation_bytes(const model::ModelConfig& m, at::ScalarType dtype, int64_t tokens, bool checkpointing) {
  const uint64_t t = uint64_t(tokens), layers = uint64_t(m.num_hidden_layers);
  if (checkpointing)
    return layers * t * uint64_t(m.hidden_size) * dtype_bytes(dtype) + t * layer_bytes_per_token(m, dtype);
  return layers * t * layer_bytes_per_token(m, dtype);
}

// The LM head over `rows` x `seq` tokens in fp32: logits, log-softmax, and (training) its gradient.
uint64_t logits_bytes(const model::ModelConfig& m, int64_t rows, int64_t seq, bool backward) {
  return uint64_t(rows) * uint64_t(seq) * uint64_t(m.vocab_size) * 4 * (backward ? 3 : 2);
}

}  // namespace

uint64_t StagePlan::total() const {
  uint64_t t = 0;
  for (const auto& i : items) t += i.bytes;
  return t;
}

uint64_t MemoryPlan::resident_bytes() const {
  uint64_t t = 0;
  for (const auto& i : resident) t += i.bytes;
  return t;
}

const StagePlan& MemoryPlan::peak_stage() const {
  VERLPP_CHECK(!stages.empty(), "a memory plan without stages");
  return *std::max_element(stages.begin(), stages.end(),
                           [](const StagePlan& a, const StagePlan& b) { return a.total() < b.total(); });
}

const MemoryItem& MemoryPlan::largest_resident() const {
  VERLPP_CHECK(!resident.empty(), "a memory plan without resident items");
  return *std::max_element(resident.begin(), resident.end(),
                           [](const MemoryItem& a, const MemoryItem& b) { return a.bytes < b.bytes; });
}

MemoryPlanInputs plan_inputs(const RunSettings& s, const model::ModelConfig& model, int64_t world_size,
                             bool accelerator, uint64_t device_total_bytes) {
  MemoryPlanInputs in;
  in.model = model;
  in.world_size = std::max<int64_t>(world_size, 1);
  in.zero_stage = s.trainer.zero_stage;
  in.param_dtype = s.actor.precision.resolve(!accelerator);
  in.rollout_dtype = s.rollout.dtype;
  in.reference = s.algorithm.use_kl_in_reward || s.actor.use_kl_loss;
  // As the RL loop decides (rl_setup.cpp): the critic by default where the estimator needs one.
  in.critic = s.critic.enable.value_or(algorithm_family(s.algorithm.adv_estimator) == AlgorithmFamily::kWithCritic);
  in.actor_checkpointing = s.model.enable_gradient_checkpointing;
  in.critic_checkpointing = s.critic.enable_gradient_checkpointing;
  in.sequence_tokens = s.data.max_prompt_length + s.data.max_response_length;
  in.update_micro_batch = s.actor.ppo_micro_batch_size_per_gpu;
  in.update_tokens_per_micro = s.actor.use_dynamic_bsz ? s.actor.ppo_max_token_len_per_gpu : 0;
  in.log_prob_micro_batch = s.rollout.log_prob_micro_batch_size_per_gpu;
  in.gpu_memory_utilization = s.rollout.gpu_memory_utilization;
  in.accelerator = accelerator;
  const int64_t rows = (s.data.train_batch_size + in.world_size - 1) / in.world_size * s.rollout.n;
  in.kv_tokens_cpu = std::min<int64_t>(rows * (in.sequence_tokens + s.rollout.block_size), int64_t(1) << 22);
  in.device_total_bytes = device_total_bytes;
  return in;
}

MemoryPlan plan_memory(const MemoryPlanInputs& in) {
  MemoryPlan plan;
  plan.device_total_bytes = in.device_total_bytes;
  const model::ModelConfig& m = in.model;
  const std::vector<int64_t> sizes = sizes_of(m);
  const uint64_t p = uint64_t(model::parameter_count(m)), compute = dtype_bytes(in.param_dtype);
  add_trained_model(plan.resident, "actor", sizes, in);
  if (in.reference)
    plan.resident.push_back({"reference weights", compute * p, true, fmt::format("{} B x {} parameters", compute, p)});
  const model::ModelConfig critic = critic_shape(m);
  if (in.critic) add_trained_model(plan.resident, "critic", sizes_of(critic), in);
  const bool engine_copy = in.rollout_dtype != in.param_dtype;
  const uint64_t engine_weights = dtype_bytes(in.rollout_dtype) * p;
  if (engine_copy)
    plan.resident.push_back({"rollout engine weights (own " + model::dtype_name(in.rollout_dtype) + " copy)",
                             engine_weights, true,
                             fmt::format("{} B x {} parameters (rollout.dtype differs from param_dtype)",
                                         dtype_bytes(in.rollout_dtype), p)});

  auto stage = [&](const std::string& name, std::vector<MemoryItem> extra) {
    StagePlan st{name, plan.resident};
    for (auto& e : extra) {
      e.resident = false;
      st.items.push_back(std::move(e));
    }
    plan.stages.push_back(std::move(st));
  };
  const int64_t seq = in.sequence_tokens;
  const uint64_t kv_per_token = 2 * uint64_t(m.num_hidden_layers) * kv_width(m) * dtype_bytes(in.rollout_dtype);
  if (in.accelerator) {
    // The engine takes gpu_memory_utilization of the device for its weights and the pool.
    const uint64_t budget = uint64_t(in.gpu_memory_utilization * double(in.device_total_bytes));
    const uint64_t pool = budget > engine_weights ? budget - engine_weights : 0;
    stage("generation",
          {{"KV pool", pool, false,
            fmt::format("rollout.gpu_memory_utilization {} x device - engine weights", in.gpu_memory_utilization)}});
  } else {
    stage("generation", {{"KV pool", uint64_t(in.kv_tokens_cpu) * kv_per_token, false,
                          fmt::format("{} tokens (every row at full length) x {} B", in.kv_tokens_cpu, kv_per_token)}});
  }
  const int64_t lp_rows = std::max<int64_t>(in.log_prob_micro_batch, 1);
  auto forward = [&](const model::ModelConfig& shape) -> std::vector<MemoryItem> {
    // Without autograd a layer's activations are freed as the forward goes on: one layer's.
    const uint64_t layer = uint64_t(lp_rows * seq) * layer_bytes_per_token(shape, in.param_dtype);
    std::vector<MemoryItem> items = {
        {"forward activations (one layer)", layer, false, fmt::format("{} rows x {} tokens", lp_rows, seq)}};
    if (shape.head == model::ModelHead::kCausalLM)
      items.push_back({"logits chunk (fp32)", logits_bytes(shape, lp_rows, seq, false), false,
                       fmt::format("{} rows x {} tokens x {} vocab x 4 B x 2", lp_rows, seq, shape.vocab_size)});
    return items;
  };
  if (in.reference) stage("reference", forward(m));
  stage("old_log_probs", forward(m));
  const int64_t tokens = in.update_tokens_per_micro > 0 ? in.update_tokens_per_micro : in.update_micro_batch * seq;
  const int64_t stage2 = in.world_size > 1 ? in.zero_stage : 0;
  auto update = [&](const model::ModelConfig& shape, bool checkpointing, uint64_t params, bool lm_head) {
    std::vector<MemoryItem> items = {
        {std::string("saved activations") + (checkpointing ? " (gradient checkpointing)" : ""),
         activation_bytes(shape, in.param_dtype, tokens, checkpointing), false,
         fmt::format("{} tokens per micro-batch x {} layers", tokens, shape.num_hidden_layers)}};
    if (in.param_dtype != at::kFloat)
      items.push_back({"16-bit gradients of one backward", compute * params, false,
                       fmt::format("{} B x {} parameters", compute, params)});
    if (stage2 == 2)
      items.push_back(
          {"fp32 gradients until the reduce-scatter", 4 * params, false, fmt::format("4 B x {} parameters", params)});
    if (lm_head) {
      const int64_t rows =
          std::min<int64_t>(in.log_prob_chunk_rows, std::max<int64_t>(tokens / std::max<int64_t>(seq, 1), 1));
      items.push_back({"logits chunk with its gradient (fp32)", logits_bytes(shape, rows, seq, true), false,
                       fmt::format("{} rows x {} tokens x {} vocab x 4 B x 3", rows, seq, shape.vocab_size)});
    }
    return items;
  };
  if (in.critic) {
    stage("values", forward(critic));
    stage("critic_update", update(critic, in.critic_checkpointing, uint64_t(model::parameter_count(critic)), false));
  }
  stage("actor_update", update(m, in.actor_checkpointing, p, true));
  if (engine_copy) {
    uint64_t largest = 0;
    for (int64_t s : sizes) largest = std::max(largest, uint64_t(s));
    stage("sync", {{"cast of one parameter", largest * dtype_bytes(in.rollout_dtype), false,
                    "the largest parameter in the rollout dtype"}});
  }
  return plan;
}

std::string format_memory_plan(const MemoryPlan& plan, const std::string& device_name) {
  std::string out;
  const double device = double(plan.device_total_bytes) / kGiB;
  out += fmt::format("memory plan per rank on {}{}\n", device_name,
                     plan.device_total_bytes ? fmt::format(" ({:.2f} GiB)", device) : std::string(" (size unknown)"));
  out += "\nresident in every stage (exact: the tensors the trainer allocates)\n";
  for (const auto& i : plan.resident)
    out += fmt::format("  {:<52} {:>10.3f} GiB   {}\n", i.name, double(i.bytes) / kGiB, i.formula);
  out += fmt::format("  {:<52} {:>10.3f} GiB\n", "total resident", double(plan.resident_bytes()) / kGiB);
  out += "\nper stage (resident + the stage's own items, estimates)\n";
  for (const auto& st : plan.stages) {
    const double total = double(st.total()) / kGiB;
    std::string verdict;
    if (plan.device_total_bytes)
      verdict = st.total() <= plan.device_total_bytes ? fmt::format("fits ({:.0f}%)", 100.0 * total / device)
                                                      : fmt::format("does NOT fit (+{:.2f} GiB)", total - device);
    out += fmt::format("  {:<16} {:>10.3f} GiB   {}\n", st.stage, total, verdict);
    for (const auto& i : st.items)
      if (!i.resident)
        out += fmt::format("      + {:<44} {:>10.3f} GiB   {}\n", i.name, double(i.bytes) / kGiB, i.formula);
  }
  const StagePlan& peak = plan.peak_stage();
  out += fmt::format("\npeak: {} at {:.3f} GiB", peak.stage, double(peak.total()) / kGiB);
  if (plan.device_total_bytes)
    out += peak.total() <= plan.device_total_bytes ? " - fits\n" : " - does not fit\n";
  else
    out += "\n";
  return out;
}

std::string memory_fix_hint(const MemoryPlanInputs& inputs) {
  std::vector<std::string> hints;
  if (inputs.rollout_dtype != inputs.param_dtype)
    hints.push_back(fmt::format("actor_rollout_ref.rollout.dtype={} (the engine then shares the compute weights)",
                                model::dtype_name(inputs.param_dtype)));
  // ZeRO-2 holds the least of the stages built, so the fewest ranks at ZeRO-2 is the answer.
  for (int64_t world = std::max<int64_t>(inputs.world_size, 2); world <= 4096; world *= 2) {
    MemoryPlanInputs trial = inputs;
    trial.zero_stage = 2;
    trial.world_size = world;
    if (plan_memory(trial).resident_bytes() <= inputs.device_total_bytes) {
      hints.push_back(fmt::format("trainer.zero_stage=2 on {} ranks (--nproc {} or as many devices)", world, world));
      break;
    }
  }
  return join(hints, "; or ");
}

void check_memory_plan(const MemoryPlanInputs& inputs, const std::string& device_name) {
  if (inputs.device_total_bytes == 0) return;
  const MemoryPlan plan = plan_memory(inputs);
  if (plan.resident_bytes() <= inputs.device_total_bytes) return;
  const MemoryItem& largest = plan.largest_resident();
  const std::string hint = memory_fix_hint(inputs);
  throw Error("memory plan",
              fmt::format("the resident training state needs {:.2f} GiB per rank, more than {}'s {:.2f} GiB (largest "
                          "item: {}, {:.2f} GiB = {}); {}. `verlpp plan` with the same arguments prints every item",
                          double(plan.resident_bytes()) / kGiB, device_name, double(inputs.device_total_bytes) / kGiB,
                          largest.name, double(largest.bytes) / kGiB, largest.formula,
                          hint.empty() ? "no ZeRO stage or rank count makes it fit: the parameters themselves are "
                                         "replicated (parameter sharding and CPU offload are not built yet)"
                                       : "it would fit with " + hint));
}

}  // namespace verlpp::controller
