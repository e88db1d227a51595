// One rank's membership in a multi-process run: the rendezvous store (LibTorch's c10d
// TCPStore, served by rank 0 at MASTER_ADDR:MASTER_PORT), the plugin communicator built over
// it (NCCL on cuda, Gloo on cpu_ref), collectives on at::Tensors, and liveness. Each rank sends
// rank 0 a heartbeat datagram with the stage it is in (UDP, a port rank 0 publishes in the
// store), so that when a collective fails or times out the error names the ranks that stopped
// and where, even when a stopped rank holds the store.
#pragma once

#include <verlpp/hw/communicator.hpp>
#include <verlpp/hw/world.hpp>

#include <ATen/core/Tensor.h>

#include <chrono>
#include <future>
#include <memory>
#include <string>
#include <vector>

namespace verlpp::hw {

struct ProcessGroupOptions {
  // Rendezvous and every collective: a rank that does not answer within it is an error.
  std::chrono::milliseconds timeout{600000};
  // How often each rank proves it is alive.
  std::chrono::milliseconds heartbeat{500};
};

class ProcessGroup {
 public:
  // Collective: every rank of `world` calls it. `device` is this rank's (its plugin provides
  // the communicator). Errors name the store address, the rank and the plugin. Sets SIGPIPE to
  // ignored when it has the default action, so a dead peer is an error, not a silent exit.
  static std::unique_ptr<ProcessGroup> create(const WorldInfo& world, const Device& device,
                                              const ProcessGroupOptions& options = {});
  ~ProcessGroup();
  // A group of some of this group's ranks (tensor-parallel groups, resource pools), with a
  // communicator of its own over the same rendezvous store: collective over `ranks` (this
  // group's ranks, ascending, this rank among them), which every member calls with the same
  // `ranks` and `name` (unique among the subgroups made: it keys the rendezvous). Its ranks are
  // the members' positions in `ranks`. It must not outlive this group; errors naming stopped
  // ranks come from this group's liveness.
  std::unique_ptr<ProcessGroup> subgroup(const std::vector<int32_t>& ranks, const std::string& name) const;
  ProcessGroup(const ProcessGroup&) = delete;
  ProcessGroup& operator=(const ProcessGroup&) = delete;

  int32_t rank() const { return world_.rank; }
  int32_t world_size() const { return world_.world_size; }
  const WorldInfo& world() const { return world_; }
  std::chrono::milliseconds timeout() const { return options_.timeout; }

  // In place over ranks; `t` contiguous on the group's device.
  void all_reduce_sum(at::Tensor& t) const;
  void all_reduce_max(at::Tensor& t) const;
  // Every rank's `t` [n, ...] (same shape on all ranks) concatenated in rank order: [world * n, ...].
  at::Tensor all_gather(const at::Tensor& t) const;
  // The same into `recv` [world * n] (flat, contiguous, send's dtype), written by the
  // communicator alone: no LibTorch op touches recv, so tensors viewing it keep their versions.
  void all_gather_into(const at::Tensor& send, const at::Tensor& recv) const;
  // recv [n] = the sum over ranks of this rank's chunk of send [world * n] (both contiguous,
  // flat, one dtype; recv may be a contiguous view into a larger tensor).
  void reduce_scatter_sum(const at::Tensor& send, at::Tensor& recv) const;
  // `t` of rank `root` on every rank (in place).
  void broadcast(at::Tensor& t, int32_t root) const;
  // Point to point: `t` (contiguous) to rank `peer`, which receives it with recv into a tensor
  // of the same size and dtype. A transfer may wait for its peer's matching call, so two ranks
  // exchanging data order their calls (one sends first, the other receives first).
  void send(const at::Tensor& t, int32_t peer) const;
  void recv(at::Tensor& t, int32_t peer) const;

  // A collective running in the background (start_all_gather_into). wait() returns once it has
  // finished on the device and rethrows its error, leaving the handle inactive; a handle dropped
  // without wait() waits in its destructor, since the collective writes memory its caller owns.
  // Move-only.
  class Pending {
   public:
    Pending() = default;
    explicit Pending(std::future<void> done) : done_(std::move(done)) {}
    Pending(Pending&&) = default;
    Pending& operator=(Pending&& other) noexcept;
    ~Pending();
    bool active() const { return done_.valid(); }
    void wait();

   private:
    std::future<void> done_;
  };
  // all_gather_into, started and not waited for: it runs on the group's communication thread
  // and, where the plugin has streams and events, on a stream of its own that first waits for
  // the work queued so far on the device's default stream, so it overlaps what the caller queues
  // next. From the first such call on, every collective of the group goes through that thread
  // in call order (the ranks must see one order). `send` and `recv` must stay allocated and
  // unwritten until the handle is waited for.
  Pending start_all_gather_into(const at::Tensor& send, const at::Tensor& recv) const;
  // reduce_scatter_sum, started and not waited for, on the same thread and stream and with the
  // same rules: `recv` holds the sum once the handle is waited for.
  Pending start_reduce_scatter_sum(const at::Tensor& send, const at::Tensor& recv) const;
  void barrier() const;
  // A signal that may be awaited for long (a stage of another resource pool): post(key) by one
  // rank; wait_posted(key) returns once some rank posted it, however long that takes, as long as
  // every rank's heartbeat goes on. Unlike a collective it has no timeout; it ends with an Error
  // naming the stopped ranks when one stops. Each key is posted once.
  void post(const std::string& key) const;
  void wait_posted(const std::string& key) const;
  // A barrier on the same terms: every rank posts "<key>/<rank>" and waits for every other's.
  void barrier_without_timeout(const std::string& key) const;

  // Records what this rank is doing now ("step 3 update_actor"), for the others' error messages.
  void set_stage(const std::string& stage);
  const std::string& stage() const { return stage_; }
  // A sentence naming the ranks whose heartbeat stopped (and the stage each last recorded), or
  // saying rank 0 does not answer; empty when every other rank is alive. Watches the
  // heartbeats for 4 periods (rank 0 keeps them; the others ask it).
  std::string diagnose_peers() const;

 private:
  struct Impl;
  ProcessGroup(WorldInfo world, ProcessGroupOptions options, const Device& device);
  // Runs `call` (one communicator operation) on the communication thread once it exists, else
  // here; errors name the operation, the stage and the ranks that stopped.
  template <class F>
  void run(const char* op, F&& call) const;
  // Queues one communicator operation (all_gather, or reduce_scatter with sum) on the
  // communication thread, starting it on first use.
  Pending start_in_background(const char* op, const at::Tensor& send, const at::Tensor& recv, bool gather) const;
  template <class F>
  void checked(const char* op, const std::string& stage, F&& call) const;
  WorldInfo world_;
  ProcessGroupOptions options_;
  const ProcessGroup* parent_ = nullptr;  // subgroups: the group whose store and liveness they use
  std::string stage_;
  std::unique_ptr<Impl> impl_;
};

}  // namespace verlpp::hw
