// Liveness of a process group's ranks over UDP datagrams: each rank sends rank 0 a heartbeat
// with the stage it is in; rank 0 keeps the table and answers the other ranks' questions about
// who stopped. Internal to the hardware layer (ProcessGroup owns one).
//
// Why datagrams and not the rendezvous store: LibTorch's TCPStore server (rank 0) serves its
// clients from one thread that blocks until a request is whole, so a rank stopped (SIGSTOP, a
// debugger) in the middle of a store request holds every other store call, the diagnosis
// included. A datagram arrives whole or not at all: no stopped rank can hold the table.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

namespace verlpp::hw::detail {

class Liveness {
 public:
  // Rank 0's side: a UDP socket on every interface (a port the system picks), the table of
  // `world_size` ranks and the thread that fills it. Never throws: a socket that cannot be made
  // leaves liveness off, and diagnose() says so.
  static std::unique_ptr<Liveness> serve(int32_t world_size, std::chrono::milliseconds heartbeat);
  // Another rank's side: heartbeats to rank 0's `host`:`port` (as served, with its `token`)
  // every `heartbeat`, from a thread of its own. Never throws, as serve().
  static std::unique_ptr<Liveness> join(const std::string& host, uint16_t port, const std::string& token, int32_t rank,
                                        std::chrono::milliseconds heartbeat);
  ~Liveness();
  Liveness(const Liveness&) = delete;
  Liveness& operator=(const Liveness&) = delete;

  // What rank 0 publishes for the others (in the store, at setup): "<port> <token>", or "off".
  std::string address() const;
  // Parses address(); false for "off" or anything malformed.
  static bool parse_address(const std::string& text, uint16_t& port, std::string& token);

  // Records this rank's stage and, on a rank other than 0, sends it at once.
  void set_stage(const std::string& stage);
  // "; stopped responding (no heartbeat for N ms): rank 1 (last stage: ...)" for the ranks
  // (other than the asking one) that sent nothing for 4 heartbeat periods, watched from now;
  // a sentence saying rank 0 does not answer, or that liveness is off; empty when all are alive.
  std::string diagnose() const;

  struct State;

 private:
  explicit Liveness(std::shared_ptr<State> state);
  std::shared_ptr<State> state_;
};

}  // namespace verlpp::hw::detail
