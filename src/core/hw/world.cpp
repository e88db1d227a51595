// world_from_environment: the launcher's variables as a WorldInfo (see world.hpp). Each
// launcher family is read as a whole, so a half-set torchrun environment is an error rather
// than a silent mix with Slurm's numbers.
#include <verlpp/core/error.hpp>
#include <verlpp/hw/world.hpp>

#include <cstdlib>

namespace verlpp::hw {
namespace {

using Getenv = std::function<const char*(const char*)>;

// The integer in variable `name`, or `fallback` when unset; Error on anything else.
int64_t int_var(const Getenv& env, const char* name, int64_t fallback) {
  const char* v = env(name);
  if (v == nullptr || *v == '\0') return fallback;
  char* end = nullptr;
  const long long x = std::strtoll(v, &end, 10);
  if (*end != '\0' || x < 0) throw Error(name, fmt::format("'{}' is not a non-negative integer", v));
  return x;
}

std::string str_var(const Getenv& env, const char* name, const std::string& fallback) {
  const char* v = env(name);
  return v != nullptr && *v != '\0' ? std::string(v) : fallback;
}

// Slurm's SLURM_TASKS_PER_NODE looks like "4(x2),3": the count of the first node is enough
// for a uniform layout.
int64_t slurm_tasks_per_node(const Getenv& env, int64_t fallback) {
  const std::string v = str_var(env, "SLURM_NTASKS_PER_NODE", str_var(env, "SLURM_TASKS_PER_NODE", ""));
  if (v.empty()) return fallback;
  const size_t digits = v.find_first_not_of("0123456789");
  if (digits == 0) throw Error("SLURM_TASKS_PER_NODE", fmt::format("'{}' does not start with a task count", v));
  return std::stoll(v.substr(0, digits));
}

}  // namespace

WorldInfo world_from_environment(const Getenv& getenv_fn) {
  const Getenv env = getenv_fn ? getenv_fn : Getenv([](const char* n) { return std::getenv(n); });
  WorldInfo w;
  const char* rank_var = "RANK";
  const char* size_var = "WORLD_SIZE";
  if (env("RANK") != nullptr || env("WORLD_SIZE") != nullptr) {
    if (env("RANK") == nullptr || env("WORLD_SIZE") == nullptr)
      throw Error(env("RANK") ? "WORLD_SIZE" : "RANK",
                  "torchrun-style launch: RANK and WORLD_SIZE must be set together");
    w.launcher = "torchrun";
    w.rank = int32_t(int_var(env, "RANK", 0));
    w.world_size = int32_t(int_var(env, "WORLD_SIZE", 1));
    w.local_rank = int32_t(int_var(env, "LOCAL_RANK", w.rank));
    w.local_world_size = int32_t(int_var(env, "LOCAL_WORLD_SIZE", w.world_size));
  } else if (env("OMPI_COMM_WORLD_RANK") != nullptr) {
    w.launcher = "mpirun";
    rank_var = "OMPI_COMM_WORLD_RANK";
    size_var = "OMPI_COMM_WORLD_SIZE";
    w.rank = int32_t(int_var(env, rank_var, 0));
    w.world_size = int32_t(int_var(env, size_var, 1));
    w.local_rank = int32_t(int_var(env, "OMPI_COMM_WORLD_LOCAL_RANK", w.rank));
    w.local_world_size = int32_t(int_var(env, "OMPI_COMM_WORLD_LOCAL_SIZE", w.world_size));
  } else if (env("SLURM_PROCID") != nullptr && env("SLURM_NTASKS") != nullptr) {
    w.launcher = "srun";
    rank_var = "SLURM_PROCID";
    size_var = "SLURM_NTASKS";
    w.rank = int32_t(int_var(env, rank_var, 0));
    w.world_size = int32_t(int_var(env, size_var, 1));
    w.local_rank = int32_t(int_var(env, "SLURM_LOCALID", w.rank));
    w.local_world_size = int32_t(slurm_tasks_per_node(env, w.world_size));
    // srun sets no master address; the first node's host name is a sound default when the
    // user did not export MASTER_ADDR (SLURM_LAUNCH_NODE_IPADDR is where srun ran).
    w.master_addr = str_var(env, "SLURM_LAUNCH_NODE_IPADDR", w.master_addr);
  }
  if (w.world_size < 1) throw Error(size_var, "the world must have at least one rank");
  if (w.rank >= w.world_size)
    throw Error(rank_var, fmt::format("rank {} is outside a world of {} ranks ({})", w.rank, w.world_size, size_var));
  if (w.local_world_size < 1 || w.local_rank >= w.local_world_size)
    throw Error("LOCAL_RANK",
                fmt::format("local rank {} is outside {} ranks on this machine", w.local_rank, w.local_world_size));
  if (w.world_size % w.local_world_size != 0)
    throw Error("LOCAL_WORLD_SIZE",
                fmt::format("{} ranks per machine do not divide the world of {}", w.local_world_size, w.world_size));
  w.master_addr = str_var(env, "MASTER_ADDR", w.master_addr);
  const int64_t port = int_var(env, "MASTER_PORT", w.master_port);
  if (port < 1 || port > 65535) throw Error("MASTER_PORT", fmt::format("{} is not a TCP port", port));
  w.master_port = uint16_t(port);
  return w;
}

std::string describe(const WorldInfo& w) {
  return fmt::format("{} node{} x {} rank{} (rank {}, local rank {}; {})", w.num_nodes(), w.num_nodes() == 1 ? "" : "s",
                     w.local_world_size, w.local_world_size == 1 ? "" : "s", w.rank, w.local_rank, w.launcher);
}

}  // namespace verlpp::hw
