// KvStore's C view (the callbacks plugins call) and the in-process store.
// Callbacks catch everything: they run inside plugin code and must not throw through it.
#include <verlpp/core/error.hpp>
#include <verlpp/core/log.hpp>
#include <verlpp/hw/kv_store.hpp>

#include <condition_variable>
#include <map>
#include <mutex>

namespace verlpp::hw {
namespace {

int32_t c_set(void* ctx, const char* key, const void* data, size_t size) {
  try {
    auto* p = static_cast<const uint8_t*>(data);
    static_cast<KvStore*>(ctx)->set(key, std::vector<uint8_t>(p, p + size));
    return VERLPP_STATUS_OK;
  } catch (const std::exception& e) {
    log(LogLevel::error, fmt::format("key-value store set('{}'): {}", key, e.what()));
    return VERLPP_STATUS_COMM_ERROR;
  }
}

int32_t c_get(void* ctx, const char* key, int64_t timeout_ms, verlpp_kv_sink sink, void* sink_ctx) {
  try {
    auto value = static_cast<KvStore*>(ctx)->get(key, std::chrono::milliseconds(timeout_ms));
    sink(sink_ctx, value.data(), value.size());
    return VERLPP_STATUS_OK;
  } catch (const std::exception& e) {
    std::string m = e.what();
    bool timed_out = m.find("imeout") != std::string::npos || m.find("imed out") != std::string::npos;
    log(timed_out ? LogLevel::warning : LogLevel::error, fmt::format("key-value store get('{}'): {}", key, m));
    return timed_out ? VERLPP_STATUS_TIMEOUT : VERLPP_STATUS_COMM_ERROR;
  }
}

int32_t c_add(void* ctx, const char* key, int64_t delta, int64_t* out) {
  try {
    int64_t v = static_cast<KvStore*>(ctx)->add(key, delta);
    if (out != nullptr) *out = v;
    return VERLPP_STATUS_OK;
  } catch (const std::exception& e) {
    log(LogLevel::error, fmt::format("key-value store add('{}'): {}", key, e.what()));
    return VERLPP_STATUS_COMM_ERROR;
  }
}

class MemoryStore : public KvStore {
 public:
  void set(const std::string& key, const std::vector<uint8_t>& value) override {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      values_[key] = value;
    }
    changed_.notify_all();
  }
  std::vector<uint8_t> get(const std::string& key, std::chrono::milliseconds timeout) override {
    std::unique_lock<std::mutex> lock(mutex_);
    if (!changed_.wait_for(lock, timeout, [&] { return values_.count(key) != 0; }))
      throw Error("key-value store",
                  fmt::format("timeout: key '{}' did not appear within {} ms", key, timeout.count()));
    return values_[key];
  }
  int64_t add(const std::string& key, int64_t delta) override {
    int64_t result;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      int64_t current = 0;
      auto it = values_.find(key);
      if (it != values_.end()) current = std::stoll(std::string(it->second.begin(), it->second.end()));
      result = current + delta;
      std::string text = std::to_string(result);
      values_[key] = std::vector<uint8_t>(text.begin(), text.end());
    }
    changed_.notify_all();
    return result;
  }

 private:
  std::mutex mutex_;
  std::condition_variable changed_;
  std::map<std::string, std::vector<uint8_t>> values_;
};

}  // namespace

KvStore::KvStore() {
  view_ = verlpp_kv_store{};
  view_.struct_size = sizeof(view_);
  view_.ctx = this;
  view_.set = &c_set;
  view_.get = &c_get;
  view_.add = &c_add;
}

std::shared_ptr<KvStore> make_memory_store() { return std::make_shared<MemoryStore>(); }

}  // namespace verlpp::hw
