// rocm: the probe, read from the amdgpu kernel driver's files (/dev/kfd and the KFD topology in
// sysfs: one node per agent, GPUs carrying a gfx_target_version) without calling the HIP
// runtime, so probing starts no HSA runtime and creates no context, as the ABI requires. AMD
// code objects have no PTX-like fallback: a device runs the kernels only when its exact gfx
// target was built (VERLPP_ROCM_ARCHITECTURES), so a mismatch is a 0 naming the rebuild flag.
// VERLPP_ROCM_PROBE_ROOT (tests) puts a fake /dev and /sys under another folder.
#include "driver_probe.hpp"

#include <dirent.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#ifndef VERLPP_ROCM_ARCHITECTURES_STRING
#define VERLPP_ROCM_ARCHITECTURES_STRING "gfx90a"
#endif

namespace verlpp::cuda {
namespace {

// "gfx90a" from gfx_target_version 90010 (major * 10000 + minor * 100 + stepping; minor and
// stepping are written in hex digits, as in gfx90a and gfx1030).
std::string gfx_name(long version) {
  const long major = version / 10000, minor = version / 100 % 100, stepping = version % 100;
  std::ostringstream out;
  out << "gfx" << major << std::hex << minor << stepping;
  return out.str();
}

// Target names without feature suffixes ("gfx90a:xnack-" -> "gfx90a"), from "a;b" or "a,b".
std::vector<std::string> parse_targets(const std::string& list) {
  std::vector<std::string> out;
  std::string item;
  for (char c : list + ",") {
    if (c == ',' || c == ';') {
      const std::string name = item.substr(0, item.find(':'));
      if (!name.empty()) out.push_back(name);
      item.clear();
    } else if (c != ' ') {
      item += c;
    }
  }
  return out;
}

struct Topology {
  std::string problem;            // non-empty: the reason probing stopped
  std::vector<std::string> gpus;  // gfx target per GPU node, in node order
};

Topology read_topology(const std::string& root) {
  Topology t;
  const std::string kfd = root + "/dev/kfd";
  if (access(kfd.c_str(), F_OK) != 0) {
    t.problem = "no AMD GPU: " + kfd +
                " does not exist (the amdgpu kernel driver is not loaded here, or the "
                "device was not passed into this container)";
    return t;
  }
  if (access(kfd.c_str(), R_OK | W_OK) != 0) {
    t.problem = "cannot open " + kfd + " for reading and writing (add the user to the 'render' and 'video' groups)";
    return t;
  }
  const std::string nodes_dir = root + "/sys/class/kfd/kfd/topology/nodes";
  DIR* dir = opendir(nodes_dir.c_str());
  if (dir == nullptr) {
    t.problem = "the amdgpu driver's topology " + nodes_dir + " cannot be read";
    return t;
  }
  std::vector<long> node_ids;
  while (dirent* entry = readdir(dir)) {
    char* end = nullptr;
    const long id = std::strtol(entry->d_name, &end, 10);
    if (end != entry->d_name && *end == '\0') node_ids.push_back(id);
  }
  closedir(dir);
  std::sort(node_ids.begin(), node_ids.end());
  for (long id : node_ids) {
    std::ifstream in(nodes_dir + "/" + std::to_string(id) + "/properties");
    std::string key;
    long value = 0, target = 0;
    while (in >> key >> value)
      if (key == "gfx_target_version") target = value;
    if (target > 0) t.gpus.push_back(gfx_name(target));  // CPU nodes carry 0
  }
  if (t.gpus.empty()) t.problem = "the amdgpu driver reports no GPU (" + nodes_dir + " lists only CPU agents)";
  return t;
}

std::string probe_root() {
  const char* root = std::getenv("VERLPP_ROCM_PROBE_ROOT");
  return root != nullptr ? root : "";
}

}  // namespace

// The HIP runtime does not expose context state the way CUDA's driver does; restoring the
// previous device is always safe there, so the DeviceGuard always restores it.
bool primary_context_active(int32_t) { return true; }

int32_t probe_score(std::string& reason) {
  const Topology t = read_topology(probe_root());
  if (!t.problem.empty()) {
    reason = t.problem;
    return 0;
  }
  const std::vector<std::string> built = parse_targets(VERLPP_ROCM_ARCHITECTURES_STRING);
  for (size_t i = 0; i < t.gpus.size(); ++i) {
    if (std::find(built.begin(), built.end(), t.gpus[i]) == built.end()) {
      reason = "GPU " + std::to_string(i) + " is " + t.gpus[i] + ", and this plugin was built only for " +
               VERLPP_ROCM_ARCHITECTURES_STRING + "; rebuild with -DVERLPP_ROCM_ARCHITECTURES=" + t.gpus[i];
      return 0;
    }
  }
  // Machine code for every device: the same score as an exact fit in the cuda plugin, above cpu_ref.
  return 30;
}

}  // namespace verlpp::cuda
