// Where this process sits among the ranks of a run, read from the environment a standard
// launcher sets: torchrun-style (RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR,
// MASTER_PORT; also what `verlpp ... --nproc N` sets), Open MPI's mpirun (OMPI_COMM_WORLD_*)
// and Slurm's srun (SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID, ...). No launcher: one rank.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

namespace verlpp::hw {

struct WorldInfo {
  int32_t rank = 0;
  int32_t world_size = 1;
  int32_t local_rank = 0;                 // the device index on this machine
  int32_t local_world_size = 1;           // ranks on this machine (world_size / nodes when uniform)
  std::string master_addr = "127.0.0.1";  // where rank 0 serves the rendezvous store
  uint16_t master_port = 29500;
  std::string launcher = "none";  // "torchrun", "mpirun", "srun" or "none"

  // The number of machines, when every machine runs local_world_size ranks.
  int32_t num_nodes() const { return local_world_size > 0 ? world_size / local_world_size : 1; }
  bool is_distributed() const { return world_size > 1; }
};

// Reads the launcher's variables through `getenv` (std::getenv by default, a map in tests).
// torchrun-style variables win over mpirun's, which win over Slurm's. Error naming the
// variable and its value when one is malformed or inconsistent (RANK >= WORLD_SIZE, ...).
WorldInfo world_from_environment(const std::function<const char*(const char*)>& getenv = nullptr);

// "2 nodes x 4 ranks (rank 3, local rank 1; mpirun)": for messages.
std::string describe(const WorldInfo& world);

}  // namespace verlpp::hw
