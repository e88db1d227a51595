// launch_local: fork + exec of N ranks and a supervision loop (see launcher.hpp). The loop
// polls waitpid every 50 ms rather than blocking, so that the grace deadline and signals
// forwarded from the user are handled without extra threads. Each rank asks the kernel for
// SIGKILL when the launcher dies (PR_SET_PDEATHSIG, set between fork and exec, which is why
// this is not posix_spawn): a launcher killed by any signal, SIGKILL included, leaves no rank
// training on its own.
#include <verlpp/controller/launcher.hpp>
#include <verlpp/core/error.hpp>

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <thread>

extern char** environ;

namespace verlpp::controller {
namespace {

std::atomic<int> g_forward_signal{0};
void remember_signal(int sig) { g_forward_signal = sig; }

// This process's environment with the rank's variables set (replacing any inherited ones).
std::vector<std::string> rank_environment(const LaunchOptions& o, int32_t rank, uint16_t port) {
  const std::vector<std::pair<std::string, std::string>> ours = {
      {"RANK", std::to_string(rank)},       {"WORLD_SIZE", std::to_string(o.nproc)},
      {"LOCAL_RANK", std::to_string(rank)}, {"LOCAL_WORLD_SIZE", std::to_string(o.nproc)},
      {"MASTER_ADDR", o.master_addr},       {"MASTER_PORT", std::to_string(port)}};
  std::vector<std::string> env;
  bool has_threads = false;
  for (char** e = environ; *e != nullptr; ++e) {
    std::string entry(*e);
    const std::string name = entry.substr(0, entry.find('='));
    bool replaced = false;
    for (const auto& [key, value] : ours) replaced = replaced || key == name;
    if (name == "OMP_NUM_THREADS") has_threads = true;
    if (!replaced) env.push_back(std::move(entry));
  }
  for (const auto& [key, value] : ours) env.push_back(key + "=" + value);
  if (!has_threads) {
    // As torchrun: ranks sharing a machine share its cores instead of each taking all of them.
    int32_t threads = o.threads_per_rank;
    if (threads <= 0) threads = std::max<int32_t>(1, int32_t(std::thread::hardware_concurrency()) / o.nproc);
    env.push_back("OMP_NUM_THREADS=" + std::to_string(threads));
  }
  return env;
}

pid_t spawn_rank(const LaunchOptions& o, int32_t rank, uint16_t port) {
  std::vector<std::string> env = rank_environment(o, rank, port);
  std::vector<std::string> args = o.argv;
  std::vector<char*> argv, envp;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  for (auto& e : env) envp.push_back(e.data());
  envp.push_back(nullptr);
  // A pipe closed on exec tells the launcher whether exec worked, and if not, why.
  int report[2];
  if (::pipe2(report, O_CLOEXEC) != 0)
    throw Error(args.front(), fmt::format("cannot start rank {}: pipe: {}", rank, std::strerror(errno)));
  const pid_t launcher = ::getpid();
  const pid_t pid = ::fork();
  if (pid < 0) {
    const int why = errno;
    ::close(report[0]);
    ::close(report[1]);
    throw Error(args.front(), fmt::format("cannot start rank {}: fork: {}", rank, std::strerror(why)));
  }
  if (pid == 0) {
    // The child: only async-signal-safe calls until exec.
    ::close(report[0]);
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != launcher) ::_exit(127);  // the launcher died before the request took hold
    ::execve(argv[0], argv.data(), envp.data());
    const int why = errno;
    (void)!::write(report[1], &why, sizeof(why));
    ::_exit(127);
  }
  ::close(report[1]);
  int exec_errno = 0;
  ssize_t n;
  do n = ::read(report[0], &exec_errno, sizeof(exec_errno));
  while (n < 0 && errno == EINTR);
  ::close(report[0]);
  if (n == ssize_t(sizeof(exec_errno))) {
    ::waitpid(pid, nullptr, 0);
    throw Error(args.front(), fmt::format("cannot start rank {}: {}", rank, std::strerror(exec_errno)));
  }
  return pid;
}

}  // namespace

std::string RankExit::describe() const {
  std::string how;
  if (signal != 0) {
    const char* name = strsignal(signal);
    how = fmt::format("was killed by signal {} ({}){}", signal, name ? name : "?",
                      terminated_by_launcher ? ", sent by the launcher after the grace period" : "");
  } else {
    how = exit_code == 0 ? "finished" : fmt::format("exited with code {}", exit_code);
  }
  return fmt::format("rank {} (pid {}) {}", rank, pid, how);
}

std::string LaunchResult::summary() const {
  if (ok()) return fmt::format("all {} ranks finished", ranks.size());
  std::string text = fmt::format("rank {} failed first: {}", first_failed, ranks[size_t(first_failed)].describe());
  for (const RankExit& r : ranks)
    if (r.rank != first_failed) text += "; " + r.describe();
  return text;
}

uint16_t pick_free_port(const std::string& addr) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) throw Error("pick_free_port", std::strerror(errno));
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_port = 0;
  if (::inet_pton(AF_INET, addr.c_str(), &sa.sin_addr) != 1) sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(sa);
  if (::bind(fd, reinterpret_cast<sockaddr*>(&sa), sizeof(sa)) != 0 ||
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&sa), &len) != 0) {
    const std::string why = std::strerror(errno);
    ::close(fd);
    throw Error("pick_free_port", fmt::format("cannot bind a port on {}: {}", addr, why));
  }
  ::close(fd);
  return ntohs(sa.sin_port);
}

LaunchResult launch_local(const LaunchOptions& o) {
  if (o.nproc < 1) throw Error("--nproc", fmt::format("{} ranks: at least one is needed", o.nproc));
  if (o.argv.empty()) throw Error("launch_local", "no command to run");
  const uint16_t port = o.master_port != 0 ? o.master_port : pick_free_port(o.master_addr);
  auto note = [&](const std::string& text) {
    if (o.on_message) o.on_message(text);
  };

  struct sigaction forward {
  }, old_int{}, old_term{};
  forward.sa_handler = remember_signal;
  sigemptyset(&forward.sa_mask);
  g_forward_signal = 0;
  sigaction(SIGINT, &forward, &old_int);
  sigaction(SIGTERM, &forward, &old_term);

  LaunchResult result;
  std::vector<bool> running;
  for (int32_t r = 0; r < o.nproc; ++r) {
    RankExit e;
    e.rank = r;
    try {
      e.pid = spawn_rank(o, r, port);
    } catch (...) {
      for (const RankExit& started : result.ranks) ::kill(started.pid, SIGTERM);
      for (const RankExit& started : result.ranks) ::waitpid(started.pid, nullptr, 0);
      sigaction(SIGINT, &old_int, nullptr);
      sigaction(SIGTERM, &old_term, nullptr);
      throw;
    }
    result.ranks.push_back(e);
    running.push_back(true);
  }
  note(fmt::format("started {} ranks (rendezvous {}:{})", o.nproc, o.master_addr, port));

  using clock = std::chrono::steady_clock;
  std::optional<clock::time_point> deadline;  // set at the first failure
  bool terminated = false;
  int32_t alive = o.nproc;
  while (alive > 0) {
    if (const int sig = g_forward_signal.exchange(0); sig != 0) {
      for (int32_t r = 0; r < o.nproc; ++r)
        if (running[size_t(r)]) ::kill(result.ranks[size_t(r)].pid, sig);
    }
    if (deadline && !terminated && clock::now() > *deadline) {
      note(fmt::format("terminating the {} rank(s) still running after the {} s grace period", alive,
                       std::chrono::duration_cast<std::chrono::seconds>(o.grace).count()));
      for (int32_t r = 0; r < o.nproc; ++r)
        if (running[size_t(r)]) {
          ::kill(result.ranks[size_t(r)].pid, SIGKILL);
          result.ranks[size_t(r)].terminated_by_launcher = true;
        }
      terminated = true;
    }
    int status = 0;
    const pid_t pid = ::waitpid(-1, &status, WNOHANG);
    if (pid <= 0) {
      if (pid < 0 && errno == ECHILD) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      continue;
    }
    for (int32_t r = 0; r < o.nproc; ++r) {
      RankExit& e = result.ranks[size_t(r)];
      if (e.pid != pid || !running[size_t(r)]) continue;
      running[size_t(r)] = false;
      --alive;
      if (WIFSIGNALED(status))
        e.signal = WTERMSIG(status);
      else
        e.exit_code = WEXITSTATUS(status);
      const bool failed = e.signal != 0 || e.exit_code != 0;
      if (failed && result.first_failed < 0) {
        result.first_failed = r;
        deadline = clock::now() + o.grace;
        note(fmt::format("{}; waiting up to {} s for the other ranks to stop", e.describe(),
                         std::chrono::duration_cast<std::chrono::seconds>(o.grace).count()));
      }
    }
  }
  sigaction(SIGINT, &old_int, nullptr);
  sigaction(SIGTERM, &old_term, nullptr);
  return result;
}

}  // namespace verlpp::controller
