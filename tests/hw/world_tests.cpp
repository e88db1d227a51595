// world_from_environment: the variables of torchrun-style launchers, Open MPI's mpirun and
// Slurm's srun read into the same WorldInfo, precedence between them, and every malformed or
// inconsistent value refused with the variable named.
#include <catch2/catch.hpp>

#include <verlpp/core/error.hpp>
#include <verlpp/hw/world.hpp>

#include <map>
#include <string>

using namespace verlpp;
using Catch::Matchers::Contains;

namespace {

hw::WorldInfo world_of(const std::map<std::string, std::string>& env) {
  return hw::world_from_environment([&](const char* name) -> const char* {
    auto it = env.find(name);
    return it == env.end() ? nullptr : it->second.c_str();
  });
}

}  // namespace

TEST_CASE("world: no launcher is one rank", "[world]") {
  const hw::WorldInfo w = world_of({});
  CHECK(w.rank == 0);
  CHECK(w.world_size == 1);
  CHECK(w.local_rank == 0);
  CHECK_FALSE(w.is_distributed());
  CHECK(w.launcher == "none");
}

TEST_CASE("world: torchrun, mpirun and srun variables", "[world]") {
  const hw::WorldInfo t = world_of({{"RANK", "5"},
                                    {"WORLD_SIZE", "8"},
                                    {"LOCAL_RANK", "1"},
                                    {"LOCAL_WORLD_SIZE", "4"},
                                    {"MASTER_ADDR", "node0"},
                                    {"MASTER_PORT", "29400"}});
  CHECK(t.launcher == "torchrun");
  CHECK((t.rank == 5 && t.world_size == 8 && t.local_rank == 1 && t.local_world_size == 4));
  CHECK(t.num_nodes() == 2);
  CHECK(t.master_addr == "node0");
  CHECK(t.master_port == 29400);

  const hw::WorldInfo m = world_of({{"OMPI_COMM_WORLD_RANK", "3"},
                                    {"OMPI_COMM_WORLD_SIZE", "4"},
                                    {"OMPI_COMM_WORLD_LOCAL_RANK", "1"},
                                    {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"}});
  CHECK(m.launcher == "mpirun");
  CHECK((m.rank == 3 && m.world_size == 4 && m.local_rank == 1 && m.num_nodes() == 2));
  CHECK(m.master_addr == "127.0.0.1");  // default without MASTER_ADDR
  CHECK(m.master_port == 29500);

  const hw::WorldInfo s = world_of({{"SLURM_PROCID", "6"},
                                    {"SLURM_NTASKS", "16"},
                                    {"SLURM_LOCALID", "6"},
                                    {"SLURM_TASKS_PER_NODE", "8(x2)"},
                                    {"SLURM_LAUNCH_NODE_IPADDR", "10.0.0.7"}});
  CHECK(s.launcher == "srun");
  CHECK((s.rank == 6 && s.world_size == 16 && s.local_rank == 6 && s.local_world_size == 8 && s.num_nodes() == 2));
  CHECK(s.master_addr == "10.0.0.7");
  CHECK(world_of({{"SLURM_PROCID", "0"},
                  {"SLURM_NTASKS", "2"},
                  {"SLURM_LAUNCH_NODE_IPADDR", "10.0.0.7"},
                  {"MASTER_ADDR", "head"}})
            .master_addr == "head");  // an exported MASTER_ADDR wins

  // torchrun-style variables win over mpirun's, which win over Slurm's.
  const hw::WorldInfo both = world_of({{"RANK", "1"},
                                       {"WORLD_SIZE", "2"},
                                       {"OMPI_COMM_WORLD_RANK", "0"},
                                       {"OMPI_COMM_WORLD_SIZE", "4"},
                                       {"SLURM_PROCID", "3"},
                                       {"SLURM_NTASKS", "8"}});
  CHECK((both.launcher == "torchrun" && both.world_size == 2 && both.rank == 1));
}

TEST_CASE("world: malformed or inconsistent variables are errors naming them", "[world]") {
  CHECK_THROWS_WITH(world_of({{"RANK", "2"}, {"WORLD_SIZE", "2"}}),
                    Contains("RANK") && Contains("rank 2 is outside a world of 2"));
  CHECK_THROWS_WITH(world_of({{"RANK", "x"}, {"WORLD_SIZE", "2"}}),
                    Contains("RANK: 'x' is not a non-negative integer"));
  CHECK_THROWS_WITH(world_of({{"RANK", "0"}}), Contains("WORLD_SIZE") && Contains("must be set together"));
  CHECK_THROWS_WITH(world_of({{"RANK", "0"}, {"WORLD_SIZE", "0"}}), Contains("at least one rank"));
  CHECK_THROWS_WITH(world_of({{"RANK", "0"}, {"WORLD_SIZE", "6"}, {"LOCAL_WORLD_SIZE", "4"}}),
                    Contains("4 ranks per machine do not divide the world of 6"));
  CHECK_THROWS_WITH(world_of({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"LOCAL_RANK", "2"}, {"LOCAL_WORLD_SIZE", "2"}}),
                    Contains("local rank 2 is outside 2 ranks on this machine"));
  CHECK_THROWS_WITH(world_of({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_PORT", "70000"}}),
                    Contains("MASTER_PORT: 70000 is not a TCP port"));
  CHECK_THROWS_WITH(world_of({{"OMPI_COMM_WORLD_RANK", "4"}, {"OMPI_COMM_WORLD_SIZE", "4"}}),
                    Contains("OMPI_COMM_WORLD_RANK"));
  CHECK_THROWS_WITH(world_of({{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "2"}, {"SLURM_TASKS_PER_NODE", "(x2)"}}),
                    Contains("SLURM_TASKS_PER_NODE"));
}
