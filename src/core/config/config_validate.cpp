// Config::validate: the keys verlpp refuses when changed (config_key_states.hpp), then the
// cross-field checks verl makes before a run (batch sizes that must divide, micro-batch
// settings, names that must exist in the algorithm registries), done
// before any work so a bad run fails in a second, not after an hour. Every problem is listed.
#include <verlpp/algo/advantages.hpp>
#include <verlpp/algo/agg_loss.hpp>
#include <verlpp/algo/kl.hpp>
#include <verlpp/algo/policy_loss.hpp>
#include <verlpp/config/config.hpp>
#include <verlpp/config/config_key_states.hpp>
#include <verlpp/config/resource_pools.hpp>
#include <verlpp/core/error.hpp>
#include <verlpp/core/strings.hpp>

#include <unistd.h>

#include <algorithm>
#include <tuple>

namespace verlpp::config {
namespace {

// Physical memory of this machine (0 if unknown).
double physical_memory_bytes() {
  const long pages = ::sysconf(_SC_PHYS_PAGES), page = ::sysconf(_SC_PAGESIZE);
  return pages > 0 && page > 0 ? double(pages) * double(page) : 0.0;
}

bool contains(const std::vector<std::string>& names, const std::string& name) {
  return std::find(names.begin(), names.end(), name) != names.end();
}

// Problems found so far; each names the key(s) and the values.
class Problems {
 public:
  template <class... Args>
  void add(fmt::format_string<Args...> format, Args&&... args) {
    list_.push_back(fmt::format(format, std::forward<Args>(args)...));
  }
  void one_of(const Config& c, const std::string& key, const std::vector<std::string>& valid) {
    std::string v = c.get<std::string>(key);
    if (!contains(valid, v)) add("{} = '{}' is not one of: {}", key, v, join(valid, ", "));
  }
  // An optimizer section's schedule: lr_scheduler_type, or the deprecated warmup_style when set.
  void scheduler(const Config& c, const std::string& optim) {
    const std::vector<std::string> valid = {"constant", "cosine"};
    one_of(c, optim + ".lr_scheduler_type", valid);
    if (!c.is_null(optim + ".warmup_style")) one_of(c, optim + ".warmup_style", valid);
  }
  const std::vector<std::string>& list() const { return list_; }

 private:
  std::vector<std::string> list_;
};

// The batch sizes against the ranks each role splits its rows over (its pool's; every rank when
// colocated).
void check_batches(const Config& c, const PoolLayout& pools, Problems& p) {
  const int64_t world_size = pools.pool_of(RlRole::kActorRollout).size();
  const int64_t batch = c.get<int64_t>("data.train_batch_size");
  const int64_t n = c.get<int64_t>("actor_rollout_ref.rollout.n");
  const int64_t mini = c.get<int64_t>("actor_rollout_ref.actor.ppo_mini_batch_size");
  if (batch < 1) p.add("data.train_batch_size = {} must be >= 1", batch);
  if (n < 1) p.add("actor_rollout_ref.rollout.n = {} must be >= 1", n);
  if (mini < 1) p.add("actor_rollout_ref.actor.ppo_mini_batch_size = {} must be >= 1", mini);
  if (batch < 1 || n < 1 || mini < 1) return;
  if (batch % mini != 0)
    p.add("data.train_batch_size = {} is not a multiple of actor_rollout_ref.actor.ppo_mini_batch_size = {}", batch,
          mini);
  if ((batch * n) % world_size != 0)
    p.add("data.train_batch_size x rollout.n = {} x {} is not divisible by the {} rank(s)", batch, n, world_size);
  // As verl: the mini-batch counts prompts; per rank it holds mini * n / world_size sequences.
  const int64_t mini_per_rank = mini * n / world_size;
  if (mini * n % world_size != 0 || mini_per_rank < 1)
    p.add("ppo_mini_batch_size x rollout.n = {} x {} does not split over {} rank(s)", mini, n, world_size);
  // The forward-only roles on pools of their own split every row of the step over their ranks.
  for (const RlRole role : active_roles(c)) {
    const int64_t ranks = pools.pool_of(role).size();
    if (role != RlRole::kActorRollout && ranks != world_size && (batch * n) % ranks != 0)
      p.add("data.train_batch_size x rollout.n = {} x {} is not divisible by the {} rank(s) of pool '{}' ({})", batch,
            n, ranks, pools.pool_of(role).name, role_key(role));
  }
  for (const std::string role : {"actor_rollout_ref.actor", "critic"}) {
    if (role == "critic" && !(c.at("critic.enable").is_boolean() && c.get<bool>("critic.enable"))) continue;
    // The critic's mini-batches split over the critic's pool.
    const int64_t ranks = role == "critic" ? pools.pool_of(RlRole::kCritic).size() : world_size;
    if (ranks != world_size && (mini * n % ranks != 0 || mini * n / ranks < 1)) {
      p.add("ppo_mini_batch_size x rollout.n = {} x {} does not split over the {} rank(s) of the critic's pool '{}'",
            mini, n, ranks, pools.pool_of(RlRole::kCritic).name);
      continue;
    }
    const int64_t role_mini_per_rank = mini * n / ranks;
    bool dynamic = c.get<bool>(role + ".use_dynamic_bsz");
    int64_t micro = c.get_or<int64_t>(role + ".ppo_micro_batch_size_per_gpu", -1);
    if (dynamic) {
      if (c.get<int64_t>(role + ".ppo_max_token_len_per_gpu") < 1)
        p.add("{}.ppo_max_token_len_per_gpu must be >= 1 with use_dynamic_bsz", role);
      continue;
    }
    if (micro < 1) {
      p.add("{}.ppo_micro_batch_size_per_gpu must be set (>= 1) unless {}.use_dynamic_bsz is true", role, role);
    } else if (role_mini_per_rank >= 1 && role_mini_per_rank % micro != 0) {
      p.add(
          "{}.ppo_micro_batch_size_per_gpu = {} does not divide the per-rank mini-batch of {} sequences "
          "(ppo_mini_batch_size {} x rollout.n {} / {} rank(s))",
          role, micro, role_mini_per_rank, mini, n, ranks);
    }
  }
  const int64_t prompt_len = c.get<int64_t>("data.max_prompt_length");
  const int64_t response_len = c.get<int64_t>("data.max_response_length");
  if (prompt_len < 1) p.add("data.max_prompt_length must be >= 1");
  if (response_len < 1) p.add("data.max_response_length must be >= 1");
  if (prompt_len < 1 || response_len < 1) return;
  // A step's whole rollout batch (ids, masks, positions, log-probs, advantages, values: about
  // kHostBytesPerToken per token) is gathered on every rank's host. A size that cannot fit in
  // this machine's memory is refused now, not after minutes of silent allocation.
  constexpr double kHostBytesPerToken = 48;
  const double tokens = double(batch) * double(n) * double(prompt_len + response_len);
  const double need = tokens * kHostBytesPerToken, have = physical_memory_bytes();
  if (have > 0 && need > have)
    p.add(
        "one step's rollout batch is data.train_batch_size x rollout.n x (max_prompt_length + max_response_length) "
        "= {} x {} x {} = {:.3g} tokens, about {:.1f} GiB of host memory for its tensors; this machine has {:.1f} "
        "GiB",
        batch, n, prompt_len + response_len, tokens, need / double(1 << 30), have / double(1 << 30));
}

void check_names(const Config& c, Problems& p) {
  p.one_of(c, "algorithm.adv_estimator", algo::advantage_estimator_names());
  p.one_of(c, "actor_rollout_ref.actor.policy_loss.loss_mode", algo::policy_loss_names());
  p.one_of(c, "actor_rollout_ref.actor.loss_agg_mode", algo::agg_loss_modes());
  p.one_of(c, "critic.loss_agg_mode", algo::agg_loss_modes());
  // KL types: the registry's names, each also with a trailing '+' (straight-through form).
  std::vector<std::string> kl_names = algo::kl_penalty_registry().names();
  for (size_t i = 0, n = kl_names.size(); i < n; ++i) kl_names.push_back(kl_names[i] + "+");
  p.one_of(c, "algorithm.kl_penalty", kl_names);
  p.one_of(c, "actor_rollout_ref.actor.kl_loss_type", kl_names);
  p.one_of(c, "algorithm.kl_ctrl.type", {"fixed", "adaptive"});
  p.one_of(c, "data.truncation", {"error", "left", "right", "middle"});
  p.one_of(c, "trainer.resume_mode", {"auto", "disable", "resume_path"});
  p.scheduler(c, "actor_rollout_ref.actor.optim");
  p.scheduler(c, "critic.optim");
  p.one_of(c, "actor_rollout_ref.rollout.dtype", {"float32", "bfloat16", "float16"});
  if (c.get<std::string>("trainer.resume_mode") == "resume_path" && c.is_null("trainer.resume_from_path"))
    p.add("trainer.resume_mode = resume_path needs trainer.resume_from_path");
}

// The sampling settings under `prefix`: the training rollout's and validation's (val_kwargs).
void check_sampling(const Config& c, Problems& p, const std::string& prefix) {
  const double temperature = c.get<double>(prefix + "temperature"), top_p = c.get<double>(prefix + "top_p");
  const int64_t top_k = c.get<int64_t>(prefix + "top_k");
  if (temperature < 0) p.add("{}temperature = {} must be >= 0 (0 = greedy)", prefix, temperature);
  if (!(top_p > 0 && top_p <= 1)) p.add("{}top_p = {} must be in (0, 1]", prefix, top_p);
  if (top_k < -1 || top_k == 0) p.add("{}top_k = {} must be -1 (off) or >= 1", prefix, top_k);
}

void check_ranges(const Config& c, Problems& p) {
  const std::string r = "actor_rollout_ref.rollout.";
  check_sampling(c, p, r);
  check_sampling(c, p, r + "val_kwargs.");
  const int64_t val_n = c.get<int64_t>(r + "val_kwargs.n");
  if (val_n < 1) p.add("{}val_kwargs.n = {} must be >= 1", r, val_n);
  double util = c.get<double>(r + "gpu_memory_utilization");
  if (!(util > 0 && util <= 1)) p.add("{}gpu_memory_utilization = {} must be in (0, 1]", r, util);
  for (const std::string key : {"trainer.save_freq", "trainer.test_freq"}) {
    int64_t v = c.get<int64_t>(key);
    if (v == 0 || v < -1) p.add("{} = {} must be -1 (never) or >= 1", key, v);
  }
  // As verl: unset clip_ratio_low/high fall back to clip_ratio.
  const double ratio = c.get<double>("actor_rollout_ref.actor.clip_ratio");
  double lo = c.get_or<double>("actor_rollout_ref.actor.clip_ratio_low", ratio),
         hi = c.get_or<double>("actor_rollout_ref.actor.clip_ratio_high", ratio);
  if (lo < 0 || hi < 0) p.add("clip_ratio_low/high must be >= 0 (got {}, {})", lo, hi);
  if (c.get<double>("actor_rollout_ref.actor.clip_ratio_c") <= 1.0)
    p.add("actor_rollout_ref.actor.clip_ratio_c = {} must be > 1 (dual-clip lower bound)",
          c.get<double>("actor_rollout_ref.actor.clip_ratio_c"));
  if (c.get<double>("actor_rollout_ref.actor.optim.lr") <= 0) p.add("actor_rollout_ref.actor.optim.lr must be > 0");
  std::string estimator = c.get<std::string>("algorithm.adv_estimator");
  if (estimator == "gae" && c.at("critic.enable").is_boolean() && !c.get<bool>("critic.enable"))
    p.add("algorithm.adv_estimator = gae needs a critic, but critic.enable = false");
  if (estimator == "grpo_passk" && c.get<int64_t>(r + "n") < 2)
    p.add("algorithm.adv_estimator = grpo_passk needs actor_rollout_ref.rollout.n >= 2");
}

// The SFT warm start (verlpp's sft.* section).
void check_sft(const Config& c, Problems& p) {
  if (!c.get<bool>("sft.enable")) return;
  if (c.is_null("sft.train_files"))
    p.add("sft.enable = true needs sft.train_files (JSONL rows with a prompt and a response)");
  if (c.get<int64_t>("sft.total_steps") < 1)
    p.add("sft.total_steps = {} must be >= 1", c.get<int64_t>("sft.total_steps"));
  const int64_t batch = c.get<int64_t>("sft.batch_size"), micro = c.get<int64_t>("sft.micro_batch_size_per_gpu");
  if (batch < 1) p.add("sft.batch_size = {} must be >= 1", batch);
  if (micro < 1) p.add("sft.micro_batch_size_per_gpu = {} must be >= 1", micro);
  if (c.get<double>("sft.optim.lr") <= 0) p.add("sft.optim.lr must be > 0");
  p.scheduler(c, "sft.optim");
}

// trainer.zero_stage, the roles' strategies and their FSDP sharding keys (ShardingSettings):
// values verlpp has, and no two keys asking for different layouts.
void check_sharding(const Config& c, const PoolLayout& pools, Problems& p) {
  const bool stage_set = !c.is_null("trainer.zero_stage");
  const int64_t zero = c.get_or<int64_t>("trainer.zero_stage", 3);
  if (zero < 0 || zero > 3)
    p.add(
        "trainer.zero_stage = {} is not supported: 0 (replicated), 1 (optimizer states sharded over the ranks), "
        "2 (gradients too), 3 (parameters too), or null (from fsdp_config.reshard_after_forward: 3, or 2 when false)",
        zero);
  const std::vector<std::tuple<std::string, std::string, RlRole>> roles = {
      {"actor_rollout_ref.actor.strategy", "actor_rollout_ref.actor.fsdp_config", RlRole::kActorRollout},
      {"actor_rollout_ref.ref.strategy", "actor_rollout_ref.ref.fsdp_config", RlRole::kReference},
      {"critic.strategy", "critic.model.fsdp_config", RlRole::kCritic}};
  for (const auto& [strategy_key, fsdp, role] : roles) {
    const int64_t world_size = pools.pool_of(role).size();  // the ranks the role shards over
    const std::string strategy = c.get<std::string>(strategy_key);
    if (strategy != "fsdp" && strategy != "fsdp2")
      p.add(
          "{} = '{}' is not supported: verlpp trains with its own FSDP-style data parallelism (fsdp or fsdp2; "
          "trainer.zero_stage picks the stage); Megatron's parallelism is not built",
          strategy_key, strategy);
    if (stage_set && zero == 3 && !c.get<bool>(fsdp + ".reshard_after_forward"))
      p.add(
          "trainer.zero_stage = 3 frees each layer's parameters after its forward, but {}.reshard_after_forward = "
          "false keeps them (ZeRO-2): set one of the two to match the other",
          fsdp);
    const int64_t fsdp_size = c.get<int64_t>(fsdp + ".fsdp_size");
    if (fsdp_size != -1 && fsdp_size != world_size)
      p.add(
          "{}.fsdp_size = {}: sharding over groups of fewer ranks than the run's {} (hybrid sharding) is not built; "
          "use -1 (all ranks)",
          fsdp, fsdp_size, world_size);
  }
}

// The layout asked for (trainer.nnodes x trainer.n_gpus_per_node; null = what was launched)
// against the launched one. Checked before any work, naming both layouts.
void check_layout(const Config& c, int world_size, int ranks_per_node, const PoolLayout& pools, Problems& p) {
  const int nodes = world_size / ranks_per_node;
  // With verl's reward pool and no pools of verlpp's, trainer.nnodes x n_gpus_per_node is the
  // global pool alone (resolve_pool_layout checks the sum).
  const bool verl_reward_pool = c.get<bool>("reward_model.enable_resource_pool") && c.is_null("trainer.resource_pools");
  const int64_t asked_nodes = c.get_or<int64_t>("trainer.nnodes", nodes);
  const int64_t asked_per_node = c.get_or<int64_t>("trainer.n_gpus_per_node", ranks_per_node);
  if (asked_nodes < 1 || asked_per_node < 1) {
    p.add("trainer.nnodes = {} and trainer.n_gpus_per_node = {} must be >= 1 (or null: the launched layout)",
          asked_nodes, asked_per_node);
  } else if (!verl_reward_pool && (asked_nodes != nodes || asked_per_node != ranks_per_node)) {
    p.add(
        "trainer.nnodes x trainer.n_gpus_per_node = {} x {} = {} rank(s) asked, but the run was launched as {} node(s) "
        "x {} "
        "rank(s) per node = {} rank(s)",
        asked_nodes, asked_per_node, asked_nodes * asked_per_node, nodes, ranks_per_node, world_size);
  }
  // The rollout's layout: engines of t ranks each, as many as fit the actor's ranks (verl refuses
  // a world its rollout size does not divide, so does this; verl's default of 2 is 1 here).
  const int64_t tp = c.get<int64_t>("actor_rollout_ref.rollout.tensor_model_parallel_size");
  const ResourcePool& actor = pools.pool_of(RlRole::kActorRollout);
  if (tp < 1) {
    p.add("actor_rollout_ref.rollout.tensor_model_parallel_size = {} must be >= 1 (ranks per rollout engine)", tp);
  } else if (pools.colocated() && world_size % tp != 0) {
    p.add(
        "actor_rollout_ref.rollout.tensor_model_parallel_size = {} splits each rollout engine over {} ranks, but the "
        "run has {} rank(s) ({} node(s) x {} per node), which is not a multiple of {}: set it to a divisor of {} "
        "(1: one whole engine per rank), or launch a multiple of {} ranks",
        tp, tp, world_size, nodes, ranks_per_node, tp, world_size, tp);
  } else if (actor.size() % tp != 0) {
    p.add(
        "actor_rollout_ref.rollout.tensor_model_parallel_size = {} splits each rollout engine over {} ranks, but the "
        "actor's pool {} has {} rank(s), which is not a multiple of {} (launched: {} node(s) x {} per node); pools "
        "asked: {}",
        tp, tp, actor.describe(), actor.size(), tp, nodes, ranks_per_node, pools.describe(active_roles(c)));
  }
  if (c.get<bool>("sft.enable") && c.get<int64_t>("sft.batch_size") % actor.size() != 0)
    p.add("sft.batch_size = {} does not split over {} rank(s)", c.get<int64_t>("sft.batch_size"), actor.size());
  check_sharding(c, pools, p);
  if (c.get_or<double>("trainer.dist_timeout_s", 1.0) <= 0)
    p.add("trainer.dist_timeout_s = {} must be > 0", c.get<double>("trainer.dist_timeout_s"));
}

}  // namespace

void Config::validate(int world_size, int ranks_per_node) const {
  if (world_size < 1) throw Error("config", fmt::format("world size {} < 1", world_size));
  if (ranks_per_node <= 0) ranks_per_node = world_size;
  if (world_size % ranks_per_node != 0)
    throw Error("config", fmt::format("{} ranks per node do not divide the world of {}", ranks_per_node, world_size));
  Problems p;
  for (const std::string& refused : refused_key_problems(*this)) p.add("{}", refused);
  check_names(*this, p);
  std::vector<std::string> pool_problems;
  const PoolLayout pools = resolve_pool_layout(*this, world_size, ranks_per_node, pool_problems);
  for (const std::string& problem : pool_problems) p.add("{}", problem);
  check_batches(*this, pools, p);
  check_ranges(*this, p);
  check_sft(*this, p);
  check_layout(*this, world_size, ranks_per_node, pools, p);
  if (!p.list().empty())
    throw Error("config", fmt::format("{} problem(s):\n  - {}", p.list().size(), join(p.list(), "\n  - ")));
}

}  // namespace verlpp::config
