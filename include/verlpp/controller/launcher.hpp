// `--nproc N` on one machine: starts N copies of a command as ranks 0..N-1 with the
// torchrun-style environment (RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR,
// MASTER_PORT) and supervises them like torchrun's agent: when one rank fails, the others get
// a grace period to stop on their own (they see the failure in their next collective), then
// are terminated; the result names the rank that failed first and how.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace verlpp::controller {

struct LaunchOptions {
  int32_t nproc = 1;
  std::vector<std::string> argv;  // every rank's command; argv[0] is the executable's path
  std::string master_addr = "127.0.0.1";
  uint16_t master_port = 0;  // 0: a free port of this machine
  // After the first failure, how long the other ranks may take to stop before SIGTERM.
  std::chrono::milliseconds grace{60000};
  // Threads per rank (OMP_NUM_THREADS) when the environment does not set it: 0 = cores / nproc.
  int32_t threads_per_rank = 0;
  std::function<void(const std::string&)> on_message;  // launcher notes (start, failures)
};

// How one rank ended.
struct RankExit {
  int32_t rank = 0;
  int pid = 0;
  int exit_code = 0;  // valid when signal == 0
  int signal = 0;     // the signal that killed it, 0 if it exited
  bool terminated_by_launcher = false;
  std::string describe() const;  // "rank 1 (pid 1234) was killed by signal 9 (Killed)"
};

struct LaunchResult {
  std::vector<RankExit> ranks;  // by rank
  int32_t first_failed = -1;    // the rank that failed first, -1 when all succeeded
  bool ok() const { return first_failed < 0; }
  // One paragraph: which rank failed first and how, and how each other rank ended.
  std::string summary() const;
};

// Runs the ranks to completion. Error when a rank cannot be started (naming the executable).
// SIGINT/SIGTERM to the launcher are passed on to every rank; a launcher that dies (any signal,
// SIGKILL included) takes its ranks with it (the kernel's parent-death signal).
LaunchResult launch_local(const LaunchOptions& options);

// A TCP port that was free on `addr` a moment ago (for MASTER_PORT).
uint16_t pick_free_port(const std::string& addr = "127.0.0.1");

}  // namespace verlpp::controller
