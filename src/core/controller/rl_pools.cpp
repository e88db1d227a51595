// Dispatch between resource pools. Every rank runs the RL loop's controller on the same batch;
// a stage of a role computes on the ranks of the role's pool only (its rows split over them, the
// results gathered inside the pool), and then the pool's first rank signals that the result is
// ready and broadcasts it to every rank over the run's communicator, so each rank continues with
// the whole batch, as in a colocated run. docs/scale-out.md lists which rank sends what at each
// stage.
#include "rl_state.hpp"

#include <ATen/ops/empty.h>
#include <ATen/ops/from_blob.h>
#include <ATen/ops/zeros.h>

#include <cstring>

namespace verlpp::controller {

using json = nlohmann::json;

void join_resource_pools(RlTrainer::State& s) {
  const config::PoolLayout& layout = s.settings.pools;
  const int32_t rank = s.world.rank, world = s.world.world_size;
  // Each pool's communicator as this rank sees it: the run's for a pool of every rank, a
  // subgroup for a smaller pool it is in (made by that pool's ranks alone), none for one rank.
  std::vector<const hw::ProcessGroup*> group_of(layout.pools.size(), s.group.get());
  for (size_t i = 0; i < layout.pools.size(); ++i) {
    const config::ResourcePool& pool = layout.pools[i];
    if (pool.size() == world || !pool.contains(rank)) continue;
    if (pool.size() == 1) {
      group_of[i] = nullptr;
      continue;
    }
    s.pool_groups.push_back(s.group->subgroup(pool.ranks(), "pool/" + pool.name));
    group_of[i] = s.pool_groups.back().get();
  }
  for (config::RlRole role : config::all_roles()) {
    const size_t i = layout.role_pool.at(role);
    const config::ResourcePool& pool = layout.pools[i];
    RlTrainer::State::RolePlacement p;
    p.root = pool.first;
    p.here = pool.contains(rank);
    p.whole_world = pool.size() == world;
    p.group = p.here ? group_of[i] : nullptr;
    if (p.group) p.dp = train::DataParallel(p.group, s.device);
    s.places[role] = p;
  }
}

at::Tensor share_from_pool(const RlTrainer::State& s, config::RlRole role, at::Tensor t) {
  const RlTrainer::State::RolePlacement& p = s.place(role);
  if (p.whole_world) return t;
  // The header: dtype, rank of the shape, then the sizes.
  constexpr int64_t kMaxDims = 8;
  const bool root = s.world.rank == p.root;
  const std::string ready = fmt::format("pool/{}/{}", config::role_key(role), s.pool_transfers++);
  if (root)
    s.group->post(ready);
  else
    s.group->wait_posted(ready);
  std::vector<int64_t> header(size_t(kMaxDims + 2), 0);
  if (root) {
    if (!t.defined())
      throw Error("resource pools",
                  fmt::format("{}: the pool's first rank has no result to send", config::role_key(role)));
    if (t.dim() > kMaxDims) throw Error("resource pools", fmt::format("a result of {} dimensions", t.dim()));
    header[0] = int64_t(t.scalar_type());
    header[1] = t.dim();
    for (int64_t d = 0; d < t.dim(); ++d) header[size_t(d + 2)] = t.size(d);
  }
  at::Tensor h =
      at::from_blob(header.data(), {kMaxDims + 2}, at::TensorOptions().dtype(at::kLong)).clone().to(s.device);
  s.group->broadcast(h, p.root);
  h = h.cpu().contiguous();
  const int64_t* hp = h.data_ptr<int64_t>();
  const auto dtype = at::ScalarType(hp[0]);
  const std::vector<int64_t> shape(hp + 2, hp + 2 + hp[1]);
  at::Tensor data =
      root ? t.to(s.device).contiguous() : at::empty(shape, at::TensorOptions().dtype(dtype).device(s.device));
  s.group->broadcast(data, p.root);
  return data;
}

void pools_barrier(const RlTrainer::State& s, const std::string& key) {
  if (!s.group) return;
  if (s.settings.pools.colocated())
    s.group->barrier();
  else
    s.group->barrier_without_timeout(key);
}

json share_json_from_pool(const RlTrainer::State& s, config::RlRole role, json value) {
  const RlTrainer::State::RolePlacement& p = s.place(role);
  if (p.whole_world) return value;
  const bool root = s.world.rank == p.root;
  // The text in 64-bit words (the communicator moves integer and float tensors): its length,
  // then its bytes.
  at::Tensor words;
  if (root) {
    const std::string text = value.dump();
    words = at::zeros({1 + (int64_t(text.size()) + 7) / 8}, at::TensorOptions().dtype(at::kLong));
    words.data_ptr<int64_t>()[0] = int64_t(text.size());
    std::memcpy(words.data_ptr<int64_t>() + 1, text.data(), text.size());
  }
  words = share_from_pool(s, role, words).cpu().contiguous();
  if (root) return value;
  const auto* bytes = reinterpret_cast<const char*>(words.data_ptr<int64_t>() + 1);
  return json::parse(std::string(bytes, bytes + words.data_ptr<int64_t>()[0]));
}

}  // namespace verlpp::controller
