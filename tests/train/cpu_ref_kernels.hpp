// The trainer tests' handle on cpu_ref's kernel table (the reference kernels a test runs the
// plugin paths through), loaded once per test binary from the build's bin folder.
#pragma once

#include <verlpp/hw/kernels.hpp>
#include <verlpp/hw/plugin_registry.hpp>

#include <string>

namespace verlpp::test {

inline const hw::Kernels& cpu_ref_kernels() {
  static const hw::Plugin plugin = hw::load_plugin_file(std::string(VERLPP_BIN_DIR) + "/libverlpp-plugin-cpu_ref.so");
  static const hw::Kernels kernels(plugin);
  return kernels;
}

}  // namespace verlpp::test
