// CheckpointManager: temporary folder, rename, atomic tracker update, pruning.
#include <verlpp/controller/checkpoint_manager.hpp>
#include <verlpp/core/error.hpp>

#include "../util/files.hpp"

#include <algorithm>

namespace verlpp::controller {
namespace {

constexpr const char* kTracker = "latest_checkpointed_iteration.txt";
constexpr const char* kPrefix = "global_step_";

bool parse_step(const std::string& name, int64_t* step) {
  const std::string prefix = kPrefix;
  if (name.rfind(prefix, 0) != 0 || name.size() == prefix.size()) return false;
  int64_t value = 0;
  for (size_t i = prefix.size(); i < name.size(); ++i) {
    if (name[i] < '0' || name[i] > '9') return false;
    value = value * 10 + (name[i] - '0');
  }
  *step = value;
  return true;
}

}  // namespace

CheckpointManager::CheckpointManager(std::string root, int64_t max_to_keep)
    : root_(std::move(root)), max_to_keep_(max_to_keep) {
  if (root_.empty()) throw Error("trainer.default_local_dir", "the checkpoint folder is empty");
}

std::string CheckpointManager::folder(int64_t step) const { return files::join(root_, kPrefix + std::to_string(step)); }

std::string CheckpointManager::temporary(int64_t step) const {
  return files::join(root_, ".incomplete_" + std::string(kPrefix) + std::to_string(step));
}

std::string CheckpointManager::begin(int64_t step) const {
  if (step < 0) throw Error("checkpoint", fmt::format("step {} < 0", step));
  files::make_dirs(root_);
  std::string tmp = temporary(step);
  files::remove_tree(tmp);  // a crash may have left one
  files::make_dirs(tmp);
  return tmp;
}

std::string CheckpointManager::commit(int64_t step) const {
  std::string tmp = temporary(step), final_dir = folder(step);
  if (!files::is_dir(tmp)) throw Error(tmp, "commit without begin: the temporary checkpoint folder does not exist");
  files::remove_tree(final_dir);  // re-saving a step replaces it
  files::rename_path(tmp, final_dir);
  files::write_text(files::join(root_, kTracker), std::to_string(step) + "\n");
  if (max_to_keep_ > 0) {
    auto steps = steps_on_disk();
    while (int64_t(steps.size()) > max_to_keep_) {
      if (steps.front() != step) files::remove_tree(folder(steps.front()));
      steps.erase(steps.begin());
    }
  }
  return final_dir;
}

void CheckpointManager::abort(int64_t step) const { files::remove_tree(temporary(step)); }

std::vector<int64_t> CheckpointManager::steps_on_disk() const {
  std::vector<int64_t> steps;
  if (!files::is_dir(root_)) return steps;
  for (const auto& name : files::list_dir(root_)) {
    int64_t s;
    if (parse_step(name, &s) && files::is_dir(files::join(root_, name))) steps.push_back(s);
  }
  std::sort(steps.begin(), steps.end());
  return steps;
}

std::optional<int64_t> CheckpointManager::latest() const {
  std::string tracker = files::join(root_, kTracker);
  if (!files::is_file(tracker)) return std::nullopt;
  std::string text = files::read_text(tracker);
  text.erase(text.find_last_not_of(" \n\r\t") + 1);
  int64_t step;
  if (!parse_step(kPrefix + text, &step)) throw Error(tracker, fmt::format("holds '{}', not a step number", text));
  if (!files::is_dir(folder(step)))
    throw Error(tracker, fmt::format("names step {}, but {} does not exist", step, folder(step)));
  return step;
}

int64_t CheckpointManager::step_of(const std::string& path) {
  std::string name = path;
  while (!name.empty() && name.back() == '/') name.pop_back();
  name = name.substr(name.find_last_of('/') == std::string::npos ? 0 : name.find_last_of('/') + 1);
  int64_t step;
  if (!parse_step(name, &step)) throw Error(path, "is not a global_step_<N> checkpoint folder");
  return step;
}

std::optional<std::string> CheckpointManager::resume_folder(const std::string& mode, const std::string& path) const {
  if (mode == "disable") return std::nullopt;
  if (mode == "auto") {
    auto step = latest();
    if (!step) return std::nullopt;
    return folder(*step);
  }
  if (mode == "resume_path") {
    if (path.empty()) throw Error("trainer.resume_from_path", "resume_mode = resume_path needs a folder");
    step_of(path);
    if (!files::is_dir(path)) throw Error("trainer.resume_from_path", fmt::format("'{}' does not exist", path));
    return path;
  }
  throw Error("trainer.resume_mode", fmt::format("'{}' is not one of auto, disable, resume_path", mode));
}

}  // namespace verlpp::controller
