// cpu_ref: facts about the host that the device properties report (memory from the OS,
// the CPU's model name). Read from /proc on Linux; zero/"cpu" where unavailable.
#pragma once

#include <cstdint>
#include <string>

namespace verlpp::cpu_ref {

struct HostMemory {
  uint64_t total_bytes = 0;
  uint64_t available_bytes = 0;
};

// MemTotal and MemAvailable from /proc/meminfo (sysconf as a fallback).
HostMemory read_host_memory();

// "model name" of the first processor in /proc/cpuinfo, or "cpu".
std::string read_cpu_model();

}  // namespace verlpp::cpu_ref
