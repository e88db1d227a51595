// probe_in_child: fork, open and probe in the child, report through a pipe. The child calls
// nothing but dlopen, dlsym, the probe, write and _exit (never exit: the host's atexit handlers
// and static destructors must not run twice). The reason buffer the probe gets is followed by
// guard bytes, so a probe that writes past the capacity it was given is caught, and one that
// leaves the reason without a terminating NUL is named too.
#include "probe_in_child.hpp"

#include <fmt/format.h>

#include <dlfcn.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>

namespace verlpp::hw::detail {
namespace {

constexpr size_t kReasonCapacity = 512;
constexpr size_t kGuardBytes = 64;
constexpr unsigned char kGuard = 0xA5;

// What the child writes after the probe returned.
struct ProbeRecord {
  int32_t score;
  int32_t terminated;  // a NUL within the capacity
  int32_t overflowed;  // a guard byte past the capacity changed
  char reason[kReasonCapacity];
};

// Stage bytes the child writes before the record, so a crash can be placed.
constexpr char kOpened = 'O';    // dlopen returned (static initialisers ran)
constexpr char kNoProbe = 'N';   // not a loadable file, or no probe symbol: the host's checks say why
constexpr char kReturned = 'R';  // the probe returned; the record follows

void write_all(int fd, const void* data, size_t size) {
  const char* p = static_cast<const char*>(data);
  while (size > 0) {
    ssize_t n = ::write(fd, p, size);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;
    p += n;
    size -= size_t(n);
  }
}

[[noreturn]] void run_child(int fd, const std::string& path, const char* symbol) {
  // The host's signal handlers (a test framework's crash reporter, a launcher's shutdown) are
  // not the child's: a crash here must end the child plainly so that the host can name it.
  struct sigaction plain {};
  plain.sa_handler = SIG_DFL;
  for (int sig = 1; sig < NSIG; ++sig) ::sigaction(sig, &plain, nullptr);
  sigset_t none;
  sigemptyset(&none);
  ::sigprocmask(SIG_SETMASK, &none, nullptr);
  void* handle = ::dlopen(path.c_str(), RTLD_LAZY | RTLD_LOCAL);
  if (handle == nullptr) {
    write_all(fd, &kNoProbe, 1);
    ::_exit(0);
  }
  write_all(fd, &kOpened, 1);
  void* probe = ::dlsym(handle, symbol);
  if (probe == nullptr) {
    write_all(fd, &kNoProbe, 1);
    ::_exit(0);
  }
  unsigned char buffer[kReasonCapacity + kGuardBytes];
  std::memset(buffer, 0, kReasonCapacity);
  std::memset(buffer + kReasonCapacity, kGuard, kGuardBytes);
  using ProbeFn = int32_t (*)(char*, size_t);
  ProbeRecord record{};
  record.score = reinterpret_cast<ProbeFn>(probe)(reinterpret_cast<char*>(buffer), kReasonCapacity);
  record.terminated = std::memchr(buffer, 0, kReasonCapacity) != nullptr;
  record.overflowed = 0;
  for (size_t i = 0; i < kGuardBytes; ++i) record.overflowed |= buffer[kReasonCapacity + i] != kGuard;
  std::memcpy(record.reason, buffer, kReasonCapacity);
  record.reason[kReasonCapacity - 1] = '\0';
  write_all(fd, &kReturned, 1);
  write_all(fd, &record, sizeof(record));
  ::_exit(0);
}

std::string signal_text(int sig) {
  const char* abbrev = ::sigabbrev_np(sig);
  return abbrev != nullptr ? fmt::format("signal SIG{}", abbrev) : fmt::format("signal {}", sig);
}

}  // namespace

ChildProbe probe_in_child(const std::string& path, const char* symbol, int64_t timeout_ms) {
  ChildProbe out;
  int fds[2];
  if (::pipe(fds) != 0) return out;
  const pid_t pid = ::fork();
  if (pid < 0) {
    ::close(fds[0]);
    ::close(fds[1]);
    return out;
  }
  if (pid == 0) {
    ::close(fds[0]);
    run_child(fds[1], path, symbol);
  }
  ::close(fds[1]);
  out.isolated = true;

  // Read the stage bytes and the record until the child closes the pipe or the time is up.
  std::string received;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  bool timed_out = false;
  for (;;) {
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) {
      timed_out = true;
      break;
    }
    pollfd p{fds[0], POLLIN, 0};
    const int ready = ::poll(&p, 1, int(left.count()));
    if (ready < 0 && errno == EINTR) continue;
    if (ready <= 0) {
      timed_out = ready == 0;
      break;
    }
    char chunk[1024];
    const ssize_t n = ::read(fds[0], chunk, sizeof(chunk));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;  // the child closed its end (it exited)
    received.append(chunk, size_t(n));
  }
  ::close(fds[0]);
  if (timed_out) ::kill(pid, SIGKILL);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }

  // The child's bytes, in order: [kOpened] then kNoProbe, or kReturned and the record.
  size_t at = 0;
  const bool opened = at < received.size() && received[at] == kOpened;
  if (opened) ++at;
  if (timed_out) {
    out.failure = fmt::format("{} did not return within {} ms (the child process was killed)",
                              opened ? "its probe" : "loading it", timeout_ms);
    return out;
  }
  if (at < received.size() && received[at] == kNoProbe) return out;
  if (at < received.size() && received[at] == kReturned && received.size() >= at + 1 + sizeof(ProbeRecord)) {
    ProbeRecord record;
    std::memcpy(&record, received.data() + at + 1, sizeof(record));
    if (record.overflowed) {
      out.failure = fmt::format("its probe wrote past the {} bytes of reason it was given", kReasonCapacity);
      return out;
    }
    if (!record.terminated) {
      out.failure = fmt::format("its probe left the reason unterminated (no NUL within {} bytes)", kReasonCapacity);
      return out;
    }
    out.probed = true;
    out.score = record.score;
    out.reason = record.reason;
    return out;
  }
  const char* when = opened ? "in its probe" : "while being loaded (its static initialisers)";
  if (WIFSIGNALED(status))
    out.failure = fmt::format("crashed {} ({})", when, signal_text(WTERMSIG(status)));
  else if (WIFEXITED(status))
    out.failure = fmt::format("ended the process {} (exit status {})", when, WEXITSTATUS(status));
  else
    out.failure = fmt::format("stopped {} without an answer", when);
  return out;
}

}  // namespace verlpp::hw::detail
