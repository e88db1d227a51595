// cpu_ref: Communicator on Gloo. Reductions dispatch on dtype (bf16 goes through fp32, which
// gloo lacks); all-gather, broadcast and point-to-point move bytes; reduce-scatter is an
// all-reduce into scratch followed by taking this rank's chunk (simple; this is the reference).
#include "gloo_communicator.hpp"
#include "half_float.hpp"

#include <verlpp/sdk/dlpack_util.hpp>

#include <gloo/allgather.h>
#include <gloo/allreduce.h>
#include <gloo/barrier.h>
#include <gloo/broadcast.h>
#include <gloo/common/error.h>
#include <gloo/math.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/store.h>
#include <gloo/transport/tcp/device.h>

#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <map>
#include <string>
#include <vector>

namespace verlpp::cpu_ref {
namespace {

using sdk::fail;
using sdk::require;

// gloo's Store interface over the host's verlpp_kv_store callbacks.
class KvStoreAdapter : public gloo::rendezvous::Store {
 public:
  KvStoreAdapter(const verlpp_kv_store* kv, std::string prefix, std::chrono::milliseconds timeout)
      : kv_(kv), prefix_(std::move(prefix)), timeout_(timeout) {}

  void set(const std::string& key, const std::vector<char>& data) override {
    int32_t rc = kv_->set(kv_->ctx, full(key).c_str(), data.data(), data.size());
    if (rc != 0) fail(VERLPP_STATUS_COMM_ERROR, "key-value store set('" + full(key) + "') failed");
  }
  std::vector<char> get(const std::string& key) override { return fetch(key, timeout_); }
  void wait(const std::vector<std::string>& keys) override { wait(keys, timeout_); }
  void wait(const std::vector<std::string>& keys, const std::chrono::milliseconds& timeout) override {
    for (const auto& k : keys) fetch(k, timeout);
  }

 private:
  std::string full(const std::string& key) const { return prefix_ + key; }
  std::vector<char> fetch(const std::string& key, std::chrono::milliseconds timeout) {
    std::vector<char> out;
    auto sink = [](void* ctx, const void* data, size_t size) {
      auto* v = static_cast<std::vector<char>*>(ctx);
      v->assign(static_cast<const char*>(data), static_cast<const char*>(data) + size);
    };
    int32_t rc = kv_->get(kv_->ctx, full(key).c_str(), timeout.count(), sink, &out);
    if (rc == VERLPP_STATUS_TIMEOUT)
      fail(VERLPP_STATUS_TIMEOUT, "rendezvous: key '" + full(key) + "' did not appear within " +
                                      std::to_string(timeout.count()) + " ms (a rank is missing?)");
    if (rc != 0) fail(VERLPP_STATUS_COMM_ERROR, "key-value store get('" + full(key) + "') failed");
    return out;
  }

  const verlpp_kv_store* kv_;
  std::string prefix_;
  std::chrono::milliseconds timeout_;
};

// Where this rank listens: VERLPP_GLOO_IFNAME, VERLPP_GLOO_HOSTNAME, loopback when the
// rendezvous is local (MASTER_ADDR unset or loopback), else this machine's host name.
gloo::transport::tcp::attr listen_attr() {
  gloo::transport::tcp::attr attr;
  if (const char* ifname = std::getenv("VERLPP_GLOO_IFNAME")) {
    attr.iface = ifname;
    return attr;
  }
  if (const char* host = std::getenv("VERLPP_GLOO_HOSTNAME")) {
    attr.hostname = host;
    return attr;
  }
  const char* master = std::getenv("MASTER_ADDR");
  std::string m = master ? master : "";
  if (m.empty() || m == "localhost" || m.rfind("127.", 0) == 0 || m == "::1") {
    attr.hostname = "127.0.0.1";
  } else {
    char name[256] = {0};
    gethostname(name, sizeof(name) - 1);
    attr.hostname = name;
  }
  return attr;
}

using ReduceFn = void (*)(void*, const void*, const void*, size_t);

template <class T>
ReduceFn reduce_fn(verlpp_reduce_op op) {
  switch (op) {
    case VERLPP_REDUCE_MAX:
      return &gloo::max<T>;
    case VERLPP_REDUCE_MIN:
      return &gloo::min<T>;
    default:
      return &gloo::sum<T>;
  }
}

const char* op_name(verlpp_reduce_op op) {
  return op == VERLPP_REDUCE_MAX ? "max" : op == VERLPP_REDUCE_MIN ? "min" : "sum";
}

class GlooCommunicator : public sdk::Communicator {
 public:
  explicit GlooCommunicator(const verlpp_comm_config& c)
      : rank_(c.rank), world_(c.world_size), timeout_(c.timeout_ms > 0 ? c.timeout_ms : 300000) {
    auto store = std::make_shared<KvStoreAdapter>(c.store, std::string(c.key_prefix) + "gloo/", timeout_);
    context_ = std::make_shared<gloo::rendezvous::Context>(rank_, world_);
    context_->setTimeout(timeout_);
    if (world_ > 1) {
      auto device = gloo::transport::tcp::CreateDevice(listen_attr());
      run("rendezvous", [&] { context_->connectFullMesh(*store, device); });
    }
  }

  void all_reduce(const DLTensor& send, DLTensor& recv, verlpp_reduce_op op, verlpp_stream) override {
    check_pair(send, recv, 1, "all_reduce");
    if (sdk::data_ptr(send) != sdk::data_ptr(recv))
      std::memcpy(sdk::data_ptr(recv), sdk::data_ptr(send), sdk::nbytes(send));
    reduce_in_place(sdk::data_ptr(recv), size_t(sdk::numel(recv)), recv.dtype, op, "all_reduce");
  }

  void all_gather(const DLTensor& send, DLTensor& recv, verlpp_stream) override {
    check_pair(send, recv, world_, "all_gather");
    size_t bytes = sdk::nbytes(send);
    if (world_ == 1 || bytes == 0) {
      if (bytes) std::memcpy(sdk::data_ptr(recv), sdk::data_ptr(send), bytes);
      return;
    }
    run("all_gather", [&] {
      gloo::AllgatherOptions opts(context_);
      opts.setInput(static_cast<char*>(sdk::data_ptr(send)), bytes);
      opts.setOutput(static_cast<char*>(sdk::data_ptr(recv)), bytes * world_);
      opts.setTag(next_tag());
      opts.setTimeout(timeout_);
      gloo::allgather(opts);
    });
  }

  void reduce_scatter(const DLTensor& send, DLTensor& recv, verlpp_reduce_op op, verlpp_stream) override {
    check_pair(recv, send, world_, "reduce_scatter");
    std::vector<char> scratch(sdk::nbytes(send));
    if (!scratch.empty()) std::memcpy(scratch.data(), sdk::data_ptr(send), scratch.size());
    reduce_in_place(scratch.data(), size_t(sdk::numel(send)), send.dtype, op, "reduce_scatter");
    size_t chunk = sdk::nbytes(recv);
    if (chunk) std::memcpy(sdk::data_ptr(recv), scratch.data() + chunk * rank_, chunk);
  }

  void broadcast(DLTensor& buffer, int32_t root, verlpp_stream) override {
    require(root >= 0 && root < world_,
            "broadcast: root " + std::to_string(root) + " out of range [0, " + std::to_string(world_) + ")");
    check_tensor(buffer, "broadcast buffer");
    size_t bytes = sdk::nbytes(buffer);
    if (world_ == 1 || bytes == 0) return;
    run("broadcast", [&] {
      gloo::BroadcastOptions opts(context_);
      opts.setOutput(static_cast<char*>(sdk::data_ptr(buffer)), bytes);
      opts.setRoot(root);
      opts.setTag(next_tag());
      opts.setTimeout(timeout_);
      gloo::broadcast(opts);
    });
  }

  void send(const DLTensor& buffer, int32_t peer, verlpp_stream) override {
    check_peer(peer, "send");
    check_tensor(buffer, "send buffer");
    size_t bytes = sdk::nbytes(buffer);
    uint64_t slot = kP2pSlotBase + send_seq_[peer]++;
    if (bytes == 0) return;
    run("send to rank " + std::to_string(peer), [&] {
      auto buf = context_->createUnboundBuffer(sdk::data_ptr(buffer), bytes);
      buf->send(peer, slot);
      if (!buf->waitSend(timeout_)) fail(VERLPP_STATUS_COMM_ERROR, "send aborted");
    });
  }

  void recv(DLTensor& buffer, int32_t peer, verlpp_stream) override {
    check_peer(peer, "recv");
    check_tensor(buffer, "recv buffer");
    size_t bytes = sdk::nbytes(buffer);
    uint64_t slot = kP2pSlotBase + recv_seq_[peer]++;
    if (bytes == 0) return;
    run("recv from rank " + std::to_string(peer), [&] {
      auto buf = context_->createUnboundBuffer(sdk::data_ptr(buffer), bytes);
      buf->recv(peer, slot);
      if (!buf->waitRecv(timeout_)) fail(VERLPP_STATUS_COMM_ERROR, "recv aborted");
    });
  }

  void barrier(verlpp_stream) override {
    if (world_ == 1) return;
    run("barrier", [&] {
      gloo::BarrierOptions opts(context_);
      opts.setTag(next_tag());
      opts.setTimeout(timeout_);
      gloo::barrier(opts);
    });
  }

 private:
  // Point-to-point slots live far above the slots gloo derives from collective tags.
  static constexpr uint64_t kP2pSlotBase = uint64_t(1) << 56;

  uint32_t next_tag() { return tag_++; }

  // Runs a gloo call, turning its exceptions into plugin errors naming the op and the rank.
  template <class F>
  void run(const std::string& what, F&& body) {
    try {
      body();
    } catch (const sdk::PluginError& e) {
      fail(e.code(), prefix(what) + e.what());
    } catch (const gloo::IoException& e) {
      std::string m = e.what();
      bool timed_out = m.find("imed out") != std::string::npos || m.find("imeout") != std::string::npos;
      fail(timed_out ? VERLPP_STATUS_TIMEOUT : VERLPP_STATUS_COMM_ERROR,
           prefix(what) + (timed_out ? "timed out after " + std::to_string(timeout_.count()) + " ms: " : "") + m);
    } catch (const std::exception& e) {
      fail(VERLPP_STATUS_COMM_ERROR, prefix(what) + e.what());
    }
  }
  std::string prefix(const std::string& what) const {
    return "rank " + std::to_string(rank_) + "/" + std::to_string(world_) + " " + what + ": ";
  }

  void check_tensor(const DLTensor& t, const std::string& what) const {
    require(t.device.device_type == kDLCPU || t.device.device_type == kDLCUDAHost,
            what + " is not host memory (DLPack device type " + std::to_string(t.device.device_type) + ")");
    require(sdk::is_contiguous(t), what + " must be contiguous");
  }
  // `big` must hold `factor` times the elements of `small`, same dtype.
  void check_pair(const DLTensor& small, const DLTensor& big, int factor, const char* op) const {
    check_tensor(small, std::string(op) + " input");
    check_tensor(big, std::string(op) + " output");
    require(sdk::same_dtype(small.dtype, big.dtype), std::string(op) + ": dtypes differ (" +
                                                         sdk::dtype_name(small.dtype) + " vs " +
                                                         sdk::dtype_name(big.dtype) + ")");
    require(sdk::numel(big) == sdk::numel(small) * factor,
            std::string(op) + ": element counts " + std::to_string(sdk::numel(small)) + " and " +
                std::to_string(sdk::numel(big)) + " do not match (factor " + std::to_string(factor) + ")");
  }
  void check_peer(int32_t peer, const char* op) const {
    require(peer >= 0 && peer < world_ && peer != rank_, std::string(op) + ": peer " + std::to_string(peer) +
                                                             " is not another rank of [0, " + std::to_string(world_) +
                                                             ")");
  }

  template <class T>
  void gloo_allreduce(T* data, size_t n, verlpp_reduce_op op, const char* what) {
    run(std::string(what) + " (" + op_name(op) + ")", [&] {
      gloo::AllreduceOptions opts(context_);
      opts.setOutput(data, n);
      opts.setReduceFunction(reduce_fn<T>(op));
      opts.setTag(next_tag());
      opts.setTimeout(timeout_);
      gloo::allreduce(opts);
    });
  }

  void reduce_in_place(void* data, size_t n, DLDataType dtype, verlpp_reduce_op op, const char* what) {
    require(dtype.lanes == 1, std::string(what) + ": vector dtypes are not supported");
    if (world_ == 1 || n == 0) return;
    switch (dtype.code) {
      case kDLFloat:
        if (dtype.bits == 32) return gloo_allreduce(static_cast<float*>(data), n, op, what);
        if (dtype.bits == 64) return gloo_allreduce(static_cast<double*>(data), n, op, what);
        if (dtype.bits == 16) return gloo_allreduce(static_cast<gloo::float16*>(data), n, op, what);
        break;
      case kDLBfloat:
        if (dtype.bits == 16) {
          auto* h = static_cast<uint16_t*>(data);
          std::vector<float> f(n);
          for (size_t i = 0; i < n; ++i) f[i] = bf16_to_float(h[i]);
          gloo_allreduce(f.data(), n, op, what);
          for (size_t i = 0; i < n; ++i) h[i] = float_to_bf16(f[i]);
          return;
        }
        break;
      case kDLInt:
        if (dtype.bits == 8) return gloo_allreduce(static_cast<int8_t*>(data), n, op, what);
        if (dtype.bits == 32) return gloo_allreduce(static_cast<int32_t*>(data), n, op, what);
        if (dtype.bits == 64) return gloo_allreduce(static_cast<int64_t*>(data), n, op, what);
        break;
      case kDLUInt:
        if (dtype.bits == 8) return gloo_allreduce(static_cast<uint8_t*>(data), n, op, what);
        break;
      default:
        break;
    }
    fail(VERLPP_STATUS_UNSUPPORTED, std::string(what) + ": dtype " + sdk::dtype_name(dtype) + " cannot be reduced");
  }

  int32_t rank_, world_;
  std::chrono::milliseconds timeout_;
  std::shared_ptr<gloo::rendezvous::Context> context_;
  uint32_t tag_ = 1;
  std::map<int32_t, uint64_t> send_seq_, recv_seq_;
};

}  // namespace

std::unique_ptr<sdk::Communicator> make_gloo_communicator(const verlpp_comm_config& config) {
  return std::make_unique<GlooCommunicator>(config);
}

}  // namespace verlpp::cpu_ref
