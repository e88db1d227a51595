// Runs the `verlpp` command (or a shell line around it) as a user does, through the shell, for
// the CLI tests.
#pragma once

#include <sys/wait.h>

#include <cstdio>
#include <fstream>
#include <memory>
#include <sstream>
#include <stdexcept>
#include <string>

namespace verlpp::e2e {

struct CliRun {
  int status = 0;      // the exit code, or 128 + the signal that ended it
  std::string output;  // stdout + stderr
};

// A shell line's exit status and standard output (what it does with standard error is its own).
inline CliRun run_shell_line(const std::string& line) {
  CliRun run;
  std::unique_ptr<FILE, int (*)(FILE*)> pipe(::popen(line.c_str(), "r"), ::pclose);
  if (!pipe) throw std::runtime_error("popen failed for " + line);
  char buffer[4096];
  while (size_t n = std::fread(buffer, 1, sizeof buffer, pipe.get())) run.output.append(buffer, n);
  const int status = ::pclose(pipe.release());
  run.status = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return run;
}

// `verlpp <args>` (args may hold redirections), both streams captured.
inline CliRun run_cli(const std::string& args) {
  return run_shell_line(std::string(VERLPP_CLI) + " " + args + " 2>&1");
}

struct ShellRun {
  int status = 0;
  std::string out;  // standard output
  std::string err;  // standard error
};

// A shell line with its standard output and standard error kept apart; standard error goes
// through `err_file`, which is left behind for a reader of a failed test.
inline ShellRun run_shell_apart(const std::string& line, const std::string& err_file) {
  const CliRun run = run_shell_line("( " + line + " ) 2>'" + err_file + "'");
  std::ifstream in(err_file, std::ios::binary);
  std::stringstream err;
  err << in.rdbuf();
  return {run.status, run.output, err.str()};
}

}  // namespace verlpp::e2e
