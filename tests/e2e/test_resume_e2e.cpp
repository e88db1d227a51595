// Resume after each point a run can be stopped at, end to end on the tiny model: from a copy of
// a finished run's folder cut back to exactly what a kill at that point leaves (the folder after
// step 3's checkpoint; step 4's row written but its checkpoint not committed; step 4's row torn
// mid-write; the tracker deleted), the resumed run's metrics.jsonl equals the uninterrupted
// run's, row for row (timings aside). A real SIGKILL right after a checkpoint commit does the
// same. And a folder a run would overwrite, or a checkpoint whose trainer_state.json records
// another step, is refused with the file named and nothing changed.
#include "e2e_util.hpp"

#include <verlpp/controller/rl_trainer.hpp>

#include <sstream>

using namespace verlpp;
using namespace verlpp::e2e;

namespace {

void shell(const std::string& command) { REQUIRE(std::system(command.c_str()) == 0); }

// A copy of the run folder `from` at `to`, with the config of a run in `to`.
std::string copy_run(const std::string& dir, const std::string& from, const std::string& to) {
  shell("rm -rf '" + to + "' && cp -a '" + from + "' '" + to + "'");
  return write_config(dir, to, "grpo");
}

// The folder as the trainer leaves it once step `step`'s checkpoint is the last one committed:
// later checkpoints gone, the tracker naming `step`.
void cut_checkpoints(const std::string& run, int64_t step) {
  for (int64_t s = step + 1; s <= kSteps; ++s) shell("rm -rf '" + run + "/global_step_" + std::to_string(s) + "'");
  std::ofstream(run + "/latest_checkpointed_iteration.txt") << step;
}

// metrics.jsonl cut to its rows of steps <= `last`, then `tail` (bytes of a row being written).
void cut_metrics(const std::string& run, int64_t last, const std::string& tail = "") {
  std::istringstream in(read_file(run + "/metrics.jsonl"));
  std::string kept;
  for (std::string line; std::getline(in, line);)
    if (!line.empty() && json::parse(line).at("step").get<int64_t>() <= last) kept += line + "\n";
  std::ofstream(run + "/metrics.jsonl", std::ios::trunc) << kept << tail;
}

// The line of step `step` in the run's metrics.jsonl.
std::string row_line(const std::string& run, int64_t step) {
  std::istringstream in(read_file(run + "/metrics.jsonl"));
  for (std::string line; std::getline(in, line);)
    if (!line.empty() && json::parse(line).at("step").get<int64_t>() == step) return line;
  FAIL("no row of step " << step << " in " << run);
  return "";
}

std::vector<int64_t> steps_of(const std::vector<json>& rows) {
  std::vector<int64_t> steps;
  for (const json& row : rows) steps.push_back(row.at("step").get<int64_t>());
  return steps;
}

// Runs `config` to the end and checks its metrics against the uninterrupted run's; returns the log.
std::string resume_and_compare(const std::string& config, const std::string& run, const std::string& whole) {
  run_to_end(config, run + ".log");
  const std::string log = read_file(run + ".log");
  INFO(log);
  CHECK(log.find("resumed from") != std::string::npos);
  const auto expected = deterministic_rows(whole), got = deterministic_rows(run);
  CHECK(steps_of(got) == steps_of(expected));  // 0..6, in order, each once
  REQUIRE(got.size() == expected.size());
  for (size_t i = 0; i < expected.size(); ++i) {
    INFO("row " << i);
    CHECK(got[i] == expected[i]);
  }
  return log;
}

// Runs `config`, which must be refused: a non-zero exit; returns the log.
std::string refused(const std::string& config, const std::string& log_path) {
  const int status = wait_for(start_train(config, log_path));
  const std::string log = read_file(log_path);
  INFO(log);
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) != 0);
  return log;
}

}  // namespace

TEST_CASE("verlpp train: resumed after each kill point, metrics.jsonl equals the uninterrupted run's", "[e2e]") {
  const std::string dir = make_fixture("resume-points");
  const std::string whole = dir + "/whole";
  run_to_end(write_config(dir, whole, "grpo"), whole + ".log");
  REQUIRE(steps_of(tracking::read_metrics(whole + "/metrics.jsonl")) == std::vector<int64_t>{0, 1, 2, 3, 4, 5, 6});
  // Each kill point on its own copy of the finished folder (blocks, not SECTIONs: Catch2 would
  // run the uninterrupted run again for every section).

  {
    INFO("stopped after step 3's checkpoint, before step 4's row");
    const std::string run = dir + "/after-commit";
    const std::string config = copy_run(dir, whole, run);
    cut_checkpoints(run, 3);
    cut_metrics(run, 3);
    const std::string log = resume_and_compare(config, run, whole);
    CHECK(log.find("dropped") == std::string::npos);  // nothing to take back
  }
  {
    INFO("stopped after step 4's row, before its checkpoint was committed");
    const std::string run = dir + "/before-commit";
    const std::string config = copy_run(dir, whole, run);
    cut_checkpoints(run, 3);
    // The checkpoint of step 4 still in its temporary folder, as the commit would have found it.
    shell("cp -a '" + whole + "/global_step_4' '" + run + "/.incomplete_global_step_4'");
    cut_metrics(run, 4);
    const std::string log = resume_and_compare(config, run, whole);
    CHECK(log.find("dropped the rows of steps 4") != std::string::npos);
    CHECK_FALSE(exists(run + "/.incomplete_global_step_4"));
  }
  {
    INFO("stopped while writing step 4's row");
    const std::string run = dir + "/torn";
    const std::string config = copy_run(dir, whole, run);
    cut_checkpoints(run, 3);
    const std::string row4 = row_line(whole, 4);
    cut_metrics(run, 3, row4.substr(0, row4.size() / 2));
    const std::string log = resume_and_compare(config, run, whole);
    CHECK(log.find("dropped an incomplete last line") != std::string::npos);
  }
  {
    INFO("the tracker deleted: the newest complete checkpoint is resumed, and the log says so");
    const std::string run = dir + "/no-tracker";
    const std::string config = copy_run(dir, whole, run);
    cut_checkpoints(run, 3);
    shell("rm '" + run + "/latest_checkpointed_iteration.txt'");
    // A newer folder that is not a complete checkpoint (no trainer_state.json) is passed over.
    shell("mkdir -p '" + run + "/global_step_4' && cp -a '" + whole + "/global_step_4/actor' '" + run +
          "/global_step_4/'");
    cut_metrics(run, 3);
    const std::string log = resume_and_compare(config, run, whole);
    CHECK(log.find("latest_checkpointed_iteration.txt is missing: resuming from " + run + "/global_step_3") !=
          std::string::npos);
    CHECK(log.find("global_step_4") != std::string::npos);
    CHECK(read_file(run + "/latest_checkpointed_iteration.txt").find("6") != std::string::npos);
  }
  {
    INFO("a folder left by an earlier version, which lost step 3's row: the gap is reported");
    const std::string run = dir + "/gap";
    const std::string config = copy_run(dir, whole, run);
    cut_checkpoints(run, 3);
    cut_metrics(run, 2);
    run_to_end(config, run + ".log");
    CHECK(read_file(run + ".log").find("has no rows for steps 3") != std::string::npos);
    CHECK(steps_of(tracking::read_metrics(run + "/metrics.jsonl")) == std::vector<int64_t>{0, 1, 2, 4, 5, 6});
  }
}

// The folder exactly as a kill would leave it, copied from inside an uninterrupted run at the
// trainer's own moments: when it reports step 3's checkpoint committed (the kill right after a
// commit, before step 4's row), and when it hands over step 4's row (written, its checkpoint not
// yet committed). Each copy, resumed, ends with the uninterrupted run's metrics.
TEST_CASE("verlpp train: the folder at a checkpoint commit, or between a row and its commit, resumes exactly",
          "[e2e]") {
  const std::string dir = make_fixture("resume-moments");
  const std::string whole = dir + "/whole", at_commit = dir + "/at-commit", before_commit = dir + "/before-commit";
  config::Config config = config::Config::from_file(write_config(dir, whole, "grpo"));
  config.resolve();
  auto steps_on_disk = [&] { return steps_of(tracking::read_metrics(whole + "/metrics.jsonl")); };
  controller::TrainerHooks hooks;
  hooks.on_message = [&](const std::string& text) {
    if (text != "checkpoint saved: " + whole + "/global_step_3") return;
    CHECK(steps_on_disk() == std::vector<int64_t>{0, 1, 2, 3});  // the row came first
    shell("cp -a '" + whole + "' '" + at_commit + "'");
  };
  hooks.on_step = [&](const json& row) {
    if (row.at("step") != 4) return;
    CHECK(steps_on_disk() == std::vector<int64_t>{0, 1, 2, 3, 4});
    CHECK(read_file(whole + "/latest_checkpointed_iteration.txt") == "3\n");  // not committed yet
    CHECK(exists(whole + "/.incomplete_global_step_4/trainer_state.json"));   // but written
    shell("cp -a '" + whole + "' '" + before_commit + "'");
  };
  {
    controller::RlTrainer trainer(config, hooks);
    trainer.fit();
  }
  REQUIRE(exists(at_commit));
  REQUIRE(exists(before_commit));
  for (const std::string& run : {at_commit, before_commit}) {
    INFO(run);
    resume_and_compare(write_config(dir, run, "grpo"), run, whole);
  }
}

TEST_CASE("verlpp train: SIGKILL right after a checkpoint commit, then resume, loses no row", "[e2e]") {
  const std::string dir = make_fixture("resume-commit-kill");
  const std::string whole = dir + "/whole", killed = dir + "/killed";
  run_to_end(write_config(dir, whole, "grpo"), whole + ".log");
  const std::string config = write_config(dir, killed, "grpo");
  const pid_t pid = start_train(config, killed + ".log");
  // Kill as soon as the tracker names step 3: the commit of step 3 has just happened.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::minutes(5);
  while (read_file(killed + "/latest_checkpointed_iteration.txt").find('3') == std::string::npos) {
    REQUIRE(std::chrono::steady_clock::now() < deadline);
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  ::kill(pid, SIGKILL);
  REQUIRE(WIFSIGNALED(wait_for(pid)));
  // Every row up to the committed step was on disk before the commit.
  const std::vector<int64_t> steps = steps_of(tracking::read_metrics(killed + "/metrics.jsonl"));
  REQUIRE(steps.size() >= 4);
  CHECK(std::vector<int64_t>(steps.begin(), steps.begin() + 4) == std::vector<int64_t>{0, 1, 2, 3});
  CHECK(steps.size() < size_t(kSteps + 1));
  resume_and_compare(config, killed, whole);
}

TEST_CASE("verlpp train: folders a run would overwrite, or a checkpoint of another step, are refused", "[e2e]") {
  const std::string dir = make_fixture("resume-refusals");
  const std::string whole = dir + "/whole";
  // Two steps are enough for a folder with checkpoints and metrics.
  json c = json::parse(read_file(write_config(dir, whole, "grpo")));
  c["trainer"]["total_training_steps"] = 2;
  c["trainer"]["test_freq"] = -1;
  std::ofstream(whole + ".json") << c.dump(2);
  run_to_end(whole + ".json", whole + ".log");
  // A copy of that run, with its config.
  auto copy = [&](const std::string& name) {
    const std::string run = dir + "/" + name;
    shell("rm -rf '" + run + "' && cp -a '" + whole + "' '" + run + "'");
    c["trainer"]["default_local_dir"] = run;
    std::ofstream(run + ".json") << c.dump(2);
    return run;
  };
  // What a refusal must leave as it was.
  auto snapshot = [](const std::string& run) {
    return read_file(run + "/metrics.jsonl") + read_file(run + "/global_step_1/trainer_state.json") +
           read_file(run + "/global_step_2/actor/model.safetensors");
  };

  {
    INFO("resume_mode=disable over an earlier run");
    const std::string run = copy("disable"), before = snapshot(run);
    const int status = wait_for(start_train(run + ".json", run + ".log", {"trainer.resume_mode=disable"}));
    const std::string log = read_file(run + ".log");
    INFO(log);
    CHECK((WIFEXITED(status) && WEXITSTATUS(status) != 0));
    CHECK(log.find("trainer.resume_mode=disable") != std::string::npos);
    CHECK(log.find(run + " holds an earlier run (global_step_1, global_step_2, latest_checkpointed_iteration.txt, "
                         "metrics.jsonl, sft_metrics.jsonl)") != std::string::npos);
    CHECK(snapshot(run) == before);
  }
  {
    INFO("trainer_state.json of global_step_2 records step 5");
    const std::string run = copy("mismatch");
    const std::string state_path = run + "/global_step_2/trainer_state.json";
    json state = json::parse(read_file(state_path));
    state["global_step"] = 5;
    std::ofstream(state_path) << state.dump(2);
    const std::string before = snapshot(run) + read_file(state_path);
    const std::string log = refused(run + ".json", run + ".log");
    CHECK(log.find(state_path + ": records global_step 5, but its folder is named for step 2") != std::string::npos);
    CHECK(snapshot(run) + read_file(state_path) == before);
  }
  {
    INFO("the tracker deleted and no folder complete");
    const std::string run = copy("no-complete");
    shell("rm '" + run + "/latest_checkpointed_iteration.txt' '" + run + "/global_step_1/trainer_state.json' '" + run +
          "/global_step_2/trainer_state.json'");
    const std::string before =
        read_file(run + "/metrics.jsonl") + read_file(run + "/global_step_2/actor/model.safetensors");
    const std::string log = refused(run + ".json", run + ".log");
    CHECK(log.find("latest_checkpointed_iteration.txt: missing, and no global_step folder") != std::string::npos);
    CHECK(log.find(run + "/global_step_2 (trainer_state.json is missing)") != std::string::npos);
    CHECK(read_file(run + "/metrics.jsonl") + read_file(run + "/global_step_2/actor/model.safetensors") == before);
  }
}
