// cuda: loading NCCL with dlopen (see the header). The non-blocking communicator init
// (ncclCommInitRankConfig) needs NCCL >= 2.14; an older library is refused with its version.
#include "nccl_library.hpp"

#include <dlfcn.h>

#include <cstdlib>
#include <type_traits>

namespace verlpp::cuda {
namespace {

struct Loaded {
  NcclLibrary library;
  bool ok = false;
  std::string problem;
};

// Opens `path` and fills the table; false (with `problem`) when a required symbol is missing.
bool open_library(const std::string& path, NcclLibrary& lib, std::string& problem) {
  void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    const char* why = dlerror();
    problem = "cannot load " + path + " (" + (why ? why : "unknown reason") + ")";
    return false;
  }
  std::string missing;
  auto bind = [&](auto& fn, const char* name, bool required) {
    fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(dlsym(handle, name));
    if (fn == nullptr && required) missing += std::string(missing.empty() ? "" : ", ") + name;
  };
  bind(lib.GetVersion, "ncclGetVersion", true);
  bind(lib.GetUniqueId, "ncclGetUniqueId", true);
  bind(lib.CommInitRankConfig, "ncclCommInitRankConfig", true);
  bind(lib.CommAbort, "ncclCommAbort", true);
  bind(lib.CommGetAsyncError, "ncclCommGetAsyncError", true);
  bind(lib.GetErrorString, "ncclGetErrorString", true);
  bind(lib.GetLastError, "ncclGetLastError", false);
  bind(lib.AllReduce, "ncclAllReduce", true);
  bind(lib.AllGather, "ncclAllGather", true);
  bind(lib.ReduceScatter, "ncclReduceScatter", true);
  bind(lib.Broadcast, "ncclBroadcast", true);
  bind(lib.Send, "ncclSend", true);
  bind(lib.Recv, "ncclRecv", true);
  if (!missing.empty()) {
    problem = path + " lacks " + missing + " (NCCL >= 2.14 is needed)";
    return false;
  }
  lib.path = path;
  if (lib.GetVersion(&lib.version) != ncclSuccess) lib.version = 0;
  if (lib.version < 21400) {
    problem = path + " is NCCL " + nccl_version_text(lib.version) +
              "; the " VERLPP_GPU_PLUGIN_NAME " plugin needs NCCL >= 2.14";
    return false;
  }
  return true;
}

Loaded load() {
  Loaded out;
  std::string first_problem;
  if (open_library(VERLPP_CCL_LIBRARY_NAME, out.library, first_problem)) {
    out.ok = true;
    return out;
  }
  const char* env = std::getenv(VERLPP_CCL_LIBRARY_ENV);
  if (env != nullptr && *env != '\0') {
    std::string second_problem;
    out.library = NcclLibrary{};
    if (open_library(env, out.library, second_problem)) {
      out.ok = true;
      return out;
    }
    out.problem = first_problem + "; " VERLPP_CCL_LIBRARY_ENV ": " + second_problem;
    return out;
  }
  out.problem = first_problem + "; set " VERLPP_CCL_LIBRARY_ENV " to the path of " VERLPP_CCL_LIBRARY_NAME
                                " " VERLPP_CCL_LIBRARY_HINT;
  return out;
}

}  // namespace

const NcclLibrary* nccl_library(std::string* problem) {
  static const Loaded loaded = load();
  if (!loaded.ok) {
    if (problem != nullptr) *problem = loaded.problem;
    return nullptr;
  }
  return &loaded.library;
}

std::string nccl_version_text(int version) {
  // Since 2.9 NCCL encodes major * 10000 + minor * 100 + patch.
  return std::to_string(version / 10000) + "." + std::to_string(version / 100 % 100) + "." +
         std::to_string(version % 100);
}

}  // namespace verlpp::cuda
