// cpu_ref: a communicator on Gloo's TCP transport, rendezvousing through the host's
// key-value store (so it works across processes and machines exactly like NCCL's bootstrap).
// Collectives run synchronously on the calling thread; every call carries the config's timeout.
#pragma once

#include <verlpp/sdk/plugin.hpp>

#include <memory>

namespace verlpp::cpu_ref {

// Creates a communicator for `config` (rank, world_size, store, timeout); blocks until every
// rank has joined or the timeout passes.
std::unique_ptr<sdk::Communicator> make_gloo_communicator(const verlpp_comm_config& config);

}  // namespace verlpp::cpu_ref
