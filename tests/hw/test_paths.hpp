// Paths the hardware tests need, compiled in by tests/hw/CMakeLists.txt.
#pragma once

#include <string>

namespace verlpp::test {

inline std::string plugin_case_dir(const std::string& folder) {
  return std::string(VERLPP_TEST_PLUGIN_ROOT) + "/" + folder;
}
inline std::string plugin_case_file(const std::string& folder, const std::string& stem) {
  return plugin_case_dir(folder) + "/libverlpp-plugin-" + stem + ".so";
}
inline std::string bin_dir() { return VERLPP_BIN_DIR; }
inline std::string cpu_ref_path() { return bin_dir() + "/libverlpp-plugin-cpu_ref.so"; }
inline std::string template_plugin_path() { return VERLPP_TEMPLATE_PLUGIN; }

// Runs a shell command, returning its exit code and capturing stdout+stderr.
int run_command(const std::string& command, std::string& output);

}  // namespace verlpp::test
