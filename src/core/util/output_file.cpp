// The output path classifier and the checked writer (see output_file.hpp).
#include "output_file.hpp"

#include <verlpp/core/error.hpp>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <utility>

namespace verlpp::files {
namespace {

// Bytes kept before they are handed to the system; larger writes go straight through.
constexpr size_t kBufferBytes = size_t(1) << 16;

std::string parent_of(const std::string& path) {
  const size_t slash = path.find_last_of('/');
  if (slash == std::string::npos) return ".";
  return slash == 0 ? "/" : path.substr(0, slash);
}

// Empty when new files can be made in `folder`, else why not.
std::string folder_problem(const std::string& folder) {
  struct stat st {};
  if (::stat(folder.c_str(), &st) != 0)
    return errno == ENOENT ? fmt::format("the folder {} does not exist", folder)
                           : fmt::format("the folder {} cannot be examined: {}", folder, std::strerror(errno));
  if (!S_ISDIR(st.st_mode)) return fmt::format("{} is not a folder", folder);
  if (::access(folder.c_str(), W_OK | X_OK) != 0)
    return fmt::format("cannot create files in the folder {}: {}", folder, std::strerror(errno));
  return "";
}

// The file a rename must replace: `path` with its symbolic links resolved, so a link to a
// regular file keeps pointing at the new contents.
std::string resolved(const std::string& path) {
  char buffer[PATH_MAX];
  return ::realpath(path.c_str(), buffer) ? std::string(buffer) : path;
}

int open_retrying(const char* path, int flags, mode_t mode) {
  int fd;
  do fd = ::open(path, flags, mode);
  while (fd < 0 && errno == EINTR);
  return fd;
}

std::atomic<uint64_t> temporary_counter{0};

}  // namespace

std::string output_display_name(const std::string& path) { return path == "-" ? "standard output" : path; }

OutputTarget classify_output(const std::string& path) {
  OutputTarget t;
  if (path == "-") {
    t.kind = OutputKind::kStdout;
    return t;
  }
  if (path.empty()) {
    t.kind = OutputKind::kOther;
    t.problem = "the output path is empty";
    return t;
  }
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0) {
    if (S_ISDIR(st.st_mode)) {
      t.kind = OutputKind::kDirectory;
      t.problem = "is an existing folder, not a file";
    } else if (S_ISCHR(st.st_mode)) {
      t.kind = OutputKind::kCharDevice;
    } else if (S_ISBLK(st.st_mode)) {
      t.kind = OutputKind::kBlockDevice;
    } else if (S_ISFIFO(st.st_mode)) {
      t.kind = OutputKind::kFifo;
    } else if (S_ISREG(st.st_mode)) {
      t.kind = OutputKind::kRegular;
      const std::string problem = folder_problem(parent_of(resolved(path)));
      if (!problem.empty()) {
        t.kind = OutputKind::kBadParent;
        t.problem = problem + " (the file is replaced through a temporary file beside it)";
      }
    } else {
      t.kind = OutputKind::kOther;
      t.problem = "is a socket or another special file, not a file to write";
    }
    return t;
  }
  const int error = errno;
  if (error == ENOTDIR) {
    t.kind = OutputKind::kBadParent;
    t.problem = "a component of the path is not a folder";
    return t;
  }
  if (error != ENOENT) {
    t.kind = OutputKind::kOther;
    t.problem = fmt::format("cannot be examined: {}", std::strerror(error));
    return t;
  }
  struct stat link {};
  if (::lstat(path.c_str(), &link) == 0 && S_ISLNK(link.st_mode)) {
    t.kind = OutputKind::kOther;
    t.problem = "is a symbolic link to a missing file";
    return t;
  }
  if (path.back() == '/') {
    t.kind = OutputKind::kBadParent;
    t.problem = fmt::format("the folder {} does not exist", path);
    return t;
  }
  t.problem = folder_problem(parent_of(path));
  t.kind = t.problem.empty() ? OutputKind::kNew : OutputKind::kBadParent;
  return t;
}

OutputTarget require_output(const std::string& path, const std::string& label) {
  OutputTarget t = classify_output(path);
  if (!t.writable()) throw Error(label.empty() ? path : label + " " + path, t.problem);
  return t;
}

OutputFile::OutputFile(const std::string& path, Mode mode) : path_(path) {
  const OutputTarget target = classify_output(path);
  if (!target.writable()) throw Error(output_display_name(path), target.problem);
  if (target.kind == OutputKind::kStdout) {
    fd_ = STDOUT_FILENO;
    return;
  }
  owns_fd_ = true;
  if (mode != Mode::kReplace || !target.replaced_atomically()) {
    // In place: a device or a FIFO as it is (no O_CREAT, no O_TRUNC); a log appended to; a
    // streamed file truncated.
    int flags = O_WRONLY | O_CLOEXEC;
    if (mode == Mode::kAppend) flags |= O_APPEND | O_CREAT;
    if (mode == Mode::kStream && target.replaced_atomically()) flags |= O_TRUNC | O_CREAT;
    fd_ = open_retrying(path.c_str(), flags, 0666);
    if (fd_ < 0) fail("cannot open it", errno);
    return;
  }
  destination_ = target.kind == OutputKind::kRegular ? resolved(path) : path;
  // A fresh name each time (O_EXCL): never an old leftover, a link or a device under the name.
  for (int attempt = 0; fd_ < 0; ++attempt) {
    temporary_ = fmt::format("{}.tmp.{}.{}", destination_, ::getpid(), temporary_counter.fetch_add(1));
    fd_ = open_retrying(temporary_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    if (fd_ < 0 && (errno != EEXIST || attempt >= 100)) {
      const int error = errno;
      const std::string tmp = std::exchange(temporary_, std::string());
      fail(fmt::format("cannot create the temporary file {}", tmp), error);
    }
  }
  struct stat st {};
  if (target.kind == OutputKind::kRegular && ::stat(destination_.c_str(), &st) == 0)
    (void)::fchmod(fd_, st.st_mode & 07777);  // the replacement keeps the replaced file's mode
}

OutputFile::~OutputFile() { discard(); }

OutputFile::OutputFile(OutputFile&& other) noexcept { *this = std::move(other); }

OutputFile& OutputFile::operator=(OutputFile&& other) noexcept {
  if (this != &other) {
    discard();
    path_ = std::move(other.path_);
    destination_ = std::move(other.destination_);
    temporary_ = std::exchange(other.temporary_, std::string());
    fd_ = std::exchange(other.fd_, -1);
    owns_fd_ = std::exchange(other.owns_fd_, false);
    buffer_ = std::move(other.buffer_);
    other.buffer_.clear();
  }
  return *this;
}

void OutputFile::fail(const std::string& what, int error) const {
  const std::string reason = std::strerror(error);
  throw Error("writing " + output_display_name(path_), what.empty() ? reason : what + ": " + reason);
}

void OutputFile::write_through(const char* data, size_t size) {
  while (size > 0) {
    const ssize_t n = ::write(fd_, data, size);
    if (n < 0) {
      if (errno == EINTR) continue;
      fail("", errno);
    }
    if (n == 0) fail("the system took no bytes", EIO);
    data += n;
    size -= size_t(n);
  }
}

void OutputFile::write(const void* data, size_t size) {
  if (fd_ < 0) throw Error("writing " + output_display_name(path_), "the file is not open (already committed?)");
  const char* bytes = static_cast<const char*>(data);
  if (buffer_.size() + size <= kBufferBytes) {
    buffer_.append(bytes, size);
    return;
  }
  flush();
  if (size >= kBufferBytes)
    write_through(bytes, size);
  else
    buffer_.append(bytes, size);
}

void OutputFile::flush() {
  if (fd_ < 0 || buffer_.empty()) return;
  // Cleared first: after a failure the bytes are not tried again (the error already said so).
  std::string pending;
  pending.swap(buffer_);
  write_through(pending.data(), pending.size());
}

void OutputFile::commit() {
  if (fd_ < 0) return;
  flush();
  const int fd = std::exchange(fd_, -1);
  if (!owns_fd_) return;  // standard output stays open
  owns_fd_ = false;
  if (temporary_.empty()) {
    if (::close(fd) != 0) fail("", errno);
    return;
  }
  // Synced before the rename, so a crash after it cannot leave an empty file under the name.
  int error = ::fsync(fd) != 0 ? errno : 0;
  if (::close(fd) != 0 && error == 0) error = errno;
  if (error == 0 && ::rename(temporary_.c_str(), destination_.c_str()) != 0) {
    error = errno;
    const std::string tmp = temporary_;
    discard();
    fail(fmt::format("cannot rename {} into place", tmp), error);
  }
  if (error != 0) {
    discard();
    fail("", error);
  }
  temporary_.clear();
}

void OutputFile::discard() noexcept {
  if (fd_ >= 0 && owns_fd_) ::close(fd_);
  fd_ = -1;
  owns_fd_ = false;
  if (!temporary_.empty()) ::unlink(temporary_.c_str());
  temporary_.clear();
  buffer_.clear();
}

}  // namespace verlpp::files
