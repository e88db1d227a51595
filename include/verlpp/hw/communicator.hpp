// A plugin communicator as a C++ object: created collectively by every rank of a group over a
// shared KvStore, destroyed with the object. Operations take borrowed DLPack tensors and throw
// PluginCallError (naming the plugin, the op, and the rank where the plugin says it) on failure.
#pragma once

#include <verlpp/hw/device.hpp>
#include <verlpp/hw/kv_store.hpp>

#include <chrono>
#include <memory>
#include <string>

namespace verlpp::hw {

enum class ReduceOp { sum = VERLPP_REDUCE_SUM, max = VERLPP_REDUCE_MAX, min = VERLPP_REDUCE_MIN };

// Settings for Communicator::create.
struct CommunicatorOptions {
  int32_t rank = 0;
  int32_t world_size = 1;
  std::string key_prefix = "verlpp/";  // distinguishes several groups sharing one store
  std::chrono::milliseconds timeout{300000};
};

class Communicator {
 public:
  // Collective: every rank calls it with the same world_size and key_prefix.
  static Communicator create(const Device& device, std::shared_ptr<KvStore> store, const CommunicatorOptions& options);
  Communicator(Communicator&& other) noexcept;
  Communicator& operator=(Communicator&&) = delete;
  ~Communicator();

  int32_t rank() const { return rank_; }
  int32_t world_size() const { return world_size_; }

  void all_reduce(const DLTensor& send, DLTensor& recv, ReduceOp op, const Stream* stream = nullptr) const;
  // In place: buffer = op over ranks of buffer.
  void all_reduce(DLTensor& buffer, ReduceOp op, const Stream* stream = nullptr) const;
  // recv [world * n] = rank-ordered concatenation of send [n].
  void all_gather(const DLTensor& send, DLTensor& recv, const Stream* stream = nullptr) const;
  // recv [n] = op over ranks of this rank's chunk of send [world * n].
  void reduce_scatter(const DLTensor& send, DLTensor& recv, ReduceOp op, const Stream* stream = nullptr) const;
  void broadcast(DLTensor& buffer, int32_t root, const Stream* stream = nullptr) const;
  void send(const DLTensor& buffer, int32_t peer, const Stream* stream = nullptr) const;
  void recv(DLTensor& buffer, int32_t peer, const Stream* stream = nullptr) const;
  void barrier(const Stream* stream = nullptr) const;

 private:
  Communicator(const Plugin& plugin, verlpp_comm handle, std::shared_ptr<KvStore> store, int32_t rank,
               int32_t world_size);
  const Plugin* plugin_;
  verlpp_comm handle_;
  std::shared_ptr<KvStore> store_;  // must outlive the plugin communicator
  int32_t rank_, world_size_;
};

}  // namespace verlpp::hw
