// cuda: NcclCommunicator (see the header). Each operation is enqueued on the caller's stream
// (NULL = the legacy default stream, which also orders it after the host's LibTorch work) and
// then waited for: the ABI promises TIMEOUT instead of a hang, which needs someone to watch
// every operation, and the caller's thread is that watcher. A send to one's own rank is
// buffered (NCCL would need the matching recv in the same group call, which the ABI's separate
// send and recv cannot express); it is what a world of one rank needs for its send/recv ring.
#include "nccl_communicator.hpp"
#include "cuda_check.hpp"
#include "nccl_library.hpp"
#include "stream_registry.hpp"

#include <verlpp/sdk/dlpack_util.hpp>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <string>
#include <thread>

namespace verlpp::cuda {
namespace {

using sdk::fail;
using sdk::require;
using Clock = std::chrono::steady_clock;

constexpr int64_t kDefaultTimeoutMs = 600000;

int64_t timeout_ms_for(const verlpp_comm_config& config) {
  if (const char* env = std::getenv("VERLPP_NCCL_TIMEOUT_MS")) {
    char* end = nullptr;
    long long value = std::strtoll(env, &end, 10);
    if (end == env || *end != '\0' || value <= 0)
      fail(VERLPP_STATUS_INVALID_ARGUMENT,
           std::string("VERLPP_NCCL_TIMEOUT_MS='") + env + "' is not a positive integer");
    return value;
  }
  return config.timeout_ms > 0 ? config.timeout_ms : kDefaultTimeoutMs;
}

// Communicators created so far per key prefix in this process: all ranks create theirs in the
// same order (SPMD), so the count tells a second communicator's id apart from the first's.
int next_generation(const std::string& prefix) {
  static std::mutex mutex;
  static std::map<std::string, int> generations;
  std::lock_guard<std::mutex> lock(mutex);
  return generations[prefix]++;
}

const char* op_name(verlpp_reduce_op op) {
  return op == VERLPP_REDUCE_MAX ? "max" : op == VERLPP_REDUCE_MIN ? "min" : "sum";
}

ncclRedOp_t nccl_op(verlpp_reduce_op op) {
  return op == VERLPP_REDUCE_MAX ? ncclMax : op == VERLPP_REDUCE_MIN ? ncclMin : ncclSum;
}

ncclDataType_t nccl_type(DLDataType d, const std::string& what) {
  if (d.lanes == 1) {
    if (d.code == kDLFloat && d.bits == 16) return ncclFloat16;
    if (d.code == kDLFloat && d.bits == 32) return ncclFloat32;
    if (d.code == kDLFloat && d.bits == 64) return ncclFloat64;
    if (d.code == kDLBfloat && d.bits == 16) return ncclBfloat16;
    if (d.code == kDLInt && d.bits == 8) return ncclInt8;
    if (d.code == kDLInt && d.bits == 32) return ncclInt32;
    if (d.code == kDLInt && d.bits == 64) return ncclInt64;
    if (d.code == kDLUInt && d.bits == 8) return ncclUint8;
    if (d.code == kDLUInt && d.bits == 32) return ncclUint32;
    if (d.code == kDLUInt && d.bits == 64) return ncclUint64;
  }
  fail(VERLPP_STATUS_UNSUPPORTED, what + ": dtype " + sdk::dtype_name(d) + " cannot be reduced by NCCL");
}

const NcclLibrary& library() {
  std::string problem;
  const NcclLibrary* lib = nccl_library(&problem);
  if (lib == nullptr) fail(VERLPP_STATUS_UNSUPPORTED, "NCCL is not available: " + problem);
  return *lib;
}

// Sleeps a little longer each time, from a spin to 1 ms, so short operations return quickly
// and long ones do not burn a core.
void back_off(int round) {
  if (round < 64)
    std::this_thread::yield();
  else
    std::this_thread::sleep_for(std::chrono::microseconds(round < 1000 ? 50 : 1000));
}

class NcclCommunicator : public sdk::Communicator {
 public:
  explicit NcclCommunicator(const verlpp_comm_config& c)
      : nccl_(library()),
        rank_(c.rank),
        world_(c.world_size),
        device_(c.device),
        timeout_(std::chrono::milliseconds(timeout_ms_for(c))) {
    DeviceGuard device_guard(device_);
    ncclUniqueId id = exchange_unique_id(c);
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;  // init and operations return at once; we poll with a deadline
    const std::string what =
        "comm_create (NCCL " + nccl_version_text(nccl_.version) + ", device " + std::to_string(device_) + ")";
    ncclResult_t r = nccl_.CommInitRankConfig(&comm_, world_, id, rank_, &config);
    if (r != ncclSuccess && r != ncclInProgress) {
      if (comm_ != nullptr) nccl_.CommAbort(comm_);
      comm_ = nullptr;
      fail(VERLPP_STATUS_COMM_ERROR, prefix(what) + "ncclCommInitRankConfig failed: " + error_text(r));
    }
    settle(r, what);
    cuda_check(gpuEventCreateWithFlags(&done_, gpuEventDisableTiming), prefix(what) + VERLPP_GPU_API "EventCreate");
    cuda_check(gpuMalloc(&barrier_word_, sizeof(float)), prefix(what) + VERLPP_GPU_API "Malloc for the barrier");
    cuda_check(gpuMemset(barrier_word_, 0, sizeof(float)), prefix(what) + VERLPP_GPU_API "Memset for the barrier");
  }

  ~NcclCommunicator() override {
    try {
      DeviceGuard device_guard(device_);
      release();
    } catch (...) {
      // The device is gone: nothing left to release on it.
    }
  }

  void all_reduce(const DLTensor& send, DLTensor& recv, verlpp_reduce_op op, verlpp_stream stream) override {
    const std::string what = std::string("all_reduce (") + op_name(op) + ")";
    check_pair(send, recv, 1, what);
    ncclDataType_t type = nccl_type(recv.dtype, what);
    size_t count = size_t(sdk::numel(recv));
    if (count == 0) return;
    run(what, stream, [&](gpuStream_t s) {
      return nccl_.AllReduce(sdk::data_ptr(send), sdk::data_ptr(recv), count, type, nccl_op(op), comm_, s);
    });
  }

  void all_gather(const DLTensor& send, DLTensor& recv, verlpp_stream stream) override {
    check_pair(send, recv, world_, "all_gather");
    size_t bytes = sdk::nbytes(send);
    if (bytes == 0) return;
    run("all_gather", stream, [&](gpuStream_t s) {
      return nccl_.AllGather(sdk::data_ptr(send), sdk::data_ptr(recv), bytes, ncclUint8, comm_, s);
    });
  }

  void reduce_scatter(const DLTensor& send, DLTensor& recv, verlpp_reduce_op op, verlpp_stream stream) override {
    const std::string what = std::string("reduce_scatter (") + op_name(op) + ")";
    check_pair(recv, send, world_, what);
    ncclDataType_t type = nccl_type(recv.dtype, what);
    size_t count = size_t(sdk::numel(recv));
    if (count == 0) return;
    run(what, stream, [&](gpuStream_t s) {
      return nccl_.ReduceScatter(sdk::data_ptr(send), sdk::data_ptr(recv), count, type, nccl_op(op), comm_, s);
    });
  }

  void broadcast(DLTensor& buffer, int32_t root, verlpp_stream stream) override {
    require(root >= 0 && root < world_,
            "broadcast: root " + std::to_string(root) + " out of range [0, " + std::to_string(world_) + ")");
    check_tensor(buffer, "broadcast buffer");
    size_t bytes = sdk::nbytes(buffer);
    if (bytes == 0) return;
    run("broadcast from rank " + std::to_string(root), stream, [&](gpuStream_t s) {
      return nccl_.Broadcast(sdk::data_ptr(buffer), sdk::data_ptr(buffer), bytes, ncclUint8, root, comm_, s);
    });
  }

  void send(const DLTensor& buffer, int32_t peer, verlpp_stream stream) override {
    check_peer(peer, "send");
    check_tensor(buffer, "send buffer");
    size_t bytes = sdk::nbytes(buffer);
    if (bytes == 0) return;
    if (peer == rank_) return send_to_self(buffer, bytes, stream);
    run("send to rank " + std::to_string(peer), stream,
        [&](gpuStream_t s) { return nccl_.Send(sdk::data_ptr(buffer), bytes, ncclUint8, peer, comm_, s); });
  }

  void recv(DLTensor& buffer, int32_t peer, verlpp_stream stream) override {
    check_peer(peer, "recv");
    check_tensor(buffer, "recv buffer");
    size_t bytes = sdk::nbytes(buffer);
    if (bytes == 0) return;
    if (peer == rank_) return recv_from_self(buffer, bytes, stream);
    run("recv from rank " + std::to_string(peer), stream,
        [&](gpuStream_t s) { return nccl_.Recv(sdk::data_ptr(buffer), bytes, ncclUint8, peer, comm_, s); });
  }

  // NCCL has no barrier: a one-element all-reduce completes only when every rank has joined.
  void barrier(verlpp_stream stream) override {
    run("barrier", stream, [&](gpuStream_t s) {
      return nccl_.AllReduce(barrier_word_, barrier_word_, 1, ncclFloat32, ncclSum, comm_, s);
    });
  }

 private:
  // Frees this communicator's device objects and the NCCL communicator (destructor only).
  void release() noexcept {
    for (auto& [ptr, bytes] : self_queue_) (void)gpuFree(ptr);
    if (barrier_word_ != nullptr) (void)gpuFree(barrier_word_);
    if (done_ != nullptr) (void)gpuEventDestroy(done_);
    // Abort, not destroy: every operation has completed by now (each call waits for its own),
    // and abort is local and never waits on peers, whereas ncclCommDestroy of a non-blocking
    // communicator may finalize with them (and hang if one is gone). An aborted one is gone.
    if (comm_ != nullptr) nccl_.CommAbort(comm_);
  }

  ncclUniqueId exchange_unique_id(const verlpp_comm_config& c) {
    ncclUniqueId id;
    std::memset(&id, 0, sizeof(id));
    if (world_ == 1) {
      ncclResult_t r = nccl_.GetUniqueId(&id);
      if (r != ncclSuccess)
        fail(VERLPP_STATUS_COMM_ERROR, prefix("comm_create") + "ncclGetUniqueId failed: " + error_text(r));
      return id;
    }
    const verlpp_kv_store* kv = c.store;
    std::string key =
        std::string(c.key_prefix) + "nccl/" + std::to_string(next_generation(c.key_prefix)) + "/unique_id";
    if (rank_ == 0) {
      ncclResult_t r = nccl_.GetUniqueId(&id);
      if (r != ncclSuccess)
        fail(VERLPP_STATUS_COMM_ERROR, prefix("comm_create") + "ncclGetUniqueId failed: " + error_text(r));
      if (kv->set(kv->ctx, key.c_str(), &id, sizeof(id)) != 0)
        fail(VERLPP_STATUS_COMM_ERROR, prefix("comm_create") + "key-value store set('" + key + "') failed");
      return id;
    }
    struct Sink {
      ncclUniqueId* id;
      size_t size = 0;
    } sink{&id};
    auto receive = [](void* ctx, const void* data, size_t size) {
      auto* s = static_cast<Sink*>(ctx);
      s->size = size;
      if (size == sizeof(ncclUniqueId)) std::memcpy(s->id, data, size);
    };
    int32_t rc = kv->get(kv->ctx, key.c_str(), timeout_.count(), receive, &sink);
    if (rc == VERLPP_STATUS_TIMEOUT)
      fail(VERLPP_STATUS_TIMEOUT, prefix("comm_create") + "rank 0's NCCL unique id (key '" + key +
                                      "') did not appear within " + std::to_string(timeout_.count()) +
                                      " ms (is rank 0 running?)");
    if (rc != 0) fail(VERLPP_STATUS_COMM_ERROR, prefix("comm_create") + "key-value store get('" + key + "') failed");
    if (sink.size != sizeof(ncclUniqueId))
      fail(VERLPP_STATUS_COMM_ERROR, prefix("comm_create") + "key '" + key + "' holds " + std::to_string(sink.size) +
                                         " bytes, not an NCCL unique id (" + std::to_string(sizeof(ncclUniqueId)) +
                                         ")");
    return id;
  }

  // Enqueues one NCCL call on the caller's stream and waits for it, with the deadline.
  template <class Enqueue>
  void run(const std::string& what, verlpp_stream stream, Enqueue&& enqueue) {
    require_healthy(what);
    StreamTarget target = resolve_stream(stream, device_);
    require(target.device == device_, what + ": stream is on device " + std::to_string(target.device) +
                                          ", the communicator on device " + std::to_string(device_));
    DeviceGuard device_guard(device_);
    auto start = Clock::now();
    ncclResult_t r = enqueue(target.stream);
    if (r != ncclSuccess && r != ncclInProgress) {
      // Argument errors leave the communicator usable; anything else may not.
      const bool is_misuse = r == ncclInvalidArgument || r == ncclInvalidUsage;
      const std::string text = error_text(r);
      if (!is_misuse) abort_after(what + " failed: " + text);
      fail(is_misuse ? VERLPP_STATUS_INVALID_ARGUMENT : VERLPP_STATUS_COMM_ERROR, prefix(what) + text);
    }
    settle(r, what, start);
    cuda_check(gpuEventRecord(done_, target.stream), prefix(what) + VERLPP_GPU_API "EventRecord");
    for (int round = 0;; ++round) {
      gpuError_t q = gpuEventQuery(done_);
      if (q == gpuSuccess) return;
      if (q != gpuErrorNotReady) {
        abort_after(what + ": the device failed");
        cuda_check(q, prefix(what) + "waiting for completion");
      }
      check_async(what);
      if (Clock::now() - start > timeout_) {
        abort_after(what + " timed out");
        fail(VERLPP_STATUS_TIMEOUT, prefix(what) + "did not finish within " + std::to_string(timeout_.count()) +
                                        " ms (a peer is missing or stuck?); the communicator was aborted");
      }
      back_off(round);
    }
  }

  // In non-blocking mode a call may return ncclInProgress: poll until NCCL has settled it.
  void settle(ncclResult_t r, const std::string& what, Clock::time_point start = Clock::now()) {
    for (int round = 0; r == ncclInProgress; ++round) {
      if (Clock::now() - start > timeout_) {
        abort_after(what + " timed out");
        fail(VERLPP_STATUS_TIMEOUT, prefix(what) + "NCCL was still in progress after " +
                                        std::to_string(timeout_.count()) +
                                        " ms (is every rank running?); the communicator was aborted");
      }
      back_off(round);
      if (comm_ == nullptr || nccl_.CommGetAsyncError(comm_, &r) != ncclSuccess) break;
    }
    if (r != ncclSuccess) {
      const std::string text = error_text(r);
      abort_after(what + " failed: " + text);
      fail(VERLPP_STATUS_COMM_ERROR, prefix(what) + text);
    }
  }

  // Fails (and aborts) when NCCL reports an asynchronous error, e.g. a peer that went away.
  void check_async(const std::string& what) {
    ncclResult_t state = ncclSuccess;
    if (comm_ == nullptr) return;
    if (nccl_.CommGetAsyncError(comm_, &state) != ncclSuccess) return;
    if (state == ncclSuccess || state == ncclInProgress) return;
    std::string text = error_text(state);
    abort_after(what + " failed: " + text);
    fail(VERLPP_STATUS_COMM_ERROR, prefix(what) + "NCCL reported " + text + "; the communicator was aborted");
  }

  void abort_after(const std::string& reason) {
    if (!broken_.empty() || comm_ == nullptr) return;
    broken_ = reason;
    nccl_.CommAbort(comm_);
    comm_ = nullptr;  // freed by the abort; nothing may touch it again
  }

  void require_healthy(const std::string& what) const {
    if (!broken_.empty())
      fail(VERLPP_STATUS_COMM_ERROR,
           prefix(what) + "the communicator is unusable after an earlier error (" + broken_ + "); create a new one");
  }

  std::string error_text(ncclResult_t r) const {
    std::string text = nccl_.GetErrorString ? nccl_.GetErrorString(r) : ("ncclResult " + std::to_string(int(r)));
    if (nccl_.GetLastError != nullptr && comm_ != nullptr) {
      const char* last = nccl_.GetLastError(comm_);
      if (last != nullptr && *last != '\0') text += " (" + std::string(last) + ")";
    }
    return text;
  }

  std::string prefix(const std::string& what) const {
    return "rank " + std::to_string(rank_) + "/" + std::to_string(world_) + " " + what + ": ";
  }

  void send_to_self(const DLTensor& buffer, size_t bytes, verlpp_stream stream) {
    require_healthy("send to self");
    StreamTarget target = resolve_stream(stream, device_);
    DeviceGuard device_guard(device_);
    void* copy = nullptr;
    cuda_check(gpuMalloc(&copy, bytes),
               prefix("send to self") + VERLPP_GPU_API "Malloc of " + std::to_string(bytes) + " bytes");
    gpuError_t e = gpuMemcpyAsync(copy, sdk::data_ptr(buffer), bytes, gpuMemcpyDeviceToDevice, target.stream);
    if (e == gpuSuccess) e = gpuStreamSynchronize(target.stream);
    if (e != gpuSuccess) {
      (void)gpuFree(copy);
      cuda_check(e, prefix("send to self") + "copy");
    }
    self_queue_.emplace_back(copy, bytes);
  }

  void recv_from_self(DLTensor& buffer, size_t bytes, verlpp_stream stream) {
    require(!self_queue_.empty(),
            prefix("recv from self") + "no send to this rank is pending (a send to oneself must come first)");
    auto [copy, sent] = self_queue_.front();
    require(sent == bytes, prefix("recv from self") + "the pending send has " + std::to_string(sent) +
                               " bytes, the buffer " + std::to_string(bytes));
    self_queue_.pop_front();
    StreamTarget target = resolve_stream(stream, device_);
    DeviceGuard device_guard(device_);
    gpuError_t e = gpuMemcpyAsync(sdk::data_ptr(buffer), copy, bytes, gpuMemcpyDeviceToDevice, target.stream);
    if (e == gpuSuccess) e = gpuStreamSynchronize(target.stream);
    (void)gpuFree(copy);
    cuda_check(e, prefix("recv from self") + "copy");
  }

  void check_tensor(const DLTensor& t, const std::string& what) const {
    require(t.device.device_type == VERLPP_GPU_DL_DEVICE,
            prefix(what) + "is not " VERLPP_GPU_PLATFORM " device memory (DLPack device type " +
                std::to_string(int(t.device.device_type)) + ")");
    require(t.device.device_id == device_, prefix(what) + "is on device " + std::to_string(t.device.device_id) +
                                               ", the communicator on device " + std::to_string(device_));
    require(sdk::is_contiguous(t), prefix(what) + "must be contiguous");
  }
  // `big` must hold `factor` times the elements of `small`, same dtype.
  void check_pair(const DLTensor& small, const DLTensor& big, int factor, const std::string& op) const {
    check_tensor(small, op + " input");
    check_tensor(big, op + " output");
    require(sdk::same_dtype(small.dtype, big.dtype),
            prefix(op) + "dtypes differ (" + sdk::dtype_name(small.dtype) + " vs " + sdk::dtype_name(big.dtype) + ")");
    require(sdk::numel(big) == sdk::numel(small) * factor,
            prefix(op) + "element counts " + std::to_string(sdk::numel(small)) + " and " +
                std::to_string(sdk::numel(big)) + " do not match (factor " + std::to_string(factor) + ")");
  }
  void check_peer(int32_t peer, const char* op) const {
    require(peer >= 0 && peer < world_,
            prefix(op) + "peer " + std::to_string(peer) + " is not a rank of [0, " + std::to_string(world_) + ")");
  }

  const NcclLibrary& nccl_;
  int32_t rank_, world_, device_;
  std::chrono::milliseconds timeout_;
  ncclComm_t comm_ = nullptr;
  gpuEvent_t done_ = nullptr;
  float* barrier_word_ = nullptr;                    // [1] f32, device: the barrier's all-reduce operand
  std::string broken_;                               // why the communicator was aborted; empty while healthy
  std::deque<std::pair<void*, size_t>> self_queue_;  // buffered sends to this rank, oldest first
};

}  // namespace

std::unique_ptr<sdk::Communicator> make_nccl_communicator(const verlpp_comm_config& config) {
  return std::make_unique<NcclCommunicator>(config);
}

std::string nccl_problem() {
  std::string problem;
  return nccl_library(&problem) == nullptr ? problem : std::string();
}

}  // namespace verlpp::cuda
