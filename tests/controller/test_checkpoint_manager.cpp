// CheckpointManager: only committed folders count, the tracker follows commits, pruning keeps
// the newest, each resume mode picks what verl would, and what verl would overwrite or resume
// without a word (a missing tracker, a fresh run over an earlier one, a trainer_state.json of
// another step) is refused or reported.
#include <verlpp/controller/checkpoint_manager.hpp>
#include <verlpp/core/error.hpp>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sys/stat.h>
#include <unistd.h>
// Catch2 last: LibTorch 2.x headers define glog's CHECK, which would otherwise replace Catch's.
#include <catch2/catch.hpp>

using Catch::Contains;
using verlpp::controller::CheckpointManager;

namespace {

std::string fresh_root(const std::string& name) {
  std::string root = "/tmp/verlpp-ckpt-test-" + name + "-" + std::to_string(getpid());
  REQUIRE(std::system(("rm -rf '" + root + "'").c_str()) == 0);
  return root;
}

bool exists(const std::string& p) {
  struct stat st;
  return stat(p.c_str(), &st) == 0;
}

// A checkpoint of `step` as the trainer commits it: the temporary folder with a weights file and
// trainer_state.json (recording `recorded`, the step itself unless a test says otherwise).
void save(const CheckpointManager& m, int64_t step, int64_t recorded = -1) {
  const std::string tmp = m.begin(step);
  std::ofstream(tmp + "/weights") << "step " << step;
  std::ofstream(tmp + "/" + CheckpointManager::kStateFile)
      << "{\"global_step\": " << (recorded < 0 ? step : recorded) << "}\n";
  m.commit(step);
}

std::string read(const std::string& path) {
  std::ifstream in(path);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

}  // namespace

TEST_CASE("checkpoints: begin/commit, tracker, pruning", "[checkpoint]") {
  std::string root = fresh_root("basic");
  CheckpointManager m(root, 2);
  CHECK_FALSE(m.latest().has_value());
  for (int64_t step : {2, 4, 6}) {
    std::string tmp = m.begin(step);
    std::ofstream(tmp + "/weights") << "step " << step;
    CHECK_FALSE(exists(m.folder(step)));  // not visible before commit
    CHECK(m.commit(step) == m.folder(step));
    CHECK(m.latest() == step);
  }
  CHECK(m.steps_on_disk() == std::vector<int64_t>{4, 6});  // max_to_keep = 2
  CHECK(exists(m.folder(6) + "/weights"));
  // A crash mid-write: begun, never committed. Resume still picks the last complete one.
  std::ofstream(m.begin(8) + "/weights") << "partial";
  CHECK(m.latest() == 6);
  std::ofstream(m.folder(6) + "/" + CheckpointManager::kStateFile) << "{\"global_step\": 6}";
  CHECK(m.plan_resume("auto", "").folder == m.folder(6));
  m.abort(8);
  CHECK(m.steps_on_disk() == std::vector<int64_t>{4, 6});
  REQUIRE(std::system(("rm -rf '" + root + "'").c_str()) == 0);
}

TEST_CASE("checkpoints: resume modes and broken trackers", "[checkpoint]") {
  std::string root = fresh_root("resume");
  CheckpointManager m(root);
  CHECK_FALSE(m.plan_resume("auto", "").folder.has_value());
  CHECK(m.plan_resume("disable", "").notes.empty());  // an empty folder: a fresh run is fine
  save(m, 3);
  CHECK(m.plan_resume("auto", "").folder == m.folder(3));
  CHECK(m.plan_resume("auto", "").step == 3);
  CHECK(m.plan_resume("resume_path", m.folder(3)).folder == m.folder(3));
  CHECK(CheckpointManager::step_of(m.folder(3) + "/") == 3);
  CHECK_THROWS_WITH(m.plan_resume("resume_path", root + "/global_step_9"), Contains("does not exist"));
  CHECK_THROWS_WITH(m.plan_resume("resume_path", root), Contains("not a global_step_<N>"));
  CHECK_THROWS_WITH(m.plan_resume("sometimes", ""), Contains("'sometimes'"));
  std::ofstream(root + "/latest_checkpointed_iteration.txt") << "7\n";
  CHECK_THROWS_WITH(m.latest(), Contains("names step 7"));
  std::ofstream(root + "/latest_checkpointed_iteration.txt") << "x7";
  CHECK_THROWS_WITH(m.latest(), Contains("not a step number"));
  REQUIRE(std::system(("rm -rf '" + root + "'").c_str()) == 0);
}

TEST_CASE("checkpoints: without the tracker, auto resumes from the newest complete folder", "[checkpoint]") {
  std::string root = fresh_root("no-tracker");
  CheckpointManager m(root);
  for (int64_t step : {1, 2, 3}) save(m, step);
  REQUIRE(std::remove((root + "/latest_checkpointed_iteration.txt").c_str()) == 0);
  auto plan = m.plan_resume("auto", "");
  CHECK(plan.folder == m.folder(3));
  CHECK(plan.step == 3);
  REQUIRE(plan.notes.size() == 1);
  CHECK_THAT(plan.notes[0], Contains("latest_checkpointed_iteration.txt is missing") && Contains("global_step_3"));

  // A newer folder without trainer_state.json (not written by a commit) is passed over, named,
  // and left as it is.
  REQUIRE(std::system(("mkdir -p '" + m.folder(5) + "' && echo partial > '" + m.folder(5) + "/weights'").c_str()) == 0);
  CHECK_FALSE(m.incomplete_reason(5).empty());
  CHECK(m.incomplete_reason(3).empty());
  plan = m.plan_resume("auto", "");
  CHECK(plan.folder == m.folder(3));
  REQUIRE(plan.notes.size() == 2);
  CHECK_THAT(plan.notes[1], Contains("global_step_5") && Contains("trainer_state.json is missing"));
  CHECK(read(m.folder(5) + "/weights") == "partial\n");
  REQUIRE(std::system(("rm -rf '" + root + "'").c_str()) == 0);
}

TEST_CASE("checkpoints: without the tracker and no complete folder, auto refuses and changes nothing", "[checkpoint]") {
  std::string root = fresh_root("only-incomplete");
  CheckpointManager m(root);
  REQUIRE(std::system(("mkdir -p '" + m.folder(2) + "' && echo partial > '" + m.folder(2) + "/weights'").c_str()) == 0);
  std::ofstream(root + "/metrics.jsonl") << "{\"step\": 1}\n";
  CHECK_THROWS_WITH(m.plan_resume("auto", "", {"metrics.jsonl"}),
                    Contains("latest_checkpointed_iteration.txt") && Contains("missing") && Contains(m.folder(2)) &&
                        Contains("trainer_state.json is missing") && Contains("nothing was changed"));
  CHECK(read(m.folder(2) + "/weights") == "partial\n");
  CHECK(read(root + "/metrics.jsonl") == "{\"step\": 1}\n");
  REQUIRE(std::system(("rm -rf '" + root + "'").c_str()) == 0);
}

TEST_CASE("checkpoints: a trainer_state.json that disagrees with its folder or is corrupt is refused", "[checkpoint]") {
  std::string root = fresh_root("state");
  CheckpointManager m(root);
  save(m, 3, /*recorded=*/5);  // global_step_3 holding step 5
  const std::string state = m.folder(3) + "/trainer_state.json";
  for (const char* mode : {"auto", "resume_path"})
    CHECK_THROWS_WITH(m.plan_resume(mode, m.folder(3)),
                      Contains(state) && Contains("global_step 5") && Contains("step 3"));
  REQUIRE(std::remove((root + "/latest_checkpointed_iteration.txt").c_str()) == 0);
  CHECK_THROWS_WITH(m.plan_resume("auto", ""), Contains(state) && Contains("global_step 5") && Contains("step 3"));

  std::ofstream(state) << "{\"global_step\": 3, \"dataloa";  // cut short
  CHECK_THROWS_WITH(m.plan_resume("auto", ""), Contains(state) && Contains("not valid JSON") && Contains("step 3"));
  std::ofstream(state) << "{\"global_step\": \"3\"}";
  CHECK_THROWS_WITH(CheckpointManager::check_state(m.folder(3)), Contains(state) && Contains("no integer global_step"));
  std::ofstream(state) << "{\"global_step\": 3}";
  CHECK(CheckpointManager::check_state(m.folder(3)) == 3);
  REQUIRE(std::system(("rm -rf '" + root + "'").c_str()) == 0);
}

TEST_CASE("checkpoints: resume_mode=disable refuses a folder holding an earlier run", "[checkpoint]") {
  std::string root = fresh_root("disable");
  CheckpointManager m(root);
  REQUIRE(std::system(("mkdir -p '" + root + "'").c_str()) == 0);
  std::ofstream(root + "/metrics.jsonl") << "{\"step\": 1}\n";
  CHECK_THROWS_WITH(
      m.plan_resume("disable", "", {"metrics.jsonl", "sft_metrics.jsonl"}),
      Contains("disable") && Contains(root) && Contains("metrics.jsonl") && Contains("trainer.default_local_dir"));
  CHECK(m.plan_resume("disable", "").notes.empty());  // metrics.jsonl not named as an output
  // auto, with no checkpoint: a fresh run, which says what it replaces.
  auto plan = m.plan_resume("auto", "", {"metrics.jsonl", "sft_metrics.jsonl"});
  CHECK_FALSE(plan.folder.has_value());
  REQUIRE(plan.notes.size() == 1);
  CHECK_THAT(plan.notes[0], Contains("no checkpoint") && Contains("metrics.jsonl") && Contains("replaced"));
  REQUIRE(std::remove((root + "/metrics.jsonl").c_str()) == 0);
  save(m, 2);
  CHECK_THROWS_WITH(m.plan_resume("disable", ""), Contains("global_step_2") && Contains("latest_checkpointed"));
  CHECK(exists(m.folder(2) + "/weights"));
  REQUIRE(std::system(("rm -rf '" + root + "'").c_str()) == 0);
}

TEST_CASE("checkpoints: resuming before checkpoints on disk says they are replaced", "[checkpoint]") {
  std::string root = fresh_root("newer");
  CheckpointManager m(root);
  for (int64_t step : {1, 2, 3}) save(m, step);
  const auto plan = m.plan_resume("resume_path", m.folder(1));
  CHECK(plan.step == 1);
  REQUIRE(plan.notes.size() == 1);
  CHECK_THAT(plan.notes[0], Contains("global_step_2, global_step_3") && Contains("replaces"));
  // The tracker names 2 while global_step_3 is in place (stopped between rename and tracker).
  std::ofstream(root + "/latest_checkpointed_iteration.txt") << "2\n";
  const auto tracked = m.plan_resume("auto", "");
  CHECK(tracked.step == 2);
  REQUIRE(tracked.notes.size() == 1);
  CHECK_THAT(tracked.notes[0], Contains("global_step_3"));
  // The tracker names a folder that is not complete.
  REQUIRE(std::remove((m.folder(2) + "/trainer_state.json").c_str()) == 0);
  CHECK_THROWS_WITH(m.plan_resume("auto", ""), Contains("names step 2") && Contains("not a complete checkpoint"));
  REQUIRE(std::system(("rm -rf '" + root + "'").c_str()) == 0);
}
