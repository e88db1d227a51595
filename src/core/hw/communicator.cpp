// Communicator: the host side of a plugin communicator (creation and the calls, checked).
#include <verlpp/hw/communicator.hpp>

namespace verlpp::hw {
namespace {
verlpp_stream handle_of(const Stream* s) { return s ? s->handle() : nullptr; }
}  // namespace

Communicator Communicator::create(const Device& device, std::shared_ptr<KvStore> store,
                                  const CommunicatorOptions& options) {
  const Plugin& plugin = device.plugin();
  plugin.require_slot(reinterpret_cast<const void*>(plugin.api().comm_create), "comm_create");
  if (options.world_size < 1 || options.rank < 0 || options.rank >= options.world_size)
    throw Error("Communicator::create",
                fmt::format("rank {} is outside a world of {}", options.rank, options.world_size));
  if (!store && options.world_size > 1)
    throw Error("Communicator::create", "a key-value store is required for more than one rank");
  if (!store) store = make_memory_store();
  verlpp_comm_config cfg{};
  cfg.struct_size = sizeof(cfg);
  cfg.rank = options.rank;
  cfg.world_size = options.world_size;
  cfg.device = device.index();
  cfg.timeout_ms = options.timeout.count();
  cfg.key_prefix = options.key_prefix.c_str();
  cfg.store = store->c_view();
  verlpp_comm handle = nullptr;
  plugin.check(plugin.api().comm_create(&cfg, &handle), "comm_create");
  return Communicator(plugin, handle, std::move(store), options.rank, options.world_size);
}

Communicator::Communicator(const Plugin& plugin, verlpp_comm handle, std::shared_ptr<KvStore> store, int32_t rank,
                           int32_t world_size)
    : plugin_(&plugin), handle_(handle), store_(std::move(store)), rank_(rank), world_size_(world_size) {}

Communicator::Communicator(Communicator&& o) noexcept
    : plugin_(o.plugin_), handle_(o.handle_), store_(std::move(o.store_)), rank_(o.rank_), world_size_(o.world_size_) {
  o.handle_ = nullptr;
}

Communicator::~Communicator() {
  if (handle_ != nullptr && plugin_->api().comm_destroy != nullptr) {
    verlpp_error* e = plugin_->api().comm_destroy(handle_);
    if (e != nullptr) plugin_->api().error_free(e);
  }
}

void Communicator::all_reduce(const DLTensor& send, DLTensor& recv, ReduceOp op, const Stream* s) const {
  plugin_->check(plugin_->api().comm_all_reduce(handle_, &send, &recv, int32_t(op), handle_of(s)), "comm_all_reduce");
}
void Communicator::all_reduce(DLTensor& buffer, ReduceOp op, const Stream* s) const {
  all_reduce(buffer, buffer, op, s);
}
void Communicator::all_gather(const DLTensor& send, DLTensor& recv, const Stream* s) const {
  plugin_->check(plugin_->api().comm_all_gather(handle_, &send, &recv, handle_of(s)), "comm_all_gather");
}
void Communicator::reduce_scatter(const DLTensor& send, DLTensor& recv, ReduceOp op, const Stream* s) const {
  plugin_->check(plugin_->api().comm_reduce_scatter(handle_, &send, &recv, int32_t(op), handle_of(s)),
                 "comm_reduce_scatter");
}
void Communicator::broadcast(DLTensor& buffer, int32_t root, const Stream* s) const {
  plugin_->check(plugin_->api().comm_broadcast(handle_, &buffer, root, handle_of(s)), "comm_broadcast");
}
void Communicator::send(const DLTensor& buffer, int32_t peer, const Stream* s) const {
  plugin_->check(plugin_->api().comm_send(handle_, &buffer, peer, handle_of(s)), "comm_send");
}
void Communicator::recv(DLTensor& buffer, int32_t peer, const Stream* s) const {
  plugin_->check(plugin_->api().comm_recv(handle_, &buffer, peer, handle_of(s)), "comm_recv");
}
void Communicator::barrier(const Stream* s) const {
  plugin_->check(plugin_->api().comm_barrier(handle_, handle_of(s)), "comm_barrier");
}

}  // namespace verlpp::hw
