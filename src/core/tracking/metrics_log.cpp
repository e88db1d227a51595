// metrics.jsonl durability: fsync before a checkpoint names a step, and the cut back to the
// checkpoint's step on resume (rows kept byte for byte, an unterminated last line dropped).
#include <verlpp/tracking/metrics_log.hpp>
#include <verlpp/tracking/report.hpp>
#include <verlpp/core/error.hpp>

#include "../util/files.hpp"

#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <map>
#include <unistd.h>

namespace verlpp::tracking {
namespace {

// "3", "3, 4", "3..7" (a run of consecutive steps) for the notes.
std::string describe_steps(const std::vector<int64_t>& steps) {
  std::string out;
  for (size_t i = 0; i < steps.size();) {
    size_t j = i;
    while (j + 1 < steps.size() && steps[j + 1] == steps[j] + 1) ++j;
    if (!out.empty()) out += ", ";
    out += j > i + 1 ? fmt::format("{}..{}", steps[i], steps[j])
                     : (j == i ? std::to_string(steps[i]) : fmt::format("{}, {}", steps[i], steps[j]));
    i = j + 1;
  }
  return out;
}

// Syncs the folder holding `path`, so that a rename into it is durable too.
void sync_parent(const std::string& path) {
  const size_t slash = path.find_last_of('/');
  sync_file(slash == std::string::npos ? "." : (slash == 0 ? "/" : path.substr(0, slash)));
}

// `text` into `path` through `path`.tmp, synced before and after the rename.
void replace_durably(const std::string& path, const std::string& text) {
  files::write_text(path + ".tmp", text);
  sync_file(path + ".tmp");
  files::rename_path(path + ".tmp", path);
  sync_parent(path);
}

}  // namespace

void sync_file(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw Error(path, fmt::format("cannot open it to sync it to disk: {}", std::strerror(errno)));
  // On Linux fsync writes back every dirty page of the file, whichever descriptor wrote it.
  const int rc = ::fsync(fd);
  const int err = errno;
  ::close(fd);
  if (rc != 0) throw Error(path, fmt::format("fsync failed (the rows may not be on disk): {}", std::strerror(err)));
}

std::vector<std::string> MetricsTrim::notes(const std::string& path, int64_t step) const {
  std::vector<std::string> out;
  if (torn_last_line)
    out.push_back(fmt::format("{}: dropped an incomplete last line (the run was stopped while writing it)", path));
  if (!dropped_steps.empty())
    out.push_back(fmt::format("{}: dropped the rows of steps {} (past the checkpoint of step {}; written again)", path,
                              describe_steps(dropped_steps), step));
  if (!missing_steps.empty())
    out.push_back(
        fmt::format("{}: has no rows for steps {}, and resuming after step {} cannot write them; to have "
                    "them, resume from a checkpoint of step {} or earlier (trainer.resume_mode=resume_path)",
                    path, describe_steps(missing_steps), step, missing_steps.front() - 1));
  if (!repeated_steps.empty())
    out.push_back(fmt::format("{}: holds more than one row for steps {}", path, describe_steps(repeated_steps)));
  return out;
}

MetricsTrim trim_metrics(const std::string& path, int64_t step) {
  MetricsTrim result;
  if (!files::is_file(path)) return result;
  const std::string text = files::read_text(path);
  std::string kept;
  std::map<int64_t, int> rows_of;
  size_t begin = 0;
  for (size_t line_no = 1; begin < text.size(); ++line_no) {
    const size_t end = text.find('\n', begin);
    if (end == std::string::npos) {  // no newline: the write of this row never finished
      result.torn_last_line = true;
      break;
    }
    std::string line = text.substr(begin, end - begin);
    begin = end + 1;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    const std::string where = fmt::format("{}:{}", path, line_no);
    const nlohmann::json row = parse_metrics_line(line, where);
    const auto found = row.find("step");
    if (found == row.end() || !found->is_number_integer())
      VERLPP_FAIL_AT(where, "a metrics row without an integer \"step\": {}", line.substr(0, 120));
    const int64_t row_step = found->get<int64_t>();
    if (row_step > step) {
      result.dropped_steps.push_back(row_step);
      continue;
    }
    kept += line + "\n";
    result.kept_steps.push_back(row_step);
    if (++rows_of[row_step] == 2) result.repeated_steps.push_back(row_step);
  }
  for (int64_t s = 1; s <= step; ++s)
    if (rows_of.count(s) == 0) result.missing_steps.push_back(s);
  if (result.torn_last_line || !result.dropped_steps.empty()) replace_durably(path, kept);
  return result;
}

}  // namespace verlpp::tracking
