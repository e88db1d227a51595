// The memory planner (see the header). Resident bytes mirror what the trainer allocates:
// TrainedModel's fp32 masters and 16-bit compute copy, the masters' fp32 gradients (kept until
// the next update's zero_grad at ZeRO-0/1), AdamW's two moments (whole, or by owner at ZeRO-1
// as owners_by_size assigns them); with flat units (ZeRO-2 and 3 over several ranks, offload:
// sharded_weights.hpp) the units' weights (whole at ZeRO-2, a shard at 3), a shard of the masters
// and moments on the device or in host memory, and their gradient sums during the update only,
// plus the reduce-scatters in flight during the backward; the reference in the
// compute dtype (a shard at ZeRO-3), the critic alike, and the engine's own copy when it cannot
// share the compute weights (counted in generation and sync: it is released while training).
// Transients are estimates.
#include <verlpp/config/keys.hpp>
#include <verlpp/controller/memory_plan.hpp>

#include <verlpp/controller/rl_trainer.hpp>

#include <verlpp/core/error.hpp>
#include <verlpp/core/strings.hpp>
#include <verlpp/model/decoder.hpp>
#include <verlpp/model/tensor_parallel.hpp>
#include <verlpp/train/partition.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <functional>
#include <map>

namespace verlpp::controller {
namespace {

constexpr double kGiB = double(uint64_t(1) << 30);

uint64_t dtype_bytes(at::ScalarType t) { return t == at::kFloat ? 4 : t == at::kDouble ? 8 : 2; }

std::vector<int64_t> sizes_of(const model::ModelConfig& config) {
  std::vector<int64_t> out;
  for (const model::ParamSpec& s : model::parameter_specs(config)) out.push_back(s.numel());
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

// Elements of the largest decoder layer and of everything outside the layers (the units of
// ShardedWeights).
struct UnitSizes {
  uint64_t layer = 0, outer = 0;
};
UnitSizes unit_sizes(const model::ModelConfig& config) {
  UnitSizes u;
  std::map<std::string, uint64_t> layers;
  for (const model::ParamSpec& s : model::parameter_specs(config)) {
    const uint64_t n = uint64_t(s.numel());
    if (s.name.rfind("model.layers.", 0) == 0) {
      layers[s.name.substr(0, s.name.find('.', 13))] += n;
    } else {
      u.outer += n;
    }
  }
  for (const auto& [name, n] : layers) u.layer = std::max(u.layer, n);
  return u;
}

// Whether a role keeps its state in flat units (ShardedWeights): ZeRO-2 or 3 over several ranks,
// or anything offloaded (TrainedModel::set_data_parallel decides the same way).
bool in_units(const RoleLayout& r, int64_t world) {
  return r.param_offload || r.optimizer_offload || (r.zero_stage >= 2 && world > 1);
}
bool per_use(const RoleLayout& r, int64_t world) { return r.zero_stage == 3 && world > 1; }
// Whether a trained role's layers reduce-scatter their gradients from their backward (units split
// over the ranks: ZeRO-2 and 3).
bool reduces_in_backward(const RoleLayout& r, int64_t world) { return r.zero_stage >= 2 && world > 1; }

// Reduce-scatters in flight at once (kReductionsInFlight in src/core/train/sharded_units.hpp).
constexpr uint64_t kReductionsInFlight = 2;

// One trained role's state, split into what stays on the device, what lives in host memory, and
// what its update adds (the gradients exist from the first backward to the step).
struct RoleItems {
  std::vector<MemoryItem> device, host, weights_when_used, update;
};

RoleItems trained_role(const std::string& role, const std::vector<int64_t>& sizes, const RoleLayout& layout,
                       const MemoryPlanInputs& in) {
  RoleItems out;
  int64_t total = 0;
  for (int64_t s : sizes) total += s;
  const uint64_t p = uint64_t(total), compute = dtype_bytes(in.param_dtype);
  const int64_t world = in.world_size, stage = world > 1 ? layout.zero_stage : 0;
  const std::string cd = model::dtype_name(in.param_dtype);
  if (in_units(layout, world)) {
    // ShardedWeights + ShardedOptimizer: per rank a shard of each unit (whole units below ZeRO-2).
    const int64_t ranks = stage >= 2 ? world : 1;
    const uint64_t shard = uint64_t((total + ranks - 1) / ranks);
    const std::string of = ranks > 1 ? fmt::format("ceil({} / {} ranks)", p, ranks) : fmt::format("{}", p);
    const bool sharded_weights = per_use(layout, world);
    const uint64_t weights = compute * (sharded_weights ? shard : p);
    MemoryItem w{role + (sharded_weights ? " weight shard (" : " weights (") + cd + ")", weights, true,
                 fmt::format("{} B x {}", compute, sharded_weights ? of : std::to_string(p))};
    if (layout.param_offload) {
      out.host.push_back(w);
      w.resident = false;
      out.weights_when_used.push_back(w);
    } else {
      out.device.push_back(w);
    }
    std::vector<MemoryItem> state;
    if (!(in.param_dtype == at::kFloat && !layout.optimizer_offload))
      state.push_back({role + " fp32 masters" + (ranks > 1 ? ", shard" : ""), 4 * shard, true, "4 B x " + of});
    state.push_back({role + " AdamW moments" + (ranks > 1 ? ", shard" : ""), 8 * shard, true, "2 x 4 B x " + of});
    for (auto& item : state) (layout.optimizer_offload ? out.host : out.device).push_back(item);
    out.update.push_back(
        {role + " fp32 gradient sums" + (ranks > 1 ? ", shard" : ""), 4 * shard, false, "4 B x " + of});
    return out;
  }
  out.device.push_back({role + " fp32 master weights", 4 * p, true, fmt::format("4 B x {} parameters", p)});
  if (in.param_dtype != at::kFloat)
    out.device.push_back(
        {role + " compute copy (" + cd + ")", compute * p, true, fmt::format("{} B x {} parameters", compute, p)});
  out.device.push_back({role + " fp32 gradients", 4 * p, true, fmt::format("4 B x {} parameters", p)});
  if (stage == 1) {
    const std::vector<int32_t> owner = train::owners_by_size(sizes, int32_t(world));
    std::vector<uint64_t> load(size_t(world), 0);
    for (size_t i = 0; i < sizes.size(); ++i) load[size_t(owner[i])] += uint64_t(sizes[i]);
    const uint64_t most = *std::max_element(load.begin(), load.end());
    out.device.push_back({role + " AdamW moments, owned parameters", 8 * most, true,
                          fmt::format("2 x 4 B x {} elements (the most any of {} ranks owns)", most, world)});
  } else {
    out.device.push_back({role + " AdamW moments", 8 * p, true, fmt::format("2 x 4 B x {} parameters", p)});
  }
  return out;
}

// With per-use gathering: the units a forward or backward holds whole at once (the outer unit,
// kept from the first forward, and one layer; two while the next one is prefetched).
std::vector<MemoryItem> gathered_units(const model::ModelConfig& shape, at::ScalarType dtype, bool prefetch) {
  const UnitSizes u = unit_sizes(shape);
  const uint64_t layers = prefetch ? 2 : 1;
  return {
      {fmt::format("gathered units (outside the layers + {})", prefetch ? "two layers: one prefetched" : "one layer"),
       dtype_bytes(dtype) * (u.outer + layers * u.layer), false,
       fmt::format("{} B x ({} + {} x {}) elements", dtype_bytes(dtype), u.outer, layers, u.layer)}};
}

// A forward without autograd, per token at its widest point (the MLP): the residual stream, the
// normed input and the down projection's output (hidden wide), [gate | up] and two
// intermediate-wide temporaries (the SiLU and the product). The attention's q/k/v, rotated copies
// and output are narrower whenever the intermediate size is at least the hidden size.
uint64_t forward_bytes_per_token(const model::ModelConfig& m, at::ScalarType dtype) {
  const uint64_t h = uint64_t(m.hidden_size), f = uint64_t(m.intermediate_size);
  return dtype_bytes(dtype) * std::max(3 * h + 4 * f, 5 * h + 3 * kv_width(m));
}

// The shape of one rank's part of the rollout engine: the whole model, or one tensor-parallel
// rank's share of its heads, MLP width and vocabulary.
model::ModelConfig engine_part(const MemoryPlanInputs& in) {
  return in.rollout_tp > 1 ? model::rank_config(in.model, model::tensor_parallel_layout(in.model, in.rollout_tp))
                           : in.model;
}

// The rollout engine's fused projections (EngineOptions::fuse_projections): each layer's q/k/v
// and gate/up parameters (weights and biases) in buffers of its own, even when it shares the
// trainer's other weights.
uint64_t fused_projection_bytes(const model::ModelConfig& m, at::ScalarType dtype) {
  static const char* const kFused[] = {".self_attn.q_proj.", ".self_attn.k_proj.", ".self_attn.v_proj.",
                                       ".mlp.gate_proj.", ".mlp.up_proj."};
  uint64_t elements = 0;
  for (const model::ParamSpec& spec : model::parameter_specs(m))
    for (const char* part : kFused)
      if (spec.name.find(part) != std::string::npos) elements += uint64_t(spec.numel());
  return elements * dtype_bytes(dtype);
}

// Saved activations per layer and token: the 16-bit inputs of the projections, attention and
// MLP, plus the fp32 RMSNorm internals. The MLP keeps [gate | up] and the down projection's
// input, and LibTorch's SwiGLU also its SiLU; the plugin's fused SwiGLU recomputes that.
uint64_t layer_bytes_per_token(const model::ModelConfig& m, at::ScalarType dtype, bool fused_swiglu) {
  const uint64_t b = dtype_bytes(dtype), h = uint64_t(m.hidden_size), f = uint64_t(m.intermediate_size);
  return b * (6 * h + 2 * kv_width(m) + (fused_swiglu ? 3 : 4) * f) + 4 * 2 * h;
}

// Saved activations of one training micro-batch of `tokens` tokens; with checkpointing only each
// layer's input is kept and one layer is recomputed at a time.
uint64_t activation_bytes(const model::ModelConfig& m, at::ScalarType dtype, int64_t tokens, bool checkpointing,
                          bool fused_swiglu) {
  const uint64_t t = uint64_t(tokens), layers = uint64_t(m.num_hidden_layers);
  if (checkpointing)
    return layers * t * uint64_t(m.hidden_size) * dtype_bytes(dtype) +
           t * layer_bytes_per_token(m, dtype, fused_swiglu);
  return layers * t * layer_bytes_per_token(m, dtype, fused_swiglu);
}

uint64_t bytes_of(const std::vector<MemoryItem>& items) {
  uint64_t t = 0;
  for (const MemoryItem& i : items) t += i.bytes;
  return t;
}

// A log-prob forward's LM head over `rows` x `seq` tokens in fp32: logits and log-softmax.
uint64_t logits_bytes(const model::ModelConfig& m, int64_t rows, int64_t seq) {
  return uint64_t(rows) * uint64_t(seq) * uint64_t(m.vocab_size) * 4 * 2;
}

}  // namespace

uint64_t StagePlan::total() const { return bytes_of(items); }

uint64_t MemoryPlan::resident_bytes() const { return bytes_of(resident); }

uint64_t MemoryPlan::host_bytes() const { return bytes_of(host); }

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

MemoryPlanInputs plan_inputs(const config::RunSettings& s, const model::ModelConfig& model, int64_t world_size,
                             bool accelerator, uint64_t device_total_bytes) {
  MemoryPlanInputs in;
  in.model = model;
  in.world_size = std::max<int64_t>(world_size, 1);
  // With resource pools the plan is the actor's pool's: its ranks, and the roles it holds besides
  // the actor (a role on a pool of its own holds less than the actor's ranks do with it).
  if (!s.pools.colocated()) in.world_size = s.pools.pool_of(config::RlRole::kActorRollout).size();
  const auto with_actor = [&](config::RlRole role) {
    return s.pools.colocated() || s.pools.role_pool.at(role) == s.pools.role_pool.at(config::RlRole::kActorRollout);
  };
  auto layout = [](const config::ShardingSettings& sh) {
    return RoleLayout{sh.zero_stage, sh.param_offload, sh.optimizer_offload, sh.forward_prefetch};
  };
  in.actor_layout = layout(s.actor.sharding);
  in.critic_layout = layout(s.critic.sharding);
  in.ref_layout = layout(s.ref.sharding);
  in.param_dtype = s.actor.precision.resolve(!accelerator);
  in.rollout_dtype = s.rollout.dtype;
  in.reference = (s.algorithm.use_kl_in_reward || s.actor.use_kl_loss) && with_actor(config::RlRole::kReference);
  // As the RL loop decides (rl_setup.cpp): the critic by default where the estimator needs one.
  in.critic = s.critic.enable.value_or(algorithm_family(s.algorithm.adv_estimator) == AlgorithmFamily::kWithCritic) &&
              with_actor(config::RlRole::kCritic);
  in.actor_checkpointing = s.model.enable_gradient_checkpointing;
  in.critic_checkpointing = s.critic.enable_gradient_checkpointing;
  in.sequence_tokens = s.data.max_prompt_length + s.data.max_response_length;
  in.update_micro_batch = s.actor.ppo_micro_batch_size_per_gpu;
  in.update_tokens_per_micro = s.actor.use_dynamic_bsz ? s.actor.ppo_max_token_len_per_gpu : 0;
  in.log_prob_micro_batch = s.rollout.log_prob_micro_batch_size_per_gpu;
  in.log_prob_chunk_rows = s.rollout.log_prob_micro_batch_size_per_gpu;  // as rl_setup.cpp sets the actor's
  in.response_tokens = s.data.max_response_length;
  in.update_logits_kept = !s.model.use_fused_kernels;
  // The plugin's kernels run where the run loads them (load_kernels): an accelerator's plugin;
  // cpu_ref marks its own a reference and LibTorch runs them.
  in.plugin_kernels = accelerator;
  in.gpu_memory_utilization = s.rollout.gpu_memory_utilization;
  in.accelerator = accelerator;
  in.rollout_tp = std::max<int64_t>(s.rollout.tensor_model_parallel_size, 1);
  const int64_t rows = (s.data.train_batch_size + in.world_size - 1) / in.world_size * s.rollout.n;
  in.forward_rows = rows;
  // An engine generates for world / t ranks' share of the prompts (as rl_setup.cpp sizes its pool).
  const int64_t engines = std::max<int64_t>(in.world_size / in.rollout_tp, 1);
  const int64_t engine_rows = (s.data.train_batch_size + engines - 1) / engines * s.rollout.n;
  in.kv_tokens_cpu = std::min<int64_t>(engine_rows * (in.sequence_tokens + s.rollout.block_size), int64_t(1) << 22);
  in.device_total_bytes = device_total_bytes;
  return in;
}

MemoryPlan plan_memory(const MemoryPlanInputs& in) {
  MemoryPlan plan;
  plan.device_total_bytes = in.device_total_bytes;
  const model::ModelConfig& m = in.model;
  const std::vector<int64_t> sizes = sizes_of(m);
  const uint64_t p = uint64_t(model::parameter_count(m)), compute = dtype_bytes(in.param_dtype);
  const int64_t world = in.world_size;
  const model::ModelConfig critic = critic_shape(m);
  const RoleItems actor = trained_role("actor", sizes, in.actor_layout, in);
  RoleItems critic_items;
  if (in.critic) critic_items = trained_role("critic", sizes_of(critic), in.critic_layout, in);
  auto take = [&](const RoleItems& r) {
    plan.resident.insert(plan.resident.end(), r.device.begin(), r.device.end());
    plan.host.insert(plan.host.end(), r.host.begin(), r.host.end());
  };
  take(actor);
  take(critic_items);
  // The reference: whole, or a shard per rank at ZeRO-3; on the host between its forwards with param_offload.
  std::vector<MemoryItem> ref_when_used;
  const bool ref_sharded = in.ref_layout.zero_stage == 3 && world > 1;
  if (in.reference) {
    const uint64_t shard = (p + uint64_t(world) - 1) / uint64_t(world);
    MemoryItem ref{ref_sharded ? "reference weight shard" : "reference weights", compute * (ref_sharded ? shard : p),
                   true,
                   ref_sharded ? fmt::format("{} B x ceil({} / {} ranks)", compute, p, world)
                               : fmt::format("{} B x {} parameters", compute, p)};
    if (in.ref_layout.param_offload) {
      plan.host.push_back(ref);
      ref.resident = false;
      ref_when_used.push_back(ref);
    } else {
      plan.resident.push_back(ref);
    }
  }
  // The engine owns its weights when it cannot share the actor's compute weights; those are
  // released after each generation, so they count in generation and sync only.
  // A split engine (rollout_tp > 1) always owns its slices: the shape of one rank's part.
  const bool split = in.rollout_tp > 1;
  const model::ModelConfig engine_shape = engine_part(in);
  const bool engine_owns =
      split || in.rollout_dtype != in.param_dtype || per_use(in.actor_layout, world) || in.actor_layout.param_offload;
  const uint64_t engine_params = uint64_t(model::parameter_count(engine_shape));
  const uint64_t engine_weights = dtype_bytes(in.rollout_dtype) * engine_params;
  std::vector<MemoryItem> engine_items;
  if (split) {
    engine_items.push_back(
        {fmt::format("rollout engine weights (1/{} slice, {})", in.rollout_tp, model::dtype_name(in.rollout_dtype)),
         engine_weights, false,
         fmt::format("{} B x {} parameters of one rank's part (tensor_model_parallel_size {}); "
                     "released while training",
                     dtype_bytes(in.rollout_dtype), engine_params, in.rollout_tp)});
  } else if (engine_owns) {
    engine_items.push_back({"rollout engine weights (own " + model::dtype_name(in.rollout_dtype) + " copy)",
                            engine_weights, false,
                            fmt::format("{} B x {} parameters ({})", dtype_bytes(in.rollout_dtype), p,
                                        in.rollout_dtype != in.param_dtype ? "rollout.dtype differs from param_dtype"
                                                                           : "the actor's weights are sharded or "
                                                                             "offloaded; released while training")});
  } else {
    // The engine shares the actor's weights but fuses q/k/v and gate/up into buffers of its own
    // (released while training, written again by the sync).
    engine_items.push_back({"rollout engine's fused q/k/v and gate/up", fused_projection_bytes(m, in.rollout_dtype),
                            false,
                            fmt::format("{} layers x ([q | k | v] + [gate | up]) x {} B; the rest is shared",
                                        m.num_hidden_layers, dtype_bytes(in.rollout_dtype))});
  }

  auto stage = [&](const std::string& name, std::vector<MemoryItem> extra) {
    StagePlan st{name, plan.resident};
    for (auto& e : extra) {
      e.resident = false;
      st.items.push_back(std::move(e));
    }
    plan.stages.push_back(std::move(st));
  };
  auto join_items = [](std::vector<MemoryItem> a, const std::vector<MemoryItem>& b) {
    a.insert(a.end(), b.begin(), b.end());
    return a;
  };
  const int64_t seq = in.sequence_tokens;
  const uint64_t kv_per_token =
      2 * uint64_t(m.num_hidden_layers) * kv_width(engine_shape) * dtype_bytes(in.rollout_dtype);
  if (in.accelerator) {
    // The engine takes gpu_memory_utilization of the device for its weights and the pool.
    const uint64_t budget = uint64_t(in.gpu_memory_utilization * double(in.device_total_bytes));
    const uint64_t pool = budget > engine_weights ? budget - engine_weights : 0;
    stage("generation",
          join_items(engine_items, {{"KV pool", pool, false,
                                     fmt::format("rollout.gpu_memory_utilization {} x device - engine weights",
                                                 in.gpu_memory_utilization)}}));
  } else {
    stage("generation",
          join_items(engine_items,
                     {{"KV pool", uint64_t(in.kv_tokens_cpu) * kv_per_token, false,
                       fmt::format("{} tokens (every row at full length) x {} B", in.kv_tokens_cpu, kv_per_token)}}));
  }
  const int64_t lp_rows = std::max<int64_t>(in.log_prob_micro_batch, 1);
  const int64_t forward_rows = std::max<int64_t>(in.forward_rows, 1);
  auto forward = [&](const model::ModelConfig& shape, const RoleLayout& layout) -> std::vector<MemoryItem> {
    const bool gathered = per_use(layout, world);
    // The log-prob forward takes the rank's whole share of the batch through the layers (one
    // layer's activations alive at a time, without autograd), then the LM head in chunks of
    // log_prob_micro_batch_size_per_gpu rows beside the final hidden states: the larger of the
    // two phases is the stage's peak.
    const uint64_t tokens = uint64_t(forward_rows * seq), per_token = forward_bytes_per_token(shape, in.param_dtype);
    const uint64_t layers_phase = tokens * per_token;
    std::vector<MemoryItem> items;
    uint64_t head_phase = 0;
    if (shape.head == model::ModelHead::kCausalLM)
      head_phase = 2 * tokens * uint64_t(shape.hidden_size) * dtype_bytes(in.param_dtype) +
                   logits_bytes(shape, std::min(lp_rows, forward_rows), seq);
    if (layers_phase >= head_phase)
      items.push_back({"forward activations (one layer at a time)", layers_phase, false,
                       fmt::format("{} rows x {} tokens x {} B", forward_rows, seq, per_token)});
    else
      items.push_back({"LM head: logits chunk (fp32) beside the hidden states", head_phase, false,
                       fmt::format("{} rows x {} tokens x {} vocab x 4 B x 2 + 2 x {} tokens x {} hidden",
                                   std::min(lp_rows, forward_rows), seq, shape.vocab_size, tokens, shape.hidden_size)});
    if (gathered) items = join_items(items, gathered_units(shape, in.param_dtype, layout.forward_prefetch));
    return items;
  };
  if (in.reference) stage("reference", join_items(ref_when_used, forward(m, in.ref_layout)));
  stage("old_log_probs", join_items(actor.weights_when_used, forward(m, in.actor_layout)));
  const int64_t tokens = in.update_tokens_per_micro > 0 ? in.update_tokens_per_micro : in.update_micro_batch * seq;
  // The update's log-probs cover the response positions: a micro-batch's rows at full response
  // length (dynamic batch size: its token budget).
  const int64_t tokens_responses =
      in.update_tokens_per_micro > 0 ? in.update_tokens_per_micro : in.update_micro_batch * in.response_tokens;
  // The update's LM head (linear_log_probs.cpp) in chunks of log_prob_chunk_rows rows: kept logits
  // (LogitsInBackward::kKeep) stay from the forward to the backward for the whole micro-batch;
  // recomputed ones (use_fused_kernels) one chunk at a time. The plugin's kernels write a chunk's
  // gradient over its logits in place; LibTorch's path adds fp32 softmax temporaries per chunk.
  auto lm_head_backward = [&](const model::ModelConfig& shape, int64_t head_tokens) {
    std::vector<MemoryItem> items;
    const uint64_t v = uint64_t(shape.vocab_size);
    const int64_t chunk =
        std::min<int64_t>(std::max<int64_t>(in.log_prob_chunk_rows, 1) * in.response_tokens, head_tokens);
    if (in.update_logits_kept)
      items.push_back({"LM head logits kept for the backward", compute * v * uint64_t(head_tokens), false,
                       fmt::format("{} tokens x {} vocab x {} B", head_tokens, v, compute)});
    else
      items.push_back({"LM head logits of one chunk (recomputed)", compute * v * uint64_t(chunk), false,
                       fmt::format("{} tokens x {} vocab x {} B", chunk, v, compute)});
    if (!in.plugin_kernels)
      items.push_back({"LM head fp32 softmax of one chunk", (8 + compute) * v * uint64_t(chunk), false,
                       fmt::format("{} tokens x {} vocab x (2 x 4 + {}) B", chunk, v, compute)});
    return items;
  };
  auto update = [&](const RoleItems& role, const RoleLayout& layout, const model::ModelConfig& shape,
                    bool checkpointing, uint64_t params, bool lm_head) {
    std::vector<MemoryItem> items = role.weights_when_used;
    items.push_back({std::string("saved activations") + (checkpointing ? " (gradient checkpointing)" : ""),
                     activation_bytes(shape, in.param_dtype, tokens, checkpointing, in.plugin_kernels), false,
                     fmt::format("{} tokens per micro-batch x {} layers", tokens, shape.num_hidden_layers)});
    items = join_items(items, role.update);
    const UnitSizes u = unit_sizes(shape);
    const bool gathered = per_use(layout, world), reducing = reduces_in_backward(layout, world);
    // The backward prefetches the layer below the one it differentiates.
    if (gathered) items = join_items(items, gathered_units(shape, in.param_dtype, true));
    if (reducing) {
      // Each running reduce-scatter holds its unit's fp32 gradient: two layers', or the last
      // layer's and the outer unit's at the end of the backward.
      const uint64_t staged = std::max(kReductionsInFlight * u.layer, u.outer + u.layer);
      items.push_back({"fp32 gradients of the reduce-scatters in flight", 4 * staged, false,
                       fmt::format("4 B x {} elements ({} units at once)", staged, kReductionsInFlight)});
    }
    // The backward has two phases and the stage's peak is the larger: the LM head's (its logits
    // and their gradient) comes first, then the layers', which leave their 16-bit gradients
    // (whole at ZeRO-0..2; at ZeRO-3 the layers' live inside their backward only, the outer
    // unit's until the backward ends).
    MemoryItem layers_phase;
    if (reducing)
      layers_phase = {"16-bit gradients outside the layers + one layer", compute * (u.outer + u.layer), false,
                      fmt::format("{} B x ({} + {}) elements", compute, u.outer, u.layer)};
    else if (in.param_dtype != at::kFloat)
      layers_phase = {"16-bit gradients of one backward", compute * params, false,
                      fmt::format("{} B x {} parameters", compute, params)};
    if (!lm_head) {
      if (layers_phase.bytes > 0) items.push_back(layers_phase);
      return items;
    }
    std::vector<MemoryItem> head_phase = lm_head_backward(shape, tokens_responses);
    // The head's weight gradient exists from its backward on: the outer unit's at ZeRO-3 (in
    // both phases), the head's own otherwise (tied or not, it is one [V, C] tensor then).
    const uint64_t head_grad =
        compute * (reducing ? u.outer : uint64_t(shape.vocab_size) * uint64_t(shape.hidden_size));
    head_phase.push_back({reducing ? "16-bit gradients outside the layers" : "LM head weight gradient", head_grad,
                          false, fmt::format("{} B x {} elements", compute, head_grad / compute)});
    if (bytes_of(head_phase) > layers_phase.bytes)
      items = join_items(items, head_phase);
    else if (layers_phase.bytes > 0)
      items.push_back(layers_phase);
    return items;
  };
  if (in.critic) {
    stage("values", join_items(critic_items.weights_when_used, forward(critic, in.critic_layout)));
    stage("critic_update", update(critic_items, in.critic_layout, critic, in.critic_checkpointing,
                                  uint64_t(model::parameter_count(critic)), false));
  }
  stage("actor_update", update(actor, in.actor_layout, m, in.actor_checkpointing, p, true));
  if (engine_owns) {
    std::vector<MemoryItem> sync = join_items(engine_items, actor.weights_when_used);
    if (per_use(in.actor_layout, world)) sync = join_items(sync, gathered_units(m, in.param_dtype, false));
    stage("sync", sync);
  }
  return plan;
}

std::string format_memory_plan(const MemoryPlan& plan, const std::string& device_name) {
  std::string out;
  const double device = double(plan.device_total_bytes) / kGiB;
  out += fmt::format("memory plan per rank on {}{}\n", device_name,
                     plan.device_total_bytes ? fmt::format(" ({:.2f} GiB)", device) : std::string(" (size unknown)"));
  out += "\nresident on the device in every stage (exact: the tensors the trainer allocates)\n";
  for (const auto& i : plan.resident)
    out += fmt::format("  {:<52} {:>10.3f} GiB   {}\n", i.name, double(i.bytes) / kGiB, i.formula);
  out += fmt::format("  {:<52} {:>10.3f} GiB\n", "total resident", double(plan.resident_bytes()) / kGiB);
  if (!plan.host.empty()) {
    out += "\nin host memory (offloaded; exact)\n";
    for (const auto& i : plan.host)
      out += fmt::format("  {:<52} {:>10.3f} GiB   {}\n", i.name, double(i.bytes) / kGiB, i.formula);
    out += fmt::format("  {:<52} {:>10.3f} GiB\n", "total in host memory", double(plan.host_bytes()) / kGiB);
  }
  out += "\nper stage on the device (resident + the stage's own items, estimates)\n";
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

namespace {

bool fits(const MemoryPlanInputs& in) { return plan_memory(in).peak_stage().total() <= in.device_total_bytes; }

// The most ranks (a divisor of `world`) a rollout engine of `m` splits over.
int64_t largest_rollout_split(const model::ModelConfig& m, int64_t world) {
  for (int64_t t = world; t > 1; --t) {
    if (world % t != 0) continue;
    try {
      model::tensor_parallel_layout(m, t);
      return t;
    } catch (const Error&) {
    }
  }
  return 1;
}

}  // namespace

std::string memory_fix_hint(const MemoryPlanInputs& inputs) {
  // Changes a run can make on the ranks it has, in the order they cost least; each as override
  // text and what it does to the plan's inputs.
  struct Move {
    std::string text;
    std::function<void(MemoryPlanInputs&)> apply;
  };
  std::vector<Move> moves;
  if (inputs.rollout_dtype != inputs.param_dtype)
    moves.push_back({fmt::format("{}={} (the engine then shares the compute weights)", config::keys::kRolloutDtype,
                                 model::dtype_name(inputs.param_dtype)),
                     [](MemoryPlanInputs& in) { in.rollout_dtype = in.param_dtype; }});
  if (!inputs.actor_layout.optimizer_offload)
    moves.push_back(
        {(std::string(config::keys::kActorFsdpConfigOptimizerOffload) + "=true") +
             (inputs.critic ? " critic.model.fsdp_config.optimizer_offload=true" : ""),
         [](MemoryPlanInputs& in) { in.actor_layout.optimizer_offload = in.critic_layout.optimizer_offload = true; }});
  if (!inputs.actor_layout.param_offload)
    moves.push_back({(std::string(config::keys::kActorFsdpConfigParamOffload) + "=true") +
                         (inputs.reference ? " actor_rollout_ref.ref.fsdp_config.param_offload=true" : "") +
                         (inputs.critic ? " critic.model.fsdp_config.param_offload=true" : ""),
                     [](MemoryPlanInputs& in) {
                       in.actor_layout.param_offload = in.ref_layout.param_offload = in.critic_layout.param_offload =
                           true;
                     }});
  if (!inputs.actor_checkpointing)
    moves.push_back({std::string(config::keys::kModelEnableGradientCheckpointing) + "=true",
                     [](MemoryPlanInputs& in) { in.actor_checkpointing = in.critic_checkpointing = true; }});
  if (inputs.update_micro_batch > 1)
    moves.push_back({std::string(config::keys::kActorPpoMicroBatchSizePerGpu) + "=1",
                     [](MemoryPlanInputs& in) { in.update_micro_batch = 1; }});
  if (inputs.accelerator && inputs.gpu_memory_utilization > 0.2)
    moves.push_back({std::string(config::keys::kRolloutGpuMemoryUtilization) + "=0.2",
                     [](MemoryPlanInputs& in) { in.gpu_memory_utilization = 0.2; }});
  std::vector<std::string> hints;
  // One change alone, where one suffices.
  for (const Move& m : moves) {
    MemoryPlanInputs trial = inputs;
    m.apply(trial);
    if (fits(trial)) hints.push_back(m.text);
  }
  // Otherwise the fewest of them, taken in order.
  MemoryPlanInputs all = inputs;
  std::vector<std::string> taken;
  bool found = false;
  for (size_t k = 0; k < moves.size() && hints.empty() && !found; ++k) {
    moves[k].apply(all);
    taken.push_back(moves[k].text);
    if (fits(all)) {
      hints.push_back(join(taken, " "));
      found = true;
    }
  }
  // ZeRO-3 on the fewest ranks that fit, alone or with every change above.
  for (const bool with_moves : {false, true}) {
    bool placed = false;
    for (int64_t world = std::max<int64_t>(inputs.world_size * 2, 2); world <= 4096 && !placed; world *= 2) {
      MemoryPlanInputs trial = with_moves ? all : inputs;
      trial.actor_layout.zero_stage = trial.critic_layout.zero_stage = trial.ref_layout.zero_stage = 3;
      trial.world_size = world;
      // The engine whole on each rank, else split over as many of the ranks as the model allows.
      std::string split;
      if (!fits(trial)) {
        trial.rollout_tp = largest_rollout_split(trial.model, world);
        split = fmt::format(" actor_rollout_ref.rollout.tensor_model_parallel_size={}", trial.rollout_tp);
      }
      if (fits(trial)) {
        hints.push_back(fmt::format("{}=3{} on {} ranks (--nproc {} or as many devices){}",
                                    config::keys::kTrainerZeroStage, split, world, world,
                                    with_moves && !taken.empty() ? " with " + join(taken, " ") : ""));
        placed = true;
      }
    }
    if (placed) break;
  }
  return join(hints, "; or ");
}

namespace {

// Why no setting fits: the generating engine's part of the model (whole, or 1 / t of it) may
// alone exceed the device.
std::string no_fit_reason(const MemoryPlanInputs& in) {
  const uint64_t engine = dtype_bytes(in.rollout_dtype) * uint64_t(model::parameter_count(engine_part(in)));
  std::string reason = "no offload, micro-batch, KV budget, ZeRO-3 rank count or engine split makes it fit";
  if (2 * engine >= in.device_total_bytes)
    reason += fmt::format(
        ": the rollout engine holds {} on every rank ({:.2f} GiB in {} of the device's {:.2f} GiB)",
        in.rollout_tp > 1 ? fmt::format("1/{} of the model", in.rollout_tp) : std::string("the whole model"),
        double(engine) / kGiB, model::dtype_name(in.rollout_dtype), double(in.device_total_bytes) / kGiB);
  return reason;
}

}  // namespace

void check_memory_plan(const MemoryPlanInputs& inputs, const std::string& device_name) {
  if (inputs.device_total_bytes == 0) return;
  const MemoryPlan plan = plan_memory(inputs);
  const StagePlan& peak = plan.peak_stage();
  if (peak.total() <= inputs.device_total_bytes) return;
  const MemoryItem& largest = *std::max_element(
      peak.items.begin(), peak.items.end(), [](const MemoryItem& a, const MemoryItem& b) { return a.bytes < b.bytes; });
  const std::string hint = memory_fix_hint(inputs);
  throw Error("memory plan",
              fmt::format("the {} stage needs {:.2f} GiB per rank ({:.2f} GiB of it resident training state), more "
                          "than {}'s {:.2f} GiB (largest item: {}, {:.2f} GiB = {}); {}. `verlpp plan` with the same "
                          "arguments prints every item",
                          peak.stage, double(peak.total()) / kGiB, double(plan.resident_bytes()) / kGiB, device_name,
                          double(inputs.device_total_bytes) / kGiB, largest.name, double(largest.bytes) / kGiB,
                          largest.formula, hint.empty() ? no_fit_reason(inputs) : "it would fit with " + hint));
}

}  // namespace verlpp::controller
