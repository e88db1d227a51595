// Checkpoint folders as verl lays them out: <root>/global_step_<N>/ and the tracker file
// <root>/latest_checkpointed_iteration.txt. A checkpoint is written into a temporary folder and
// renamed into place only when complete, and the tracker is replaced atomically after that, so a
// crash (even SIGKILL) never leaves a half checkpoint that resume would pick up. A complete
// folder holds trainer_state.json (the file the trainer writes last) recording its own step.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace verlpp::controller {

// What trainer.resume_mode decided for a run folder: the checkpoint to load (none: train from
// scratch) and what the trainer should tell the user about it (a missing tracker, checkpoints
// or files the run will write again).
struct ResumePlan {
  std::optional<std::string> folder;  // the global_step_N folder to resume from
  int64_t step = 0;                   // its N (0 when training from scratch)
  std::vector<std::string> notes;     // one line each, for the run's log
};

class CheckpointManager {
 public:
  // The file inside a global_step_N folder that makes it complete (see check_state).
  static constexpr const char* kStateFile = "trainer_state.json";

  // `max_to_keep` <= 0 keeps every checkpoint (verl's null).
  CheckpointManager(std::string root, int64_t max_to_keep = 0);

  // A fresh temporary folder to write step `step` into (under root, removed first if left over).
  std::string begin(int64_t step) const;
  // The temporary folder begin(step) makes (for ranks that write into it after it is made).
  std::string temporary(int64_t step) const;
  // Moves the temporary folder into place as global_step_<step>, updates the tracker, and
  // removes the oldest complete checkpoints beyond max_to_keep. Returns the final folder.
  std::string commit(int64_t step) const;
  // Drops a begun but uncommitted checkpoint.
  void abort(int64_t step) const;

  // The step the tracker names, if its folder exists; nullopt for a fresh run.
  std::optional<int64_t> latest() const;
  // Complete checkpoint steps on disk, ascending.
  std::vector<int64_t> steps_on_disk() const;
  std::string folder(int64_t step) const;
  const std::string& root() const { return root_; }

  // verl's trainer.resume_mode. "auto": the tracker's step; without a tracker the newest
  // complete global_step_N folder (an Error naming the folders if there are some but none is
  // complete); nothing when the root holds no checkpoint. "disable": train from scratch, refused
  // (an Error naming what is there) if the root holds checkpoints, the tracker or one of
  // `run_outputs`, which a fresh run would overwrite. "resume_path": `resume_from_path`, a
  // global_step_N folder that must exist. The chosen folder's trainer_state.json is checked
  // (check_state). `run_outputs`: files under root that a fresh run writes from the start
  // (metrics); with "auto" and no checkpoint their replacement is one of the notes.
  ResumePlan plan_resume(const std::string& resume_mode, const std::string& resume_from_path,
                         const std::vector<std::string>& run_outputs = {}) const;

  // Why global_step_<step> is not a complete checkpoint (its trainer_state.json is missing), or
  // "" when it is complete.
  std::string incomplete_reason(int64_t step) const;

  // The step number in a "global_step_N" folder name; error naming the path otherwise.
  static int64_t step_of(const std::string& folder);
  // The step `folder`/trainer_state.json records; an Error naming the file if it is missing,
  // unreadable, not JSON, has no integer global_step, or records another step than the folder's
  // name (naming both).
  static int64_t check_state(const std::string& folder);

 private:
  std::string root_;
  int64_t max_to_keep_;
};

}  // namespace verlpp::controller
