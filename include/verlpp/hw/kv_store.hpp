// Rendezvous key-value stores handed to plugins (as verlpp_kv_store callbacks) so that their
// communicators can bootstrap: LibTorch's c10d TCPStore across processes and machines, or an
// in-process store for single-process use and tests.
#pragma once

#include <verlpp/plugin_abi.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace verlpp::hw {

// A shared key-value store. Thread-safe. get() blocks until the key exists or times out.
class KvStore {
 public:
  KvStore();
  virtual ~KvStore() = default;
  KvStore(const KvStore&) = delete;
  KvStore& operator=(const KvStore&) = delete;

  virtual void set(const std::string& key, const std::vector<uint8_t>& value) = 0;
  // Throws Error (naming the key and the timeout) if the key does not appear in time.
  virtual std::vector<uint8_t> get(const std::string& key, std::chrono::milliseconds timeout) = 0;
  // Atomically adds delta to the integer at key (0 if absent) and returns the result.
  virtual int64_t add(const std::string& key, int64_t delta) = 0;

  // The C view passed to plugins; valid as long as this object lives.
  const verlpp_kv_store* c_view() const { return &view_; }

 private:
  verlpp_kv_store view_;
};

// Options for a TCP rendezvous store (c10d TCPStore).
struct TcpStoreOptions {
  std::string host = "127.0.0.1";
  uint16_t port = 0;       // 0 on the server: pick a free port (see TcpStore port())
  bool is_server = false;  // exactly one process (rank 0) serves
  int world_size = 1;      // processes that will connect, the server included
  std::chrono::milliseconds timeout{300000};
};

// Creates a c10d TCPStore client or server. Throws Error naming host:port on failure.
std::shared_ptr<KvStore> make_tcp_store(const TcpStoreOptions& options);

// The port a TCP store listens on (useful after asking for port 0).
uint16_t tcp_store_port(const KvStore& store);

// An in-process store (no networking), for one process.
std::shared_ptr<KvStore> make_memory_store();

}  // namespace verlpp::hw
