// cpu_ref: /proc readers for the device properties.
#include "host_memory.hpp"

#include <unistd.h>

#include <fstream>
#include <sstream>

namespace verlpp::cpu_ref {

HostMemory read_host_memory() {
  HostMemory m;
  std::ifstream in("/proc/meminfo");
  std::string key;
  uint64_t value_kib = 0;
  std::string unit;
  while (in >> key >> value_kib) {
    std::getline(in, unit);
    if (key == "MemTotal:") m.total_bytes = value_kib * 1024;
    if (key == "MemAvailable:") m.available_bytes = value_kib * 1024;
  }
  if (m.total_bytes == 0) {
    long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGE_SIZE);
    long avail = sysconf(_SC_AVPHYS_PAGES);
    if (pages > 0 && page > 0) m.total_bytes = uint64_t(pages) * uint64_t(page);
    if (avail > 0 && page > 0) m.available_bytes = uint64_t(avail) * uint64_t(page);
  }
  return m;
}

std::string read_cpu_model() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("model name", 0) == 0) {
      auto colon = line.find(':');
      if (colon != std::string::npos) {
        std::string name = line.substr(colon + 1);
        name.erase(0, name.find_first_not_of(" \t"));
        if (!name.empty()) return name;
      }
    }
  }
  return "cpu";
}

}  // namespace verlpp::cpu_ref
