// CheckpointManager: only committed folders count, the tracker follows commits, pruning keeps
// the newest, and each resume mode picks what verl would.
#include <verlpp/controller/checkpoint_manager.hpp>
#include <verlpp/core/error.hpp>

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
  CHECK(m.resume_folder("auto", "") == m.folder(6));
  m.abort(8);
  CHECK(m.steps_on_disk() == std::vector<int64_t>{4, 6});
  REQUIRE(std::system(("rm -rf '" + root + "'").c_str()) == 0);
}

TEST_CASE("checkpoints: resume modes and broken trackers", "[checkpoint]") {
  std::string root = fresh_root("resume");
  CheckpointManager m(root);
  CHECK_FALSE(m.resume_folder("auto", "").has_value());
  m.begin(3);
  m.commit(3);
  CHECK(m.resume_folder("disable", "") == std::nullopt);
  CHECK(m.resume_folder("resume_path", m.folder(3)) == m.folder(3));
  CHECK(CheckpointManager::step_of(m.folder(3) + "/") == 3);
  CHECK_THROWS_WITH(m.resume_folder("resume_path", root + "/global_step_9"), Contains("does not exist"));
  CHECK_THROWS_WITH(m.resume_folder("resume_path", root), Contains("not a global_step_<N>"));
  CHECK_THROWS_WITH(m.resume_folder("sometimes", ""), Contains("'sometimes'"));
  std::ofstream(root + "/latest_checkpointed_iteration.txt") << "7\n";
  CHECK_THROWS_WITH(m.latest(), Contains("names step 7"));
  std::ofstream(root + "/latest_checkpointed_iteration.txt") << "x7";
  CHECK_THROWS_WITH(m.latest(), Contains("not a step number"));
  REQUIRE(std::system(("rm -rf '" + root + "'").c_str()) == 0);
}
