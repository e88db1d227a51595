// Progress (see progress.hpp).
#include "progress.hpp"

#include <fmt/format.h>

#include <chrono>
#include <cstdio>
#include <unistd.h>

namespace verlpp::apps {
namespace {
double now_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}
}  // namespace

Progress::Progress() : tty_(::isatty(STDERR_FILENO) == 1) {}

void Progress::update(const std::string& phase, int64_t done, int64_t total) {
  if (total <= 0) return;
  if (phase != phase_) {
    phase_ = phase;
    last_percent_ = -1;
    phase_start_ = now_seconds();
  }
  const int64_t percent = done * 100 / total;
  const double elapsed = now_seconds() - phase_start_;
  const double eta = done > 0 ? elapsed * double(total - done) / double(done) : 0.0;
  if (tty_) {
    const int width = 30, filled = int(width * done / total);
    std::string bar(size_t(filled), '#');
    bar.append(size_t(width - filled), '-');
    std::fprintf(stderr, "\r%-6s [%s] %lld/%lld  %.0fs elapsed, ~%.0fs left   ", phase.c_str(), bar.c_str(),
                 static_cast<long long>(done), static_cast<long long>(total), elapsed, eta);
    bar_open_ = done < total;
    if (!bar_open_) std::fputc('\n', stderr);
    std::fflush(stderr);
    return;
  }
  // Not a terminal: a line at every 10% of the long phases only.
  if (phase == "gen" || phase == "val") return;
  if (percent / 10 == last_percent_ / 10 && done != total) return;
  last_percent_ = percent;
  std::fprintf(stderr, "%s %lld/%lld (%lld%%), %.0fs elapsed\n", phase.c_str(), static_cast<long long>(done),
               static_cast<long long>(total), static_cast<long long>(percent), elapsed);
}

void Progress::line(const std::string& text) {
  if (tty_ && bar_open_) std::fputs("\r\033[K", stderr);
  bar_open_ = false;
  std::fprintf(stderr, "%s\n", text.c_str());
  std::fflush(stderr);
}

}  // namespace verlpp::apps
