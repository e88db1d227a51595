// CheckedStdout (see checked_stdout.hpp).
#include "checked_stdout.hpp"

#include <verlpp/core/error.hpp>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <utility>

namespace verlpp::apps {

CheckedStdout::Buffer::int_type CheckedStdout::Buffer::overflow(int_type c) {
  if (traits_type::eq_int_type(c, traits_type::eof())) return traits_type::not_eof(c);
  const char ch = traits_type::to_char_type(c);
  out_.write(&ch, 1);
  return c;
}

std::streamsize CheckedStdout::Buffer::xsputn(const char* data, std::streamsize size) {
  out_.write(data, size_t(size));
  return size;
}

int CheckedStdout::Buffer::sync() {
  out_.flush();
  return 0;
}

CheckedStdout::CheckedStdout() {
  std::fflush(stdout);  // nothing written before this may come after what follows
  previous_ = std::cout.rdbuf(&buffer_);
  previous_exceptions_ = std::cout.exceptions();
  std::cout.exceptions(std::ios::badbit);
}

CheckedStdout::~CheckedStdout() { release(); }

void CheckedStdout::release() noexcept {
  if (previous_ == nullptr) return;
  std::cout.rdbuf(std::exchange(previous_, nullptr));
  std::cout.clear();
  std::cout.exceptions(previous_exceptions_);
}

void CheckedStdout::finish() {
  if (previous_ == nullptr) return;  // finished (or failed) already
  try {
    std::cout.flush();
    out_.commit();
  } catch (...) {
    // std::cerr flushes std::cout before each message (tie): a failed stdout must not throw
    // again when the error is reported.
    release();
    throw;
  }
  release();
  // Anything that wrote to C stdio's stdout (a plugin's printf) is checked as well.
  errno = 0;
  if (std::fflush(stdout) != 0 || std::ferror(stdout))
    throw Error("writing standard output", errno != 0 ? std::strerror(errno) : "the C library reports a write error");
}

}  // namespace verlpp::apps
