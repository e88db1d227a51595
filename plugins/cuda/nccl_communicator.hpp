// cuda: a communicator on NCCL, bootstrapped through the host's key-value store (rank 0
// publishes the ncclUniqueId, the others read it), created in NCCL's non-blocking mode so that
// nothing can hang: init and every operation are polled (ncclCommGetAsyncError, and a CUDA
// event for completion) until they finish or the timeout passes, and then the communicator is
// aborted (ncclCommAbort) and the call fails with TIMEOUT naming the op and the rank.
#pragma once

#include <verlpp/sdk/plugin.hpp>

#include <memory>

namespace verlpp::cuda {

// Builds the communicator for `config`; blocks until every rank joined or the timeout passed.
// The timeout is config.timeout_ms, overridden by the environment variable
// VERLPP_NCCL_TIMEOUT_MS when set (10 minutes when neither gives one).
std::unique_ptr<sdk::Communicator> make_nccl_communicator(const verlpp_comm_config& config);

// Empty when NCCL can be used, else why not (for the COMMUNICATOR capability bit and messages).
std::string nccl_problem();

}  // namespace verlpp::cuda
