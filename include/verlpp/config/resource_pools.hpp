// Resource pools (verl's resource_pool_spec and role mapping): which ranks run which role of an
// RL run. By default every role is colocated on every rank (one pool, no config). With
// trainer.resource_pools the ranks are split into named pools, in the order declared, and
// trainer.role_pools places each role on one of them; reward_model.enable_resource_pool adds
// verl's reward_pool for the reward model. How the RL loop runs over pools (which rank computes
// and which sends what) is in docs/scale-out.md.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace verlpp::config {

class Config;

// The roles a pool can hold (verl's Role): the actor with its rollout engine, the reference
// policy, the critic and the reward model.
enum class RlRole { kActorRollout, kReference, kCritic, kRewardModel };
// The role's key in trainer.role_pools: actor_rollout, ref, critic, reward_model.
const char* role_key(RlRole role);
// Every role, in that order.
const std::vector<RlRole>& all_roles();

// A named set of consecutive ranks [first, first + size()).
struct ResourcePool {
  std::string name;
  int64_t n_gpus_per_node = 1, nnodes = 1;  // as asked; the pool has their product of ranks
  int32_t first = 0;
  int64_t size() const { return n_gpus_per_node * nnodes; }
  std::vector<int32_t> ranks() const;
  bool contains(int32_t rank) const { return rank >= first && rank < first + size(); }
  // "critic_pool (ranks 2-3)"
  std::string describe() const;
};

// Where the roles of one run live.
struct PoolLayout {
  std::vector<ResourcePool> pools;     // in the order declared, consecutive ranks from 0
  std::map<RlRole, size_t> role_pool;  // every role -> its index in `pools`
  const ResourcePool& pool_of(RlRole role) const { return pools.at(role_pool.at(role)); }
  // Every role on one pool of every rank (the default).
  bool colocated() const { return pools.size() == 1; }
  int64_t ranks_asked() const;
  // One line per pool: its ranks and the roles of `active` on it.
  std::string describe(const std::vector<RlRole>& active) const;
};

// The roles a run with this config builds: actor_rollout always, ref with a KL term
// (algorithm.use_kl_in_reward or actor.use_kl_loss), critic with critic.enable (null: the gae
// estimator), reward_model with reward_model.enable.
std::vector<RlRole> active_roles(const Config& config);

// trainer.resource_pools, trainer.role_pools and reward_model.enable_resource_pool for a run of
// `world_size` ranks, `ranks_per_node` per machine. Each problem found (a malformed entry, an
// unknown role or pool, pools asking for other than the launched ranks, a pool no active role
// uses, the actor's pool not first) is appended to `problems`, naming the keys and both the
// asked and the launched layouts; the layout returned is then the colocated one.
PoolLayout resolve_pool_layout(const Config& config, int world_size, int ranks_per_node,
                               std::vector<std::string>& problems);

// The layout, or an Error listing its problems.
PoolLayout pool_layout(const Config& config, int world_size, int ranks_per_node);

}  // namespace verlpp::config
