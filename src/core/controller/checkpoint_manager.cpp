// CheckpointManager: temporary folder, rename, atomic tracker update, pruning.
#include <verlpp/config/keys.hpp>
#include <verlpp/controller/checkpoint_manager.hpp>
#include <verlpp/core/error.hpp>
#include <verlpp/core/strings.hpp>

#include "../util/files.hpp"

#include <nlohmann/json.hpp>

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
  if (root_.empty()) throw Error(config::keys::kTrainerDefaultLocalDir, "the checkpoint folder is empty");
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

int64_t CheckpointManager::check_state(const std::string& dir) {
  const int64_t named = step_of(dir);
  const std::string path = files::join(dir, kStateFile);
  if (!files::is_file(path))
    throw Error(path, "missing: the folder is not a complete checkpoint (the trainer writes this file last)");
  nlohmann::json state;
  try {
    state = nlohmann::json::parse(files::read_text(path));
  } catch (const nlohmann::json::exception& e) {
    throw Error(path, fmt::format("unreadable, not valid JSON ({}); the checkpoint of step {} cannot be resumed",
                                  e.what(), named));
  }
  const auto found = state.is_object() ? state.find("global_step") : state.end();
  if (found == state.end() || !found->is_number_integer())
    throw Error(path, fmt::format("has no integer global_step; the checkpoint of step {} cannot be resumed", named));
  const int64_t recorded = found->get<int64_t>();
  if (recorded != named)
    throw Error(path, fmt::format("records global_step {}, but its folder is named for step {}; the folder was "
                                  "renamed or its contents replaced, so it is not resumed",
                                  recorded, named));
  return recorded;
}

std::string CheckpointManager::incomplete_reason(int64_t step) const {
  if (!files::is_dir(folder(step))) return fmt::format("{} does not exist", folder(step));
  if (!files::is_file(files::join(folder(step), kStateFile))) return fmt::format("{} is missing", kStateFile);
  return "";
}

namespace {

std::string list_steps(const std::vector<int64_t>& steps) {
  std::vector<std::string> names;
  for (int64_t s : steps) names.push_back(kPrefix + std::to_string(s));
  return join(names, ", ");
}

}  // namespace

ResumePlan CheckpointManager::plan_resume(const std::string& mode, const std::string& path,
                                          const std::vector<std::string>& run_outputs) const {
  if (mode != "auto" && mode != "disable" && mode != "resume_path")
    throw Error(config::keys::kTrainerResumeMode, fmt::format("'{}' is not one of auto, disable, resume_path", mode));
  const std::vector<int64_t> on_disk = steps_on_disk();
  const std::string tracker = files::join(root_, kTracker);
  std::vector<std::string> outputs;  // the run outputs present
  for (const std::string& name : run_outputs)
    if (files::is_file(files::join(root_, name))) outputs.push_back(name);
  ResumePlan plan;
  // The checkpoints a run resumed at plan.step saves again: they are replaced, so say so.
  auto note_newer = [&](const std::string& why) {
    std::vector<int64_t> newer;
    for (int64_t s : on_disk)
      if (s > plan.step) newer.push_back(s);
    if (!newer.empty())
      plan.notes.push_back(
          fmt::format("{} in {} {} newer than step {} ({}); a checkpoint of the same step from "
                      "this run replaces {}",
                      list_steps(newer), root_, newer.size() == 1 ? "is" : "are", plan.step, why,
                      newer.size() == 1 ? "it" : "each"));
  };

  if (mode == "disable") {
    std::vector<std::string> found;
    if (!on_disk.empty()) found.push_back(list_steps(on_disk));
    if (files::is_file(tracker)) found.push_back(kTracker);
    found.insert(found.end(), outputs.begin(), outputs.end());
    if (!found.empty())
      throw Error(std::string(config::keys::kTrainerResumeMode) + "=disable",
                  fmt::format("trains from scratch, but {} holds an earlier run ({}) that it would overwrite; "
                              "choose another trainer.default_local_dir, move those away, or resume the run "
                              "(trainer.resume_mode=auto)",
                              root_, join(found, ", ")));
    return plan;
  }

  if (mode == "resume_path") {
    if (path.empty()) throw Error(config::keys::kTrainerResumeFromPath, "resume_mode = resume_path needs a folder");
    step_of(path);
    if (!files::is_dir(path))
      throw Error(config::keys::kTrainerResumeFromPath, fmt::format("'{}' does not exist", path));
    plan.step = check_state(path);
    plan.folder = path;
    note_newer(std::string(config::keys::kTrainerResumeFromPath) + " names an earlier one");
    return plan;
  }

  // auto
  if (files::is_file(tracker)) {
    plan.step = *latest();
    if (!incomplete_reason(plan.step).empty())
      throw Error(tracker, fmt::format("names step {}, but {} is not a complete checkpoint ({}); move it away to "
                                       "resume from an earlier one",
                                       plan.step, folder(plan.step), incomplete_reason(plan.step)));
    check_state(folder(plan.step));
    plan.folder = folder(plan.step);
    note_newer("stopped after their folder was renamed into place, before the tracker named it");
    return plan;
  }
  if (on_disk.empty()) {
    if (!outputs.empty())
      plan.notes.push_back(fmt::format(
          "no checkpoint in {}: training from scratch; {} of an earlier attempt that saved no checkpoint {} replaced",
          root_, join(outputs, ", "), outputs.size() == 1 ? "is" : "are"));
    return plan;
  }
  // No tracker, but checkpoint folders: the newest complete one (the tracker may have been
  // deleted, or the folders copied here without it).
  std::vector<std::string> incomplete;
  for (auto it = on_disk.rbegin(); it != on_disk.rend(); ++it) {
    const std::string why = incomplete_reason(*it);
    if (!why.empty()) {
      incomplete.push_back(fmt::format("{} ({})", folder(*it), why));
      continue;
    }
    plan.step = check_state(folder(*it));
    plan.folder = folder(*it);
    break;
  }
  const std::string skipped = join(incomplete, ", ");
  if (!plan.folder)
    throw Error(tracker, fmt::format("missing, and no global_step folder in {} is a complete checkpoint: {}; "
                                     "nothing was changed. Move those folders away (or remove them) to train "
                                     "from scratch, or choose another trainer.default_local_dir",
                                     root_, skipped));
  plan.notes.push_back(
      fmt::format("{} is missing: resuming from {}, the newest complete checkpoint", tracker, *plan.folder));
  if (!incomplete.empty()) note_newer("not complete: " + skipped);
  return plan;
}

}  // namespace verlpp::controller
