// A plugin file's probe run in a forked child process, so that a plugin that crashes, aborts,
// ends the process or hangs while being loaded or probed is rejected with that reason instead
// of taking the host down. The child only opens the file, calls the probe and writes the
// outcome back through a pipe; the host then loads a plugin that passed in its own process.
#pragma once

#include <cstdint>
#include <string>

namespace verlpp::hw::detail {

struct ChildProbe {
  // False when no child could be started (fork or pipe failed): the caller probes in process.
  bool isolated = false;
  // True when the child opened the file and found the probe symbol, and the probe returned.
  bool probed = false;
  int32_t score = 0;
  std::string reason;  // the probe's reason, when it returned
  // Why the file is rejected: the probe crashed, ended the process, hung, or broke the reason
  // buffer's contract. Empty when it returned well, or when the child found no probe to call
  // (the in-process checks then name what is wrong with the file).
  std::string failure;
};

// Runs `symbol` of the shared object at `path` in a child, waiting at most `timeout_ms`.
ChildProbe probe_in_child(const std::string& path, const char* symbol, int64_t timeout_ms);

}  // namespace verlpp::hw::detail
