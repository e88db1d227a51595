// Catch2 main for verlpp_hw_tests, plus the small command runner the CLI tests share.
#define CATCH_CONFIG_MAIN
#include <catch2/catch.hpp>

#include "test_paths.hpp"

#include <sys/wait.h>

#include <cstdio>

namespace verlpp::test {

int run_command(const std::string& command, std::string& output) {
  output.clear();
  FILE* pipe = popen((command + " 2>&1").c_str(), "r");
  if (pipe == nullptr) return -1;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof(buf), pipe)) > 0) output.append(buf, n);
  int status = pclose(pipe);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

}  // namespace verlpp::test
