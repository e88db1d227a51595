// Checked output (internal): what an output path names, and one writer used by every output of
// the library and the `verlpp` command. Every write, flush and close is checked; a failure is an
// Error "writing <file>: <OS reason>" (strerror, e.g. "No space left on device"), so nothing is
// lost silently. Regular files (and new paths) are written beside their name and renamed into
// place; devices, FIFOs and standard output ("-") are written in place, so a device node or a
// pipe is never replaced by a regular file. POSIX only, as files.hpp explains.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace verlpp::files {

// What an output path names now.
enum class OutputKind {
  kStdout,       // "-": the process's standard output
  kNew,          // nothing there yet; the parent folder exists and is writable
  kRegular,      // a regular file (through symbolic links); its folder is writable
  kCharDevice,   // e.g. /dev/null, /dev/full, a terminal
  kBlockDevice,  // a disk
  kFifo,         // a named pipe
  kDirectory,    // refused: a folder
  kBadParent,    // refused: the parent folder is missing, is not a folder, or is not writable
  kOther,        // refused: a socket, a dangling symbolic link, a path that cannot be examined
};

struct OutputTarget {
  OutputKind kind = OutputKind::kNew;
  // Why the path cannot be written (empty when it can), e.g. "is an existing folder".
  std::string problem;
  bool writable() const { return problem.empty(); }
  // True for the kinds written through a temporary file and a rename.
  bool replaced_atomically() const { return kind == OutputKind::kNew || kind == OutputKind::kRegular; }
};

// Examines `path` as an output; nothing is created or changed.
OutputTarget classify_output(const std::string& path);
// classify_output, and an Error "<label> <path>: <problem>" when it cannot be written. For the
// command line's output options, checked before any work (`label` is e.g. "--out").
OutputTarget require_output(const std::string& path, const std::string& label);
// "standard output" for "-", else the path: how errors name an output.
std::string output_display_name(const std::string& path);

// A file being written. Writes are buffered; write(), flush() and commit() throw an Error naming
// the file and the OS reason when the system refuses them.
//   kReplace: a new path or a regular file is written to a temporary file beside it (same
//     folder, same file system), which commit() syncs and renames over the path, so readers see
//     the old file or the complete new one; a device, a FIFO or "-" is written in place.
//   kAppend: opened in place and appended to (created when missing), for logs such as
//     metrics.jsonl; flush() puts each row on disk before the next step runs.
//   kStream: written in place from the start (a regular file is truncated when opened), so
//     what each flush() wrote is under the name even if the process is killed; for results
//     streamed as they finish (`verlpp generate --output`).
// A writer destroyed without commit() (an exception on the way) removes its temporary file and
// leaves the path as it was.
class OutputFile {
 public:
  enum class Mode { kReplace, kAppend, kStream };

  OutputFile() = default;
  // Opens `path` (refused, with the path named, when require_output would refuse it).
  explicit OutputFile(const std::string& path, Mode mode = Mode::kReplace);
  ~OutputFile();
  OutputFile(OutputFile&& other) noexcept;
  OutputFile& operator=(OutputFile&& other) noexcept;
  OutputFile(const OutputFile&) = delete;
  OutputFile& operator=(const OutputFile&) = delete;

  void write(const void* data, size_t size);
  void write(std::string_view text) { write(text.data(), text.size()); }
  // Hands everything buffered to the operating system.
  void flush();
  // Flushes and finishes: a temporary file is synced, closed and renamed over the path; a file
  // written in place is closed (standard output is flushed, not closed).
  void commit();

  bool is_open() const { return fd_ >= 0; }
  const std::string& path() const { return path_; }

 private:
  void write_through(const char* data, size_t size);
  void fail(const std::string& what, int error) const;
  void discard() noexcept;

  std::string path_;         // as given
  std::string destination_;  // the file the rename replaces (symbolic links resolved)
  std::string temporary_;    // empty when written in place
  int fd_ = -1;
  bool owns_fd_ = false;  // false for standard output
  std::string buffer_;
};

}  // namespace verlpp::files
