// `verlpp train` with every local logger and the generation dumps, then resumed from an earlier
// checkpoint: every metric of metrics.jsonl is in the TensorBoard events (read by the protobuf
// library), the MLflow store (read from MLflow's layout) and verl's file logger, at its step,
// once; the dumps hold the run's samples, checked against the data and recomputed: each score
// by the reward function, each GRPO advantage from its group's scores, each validation mean
// against val/acc.
#include <verlpp/tracking/generation_dump.hpp>
#include <verlpp/reward/reward.hpp>

#include "mlflow_reader.hpp"
#include "tb_reader.hpp"

#include <map>
#include <set>

// Catch2 (through e2e_util.hpp) last: LibTorch 2.x headers define glog's CHECK.
#include "e2e_util.hpp"

using namespace verlpp;
using namespace verlpp::e2e;
using Catch::Contains;

namespace {

std::vector<nlohmann::ordered_json> read_lines(const std::string& path) {
  std::ifstream in(path);
  REQUIRE(in);
  std::vector<nlohmann::ordered_json> out;
  std::string line;
  while (std::getline(in, line)) out.push_back(nlohmann::ordered_json::parse(line));
  return out;
}

std::string text_of(const nlohmann::ordered_json& v) { return v.is_string() ? v.get<std::string>() : v.dump(); }

// Every numeric metric of metrics.jsonl is in each backend at its step, once, with its value.
void check_backends(const std::string& out, const std::vector<json>& rows) {
  std::map<std::pair<int64_t, std::string>, std::vector<float>> tb;
  size_t tb_files = 0;
  for (const auto& s : verlpp_test::read_event_dir(out + "/tb", &tb_files)) tb[{s.step, s.tag}].push_back(s.value);
  const verlpp_test::MlflowStore store = verlpp_test::read_mlflow_store(out + "/mlruns");
  REQUIRE(store.runs.size() == 1);  // the resumed run continued the first one
  const verlpp_test::MlflowRun& run = store.runs[0];
  CHECK(run.experiment_name == "proj");
  CHECK(run.run_name == "exp");
  CHECK(run.status == 3);
  CHECK(run.params.at("trainer/logger/list_len") == "4");
  CHECK(run.params.at("trainer/project_name") == "proj");
  CHECK(run.params.at("data/train_batch_size") == "4");
  const auto file_rows = read_lines(out + "/verl_file.jsonl");
  REQUIRE(file_rows.size() == rows.size());
  size_t metrics = 0;
  for (size_t i = 0; i < rows.size(); ++i) {
    const int64_t step = rows[i]["step"].get<int64_t>();
    CHECK(file_rows[i]["step"] == step);
    for (const auto& [name, value] : rows[i].items()) {
      // JSON has no NaN: metrics.jsonl holds null where the backends hold NaN.
      if (name == "step" || !(value.is_number() || value.is_null())) continue;
      ++metrics;
      INFO("step " << step << " " << name);
      CHECK(json(file_rows[i]["data"][name]) == value);
      const auto t = tb.find({step, name});
      REQUIRE(t != tb.end());
      REQUIRE(t->second.size() == 1);
      // MLflow refuses "@" in a metric name; the store holds verl's spelling "_at_".
      std::string mlflow_name;
      for (const char c : name) mlflow_name += c == '@' ? std::string("_at_") : std::string(1, c);
      REQUIRE(run.metrics.count(mlflow_name) == 1);
      std::vector<double> at_step;
      for (const auto& p : run.metrics.at(mlflow_name))
        if (p.step == step) at_step.push_back(p.value);
      REQUIRE(at_step.size() == 1);
      if (value.is_null()) {
        CHECK(std::isnan(t->second[0]));
        CHECK(std::isnan(at_step[0]));
      } else {
        CHECK(t->second[0] == float(value.get<double>()));
        CHECK(at_step[0] == value.get<double>());
      }
    }
  }
  CHECK(tb.size() == metrics);
  size_t points = 0;
  for (const auto& [name, list] : run.metrics) points += list.size();
  CHECK(points == metrics);
  CHECK(tb_files == 2);  // the first run's file (cut back to step 2) and the resumed run's
}

// The training dumps: 4 prompts x 4 samples per step, each score the reward of its output, each
// group of 4 the same prompt with GRPO's advantages of its scores.
void check_rollout_dumps(const std::string& data_dir, const std::string& dump_dir, int64_t steps) {
  size_t rewarded = 0;  // samples with a non-zero score: the advantage check is not all zeros
  std::multimap<std::string, std::string> truth_of_content;  // train.jsonl: prompt text -> ground truth
  for (const auto& row : read_lines(data_dir + "/train.jsonl"))
    truth_of_content.emplace(row["prompt"][0]["content"].get<std::string>(),
                             text_of(row["reward_model"]["ground_truth"]));
  for (int64_t step = 1; step <= steps; ++step) {
    const auto rows = read_lines(dump_dir + "/" + std::to_string(step) + ".jsonl");
    REQUIRE(rows.size() == 16);
    std::vector<std::string> keys;
    for (const auto& [key, value] : rows[0].items()) keys.push_back(key);
    CHECK(keys == std::vector<std::string>{"input", "output", "gts", "score", "step", "advantage"});
    for (size_t g = 0; g < 4; ++g) {
      double mean = 0, var = 0;
      for (size_t k = 0; k < 4; ++k) mean += rows[4 * g + k]["score"].get<double>() / 4;
      for (size_t k = 0; k < 4; ++k) var += std::pow(rows[4 * g + k]["score"].get<double>() - mean, 2) / 3;
      for (size_t k = 0; k < 4; ++k) {
        const auto& r = rows[4 * g + k];
        INFO("step " << step << " row " << 4 * g + k << ": " << r.dump());
        CHECK(r["step"] == step);
        CHECK(r["input"] == rows[4 * g]["input"]);
        CHECK(r["gts"] == rows[4 * g]["gts"]);
        CHECK(r["score"].get<double>() == tasks::arith_reward(r["output"].get<std::string>(), text_of(r["gts"])));
        rewarded += r["score"].get<double>() != 0.0;
        CHECK(r["advantage"].get<double>() ==
              Approx((r["score"].get<double>() - mean) / (std::sqrt(var) + 1e-6)).margin(1e-5));
        // The input is one of the training prompts, paired with its ground truth.
        bool paired = false;
        for (const auto& [content, truth] : truth_of_content)
          paired = paired ||
                   (r["input"].get<std::string>().find(content) != std::string::npos && truth == text_of(r["gts"]));
        CHECK(paired);
      }
    }
  }
  CHECK(rewarded > 0);
}

// The validation dumps at the evaluations: every val row, scores recomputed, their mean val/acc;
// the logged samples are among them.
void check_val_dumps(const std::string& run, const std::string& dump_dir, const std::vector<json>& rows) {
  std::map<int64_t, json> row_of;
  for (const json& r : rows) row_of[r["step"].get<int64_t>()] = r;
  std::map<int64_t, nlohmann::ordered_json> logged;
  for (const auto& e : read_lines(run + "/val_generations.jsonl")) logged[e["step"].get<int64_t>()] = e;
  CHECK(logged.size() == 3);
  for (const int64_t step : {0, 2, 4}) {
    INFO("validation at step " << step);
    const auto dump = read_lines(dump_dir + "/" + std::to_string(step) + ".jsonl");
    REQUIRE(dump.size() == 12);
    double sum = 0;
    std::set<std::tuple<std::string, std::string, double>> samples;
    for (const auto& r : dump) {
      CHECK(r["step"] == step);
      const double score = tasks::arith_reward(r["output"].get<std::string>(), text_of(r["gts"]));
      CHECK(r["score"].get<double>() == score);
      CHECK(r["reward"].get<double>() == score);
      sum += score;
      samples.insert({r["input"].get<std::string>(), r["output"].get<std::string>(), score});
    }
    CHECK(sum / 12 == Approx(row_of.at(step)["val/acc"].get<double>()).margin(1e-12));
    REQUIRE(logged.count(step) == 1);
    const auto& chosen = logged[step]["samples"];
    REQUIRE(chosen.size() == 3);
    for (const auto& c : chosen)
      CHECK(samples.count({c["input"].get<std::string>(), c["output"].get<std::string>(), c["score"].get<double>()}) ==
            1);
  }
}

}  // namespace

TEST_CASE("verlpp train: every logger and the generation dumps, across a resume", "[e2e][loggers]") {
  const std::string dir = make_fixture("loggers");
  const std::string run = dir + "/run", out = dir + "/out";
  REQUIRE(std::system(("mkdir -p " + out).c_str()) == 0);
  const std::string config = write_config(dir, run, "grpo");
  const std::vector<std::string> overrides = {"trainer.total_training_steps=4",
                                              "trainer.test_freq=2",
                                              "sft.enable=false",
                                              "trainer.project_name=proj",
                                              "trainer.experiment_name=exp",
                                              R"(trainer.logger=["console","file","tensorboard","mlflow"])",
                                              "trainer.rollout_data_dir=" + out + "/rollouts",
                                              "trainer.validation_data_dir=" + out + "/val",
                                              "trainer.log_val_generations=3"};
  const std::vector<std::string> env = {"TENSORBOARD_DIR=" + out + "/tb", "MLFLOW_TRACKING_URI=file:" + out + "/mlruns",
                                        "VERL_FILE_LOGGER_PATH=" + out + "/verl_file.jsonl"};
  auto train = [&](const std::vector<std::string>& extra, const std::string& log) {
    std::vector<std::string> args = overrides;
    args.insert(args.end(), extra.begin(), extra.end());
    const int status = wait_for(start_train(config, log, args, env));
    INFO(read_file(log));
    REQUIRE(WIFEXITED(status));
    REQUIRE(WEXITSTATUS(status) == 0);
    return read_file(log);
  };
  const std::string first = train({}, run + ".log");
  CHECK_THAT(first, Contains("step   1/4") && Contains("validation generations at step 2 (3 samples)"));
  // Resumed from step 2: steps 3 and 4 are cut from every backend and written again.
  const std::string second =
      train({"trainer.resume_mode=resume_path", "trainer.resume_from_path=" + run + "/global_step_2"}, run + "-2.log");
  CHECK_THAT(second, Contains("step   3/4") && Contains("dropped") && Contains("mlflow"));
  const std::vector<json> rows = tracking::read_metrics(run + "/metrics.jsonl");
  REQUIRE(rows.size() == 5);  // step 0 (validation before training) and steps 1..4
  check_backends(out, rows);
  check_rollout_dumps(dir, out + "/rollouts", 4);
  check_val_dumps(run, out + "/val", rows);
  CHECK_THAT(read_file(run + "/report.html"), Contains("Validation generations"));
}

TEST_CASE("verlpp train: a logger backend that needs a network service is refused before any work", "[e2e][loggers]") {
  const std::string dir = make_fixture("loggers-refused");
  const std::string run = dir + "/run";
  const std::string config = write_config(dir, run, "grpo");
  const int status = wait_for(start_train(config, run + ".log", {R"(trainer.logger=["console","wandb"])"}));
  const std::string log = read_file(run + ".log");
  INFO(log);
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) != 0);
  CHECK_THAT(log, Contains("trainer.logger") && Contains("'wandb' reports to a network service") &&
                      Contains("console, file, mlflow, tensorboard"));
  CHECK_FALSE(exists(run + "/metrics.jsonl"));
}
