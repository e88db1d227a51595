// Checkpoint folders as verl lays them out: <root>/global_step_<N>/ and the tracker file
// <root>/latest_checkpointed_iteration.txt. A checkpoint is written into a temporary folder and
// renamed into place only when complete, and the tracker is replaced atomically after that, so a
// crash (even SIGKILL) never leaves a half checkpoint that resume would pick up.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace verlpp::controller {

class CheckpointManager {
 public:
  // `max_to_keep` <= 0 keeps every checkpoint (verl's null).
  CheckpointManager(std::string root, int64_t max_to_keep = 0);

  // A fresh temporary folder to write step `step` into (under root, removed first if left over).
  std::string begin(int64_t step) const;
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

  // verl's trainer.resume_mode: "auto" (latest, or none), "disable" (none), "resume_path" (the
  // given global_step_N folder, which must exist). Returns the folder to resume from, if any.
  std::optional<std::string> resume_folder(const std::string& resume_mode, const std::string& resume_from_path) const;

  // The step number in a "global_step_N" folder name; error naming the path otherwise.
  static int64_t step_of(const std::string& folder);

 private:
  std::string temporary(int64_t step) const;
  std::string root_;
  int64_t max_to_keep_;
};

}  // namespace verlpp::controller
