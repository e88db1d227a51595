// Resource pools: trainer.resource_pools (a list of {name, n_gpus_per_node, nnodes}, ranks taken in
// the order declared), trainer.role_pools (role -> pool name; roles not named run on the first
// pool) and verl's reward_model.enable_resource_pool (a pool "reward_pool" of
// reward_model.n_gpus_per_node x reward_model.nnodes ranks after the others, holding the reward
// model). Every problem is reported with the asked and the launched layouts side by side.
#include <verlpp/config/config.hpp>
#include <verlpp/config/resource_pools.hpp>
#include <verlpp/core/error.hpp>
#include <verlpp/core/strings.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <optional>
#include <set>

namespace verlpp::config {
namespace {

using json = nlohmann::json;

constexpr const char* kRewardPool = "reward_pool";
constexpr const char* kGlobalPool = "global_pool";

std::string launched_layout(int world_size, int ranks_per_node) {
  return fmt::format("{} node(s) x {} rank(s) = {} rank(s)", world_size / ranks_per_node, ranks_per_node, world_size);
}

std::string asked_layout(const std::vector<ResourcePool>& pools) {
  std::vector<std::string> parts;
  int64_t total = 0;
  for (const ResourcePool& p : pools) {
    parts.push_back(fmt::format("{} {} x {}", p.name, p.nnodes, p.n_gpus_per_node));
    total += p.size();
  }
  return fmt::format("{} = {} rank(s)", join(parts, " + "), total);
}

// A positive integer field of a pool entry, or a problem.
int64_t positive(const json& entry, const char* field, int64_t fallback, const std::string& where,
                 std::vector<std::string>& problems) {
  if (!entry.contains(field) || entry[field].is_null()) return fallback;
  if (!entry[field].is_number_integer() || entry[field].get<int64_t>() < 1) {
    problems.push_back(fmt::format("{}.{} = {} must be an integer >= 1", where, field, entry[field].dump()));
    return fallback;
  }
  return entry[field].get<int64_t>();
}

// trainer.resource_pools as declared (empty when null or malformed).
std::vector<ResourcePool> declared_pools(const Config& c, std::vector<std::string>& problems) {
  std::vector<ResourcePool> pools;
  const json& list = c.at("trainer.resource_pools");
  if (list.is_null()) return pools;
  if (!list.is_array() || list.empty()) {
    problems.push_back(
        fmt::format("trainer.resource_pools = {} must be null (every role on every rank) or a non-empty list of "
                    "{{name, n_gpus_per_node, nnodes}}",
                    list.dump()));
    return pools;
  }
  std::set<std::string> names;
  for (size_t i = 0; i < list.size(); ++i) {
    const std::string where = fmt::format("trainer.resource_pools[{}]", i);
    const json& entry = list[i];
    if (!entry.is_object()) {
      problems.push_back(
          fmt::format("{} = {} must be a mapping {{name, n_gpus_per_node, nnodes}}", where, entry.dump()));
      continue;
    }
    for (const auto& [key, value] : entry.items())
      if (key != "name" && key != "n_gpus_per_node" && key != "nnodes")
        problems.push_back(fmt::format("{}.{} is not a pool key (name, n_gpus_per_node, nnodes)", where, key));
    ResourcePool p;
    if (!entry.contains("name") || !entry["name"].is_string() || entry["name"].get<std::string>().empty()) {
      problems.push_back(fmt::format("{}.name must be a non-empty string", where));
      continue;
    }
    p.name = entry["name"].get<std::string>();
    if (!names.insert(p.name).second) problems.push_back(fmt::format("{}: pool '{}' is declared twice", where, p.name));
    if (!entry.contains("n_gpus_per_node"))
      problems.push_back(fmt::format("{} ('{}') needs n_gpus_per_node (its ranks on each node)", where, p.name));
    p.n_gpus_per_node = positive(entry, "n_gpus_per_node", 1, where, problems);
    p.nnodes = positive(entry, "nnodes", 1, where, problems);
    pools.push_back(p);
  }
  return pools;
}

}  // namespace

const char* role_key(RlRole role) {
  switch (role) {
    case RlRole::kActorRollout:
      return "actor_rollout";
    case RlRole::kReference:
      return "ref";
    case RlRole::kCritic:
      return "critic";
    case RlRole::kRewardModel:
      return "reward_model";
  }
  return "?";
}

const std::vector<RlRole>& all_roles() {
  static const std::vector<RlRole> roles = {RlRole::kActorRollout, RlRole::kReference, RlRole::kCritic,
                                            RlRole::kRewardModel};
  return roles;
}

std::vector<int32_t> ResourcePool::ranks() const {
  std::vector<int32_t> out;
  for (int64_t k = 0; k < size(); ++k) out.push_back(first + int32_t(k));
  return out;
}

std::string ResourcePool::describe() const {
  if (size() < 1) return fmt::format("{} (no ranks)", name);
  return size() == 1 ? fmt::format("{} (rank {})", name, first)
                     : fmt::format("{} (ranks {}-{})", name, first, first + size() - 1);
}

int64_t PoolLayout::ranks_asked() const {
  int64_t total = 0;
  for (const ResourcePool& p : pools) total += p.size();
  return total;
}

std::string PoolLayout::describe(const std::vector<RlRole>& active) const {
  std::vector<std::string> lines;
  for (size_t i = 0; i < pools.size(); ++i) {
    std::vector<std::string> roles;
    for (RlRole r : active)
      if (role_pool.at(r) == i) roles.push_back(role_key(r));
    lines.push_back(fmt::format("{}: {}", pools[i].describe(), roles.empty() ? "no role" : join(roles, ", ")));
  }
  return join(lines, "; ");
}

std::vector<RlRole> active_roles(const Config& c) {
  std::vector<RlRole> roles = {RlRole::kActorRollout};
  if (c.get<bool>("algorithm.use_kl_in_reward") || c.get<bool>("actor_rollout_ref.actor.use_kl_loss"))
    roles.push_back(RlRole::kReference);
  const json& critic = c.at("critic.enable");
  if (critic.is_boolean() ? critic.get<bool>() : c.get<std::string>("algorithm.adv_estimator") == "gae")
    roles.push_back(RlRole::kCritic);
  if (c.get<bool>("reward_model.enable")) roles.push_back(RlRole::kRewardModel);
  return roles;
}

PoolLayout resolve_pool_layout(const Config& c, int world_size, int ranks_per_node,
                               std::vector<std::string>& problems) {
  if (ranks_per_node <= 0) ranks_per_node = world_size;
  const size_t before = problems.size();
  PoolLayout layout;
  layout.pools = declared_pools(c, problems);
  const bool reward_pool = c.get<bool>("reward_model.enable_resource_pool");
  // verl's reward pool's size (read always, so that `verlpp config` shows them as keys with an effect).
  const int64_t rm_per_node = c.get<int64_t>("reward_model.n_gpus_per_node"),
                rm_nodes = c.get<int64_t>("reward_model.nnodes");
  if (layout.pools.empty()) {
    // verl's default: one global pool of trainer.nnodes x trainer.n_gpus_per_node ranks (here:
    // the launched ranks, less verl's reward pool when there is one).
    ResourcePool global;
    global.name = kGlobalPool;
    global.n_gpus_per_node = ranks_per_node;
    global.nnodes = world_size / ranks_per_node;
    if (reward_pool && !c.is_null("trainer.n_gpus_per_node")) {
      global.n_gpus_per_node = c.get<int64_t>("trainer.n_gpus_per_node");
      global.nnodes = c.get_or<int64_t>("trainer.nnodes", 1);
    } else if (reward_pool) {  // the launched ranks less the reward pool's
      global.n_gpus_per_node = world_size - rm_per_node * std::max<int64_t>(rm_nodes, 0);
      global.nnodes = 1;
    }
    layout.pools.push_back(global);
  }
  if (reward_pool) {
    ResourcePool rm;
    rm.name = kRewardPool;
    rm.n_gpus_per_node = rm_per_node;
    rm.nnodes = rm_nodes;
    if (rm.n_gpus_per_node < 1 || rm.nnodes < 1)
      problems.push_back(fmt::format(
          "reward_model.enable_resource_pool needs reward_model.n_gpus_per_node and reward_model.nnodes >= 1 (the "
          "reward pool's ranks), not {} and {}",
          rm.n_gpus_per_node, rm.nnodes));
    if (std::any_of(layout.pools.begin(), layout.pools.end(),
                    [](const ResourcePool& p) { return p.name == kRewardPool; }))
      problems.push_back(
          "reward_model.enable_resource_pool adds the pool 'reward_pool', which trainer.resource_pools "
          "already declares: declare it there or use the reward_model keys, not both");
    layout.pools.push_back(rm);
  }
  int32_t next = 0;
  for (ResourcePool& p : layout.pools) {
    p.first = next;
    next += int32_t(std::max<int64_t>(p.size(), 0));
  }
  auto index_of = [&](const std::string& name) -> std::optional<size_t> {
    for (size_t i = 0; i < layout.pools.size(); ++i)
      if (layout.pools[i].name == name) return i;
    return std::nullopt;
  };
  for (RlRole r : all_roles()) layout.role_pool[r] = 0;
  if (reward_pool) layout.role_pool[RlRole::kRewardModel] = layout.pools.size() - 1;
  const json& map = c.at("trainer.role_pools");
  if (!map.is_null() && !map.is_object()) {
    problems.push_back(fmt::format("trainer.role_pools = {} must be a mapping of role to pool name", map.dump()));
  } else if (map.is_object()) {
    std::vector<std::string> pool_names;
    for (const ResourcePool& p : layout.pools) pool_names.push_back(p.name);
    for (const auto& [key, value] : map.items()) {
      const auto role =
          std::find_if(all_roles().begin(), all_roles().end(), [&](RlRole r) { return key == role_key(r); });
      if (role == all_roles().end()) {
        problems.push_back(
            fmt::format("trainer.role_pools.{}: not a role (actor_rollout, ref, critic, reward_model)", key));
        continue;
      }
      const auto pool = value.is_string() ? index_of(value.get<std::string>()) : std::nullopt;
      if (!pool) {
        problems.push_back(fmt::format("trainer.role_pools.{} = {} is not a declared pool ({})", key, value.dump(),
                                       join(pool_names, ", ")));
        continue;
      }
      if (*role == RlRole::kRewardModel && reward_pool && *pool != layout.pools.size() - 1)
        problems.push_back(fmt::format(
            "trainer.role_pools.reward_model = {} but reward_model.enable_resource_pool places the reward model on "
            "'reward_pool': set one of the two",
            value.dump()));
      layout.role_pool[*role] = *pool;
    }
  }
  const std::vector<RlRole> active = active_roles(c);
  const std::string launched = launched_layout(world_size, ranks_per_node);
  if (layout.ranks_asked() != world_size)
    problems.push_back(
        fmt::format("the resource pools ask for {} but the run was launched as {}: every rank belongs "
                    "to exactly one pool, so the two must match (--nproc, trainer.nnodes x "
                    "trainer.n_gpus_per_node)",
                    asked_layout(layout.pools), launched));
  if (layout.role_pool.at(RlRole::kActorRollout) != 0)
    problems.push_back(fmt::format(
        "trainer.role_pools places actor_rollout on '{}', but the actor's pool must be the first declared (it holds "
        "rank 0, which writes the run's files); asked: {}",
        layout.pool_of(RlRole::kActorRollout).name, layout.describe(active)));
  for (size_t i = 0; i < layout.pools.size(); ++i)
    if (std::none_of(active.begin(), active.end(), [&](RlRole r) { return layout.role_pool.at(r) == i; }))
      problems.push_back(fmt::format("pool '{}' holds no role this run builds, so its ranks would idle; asked: {}",
                                     layout.pools[i].name, layout.describe(active)));
  if (problems.size() != before) {
    // The colocated layout, so that the other checks still read sizes that exist.
    PoolLayout fallback;
    ResourcePool all;
    all.name = kGlobalPool;
    all.n_gpus_per_node = ranks_per_node;
    all.nnodes = world_size / ranks_per_node;
    fallback.pools.push_back(all);
    for (RlRole r : all_roles()) fallback.role_pool[r] = 0;
    return fallback;
  }
  return layout;
}

PoolLayout pool_layout(const Config& c, int world_size, int ranks_per_node) {
  std::vector<std::string> problems;
  PoolLayout layout = resolve_pool_layout(c, world_size, ranks_per_node, problems);
  if (!problems.empty())
    throw Error("resource pools", fmt::format("{} problem(s):\n  - {}", problems.size(), join(problems, "\n  - ")));
  return layout;
}

}  // namespace verlpp::config
