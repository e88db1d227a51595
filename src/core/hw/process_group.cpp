// ProcessGroup: store + communicator + liveness (see process_group.hpp). Liveness goes over
// datagrams of its own (liveness.hpp), never through the store.
#include <verlpp/core/error.hpp>
#include <verlpp/hw/process_group.hpp>

#include "dlpack_view.hpp"
#include "liveness.hpp"
#include "serial_worker.hpp"

#include <ATen/ops/empty.h>

#include <signal.h>

#include <algorithm>
#include <atomic>
#include <mutex>
#include <thread>
#include <vector>

namespace verlpp::hw {

struct ProcessGroup::Impl {
  explicit Impl(const Device& d) : device(d) {}
  Device device;
  std::shared_ptr<KvStore> store;
  std::unique_ptr<Communicator> comm;
  // Started by the first background collective; from then on every collective runs on it.
  // Declared after comm and the stream it uses: destroyed (joined) before them.
  std::mutex worker_mutex;
  std::unique_ptr<Stream> comm_stream;  // with the worker, where the plugin has streams and events
  std::unique_ptr<detail::SerialWorker> worker;
  std::unique_ptr<detail::Liveness> liveness;  // the whole group's; null in subgroups
  // Set once an operation of the group failed: the store is then not destroyed, since a rank
  // stopped in the middle of a store request may hold rank 0's server, and destroying that
  // server joins its thread, which would wait for the stopped rank forever.
  std::atomic<bool> failed{false};
};

namespace {

const char* const kLivenessKey = "verlpp/liveness";

std::shared_ptr<KvStore> connect(const WorldInfo& w, bool serve, std::chrono::milliseconds timeout) {
  TcpStoreOptions o;
  o.host = w.master_addr;
  o.port = w.master_port;
  o.is_server = serve;
  o.world_size = w.world_size;
  o.timeout = timeout;
  return make_tcp_store(o);
}

}  // namespace

ProcessGroup::ProcessGroup(WorldInfo world, ProcessGroupOptions options, const Device& device)
    : world_(std::move(world)), options_(options), impl_(std::make_unique<Impl>(device)) {}

std::unique_ptr<ProcessGroup> ProcessGroup::create(const WorldInfo& world, const Device& device,
                                                   const ProcessGroupOptions& options) {
  // A write to a socket whose peer died raises SIGPIPE, whose default action ends the process
  // without a word (seen: rank 0 "killed by signal 13" when rank 1 was killed mid-send). Ignored,
  // the write fails with EPIPE and the collective reports the dead rank. Only the default
  // disposition is replaced: a program that installed its own handler keeps it.
  struct sigaction current {};
  if (sigaction(SIGPIPE, nullptr, &current) == 0 && current.sa_handler == SIG_DFL) {
    struct sigaction ignore {};
    ignore.sa_handler = SIG_IGN;
    sigemptyset(&ignore.sa_mask);
    sigaction(SIGPIPE, &ignore, nullptr);
  }
  std::unique_ptr<ProcessGroup> g(new ProcessGroup(world, options, device));
  const std::string where = fmt::format("rank {} of {}", world.rank, world.world_size);
  try {
    g->impl_->store = connect(world, world.rank == 0, options.timeout);
  } catch (const std::exception& e) {
    throw Error(where, fmt::format("rendezvous at {}:{} failed ({}): {}", world.master_addr, world.master_port,
                                   world.rank == 0 ? "serving the store" : "connecting to rank 0's store", e.what()));
  }
  // Liveness first: a rank that stops while the communicator is being built is named.
  if (world.rank == 0) {
    g->impl_->liveness = detail::Liveness::serve(world.world_size, options.heartbeat);
    const std::string address = g->impl_->liveness->address();
    g->impl_->store->set(kLivenessKey, std::vector<uint8_t>(address.begin(), address.end()));
  } else {
    std::vector<uint8_t> published;
    try {
      published = g->impl_->store->get(kLivenessKey, options.timeout);
    } catch (const std::exception& e) {
      throw Error(where, fmt::format("rank 0 did not publish its liveness address at {}:{}: {}", world.master_addr,
                                     world.master_port, e.what()));
    }
    uint16_t port = 0;  // stays 0 (liveness off) unless rank 0 published an address
    std::string token;
    detail::Liveness::parse_address(std::string(published.begin(), published.end()), port, token);
    g->impl_->liveness = detail::Liveness::join(world.master_addr, port, token, world.rank, options.heartbeat);
  }
  g->set_stage("setup");
  CommunicatorOptions co;
  co.rank = world.rank;
  co.world_size = world.world_size;
  co.key_prefix = "verlpp/comm/";
  co.timeout = options.timeout;
  try {
    g->impl_->comm = std::make_unique<Communicator>(Communicator::create(device, g->impl_->store, co));
  } catch (const std::exception& e) {
    g->impl_->failed = true;
    throw Error(where, fmt::format("creating the {} communicator failed: {}{}", device.plugin().name(), e.what(),
                                   g->diagnose_peers()));
  }
  return g;
}

std::unique_ptr<ProcessGroup> ProcessGroup::subgroup(const std::vector<int32_t>& ranks, const std::string& name) const {
  const auto me = std::find(ranks.begin(), ranks.end(), world_.rank);
  bool ascending = !ranks.empty() && ranks.front() >= 0 && ranks.back() < world_.world_size;
  for (size_t i = 1; i < ranks.size(); ++i) ascending = ascending && ranks[i - 1] < ranks[i];
  if (!ascending || me == ranks.end() || name.empty())
    throw Error(fmt::format("subgroup '{}' of rank {} of {}", name, world_.rank, world_.world_size),
                "its ranks must be ascending ranks of the group, this one among them, and it needs a name");
  WorldInfo w = world_;
  w.rank = int32_t(me - ranks.begin());
  w.world_size = int32_t(ranks.size());
  std::unique_ptr<ProcessGroup> g(new ProcessGroup(w, options_, impl_->device));
  g->parent_ = parent_ != nullptr ? parent_ : this;
  g->impl_->store = impl_->store;
  g->stage_ = stage_;
  CommunicatorOptions co;
  co.rank = w.rank;
  co.world_size = w.world_size;
  co.key_prefix = "verlpp/comm/" + name + "/";
  co.timeout = options_.timeout;
  try {
    g->impl_->comm = std::make_unique<Communicator>(Communicator::create(impl_->device, g->impl_->store, co));
  } catch (const std::exception& e) {
    g->impl_->failed = true;
    throw Error(fmt::format("subgroup '{}' (rank {} of {})", name, w.rank, w.world_size),
                fmt::format("creating the {} communicator failed: {}{}", impl_->device.plugin().name(), e.what(),
                            diagnose_peers()));
  }
  return g;
}

ProcessGroup::~ProcessGroup() {
  impl_->liveness.reset();  // its thread never blocks for long
  // Deliberately leaked after a failure (see Impl::failed): the process is ending with an error
  // anyway, and the OS closes the sockets.
  if (impl_->failed) new std::shared_ptr<KvStore>(std::move(impl_->store));
}

void ProcessGroup::set_stage(const std::string& stage) {
  stage_ = stage;
  if (impl_->liveness) impl_->liveness->set_stage(stage_);  // subgroups: their parent's says it
}

std::string ProcessGroup::diagnose_peers() const {
  if (parent_ != nullptr) return parent_->diagnose_peers();
  if (world_.world_size < 2 || !impl_->liveness) return "";
  return impl_->liveness->diagnose();
}

template <class F>
void ProcessGroup::checked(const char* op, const std::string& stage, F&& call) const {
  try {
    call();
  } catch (const std::exception& e) {
    impl_->failed = true;
    // The caller (the trainer's stage runner) adds the rank; the stage is said here because a
    // collective outside a stage (setup, SFT) has no other place to say it.
    throw Error(fmt::format("{} over {} ranks during '{}'", op, world_.world_size, stage),
                fmt::format("{}{}", e.what(), diagnose_peers()));
  }
}

template <class F>
void ProcessGroup::run(const char* op, F&& call) const {
  detail::SerialWorker* worker = nullptr;
  {
    std::lock_guard<std::mutex> lock(impl_->worker_mutex);
    worker = impl_->worker.get();
  }
  if (worker == nullptr) return checked(op, stage_, call);
  // The stage is read here, not on the worker: set_stage may run meanwhile.
  worker->submit([this, op, stage = stage_, &call] { checked(op, stage, call); }).get();
}

ProcessGroup::Pending& ProcessGroup::Pending::operator=(Pending&& other) noexcept {
  if (this != &other) {
    if (done_.valid()) done_.wait();
    done_ = std::move(other.done_);
  }
  return *this;
}

ProcessGroup::Pending::~Pending() {
  if (done_.valid()) done_.wait();
}

void ProcessGroup::Pending::wait() {
  if (done_.valid()) done_.get();
}

namespace {
void require_contiguous(const at::Tensor& t, const char* op) {
  if (!t.is_contiguous()) throw Error(op, "the tensor must be contiguous");
}
}  // namespace

void ProcessGroup::all_reduce_sum(at::Tensor& t) const {
  require_contiguous(t, "all_reduce");
  if (world_.world_size == 1) return;  // see reduce_scatter_sum
  DLTensor d = detail::dl_view(t);
  run("all_reduce", [&] { impl_->comm->all_reduce(d, ReduceOp::sum); });
}

void ProcessGroup::all_reduce_max(at::Tensor& t) const {
  require_contiguous(t, "all_reduce");
  if (world_.world_size == 1) return;  // see reduce_scatter_sum
  DLTensor d = detail::dl_view(t);
  run("all_reduce", [&] { impl_->comm->all_reduce(d, ReduceOp::max); });
}

at::Tensor ProcessGroup::all_gather(const at::Tensor& t) const {
  const at::Tensor in = t.contiguous();
  std::vector<int64_t> shape(in.sizes().begin(), in.sizes().end());
  if (shape.empty()) shape.push_back(1);
  shape[0] *= world_.world_size;
  at::Tensor out = at::empty(shape, in.options());
  // Flat views: the communicator gathers [n] into [world * n].
  at::Tensor flat_in = in.view({-1}), flat_out = out.view({-1});
  DLTensor send = detail::dl_view(flat_in), recv = detail::dl_view(flat_out);
  run("all_gather", [&] { impl_->comm->all_gather(send, recv); });
  return out;
}

namespace {
// A collective's flat arguments: contiguous, one dtype, and one of them `world` times the other
// (recv for a gather, send for a reduce-scatter).
void check_flat_pair(const char* op, const at::Tensor& send, const at::Tensor& recv, int32_t world,
                     bool recv_is_larger) {
  require_contiguous(send, op);
  require_contiguous(recv, op);
  const at::Tensor& larger = recv_is_larger ? recv : send;
  const at::Tensor& smaller = recv_is_larger ? send : recv;
  if (larger.numel() != smaller.numel() * world || send.scalar_type() != recv.scalar_type())
    throw Error(op, fmt::format("send has {} {} elements, recv {} {}: {} must be world_size ({}) times {}, one dtype",
                                send.numel(), c10::toString(send.scalar_type()), recv.numel(),
                                c10::toString(recv.scalar_type()), recv_is_larger ? "recv" : "send", world,
                                recv_is_larger ? "send" : "recv"));
}

// all_gather_into's arguments: flat [n] and [world * n].
void check_gather_into(const at::Tensor& send, const at::Tensor& recv, int32_t world) {
  check_flat_pair("all_gather", send, recv, world, /*recv_is_larger=*/true);
}

// reduce_scatter_sum's arguments: send [world * n] and recv [n].
void check_reduce_scatter(const at::Tensor& send, const at::Tensor& recv, int32_t world) {
  check_flat_pair("reduce_scatter", send, recv, world, /*recv_is_larger=*/false);
}
}  // namespace

void ProcessGroup::all_gather_into(const at::Tensor& send, const at::Tensor& recv) const {
  check_gather_into(send, recv, world_.world_size);
  at::Tensor flat_send = send.view({-1}), flat_recv = recv.view({-1});
  DLTensor s = detail::dl_view(flat_send), r = detail::dl_view(flat_recv);
  run("all_gather", [&] { impl_->comm->all_gather(s, r); });
}

ProcessGroup::Pending ProcessGroup::start_in_background(const char* op, const at::Tensor& send, const at::Tensor& recv,
                                                        bool gather) const {
  detail::SerialWorker* worker = nullptr;
  {
    std::lock_guard<std::mutex> lock(impl_->worker_mutex);
    if (!impl_->worker) {
      const verlpp_plugin_api& api = impl_->device.plugin().api();
      if (api.stream_create != nullptr && api.event_create != nullptr)
        impl_->comm_stream = std::make_unique<Stream>(impl_->device.create_stream());
      impl_->worker = std::make_unique<detail::SerialWorker>();
    }
    worker = impl_->worker.get();
  }
  const Stream* stream = impl_->comm_stream.get();
  if (stream != nullptr) {
    // The collective reads `send` as the default stream has it now (an optimizer step or a
    // backward may still be writing it there); what the caller queues after this call does not
    // hold it back.
    Event ready = impl_->device.create_event();
    ready.record(impl_->device.default_stream());
    stream->wait(ready);
  }
  at::Tensor flat_send = send.view({-1}), flat_recv = recv.view({-1});
  return Pending(worker->submit([this, op, gather, stage = stage_, flat_send, flat_recv, stream] {
    DLTensor s = detail::dl_view(flat_send), r = detail::dl_view(flat_recv);
    checked(op, stage, [&] {
      if (gather) {
        impl_->comm->all_gather(s, r, stream);
      } else {
        impl_->comm->reduce_scatter(s, r, ReduceOp::sum, stream);
      }
    });
  }));
}

ProcessGroup::Pending ProcessGroup::start_all_gather_into(const at::Tensor& send, const at::Tensor& recv) const {
  if (world_.world_size == 1) {
    all_gather_into(send, recv);
    return Pending();
  }
  check_gather_into(send, recv, world_.world_size);
  return start_in_background("all_gather", send, recv, /*gather=*/true);
}

ProcessGroup::Pending ProcessGroup::start_reduce_scatter_sum(const at::Tensor& send, const at::Tensor& recv) const {
  check_reduce_scatter(send, recv, world_.world_size);
  if (world_.world_size == 1) {
    at::Tensor out = recv;
    reduce_scatter_sum(send, out);
    return Pending();
  }
  return start_in_background("reduce_scatter", send, recv, /*gather=*/false);
}

void ProcessGroup::reduce_scatter_sum(const at::Tensor& send, at::Tensor& recv) const {
  check_reduce_scatter(send, recv, world_.world_size);
  if (world_.world_size == 1) {
    // One rank: the result is the input. Plugin communicators wait for each collective to
    // finish on the host; a copy on the compute stream keeps the device's queue full.
    if (recv.data_ptr() != send.data_ptr()) recv.copy_(send);
    return;
  }
  at::Tensor flat_send = send.view({-1}), flat_recv = recv.view({-1});
  DLTensor s = detail::dl_view(flat_send), r = detail::dl_view(flat_recv);
  run("reduce_scatter", [&] { impl_->comm->reduce_scatter(s, r, ReduceOp::sum); });
}

void ProcessGroup::broadcast(at::Tensor& t, int32_t root) const {
  require_contiguous(t, "broadcast");
  DLTensor d = detail::dl_view(t);
  run("broadcast", [&] { impl_->comm->broadcast(d, root); });
}

void ProcessGroup::send(const at::Tensor& t, int32_t peer) const {
  require_contiguous(t, "send");
  const DLTensor d = detail::dl_view(t);
  run("send", [&] { impl_->comm->send(d, peer); });
}

void ProcessGroup::recv(at::Tensor& t, int32_t peer) const {
  require_contiguous(t, "recv");
  DLTensor d = detail::dl_view(t);
  run("recv", [&] { impl_->comm->recv(d, peer); });
}

void ProcessGroup::barrier() const {
  run("barrier", [&] { impl_->comm->barrier(); });
}

void ProcessGroup::post(const std::string& key) const { impl_->store->add("verlpp/post/" + key, 1); }

void ProcessGroup::barrier_without_timeout(const std::string& key) const {
  post(fmt::format("{}/{}", key, world_.rank));
  for (int32_t r = 0; r < world_.world_size; ++r)
    if (r != world_.rank) wait_posted(fmt::format("{}/{}", key, r));
}

void ProcessGroup::wait_posted(const std::string& key) const {
  // Polled with add(key, 0), which never blocks (a store get that times out can leave a late
  // answer on the connection); the other ranks' heartbeats are checked every few seconds.
  const std::string stored = "verlpp/post/" + key;
  const auto check_every = std::max<std::chrono::milliseconds>(options_.heartbeat * 8, std::chrono::seconds(5));
  auto last_check = std::chrono::steady_clock::now();
  auto pause = std::chrono::milliseconds(1);
  while (impl_->store->add(stored, 0) == 0) {
    std::this_thread::sleep_for(pause);
    pause = std::min<std::chrono::milliseconds>(pause * 2, std::chrono::milliseconds(50));
    if (std::chrono::steady_clock::now() - last_check < check_every) continue;
    const std::string stopped = diagnose_peers();
    if (!stopped.empty()) {
      impl_->failed = true;
      throw Error(
          fmt::format("waiting for '{}' during '{}' (rank {} of {})", key, stage_, world_.rank, world_.world_size),
          "another rank will not post it" + stopped);
    }
    last_check = std::chrono::steady_clock::now();
  }
}

}  // namespace verlpp::hw
