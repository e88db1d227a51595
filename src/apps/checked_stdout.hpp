// std::cout through the library's checked writer (files::OutputFile on "-"): a write that the
// system refuses (`verlpp tokenize > /dev/full`) throws "writing standard output: <OS reason>"
// where it happens, and finish() flushes what is left, so the command exits non-zero instead of
// losing its output silently.
#pragma once

#include "../core/util/output_file.hpp"

#include <iostream>
#include <streambuf>

namespace verlpp::apps {

class CheckedStdout {
 public:
  // Routes std::cout here (with exceptions on: a failed write surfaces as the Error itself).
  CheckedStdout();
  // Puts std::cout back as it was; whatever is still buffered is dropped (finish() writes it).
  ~CheckedStdout();
  CheckedStdout(const CheckedStdout&) = delete;
  CheckedStdout& operator=(const CheckedStdout&) = delete;
  // Writes everything still buffered, C stdio's stdout included, and puts std::cout back; an
  // Error when a write fails. A second call does nothing.
  void finish();

 private:
  void release() noexcept;

  class Buffer : public std::streambuf {
   public:
    explicit Buffer(files::OutputFile& out) : out_(out) {}

   protected:
    int_type overflow(int_type c) override;
    std::streamsize xsputn(const char* data, std::streamsize size) override;
    int sync() override;

   private:
    files::OutputFile& out_;
  };

  files::OutputFile out_{"-"};
  Buffer buffer_{out_};
  std::streambuf* previous_ = nullptr;
  std::ios::iostate previous_exceptions_ = std::ios::goodbit;
};

}  // namespace verlpp::apps
