// ProcessGroup: store + communicator + heartbeat (see process_group.hpp). The heartbeat and the
// diagnosis use their own store connections, so they never share a socket with the main thread.
#include <verlpp/core/error.hpp>
#include <verlpp/hw/process_group.hpp>

#include "dlpack_view.hpp"
#include "serial_worker.hpp"

#include <ATen/ops/empty.h>

#include <signal.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <mutex>
#include <thread>
#include <vector>

namespace verlpp::hw {

// What the heartbeat thread shares with its group, owned jointly: a thread stuck in a store call
// (see diagnose_peers) is detached at shutdown and may outlive the group.
struct HeartbeatState {
  std::mutex mutex;
  std::condition_variable wake;
  bool stopping = false;
  bool finished = false;
};

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
  std::thread heartbeat;
  std::shared_ptr<HeartbeatState> beat = std::make_shared<HeartbeatState>();
  // Set when the store stopped answering (diagnose_peers' deadline, or a heartbeat that never
  // came back): then the store is not destroyed, since destroying rank 0's server joins its
  // thread, which waits for the stopped rank forever.
  std::atomic<bool> store_wedged{false};
};

namespace {

std::string hb_key(int32_t rank) { return fmt::format("verlpp/hb/{}", rank); }
std::string stage_key(int32_t rank) { return fmt::format("verlpp/stage/{}", rank); }

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
  g->impl_->store->add(hb_key(world.rank), 1);
  g->set_stage("setup");
  CommunicatorOptions co;
  co.rank = world.rank;
  co.world_size = world.world_size;
  co.key_prefix = "verlpp/comm/";
  co.timeout = options.timeout;
  try {
    g->impl_->comm = std::make_unique<Communicator>(Communicator::create(device, g->impl_->store, co));
  } catch (const std::exception& e) {
    throw Error(where, fmt::format("creating the {} communicator failed: {}{}", device.plugin().name(), e.what(),
                                   g->diagnose_peers()));
  }
  // The heartbeat: its own connection; a store that goes away just ends it (the next
  // collective reports the failure with a diagnosis).
  std::shared_ptr<HeartbeatState> beat = g->impl_->beat;
  g->impl_->heartbeat = std::thread([beat, world, options] {
    std::shared_ptr<KvStore> own;
    try {
      own = connect(world, false, options.timeout);
    } catch (...) {
      own.reset();
    }
    std::unique_lock<std::mutex> lock(beat->mutex);
    while (own && !beat->stopping) {
      lock.unlock();
      try {
        own->add(hb_key(world.rank), 1);
      } catch (...) {
        own.reset();
      }
      lock.lock();
      if (own) beat->wake.wait_for(lock, options.heartbeat, [&] { return beat->stopping; });
    }
    beat->finished = true;
    beat->wake.notify_all();
  });
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
    throw Error(fmt::format("subgroup '{}' (rank {} of {})", name, w.rank, w.world_size),
                fmt::format("creating the {} communicator failed: {}{}", impl_->device.plugin().name(), e.what(),
                            diagnose_peers()));
  }
  return g;
}

ProcessGroup::~ProcessGroup() {
  if (impl_->heartbeat.joinable()) {
    std::unique_lock<std::mutex> lock(impl_->beat->mutex);
    impl_->beat->stopping = true;
    impl_->beat->wake.notify_all();
    // A heartbeat stuck in a store call that will never be answered (a stopped rank holds rank
    // 0's store) must not hold the process: after a bounded wait it is left running, detached.
    const bool finished =
        impl_->beat->wake.wait_for(lock, std::chrono::seconds(5), [&] { return impl_->beat->finished; });
    lock.unlock();
    if (finished) {
      impl_->heartbeat.join();
    } else {
      impl_->heartbeat.detach();
      impl_->store_wedged = true;
    }
  }
  // Deliberately leaked when wedged: the process is ending with an error anyway, and the OS
  // closes the sockets; destroying it would wait for the stopped rank.
  if (impl_->store_wedged) new std::shared_ptr<KvStore>(std::move(impl_->store));
}

void ProcessGroup::set_stage(const std::string& stage) {
  stage_ = stage;
  if (parent_ != nullptr) return;  // the store's stage keys are the whole group's ranks
  const std::string& s = stage_;
  try {
    impl_->store->set(stage_key(world_.rank), std::vector<uint8_t>(s.begin(), s.end()));
  } catch (const std::exception&) {
    // A store that is gone shows up in the next collective, with a diagnosis.
  }
}

namespace {

// The store work of diagnose_peers (see there): heartbeats before and after a pause, and the
// last stage of each rank whose heartbeat did not move.
std::string probe_peers(const WorldInfo& world_, const ProcessGroupOptions& options_) {
  std::shared_ptr<KvStore> probe;
  try {
    probe = connect(world_, false, std::chrono::milliseconds(3000));
  } catch (const std::exception&) {
    return fmt::format("; the rendezvous store at {}:{} is unreachable, so rank 0 (which serves it) has stopped",
                       world_.master_addr, world_.master_port);
  }
  try {
    std::vector<int64_t> before(size_t(world_.world_size));
    for (int32_t r = 0; r < world_.world_size; ++r) before[size_t(r)] = probe->add(hb_key(r), 0);
    std::this_thread::sleep_for(options_.heartbeat * 4);
    std::vector<std::string> stopped;
    for (int32_t r = 0; r < world_.world_size; ++r) {
      if (r == world_.rank || probe->add(hb_key(r), 0) != before[size_t(r)]) continue;
      std::string stage = "unknown";
      try {
        const auto v = probe->get(stage_key(r), std::chrono::milliseconds(500));
        stage.assign(v.begin(), v.end());
      } catch (const std::exception&) {
      }
      stopped.push_back(fmt::format("rank {} (last stage: {})", r, stage));
    }
    if (stopped.empty()) return "";
    std::string list;
    for (const auto& s : stopped) list += (list.empty() ? "" : ", ") + s;
    return fmt::format("; stopped responding (no heartbeat for {} ms): {}", (options_.heartbeat * 4).count(), list);
  } catch (const std::exception& e) {
    return fmt::format(
        "; the rendezvous store at {}:{} failed while checking the other ranks ({}): rank 0 has probably stopped",
        world_.master_addr, world_.master_port, e.what());
  }
}

}  // namespace

std::string ProcessGroup::diagnose_peers() const {
  if (parent_ != nullptr) return parent_->diagnose_peers();
  if (world_.world_size < 2) return "";
  // c10d's TCPStore server (rank 0) serves its clients from one thread, which blocks reading a
  // request until it is whole: a rank stopped (SIGSTOP, a debugger) in the middle of a store
  // request leaves every other store call waiting forever, this probe's included (seen in the
  // hung-rank test: rank 0 waited in its diagnosis, so nothing ended the run). So the probe runs
  // on its own thread with a deadline; a probe still waiting then is abandoned (detached: it
  // holds only copies and a shared result).
  struct Result {
    std::mutex mutex;
    std::condition_variable done;
    bool finished = false;
    std::string text;
  };
  auto result = std::make_shared<Result>();
  std::thread([result, world = world_, options = options_] {
    std::string text = probe_peers(world, options);
    std::lock_guard<std::mutex> lock(result->mutex);
    result->text = std::move(text);
    result->finished = true;
    result->done.notify_all();
  }).detach();
  const auto deadline = options_.heartbeat * 4 + std::chrono::milliseconds(5000);
  std::unique_lock<std::mutex> lock(result->mutex);
  if (result->done.wait_for(lock, deadline, [&] { return result->finished; })) return result->text;
  impl_->store_wedged = true;
  return fmt::format(
      "; the rendezvous store at {}:{} did not answer within {} ms while checking the other ranks "
      "(a rank stopped in the middle of a store request holds rank 0's store; which ranks stopped "
      "is unknown)",
      world_.master_addr, world_.master_port, deadline.count());
}

template <class F>
void ProcessGroup::checked(const char* op, const std::string& stage, F&& call) const {
  try {
    call();
  } catch (const std::exception& e) {
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
    if (!stopped.empty())
      throw Error(
          fmt::format("waiting for '{}' during '{}' (rank {} of {})", key, stage_, world_.rank, world_.world_size),
          "another rank will not post it" + stopped);
    last_check = std::chrono::steady_clock::now();
  }
}

}  // namespace verlpp::hw
