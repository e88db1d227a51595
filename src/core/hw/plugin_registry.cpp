// Plugin discovery and loading. Order per file: open (Boost.DLL), probe symbol, entry symbol,
// probe score, table size and major checks, name checks; then the best variant per name is
// chosen and only the winners are initialised. Shared objects of loaded plugins are never
// unloaded (their handles are deliberately leaked): plugins live as long as the process.
#include <verlpp/core/log.hpp>
#include <verlpp/hw/plugin_registry.hpp>

#include "probe_in_child.hpp"

#include <boost/dll/runtime_symbol_info.hpp>
#include <boost/dll/shared_library.hpp>
#include <verlpp/core/strings.hpp>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <set>

#ifndef VERLPP_INSTALL_PLUGIN_DIR
#define VERLPP_INSTALL_PLUGIN_DIR "/usr/local/lib/verlpp/plugins"
#endif

namespace fs = std::filesystem;

namespace verlpp::hw {
namespace {

constexpr const char* kPrefix = "libverlpp-plugin-";
constexpr const char* kSuffix = ".so";

// One file under consideration.
struct Candidate {
  std::string path;  // canonical
  std::unique_ptr<boost::dll::shared_library> library;
  verlpp_plugin_api table{};  // host's full-size copy
  size_t table_size = 0;      // what the plugin declared
  int32_t score = 0;
  std::string name, variant;
};

void host_log(void*, int32_t level, const char* plugin, const char* message) {
  LogLevel l = level <= VERLPP_LOG_DEBUG     ? LogLevel::debug
               : level == VERLPP_LOG_INFO    ? LogLevel::info
               : level == VERLPP_LOG_WARNING ? LogLevel::warning
                                             : LogLevel::error;
  log(l, fmt::format("plugin {}: {}", plugin ? plugin : "?", message ? message : ""));
}

const verlpp_host_api& host_api() {
  static const verlpp_host_api api = [] {
    verlpp_host_api a{};
    a.struct_size = sizeof(a);
    a.host_abi_major = VERLPP_PLUGIN_ABI_MAJOR;
    a.host_abi_minor = VERLPP_PLUGIN_ABI_MINOR;
    a.ctx = nullptr;
    a.log = &host_log;
    return a;
  }();
  return api;
}

bool valid_name(const std::string& name) {
  if (name.empty()) return false;
  return std::all_of(name.begin(), name.end(),
                     [](char c) { return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_'; });
}

// "cuda-sm90" from "libverlpp-plugin-cuda-sm90.so"; empty when the file name does not match.
std::string stem_of(const std::string& file_name) {
  std::string prefix = kPrefix;
  if (file_name.size() <= prefix.size() + 3 || file_name.rfind(prefix, 0) != 0 || !ends_with(file_name, kSuffix))
    return {};
  return file_name.substr(prefix.size(), file_name.size() - prefix.size() - 3);
}

// Names of required slots that are NULL in `t`.
std::vector<std::string> missing_required(const verlpp_plugin_api& t) {
  std::vector<std::string> missing;
  auto need = [&](const void* slot, const char* name) {
    if (slot == nullptr) missing.push_back(name);
  };
  need(reinterpret_cast<const void*>(t.init), "init");
  need(reinterpret_cast<const void*>(t.error_free), "error_free");
  need(reinterpret_cast<const void*>(t.device_count), "device_count");
  need(reinterpret_cast<const void*>(t.device_get_properties), "device_get_properties");
  need(reinterpret_cast<const void*>(t.device_memory_info), "device_memory_info");
  need(reinterpret_cast<const void*>(t.mem_alloc), "mem_alloc");
  need(reinterpret_cast<const void*>(t.mem_free), "mem_free");
  need(reinterpret_cast<const void*>(t.memcpy_async), "memcpy_async");
  return missing;
}

// Opens and checks one file without initialising it. Returns "" on success, else the reason.
// With options.isolate_probes the file is first opened and probed in a child process, so that
// a crash, an abort or a hang there is a rejection; the probe's answer is then taken from the
// child and not asked again here.
std::string inspect(Candidate& c, const DiscoveryOptions& options) {
  std::error_code ec;
  if (!fs::exists(c.path, ec)) return "file does not exist";
  if (!fs::is_regular_file(c.path, ec)) return "not a regular file";
  detail::ChildProbe child;
  if (options.isolate_probes) {
    child = detail::probe_in_child(c.path, VERLPP_PLUGIN_PROBE_SYMBOL, options.probe_timeout_ms);
    if (!child.failure.empty()) return child.failure;
  }
  try {
    // Plain RTLD_LOCAL, not RTLD_DEEPBIND: deep binding made libgloo bind libstdc++ vtables
    // to copies inside the plugin and crash (LibTorch 2.11 host). A plugin must therefore not
    // depend on a library whose symbols LibTorch also exports (see plugins/cpu_ref/CMakeLists).
    c.library = std::make_unique<boost::dll::shared_library>(
        c.path, boost::dll::load_mode::rtld_lazy | boost::dll::load_mode::rtld_local);
  } catch (const std::exception& e) {
    return fmt::format("cannot be loaded as a shared object: {}", e.what());
  }
  auto& lib = *c.library;
  if (!lib.has(VERLPP_PLUGIN_PROBE_SYMBOL) || !lib.has(VERLPP_PLUGIN_GET_API_SYMBOL)) {
    for (int major = 2; major <= 9; ++major)
      if (lib.has(fmt::format("verlpp_plugin_get_api_v{}", major)))
        return fmt::format("built for plugin ABI major {}; this host speaks major {}", major, VERLPP_PLUGIN_ABI_MAJOR);
    return fmt::format("has no symbol {} (not a verlpp plugin of ABI major {})",
                       lib.has(VERLPP_PLUGIN_PROBE_SYMBOL) ? VERLPP_PLUGIN_GET_API_SYMBOL : VERLPP_PLUGIN_PROBE_SYMBOL,
                       VERLPP_PLUGIN_ABI_MAJOR);
  }
  auto probe = lib.get<int32_t(char*, size_t)>(VERLPP_PLUGIN_PROBE_SYMBOL);
  auto get_api = lib.get<const verlpp_plugin_api*(uint32_t)>(VERLPP_PLUGIN_GET_API_SYMBOL);

  // The child's answer stands when it says yes. A no is asked again here: the child showed that
  // the probe returns, but a forked child cannot initialise some drivers that its parent already
  // did (CUDA: cuInit fails in the child of a process that uses CUDA), so it may say no wrongly.
  std::string reason;
  if (child.probed && child.score > 0) {
    c.score = child.score;
    reason = child.reason;
  } else {
    char buffer[512] = {0};
    c.score = probe(buffer, sizeof(buffer));
    buffer[sizeof(buffer) - 1] = '\0';
    reason = buffer;
  }
  if (c.score <= 0)
    return fmt::format("probe says it cannot run here: {}", reason.empty() ? "(no reason given)" : reason);

  const verlpp_plugin_api* table = get_api(VERLPP_PLUGIN_ABI_MINOR);
  if (table == nullptr)
    return fmt::format("{}({}) returned NULL", VERLPP_PLUGIN_GET_API_SYMBOL, VERLPP_PLUGIN_ABI_MINOR);
  if (table->struct_size < VERLPP_PLUGIN_API_MIN_SIZE)
    return fmt::format("API table is {} bytes, below the minimum of {} (corrupt or not a verlpp plugin)",
                       table->struct_size, VERLPP_PLUGIN_API_MIN_SIZE);
  if (table->abi_major != VERLPP_PLUGIN_ABI_MAJOR)
    return fmt::format("built for plugin ABI major {}; this host speaks major {}", table->abi_major,
                       VERLPP_PLUGIN_ABI_MAJOR);
  // Read the first min(plugin's, host's) bytes; everything past an older table stays NULL.
  c.table_size = table->struct_size;
  c.table = verlpp_plugin_api{};
  std::memcpy(&c.table, table, std::min(c.table_size, sizeof(verlpp_plugin_api)));
  c.table.struct_size = sizeof(verlpp_plugin_api);
  c.name = c.table.name ? c.table.name : "";
  c.variant = c.table.variant ? c.table.variant : "";
  if (!valid_name(c.name)) return fmt::format("declares an invalid name '{}' (want [a-z0-9_]+)", c.name);
  std::string stem = stem_of(fs::path(c.path).filename().string());
  std::string expected = c.variant.empty() ? c.name : c.name + "-" + c.variant;
  if (!stem.empty() && stem != expected)
    return fmt::format("declares name '{}' variant '{}', but its file name says '{}'", c.name, c.variant, stem);
  auto missing = missing_required(c.table);
  if (!missing.empty())
    return fmt::format("lacks required function(s) {} (table of {} bytes)", join(missing, ", "), c.table_size);
  return {};
}

// Initialises an inspected candidate. Returns "" on success, else the reason.
std::string initialise(Candidate& c) {
  verlpp_error* error = c.table.init(&host_api());
  if (error == nullptr) return {};
  std::string message = error->message ? error->message : "(no message)";
  int32_t code = error->code;
  c.table.error_free(error);
  return fmt::format("init failed: {} ({})", message, status_name(code));
}

std::string canonical(const std::string& path) {
  std::error_code ec;
  fs::path p = fs::weakly_canonical(fs::absolute(path), ec);
  return ec ? path : p.string();
}

// Plugin files in `dirs` (search order kept) whose stem satisfies `accept`.
std::vector<std::string> scan(const std::vector<std::string>& dirs,
                              const std::function<bool(const std::string&)>& accept) {
  std::vector<std::string> found;
  for (const auto& dir : dirs) {
    std::error_code ec;
    std::vector<std::string> here;
    for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
      std::string stem = stem_of(it->path().filename().string());
      if (!stem.empty() && accept(stem)) here.push_back(it->path().string());
    }
    std::sort(here.begin(), here.end());
    found.insert(found.end(), here.begin(), here.end());
  }
  return found;
}

Plugin adopt(Candidate& c) {
  Plugin p(c.path, c.score, c.table, c.table_size);
  c.library.release();  // never unloaded
  return p;
}

std::string describe(const std::vector<std::string>& items) {
  return items.empty() ? std::string("(none)") : join(items, ", ");
}

// Loads the best of `paths` for an explicit request (`label` says how it was requested, e.g.
// "VERL_HARDWARE_PLUGIN=cuda"); throws an Error naming each file and its reason on failure.
Plugin load_requested(const std::string& label, const std::vector<std::string>& paths,
                      const DiscoveryOptions& options) {
  std::vector<std::unique_ptr<Candidate>> ok;
  std::vector<std::string> failures;
  for (const auto& path : paths) {
    auto c = std::make_unique<Candidate>();
    c->path = canonical(path);
    std::string why = inspect(*c, options);
    if (why.empty())
      ok.push_back(std::move(c));
    else
      failures.push_back(fmt::format("{}: {}", c->path, why));
  }
  if (ok.empty()) throw Error(label, fmt::format("the requested plugin cannot be loaded: {}", join(failures, "; ")));
  auto best = std::max_element(ok.begin(), ok.end(), [](const auto& a, const auto& b) { return a->score < b->score; });
  std::string why = initialise(**best);
  if (!why.empty()) throw Error((*best)->path, "the requested plugin cannot be loaded: " + why);
  return adopt(**best);
}

}  // namespace

DiscoveryOptions DiscoveryOptions::from_environment() {
  DiscoveryOptions o;
  if (const char* r = std::getenv("VERL_HARDWARE_PLUGIN")) o.requested = r;
  if (const char* p = std::getenv("VERLPP_PLUGIN_PATH")) o.search_dirs = split(p, ':');
  if (const char* t = std::getenv("VERLPP_PLUGIN_PROBE_TIMEOUT_MS")) {
    char* end = nullptr;
    const long long ms = std::strtoll(t, &end, 10);
    if (end == t || *end != '\0' || ms <= 0)
      throw Error("VERLPP_PLUGIN_PROBE_TIMEOUT_MS=" + std::string(t), "not a positive number of milliseconds");
    o.probe_timeout_ms = ms;
  }
  o.search_dirs.push_back(install_plugin_dir());
  o.search_dirs.push_back(executable_dir());
  return o;
}

std::string install_plugin_dir() { return VERLPP_INSTALL_PLUGIN_DIR; }

std::string executable_dir() {
  boost::dll::fs::error_code ec;
  auto p = boost::dll::program_location(ec);
  return ec ? std::string(".") : p.parent_path().string();
}

Plugin load_plugin_file(const std::string& path, const DiscoveryOptions& options) {
  return load_requested("plugin file " + path, {path}, options);
}

DiscoveryResult discover_plugins(const DiscoveryOptions& options) {
  DiscoveryResult result;
  // Folders, de-duplicated by real path, in order.
  std::set<std::string> seen_dirs;
  for (const auto& d : options.search_dirs) {
    std::string c = canonical(d);
    if (seen_dirs.insert(c).second) result.searched_dirs.push_back(c);
  }
  std::string requested = options.requested;
  if (requested == "none") {
    result.disabled = true;
    return result;
  }

  if (!requested.empty()) {
    std::set<std::string> names_loaded;
    for (const std::string& item : split(requested, ',')) {
      bool is_path = item.find('/') != std::string::npos || ends_with(item, ".so");
      std::vector<std::string> paths;
      if (is_path) {
        std::error_code ec;
        if (!fs::exists(item, ec)) throw Error("VERL_HARDWARE_PLUGIN=" + item, "no such file: " + item);
        paths.push_back(item);
      } else {
        if (!valid_name(item))
          throw Error("VERL_HARDWARE_PLUGIN=" + item,
                      "'" + item + "' is neither a path nor a plugin name ([a-z0-9_]+)");
        paths = scan(result.searched_dirs,
                     [&](const std::string& stem) { return stem == item || stem.rfind(item + "-", 0) == 0; });
        if (paths.empty())
          throw Error("VERL_HARDWARE_PLUGIN=" + item,
                      fmt::format("no plugin named '{}' (looked for {}{}.so and {}{}-*.so in {})", item, kPrefix, item,
                                  kPrefix, item, describe(result.searched_dirs)));
      }
      Plugin p = load_requested("VERL_HARDWARE_PLUGIN=" + item, paths, options);
      if (!names_loaded.insert(p.name()).second) {
        result.rejected.push_back({p.path(), p.name(), "duplicate: a plugin of this name is already loaded"});
        continue;
      }
      result.loaded.push_back(std::move(p));
    }
    return result;
  }

  // Scan: everything that looks like a plugin; failures are listed, never fatal.
  std::vector<std::unique_ptr<Candidate>> ok;
  std::set<std::string> seen_files;
  std::map<std::pair<std::string, std::string>, std::string> first_of;  // (name, variant) -> path
  for (const auto& path : scan(result.searched_dirs, [](const std::string&) { return true; })) {
    std::string real = canonical(path);
    if (!seen_files.insert(real).second) continue;  // the same file reached twice
    auto c = std::make_unique<Candidate>();
    c->path = real;
    std::string why = inspect(*c, options);
    if (!why.empty()) {
      result.rejected.push_back({c->path, c->name, why});
      continue;
    }
    auto key = std::make_pair(c->name, c->variant);
    auto [it, fresh] = first_of.emplace(key, c->path);
    if (!fresh) {
      result.rejected.push_back(
          {c->path, c->name, "duplicate of " + it->second + " (same name and variant; the first found wins)"});
      continue;
    }
    ok.push_back(std::move(c));
  }
  // Best-scoring variant per name.
  std::map<std::string, Candidate*> best;
  for (auto& c : ok) {
    auto& slot = best[c->name];
    if (slot == nullptr || c->score > slot->score) slot = c.get();
  }
  for (auto& c : ok) {
    Candidate* winner = best[c->name];
    if (winner != c.get()) {
      result.rejected.push_back({c->path, c->name,
                                 fmt::format("variant '{}' (score {}) lost to '{}' (score {})", c->variant, c->score,
                                             winner->variant, winner->score)});
      continue;
    }
    std::string why = initialise(*c);
    if (!why.empty()) {
      result.rejected.push_back({c->path, c->name, why});
      continue;
    }
    result.loaded.push_back(adopt(*c));
  }
  return result;
}

const DiscoveryResult& plugins() {
  static const DiscoveryResult result = discover_plugins(DiscoveryOptions::from_environment());
  return result;
}

const Plugin& plugin_named(const std::string& name) {
  const auto& all = plugins();
  std::vector<std::string> names;
  for (const auto& p : all.loaded) {
    if (p.name() == name) return p;
    names.push_back(p.name());
  }
  throw Error("plugin " + name, fmt::format("not loaded; loaded plugins: {}", describe(names)));
}

}  // namespace verlpp::hw
