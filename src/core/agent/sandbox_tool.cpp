// verlpp.tools.Sandbox: runs the call's code as the last argument of a configured command
// (sh -c by default) in a child process with limits, so a model's code can neither take the
// machine down nor reach the network:
//   - address space, CPU seconds and processes are capped with setrlimit (as root the child runs
//     as nobody, since the process cap does not bind root);
//   - a new network namespace holds only a down loopback, where the host allows one (unshare
//     needs CAP_SYS_ADMIN or unprivileged user namespaces); when it does not, the tool says so
//     once in the log and the child runs with the host's network;
//   - the child gets its own process group, an empty working directory and a minimal
//     environment; at the wall-time limit, or once its output passes the cap, the whole group is
//     killed;
//   - what it printed (stdout and stderr together, cut at the cap), its exit status, a timeout
//     or a kill are the reply's text: a sandbox error is the model's to read, never an abort.
// fork() is used rather than posix_spawn because the child must set limits, a namespace and a
// user between fork and exec; it calls only async-signal-safe functions there.
#include "builtin_tools.hpp"

#include <verlpp/core/error.hpp>
#include <verlpp/core/log.hpp>

#include <fcntl.h>
#include <grp.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <mutex>
#include <thread>

namespace verlpp::agent {
namespace {

constexpr uid_t kNobody = 65534;

struct SandboxLimits {
  std::vector<std::string> command = {"/bin/sh", "-c"};
  std::string argument = "code";  // the call's argument that holds the code
  double timeout_s = 10.0;
  int64_t memory_mb = 1024;
  int64_t cpu_s = 10;
  int64_t max_processes = 64;
  int64_t max_output_bytes = 64 * 1024;
  bool isolate_network = true;
};

int64_t positive(const nlohmann::json& config, const char* key, int64_t fallback, const std::string& where) {
  if (!config.contains(key)) return fallback;
  const auto& v = config[key];
  VERLPP_CHECK(v.is_number_integer() && v.get<int64_t>() >= 1, "{}.config.{}: expected a positive integer, got {}",
               where, key, v.dump());
  return v.get<int64_t>();
}

SandboxLimits read_limits(const nlohmann::json& config, const std::string& where) {
  SandboxLimits limits;
  if (config.contains("command")) {
    const auto& c = config["command"];
    VERLPP_CHECK(c.is_array() && !c.empty(), "{}.config.command: expected a non-empty list such as [/bin/sh, -c]",
                 where);
    limits.command.clear();
    for (const auto& part : c) {
      VERLPP_CHECK(part.is_string() && !part.get<std::string>().empty(),
                   "{}.config.command: every entry must be a non-empty string, got {}", where, part.dump());
      limits.command.push_back(part.get<std::string>());
    }
    VERLPP_CHECK(limits.command[0].find('/') == 0, "{}.config.command: the program must be an absolute path, got '{}'",
                 where, limits.command[0]);
  }
  if (config.contains("argument")) {
    VERLPP_CHECK(config["argument"].is_string(), "{}.config.argument: expected a string", where);
    limits.argument = config["argument"].get<std::string>();
  }
  if (config.contains("timeout_s")) {
    const auto& t = config["timeout_s"];
    VERLPP_CHECK(t.is_number() && t.get<double>() > 0, "{}.config.timeout_s: expected a positive number, got {}", where,
                 t.dump());
    limits.timeout_s = t.get<double>();
  }
  limits.memory_mb = positive(config, "memory_mb", limits.memory_mb, where);
  limits.cpu_s = positive(config, "cpu_s", limits.cpu_s, where);
  limits.max_processes = positive(config, "max_processes", limits.max_processes, where);
  limits.max_output_bytes = positive(config, "max_output_bytes", limits.max_output_bytes, where);
  if (config.contains("network")) {
    const auto& n = config["network"];
    VERLPP_CHECK(n.is_string() && (n == "none" || n == "host"), "{}.config.network: expected none or host, got {}",
                 where, n.dump());
    limits.isolate_network = n == "none";
  }
  return limits;
}

// The processes `uid` runs now (the process cap of a non-root user counts all of them).
int64_t processes_of(uid_t uid) {
  int64_t count = 0;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator("/proc", ec)) {
    const std::string name = entry.path().filename().string();
    if (name.empty() || name.find_first_not_of("0123456789") != std::string::npos) continue;
    struct stat st {};
    if (::stat(entry.path().c_str(), &st) == 0 && st.st_uid == uid) ++count;
  }
  return count;
}

std::string signal_name(int sig) {
  const char* name = ::sigabbrev_np(sig);
  return name ? std::string("SIG") + name : std::to_string(sig);
}

// Whether a child can have its own network namespace here; probed once, said once.
bool network_isolation_works() {
  static std::once_flag probed;
  static bool works = false;
  std::call_once(probed, [] {
    const pid_t pid = ::fork();
    if (pid == 0) ::_exit(::unshare(CLONE_NEWNET) == 0 ? 0 : 1);
    int status = 0;
    works = pid > 0 && ::waitpid(pid, &status, 0) == pid && WIFEXITED(status) && WEXITSTATUS(status) == 0;
    if (!works)
      verlpp::log(LogLevel::warning,
                  "sandbox tool: this host does not allow a new network namespace (unshare needs CAP_SYS_ADMIN); "
                  "sandboxed code runs with the host's network");
  });
  return works;
}

class SandboxTool : public Tool {
 public:
  SandboxTool(const nlohmann::ordered_json& schema, const SandboxLimits& limits, const std::string& where)
      : Tool(schema, where), limits_(limits) {}

  ToolResult call(const nlohmann::ordered_json& arguments, const nlohmann::json&) const override {
    if (!arguments.is_object() || !arguments.contains(limits_.argument) || !arguments[limits_.argument].is_string())
      throw Error("sandbox", fmt::format("expected the argument \"{}\" (a string)", limits_.argument));
    return ToolResult{run(arguments[limits_.argument].get<std::string>()), 0.0};
  }

 private:
  SandboxLimits limits_;

  std::string run(const std::string& code) const {
    // Everything the child needs is built before fork (it may not allocate after it).
    std::vector<std::string> args = limits_.command;
    args.push_back(code);
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    char dir_template[] = "/tmp/verlpp-sandbox-XXXXXX";
    VERLPP_CHECK(::mkdtemp(dir_template) != nullptr, "sandbox: cannot make a working directory: {}",
                 std::strerror(errno));
    const std::string dir = dir_template;
    const bool as_root = ::geteuid() == 0;
    if (as_root && ::chown(dir.c_str(), kNobody, kNobody) != 0) {
      std::filesystem::remove_all(dir);
      throw Error("sandbox", fmt::format("cannot hand the working directory to nobody: {}", std::strerror(errno)));
    }
    std::vector<std::string> env = {"PATH=/usr/local/bin:/usr/bin:/bin", "HOME=" + dir, "TMPDIR=" + dir,
                                    "LANG=C.UTF-8"};
    std::vector<char*> envp;
    for (auto& e : env) envp.push_back(e.data());
    envp.push_back(nullptr);
    const rlim_t memory = static_cast<rlim_t>(limits_.memory_mb) << 20;
    const rlim_t cpu = static_cast<rlim_t>(limits_.cpu_s);
    const rlim_t processes =
        static_cast<rlim_t>(limits_.max_processes + (as_root ? processes_of(kNobody) : processes_of(::geteuid())));
    const bool isolate = limits_.isolate_network && network_isolation_works();

    int pipe_fds[2];
    VERLPP_CHECK(::pipe2(pipe_fds, O_CLOEXEC) == 0, "sandbox: pipe: {}", std::strerror(errno));
    const pid_t pid = ::fork();
    if (pid < 0) {
      const int err = errno;
      ::close(pipe_fds[0]);
      ::close(pipe_fds[1]);
      std::filesystem::remove_all(dir);
      throw Error("sandbox", fmt::format("fork: {}", std::strerror(err)));
    }
    if (pid == 0) child(pipe_fds[1], dir.c_str(), argv.data(), envp.data(), memory, cpu, processes, isolate, as_root);
    ::close(pipe_fds[1]);
    std::string reply = collect(pid, pipe_fds[0]);
    ::close(pipe_fds[0]);
    std::error_code ec;
    std::filesystem::remove_all(dir, ec);
    return reply;
  }

  // The child, between fork and exec: async-signal-safe calls only; a failure is reported on the
  // pipe and ends it with status 127.
  [[noreturn]] static void child(int out, const char* dir, char* const* argv, char* const* envp, rlim_t memory,
                                 rlim_t cpu, rlim_t processes, bool isolate, bool as_root) {
    auto die = [out](const char* what) {
      const char* why = ::strerror(errno);
      (void)!::write(out, "sandbox: ", 9);
      (void)!::write(out, what, ::strlen(what));
      (void)!::write(out, ": ", 2);
      (void)!::write(out, why, ::strlen(why));
      (void)!::write(out, "\n", 1);
      ::_exit(127);
    };
    ::setpgid(0, 0);
    if (::dup2(out, 1) < 0 || ::dup2(out, 2) < 0) die("dup2");
    const int null_fd = ::open("/dev/null", O_RDONLY);
    if (null_fd >= 0) ::dup2(null_fd, 0);
    if (isolate && ::unshare(CLONE_NEWNET) != 0) die("unshare(CLONE_NEWNET)");
    const struct rlimit mem = {memory, memory}, cpus = {cpu, cpu + 1}, procs = {processes, processes}, core = {0, 0};
    if (::setrlimit(RLIMIT_AS, &mem) != 0 || ::setrlimit(RLIMIT_CPU, &cpus) != 0 ||
        ::setrlimit(RLIMIT_NPROC, &procs) != 0 || ::setrlimit(RLIMIT_CORE, &core) != 0)
      die("setrlimit");
    if (as_root && (::setgroups(0, nullptr) != 0 || ::setgid(kNobody) != 0 || ::setuid(kNobody) != 0))
      die("dropping to nobody");
    if (::chdir(dir) != 0) die("chdir");
    ::execve(argv[0], argv, envp);
    die(argv[0]);
    ::_exit(127);  // die() does not return; this says so to the compiler
  }

  // Reads the child's output until it exits and the pipe drains, or the limits strike.
  std::string collect(pid_t pid, int in) const {
    const auto start = std::chrono::steady_clock::now();
    const auto deadline = start + std::chrono::duration<double>(limits_.timeout_s);
    std::string output;
    bool timed_out = false, capped = false, exited = false;
    int status = 0;
    char buffer[16384];
    while (true) {
      const auto now = std::chrono::steady_clock::now();
      if (now >= deadline) {
        timed_out = true;
        break;
      }
      const int wait_ms = static_cast<int>(
          std::min<int64_t>(100, std::chrono::duration_cast<std::chrono::milliseconds>(deadline - now).count() + 1));
      struct pollfd p = {in, POLLIN, 0};
      const int ready = ::poll(&p, 1, wait_ms);
      if (ready > 0) {
        const ssize_t n = ::read(in, buffer, sizeof(buffer));
        if (n > 0) {
          const size_t room =
              static_cast<size_t>(limits_.max_output_bytes) - std::min(output.size(), size_t(limits_.max_output_bytes));
          output.append(buffer, std::min(room, static_cast<size_t>(n)));
          if (static_cast<size_t>(n) > room) {
            capped = true;
            break;
          }
          continue;
        }
        if (n == 0) break;  // every writer closed: the child and what it started are done
      }
      // The child ended but something it started holds the pipe: that is the group's to end.
      if (!exited && ::waitpid(pid, &status, WNOHANG) == pid) {
        exited = true;
        ::kill(-pid, SIGKILL);
      }
    }
    ::kill(-pid, SIGKILL);
    if (!exited) ::waitpid(pid, &status, 0);
    std::string reply = output;
    auto note = [&reply](const std::string& text) {
      if (!reply.empty() && reply.back() != '\n') reply += '\n';
      reply += text;
    };
    if (timed_out)
      note(fmt::format("[timed out after {} s: killed]", limits_.timeout_s));
    else if (capped)
      note(fmt::format("[output cut at {} bytes: killed]", limits_.max_output_bytes));
    else if (WIFEXITED(status) && WEXITSTATUS(status) != 0)
      note(fmt::format("[exit code {}]", WEXITSTATUS(status)));
    else if (WIFSIGNALED(status))
      note(fmt::format("[killed by {}{}]", signal_name(WTERMSIG(status)),
                       WTERMSIG(status) == SIGXCPU || WTERMSIG(status) == SIGKILL ? ": a limit was reached" : ""));
    return reply;
  }
};

}  // namespace

std::unique_ptr<Tool> make_sandbox_tool(const nlohmann::json& config, const nlohmann::ordered_json& schema,
                                        const std::string& where) {
  return std::make_unique<SandboxTool>(schema, read_limits(config, where), where);
}

// Whether sandboxed children get their own network namespace on this host.
bool sandbox_isolates_network() { return network_isolation_works(); }

}  // namespace verlpp::agent
