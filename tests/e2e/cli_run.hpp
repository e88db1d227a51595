// Runs the `verlpp` command as a user does, through the shell, for the CLI tests.
#pragma once

#include <sys/wait.h>

#include <cstdio>
#include <memory>
#include <stdexcept>
#include <string>

namespace verlpp::e2e {

struct CliRun {
  int status = 0;      // the exit code, or 128 + the signal that ended it
  std::string output;  // stdout + stderr
};

// `verlpp <args>` (args may hold redirections), both streams captured.
inline CliRun run_cli(const std::string& args) {
  CliRun run;
  std::unique_ptr<FILE, int (*)(FILE*)> pipe(::popen((std::string(VERLPP_CLI) + " " + args + " 2>&1").c_str(), "r"),
                                             ::pclose);
  if (!pipe) throw std::runtime_error("popen failed for verlpp " + args);
  char buffer[4096];
  while (size_t n = std::fread(buffer, 1, sizeof buffer, pipe.get())) run.output.append(buffer, n);
  const int status = ::pclose(pipe.release());
  run.status = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return run;
}

}  // namespace verlpp::e2e
