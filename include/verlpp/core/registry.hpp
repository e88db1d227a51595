// Registry<Entry>: the one shape for named things that users extend (reward sources, batch reward
// functions, reward managers, loggers, agent loops, tools). An entry is registered in one line,
// from verlpp's own files, a linking program or a shared object loaded at run time alike:
//   static const bool registered = reward::sources().add("arith", score_arith);
// A name is registered once; a lookup of an unknown name is an Error naming the kind and listing
// the known names. Thread-safe: lookups copy the entry out under the lock.
#pragma once

#include <verlpp/core/error.hpp>
#include <verlpp/core/strings.hpp>

#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

namespace verlpp {

template <class Entry>
class Registry {
 public:
  // `kind` names what the registry holds in its errors ("reward source", "logger", "tool").
  explicit Registry(std::string kind) : kind_(std::move(kind)) {}
  // Calls add_builtins(*this) once, so that a function-local static holds the built-in entries
  // from its first use.
  Registry(std::string kind, void (*add_builtins)(Registry&)) : kind_(std::move(kind)) { add_builtins(*this); }
  Registry(const Registry&) = delete;
  Registry& operator=(const Registry&) = delete;

  // Registers `entry` as `name`; an empty name or one already registered is an Error. Returns
  // true, so that a registration can initialise a static (the one-line form above).
  bool add(const std::string& name, Entry entry) {
    if (name.empty()) throw Error("register " + kind_, "the name is empty");
    if constexpr (std::is_constructible_v<bool, const Entry&>)  // a function: not an empty one
      if (!static_cast<bool>(entry)) throw Error("register " + kind_, fmt::format("'{}': the function is empty", name));
    std::lock_guard<std::mutex> lock(mutex_);
    if (!entries_.emplace(name, std::move(entry)).second)
      throw Error("register " + kind_, fmt::format("'{}' is already registered", name));
    return true;
  }
  // Whether `name` is registered.
  bool contains(const std::string& name) const {
    std::lock_guard<std::mutex> lock(mutex_);
    return entries_.count(name) > 0;
  }
  // The entry of `name`, or nothing.
  std::optional<Entry> find(const std::string& name) const {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = entries_.find(name);
    if (it == entries_.end()) return std::nullopt;
    return it->second;
  }
  // The entry of `name`; an unknown name is an Error at `where` (a config key) listing the known.
  Entry get(const std::string& name, const std::string& where = "") const {
    if (std::optional<Entry> entry = find(name)) return std::move(*entry);
    throw unknown(name, where);
  }
  // The Error get() raises for an unknown `name`: "<where>: unknown <kind> '<name>'; known: ...".
  Error unknown(const std::string& name, const std::string& where = "") const {
    return Error(where.empty() ? kind_ : where,
                 fmt::format("unknown {} '{}'; known: {}", kind_, name, join(names(), ", ")));
  }
  // The registered names, sorted.
  std::vector<std::string> names() const {
    std::lock_guard<std::mutex> lock(mutex_);
    std::vector<std::string> out;
    for (const auto& item : entries_) out.push_back(item.first);
    return out;
  }
  const std::string& kind() const { return kind_; }

 private:
  std::string kind_;
  mutable std::mutex mutex_;
  std::map<std::string, Entry> entries_;
};

}  // namespace verlpp
