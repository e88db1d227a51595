// The TCP rendezvous store: a thin KvStore over LibTorch's c10d::TCPStore (no home-made
// networking). The one file of the hardware layer that includes c10d headers.
#include <verlpp/core/error.hpp>
#include <verlpp/hw/kv_store.hpp>

#include <torch/csrc/distributed/c10d/TCPStore.hpp>

namespace verlpp::hw {
namespace {

class TcpStore : public KvStore {
 public:
  explicit TcpStore(const TcpStoreOptions& o) : where_(fmt::format("TCP store {}:{}", o.host, o.port)) {
    c10d::TCPStoreOptions opts;
    opts.port = o.port;
    opts.isServer = o.is_server;
    opts.numWorkers = o.world_size;
    opts.waitWorkers = false;  // ranks join at their own pace; collectives wait for them
    opts.timeout = o.timeout;
    try {
      store_ = c10::make_intrusive<c10d::TCPStore>(o.host, opts);
    } catch (const std::exception& e) {
      throw Error(where_,
                  fmt::format("cannot {} the rendezvous store: {}", o.is_server ? "start" : "connect to", e.what()));
    }
    where_ = fmt::format("TCP store {}:{}", o.host, store_->getPort());
  }

  void set(const std::string& key, const std::vector<uint8_t>& value) override { store_->set(key, value); }

  std::vector<uint8_t> get(const std::string& key, std::chrono::milliseconds timeout) override {
    try {
      store_->wait({key}, timeout);
    } catch (const std::exception& e) {
      throw Error(where_,
                  fmt::format("timeout: key '{}' did not appear within {} ms ({})", key, timeout.count(), e.what()));
    }
    return store_->get(key);
  }

  int64_t add(const std::string& key, int64_t delta) override { return store_->add(key, delta); }

  uint16_t port() const { return store_->getPort(); }

 private:
  std::string where_;
  c10::intrusive_ptr<c10d::TCPStore> store_;
};

}  // namespace

std::shared_ptr<KvStore> make_tcp_store(const TcpStoreOptions& options) { return std::make_shared<TcpStore>(options); }

uint16_t tcp_store_port(const KvStore& store) {
  auto* tcp = dynamic_cast<const TcpStore*>(&store);
  if (tcp == nullptr) throw Error("tcp_store_port", "the store is not a TCP store");
  return tcp->port();
}

}  // namespace verlpp::hw
