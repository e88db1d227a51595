// `verlpp train CONFIG.json` end to end on the tiny model: GRPO and PPO (gae, with a critic) run
// a few steps with an SFT warm start, write finite metrics with verl's names, validation rows,
// checkpoints and the report; and a run killed with SIGKILL while training, then resumed,
// produces exactly the metrics (timings aside) and the weights of an uninterrupted run.
#include <verlpp/config/run_settings.hpp>
#include <verlpp/tracking/validation_metrics.hpp>

#include <dirent.h>

#include <cstdlib>

// Catch2 (through e2e_util.hpp) last: LibTorch 2.x headers define glog's CHECK.
#include "e2e_util.hpp"

using namespace verlpp;
using namespace verlpp::e2e;

TEST_CASE("verlpp train: GRPO and PPO run end to end with metrics, checkpoints and a report", "[e2e]") {
  const std::string dir = make_fixture("run");
  for (const std::string estimator : {"grpo", "gae"}) {
    const std::string run = dir + "/" + estimator;
    run_to_end(write_config(dir, run, estimator), run + ".log");
    const std::vector<json> rows = tracking::read_metrics(run + "/metrics.jsonl");
    REQUIRE(rows.size() == size_t(kSteps + 1));  // step 0 (validation before training) + 6 steps
    CHECK(finite_number(rows[0], "val/acc"));
    CHECK(finite_number(rows[0], "val/arith/acc"));
    for (int64_t step = 1; step <= kSteps; ++step) {
      const json& row = rows[size_t(step)];
      INFO(estimator << " step " << step << ": " << row.dump());
      CHECK(row["step"] == step);
      for (const char* key :
           {"actor/pg_loss", "actor/pg_clipfrac", "actor/ppo_kl", "actor/entropy", "actor/grad_norm", "actor/kl_loss",
            "critic/score/mean", "critic/rewards/mean", "critic/advantages/mean", "response_length/mean",
            "timing_s/gen", "timing_s/update_actor", "timing_s/step", "perf/throughput", "memory/gen_gib"})
        CHECK(finite_number(row, key));
      if (estimator == "gae")
        for (const char* key : {"critic/vf_loss", "critic/values/mean", "timing_s/update_critic", "timing_s/values"})
          CHECK(finite_number(row, key));
      CHECK(finite_number(row, "val/acc") == (step % 3 == 0));
      CHECK(exists(run + "/global_step_" + std::to_string(step) + "/actor/model.safetensors"));
      CHECK(exists(run + "/global_step_" + std::to_string(step) + "/actor/optimizer.safetensors"));
      CHECK(exists(run + "/global_step_" + std::to_string(step) + "/critic/model.safetensors") == (estimator == "gae"));
    }
    CHECK(read_file(run + "/latest_checkpointed_iteration.txt").find(std::to_string(kSteps)) != std::string::npos);
    CHECK(exists(run + "/sft_model/model.safetensors"));
    // The saved actor is a Hugging Face folder our loader (and transformers) reads.
    model::DecoderLM saved = model::load_pretrained(run + "/global_step_6/actor");
    CHECK(saved.config().vocab_size == 384);
    const std::string report = read_file(run + "/report.html");
    CHECK(report.find("<svg") != std::string::npos);
    // The training moved the policy: the last checkpoint's weights differ from the SFT result.
    model::SafetensorsFile a(run + "/sft_model/model.safetensors"), b(run + "/global_step_6/actor/model.safetensors");
    CHECK_FALSE(a.tensor("model.layers.0.mlp.up_proj.weight").equal(b.tensor("model.layers.0.mlp.up_proj.weight")));
  }
}

TEST_CASE("verlpp train: SIGKILL mid-run, then resume, repeats the uninterrupted run exactly", "[e2e]") {
  const std::string dir = make_fixture("resume");
  for (const std::string estimator : {"grpo", "gae"}) {
    const std::string whole = dir + "/" + estimator + "-whole", killed = dir + "/" + estimator + "-killed";
    run_to_end(write_config(dir, whole, estimator), whole + ".log");

    const std::string config = write_config(dir, killed, estimator);
    const pid_t pid = start_train(config, killed + ".log");
    // Kill as soon as step 3 is on record: the process is then inside step 4 (or saving it).
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::minutes(5);
    while (read_file(killed + "/metrics.jsonl").find("\"step\":3") == std::string::npos) {
      REQUIRE(std::chrono::steady_clock::now() < deadline);
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    ::kill(pid, SIGKILL);
    const int status = wait_for(pid);
    REQUIRE(WIFSIGNALED(status));  // it really died mid-run (a finished run would prove nothing)
    CHECK(tracking::read_metrics(killed + "/metrics.jsonl").size() < size_t(kSteps + 1));

    run_to_end(config, killed + "-resumed.log");
    CHECK(read_file(killed + "-resumed.log").find("resumed from") != std::string::npos);
    const auto expected = deterministic_rows(whole), got = deterministic_rows(killed);
    REQUIRE(got.size() == expected.size());
    for (size_t i = 0; i < expected.size(); ++i) {
      INFO(estimator << " row " << i);
      CHECK(got[i] == expected[i]);
    }
    for (const std::string& role :
         estimator == "gae" ? std::vector<std::string>{"actor", "critic"} : std::vector<std::string>{"actor"}) {
      model::SafetensorsFile a(whole + "/global_step_6/" + role + "/model.safetensors");
      model::SafetensorsFile b(killed + "/global_step_6/" + role + "/model.safetensors");
      for (const auto& entry : a.entries()) CHECK(a.tensor(entry.name).equal(b.tensor(entry.name)));
    }
  }
}

TEST_CASE("every example config under examples/ loads and validates, in the library and the CLI", "[e2e]") {
  // Every *.json under examples/ that is a run config (tokenizer and model files aside).
  std::vector<std::string> configs;
  auto entries = [](const std::string& dir) {
    std::vector<std::string> names;
    if (DIR* d = ::opendir(dir.c_str())) {
      while (const dirent* e = ::readdir(d))
        if (e->d_name[0] != '.') names.emplace_back(e->d_name);
      ::closedir(d);
    }
    return names;
  };
  for (const std::string& folder : entries(std::string(VERLPP_SOURCE_DIR) + "/examples")) {
    const std::string dir = std::string(VERLPP_SOURCE_DIR) + "/examples/" + folder;
    for (const std::string& name : entries(dir)) {
      const bool model_file =
          name == "config.json" || name.rfind("tokenizer", 0) == 0 || name.rfind("generation", 0) == 0;
      if (name.size() > 5 && name.substr(name.size() - 5) == ".json" && !model_file)
        configs.push_back(dir + "/" + name);
    }
  }
  REQUIRE(configs.size() >= 3);
  for (const std::string& file : configs) {
    INFO(file);
    config::Config c = config::Config::from_file(file);
    c.resolve();
    CHECK_NOTHROW(c.validate(1));
    CHECK_NOTHROW(config::parse_run_settings(c, 1, 1));
    // `verlpp config FILE` validates it as a run would.
    const int status = std::system((std::string(VERLPP_CLI) + " config " + file + " > /dev/null").c_str());
    CHECK((WIFEXITED(status) && WEXITSTATUS(status) == 0));
  }
  // The embedded default is examples/arith/grpo_tiny.json, with the demo inputs switched on.
  config::Config c = config::Config::from_file(std::string(VERLPP_SOURCE_DIR) + "/examples/arith/grpo_tiny.json");
  c.resolve();
  CHECK(c.get<bool>("verlpp.demo.enabled"));
  CHECK(c.get<std::string>("data.train_files").find("/data/arith_train.jsonl") != std::string::npos);
}

TEST_CASE("verlpp train: every other estimator runs its family's step", "[e2e]") {
  const std::string dir = make_fixture("estimators");
  for (const std::string estimator :
       {"rloo", "reinforce_plus_plus", "reinforce_plus_plus_baseline", "remax", "opo", "gpg", "grpo_passk"}) {
    const std::string run = dir + "/" + estimator;
    const std::string config = write_config(dir, run, estimator);
    // Two steps, no SFT, no checkpoints or validation: the step function alone.
    json c = json::parse(read_file(config));
    c["trainer"]["total_training_steps"] = 2;
    c["trainer"]["save_freq"] = -1;
    c["trainer"]["test_freq"] = -1;
    c["trainer"]["val_before_train"] = false;
    c["sft"]["enable"] = false;
    std::ofstream(config) << c.dump(2);
    run_to_end(config, run + ".log");
    const std::vector<json> rows = tracking::read_metrics(run + "/metrics.jsonl");
    REQUIRE(rows.size() == 2);
    for (const json& row : rows) {
      INFO(estimator << ": " << row.dump());
      for (const char* key : {"actor/pg_loss", "actor/grad_norm", "critic/advantages/mean", "critic/score/mean"})
        CHECK(finite_number(row, key));
      CHECK(finite_number(row, "timing_s/gen_max") == (estimator == "remax"));  // remax's greedy baseline
      CHECK_FALSE(row.contains("critic/vf_loss"));                              // no critic
    }
  }
}

// verl's DAPO settings on the CLI's path: reward_model.reward_manager=dapo with the overlong
// buffer over the whole response budget (expected length 0), so each response's penalty is
// -length / max_response_length * penalty_factor and the step's mean follows response_length/mean;
// scored on two threads with a timeout that nothing reaches.
TEST_CASE("verlpp train: the dapo manager's overlong penalty and its metrics", "[e2e]") {
  const std::string dir = make_fixture("dapo");
  const std::string run = dir + "/dapo";
  const std::string config = write_config(dir, run, "grpo");
  json c = json::parse(read_file(config));
  c["trainer"]["total_training_steps"] = 2;
  c["trainer"]["save_freq"] = -1;
  c["trainer"]["test_freq"] = -1;
  c["trainer"]["val_before_train"] = false;
  c["sft"]["enable"] = false;
  c["reward_model"]["reward_manager"] = "dapo";
  c["reward_model"]["reward_kwargs"] = {
      {"overlong_buffer_cfg", {{"enable", true}, {"len", 6}, {"penalty_factor", 0.5}, {"log", true}}}};
  c["verlpp"]["reward"] = {{"num_workers", 2}, {"timeout_s", 60}};
  std::ofstream(config) << c.dump(2);
  run_to_end(config, run + ".log");
  const std::vector<json> rows = tracking::read_metrics(run + "/metrics.jsonl");
  REQUIRE(rows.size() == 2);
  for (const json& row : rows) {
    INFO(row.dump());
    REQUIRE(finite_number(row, "reward/overlong_reward/mean"));
    REQUIRE(finite_number(row, "response_length/mean"));
    CHECK(row["reward/overlong_reward/mean"].get<double>() ==
          Approx(-row["response_length/mean"].get<double>() / 6 * 0.5).margin(1e-9));
    CHECK(row["reward/overlong_ratio"] == 1.0);  // every response has at least one token
    // The penalty is in the sequence scores: what remains is the arith rule's mean, in [0, 1].
    const double rule_mean = row["critic/score/mean"].get<double>() - row["reward/overlong_reward/mean"].get<double>();
    CHECK(rule_mean >= -1e-6);
    CHECK(rule_mean <= 1 + 1e-6);
    CHECK(row["reward/timeout_count"] == 0);
  }
}

// The weights the engine validates with before RL are the SFT result, also when the engine holds
// a copy (here: bf16 mixed precision and a bf16 engine sharing the actor's compute copy, the GPU
// default): validation before RL without any validation inside SFT equals SFT's own validation
// at its last step (which syncs first), metric for metric.
TEST_CASE("verlpp train: after the SFT warm start the engine generates with the fine-tuned weights", "[e2e]") {
  const std::string dir = make_fixture("sft_sync");
  // 0: no SFT (the starting weights); 1: SFT, validation only before RL; 2: SFT validating itself.
  std::vector<json> seen;
  for (int variant : {0, 1, 2}) {
    const std::string run = dir + "/variant" + std::to_string(variant);
    const std::string config = write_config(dir, run, "grpo");
    json c = json::parse(read_file(config));
    c["actor_rollout_ref"]["actor"]["fsdp_config"]["mixed_precision"]["param_dtype"] = "bf16";
    c["actor_rollout_ref"]["rollout"]["dtype"] = "bfloat16";
    c["trainer"]["total_training_steps"] = 1;
    c["trainer"]["save_freq"] = -1;
    c["sft"]["enable"] = variant != 0;
    c["sft"]["total_steps"] = 40;
    c["sft"]["test_freq"] = variant == 2 ? 40 : -1;
    std::ofstream(config) << c.dump(2);
    run_to_end(config, run + ".log");
    if (variant == 2) {
      std::ifstream sft(run + "/sft_metrics.jsonl");
      json last;
      for (std::string line; std::getline(sft, line);)
        if (!line.empty()) last = json::parse(line);
      seen.push_back({{"acc", last.at("sft/val/acc")}, {"length", last.at("sft/val/response_length/mean")}});
    } else {
      const std::vector<json> rows = tracking::read_metrics(run + "/metrics.jsonl");
      REQUIRE(!rows.empty());
      seen.push_back({{"acc", rows[0].at("val/acc")}, {"length", rows[0].at("val/response_length/mean")}});
    }
  }
  INFO("starting weights: " << seen[0].dump() << "; validation before RL: " << seen[1].dump()
                            << "; SFT's last validation: " << seen[2].dump());
  REQUIRE(seen[0] != seen[2]);  // the SFT changed what greedy validation generates
  CHECK(seen[1] == seen[2]);
}

// rollout.val_kwargs: n = 2 sampled responses per validation prompt give verl's val-core and
// val-aux names, each figure recomputed from the validation dump (the scores of every response,
// in the batch's order: a prompt's two responses side by side), and the older names beside them.
TEST_CASE("verlpp train: val_kwargs.n=2 with sampling writes verl's val-core metrics", "[e2e]") {
  const std::string dir = make_fixture("val_kwargs");
  const std::string run = dir + "/run";
  const std::string config = write_config(dir, run, "grpo");
  json c = json::parse(read_file(config));
  c["trainer"]["total_training_steps"] = 1;
  c["trainer"]["save_freq"] = -1;
  c["trainer"]["test_freq"] = 1;
  c["trainer"]["validation_data_dir"] = run + "/val_dump";
  c["sft"]["total_steps"] = 80;  // a policy that answers some prompts right (25% before RL)
  c["actor_rollout_ref"]["rollout"]["val_kwargs"] = {{"n", 2}, {"do_sample", true}, {"temperature", 1.0}};
  std::ofstream(config) << c.dump(2);
  run_to_end(config, run + ".log");
  const std::vector<json> rows = tracking::read_metrics(run + "/metrics.jsonl");
  REQUIRE(rows.size() == 2);  // before training, after step 1
  for (const json& row : rows) {
    const int64_t step = row["step"].get<int64_t>();
    INFO("step " << step << ": " << row.dump());
    std::ifstream dump(run + "/val_dump/" + std::to_string(step) + ".jsonl");
    std::vector<json> samples;
    for (std::string line; std::getline(dump, line);)
      if (!line.empty()) samples.push_back(json::parse(line));
    REQUIRE(samples.size() == 24);  // 12 prompts x 2
    double sum = 0, best = 0, worst = 0, spread = 0;
    bool sampled = false;
    for (size_t i = 0; i < samples.size(); i += 2) {
      REQUIRE(samples[i]["input"] == samples[i + 1]["input"]);
      const double a = samples[i]["score"].get<double>(), b = samples[i + 1]["score"].get<double>();
      sum += a + b;
      best += std::max(a, b);
      worst += std::min(a, b);
      spread += std::abs(a - b) / 2;  // the population std of two values
      sampled = sampled || samples[i]["output"] != samples[i + 1]["output"];
    }
    CHECK(sampled);  // do_sample: a prompt's two responses are drawn, not both greedy
    // Before RL some prompt has a right and a wrong response, so the checks below have a gap to
    // measure (after the one RL step at this learning rate the policy may answer none).
    if (step == 0) CHECK(best > worst);
    CHECK(row.at("val-core/arith/reward/mean@2").get<double>() == Approx(sum / 24).margin(1e-12));
    CHECK(row.at("val-aux/arith/reward/std@2").get<double>() == Approx(spread / 12).margin(1e-12));
    // best@2 and worst@2 of a pair: each bootstrap draw of two indices that differ yields the
    // pair's max and min, one that repeats an index yields the same value twice; so best - worst
    // is the share of differing draws times the mean gap (the draws are verl's, the same for
    // every prompt since it re-seeds each time).
    const double b2 = row.at("val-core/arith/reward/best@2/mean").get<double>();
    const double w2 = row.at("val-aux/arith/reward/worst@2/mean").get<double>();
    const std::vector<int64_t> draws = tracking::numpy_choice_indices(2, 1000, 2, 42);
    int64_t differ = 0;
    for (size_t k = 0; k < draws.size(); k += 2) differ += draws[k] != draws[k + 1];
    CHECK(b2 - w2 == Approx(double(differ) / 1000 * (best - worst) / 12).margin(1e-12));
    CHECK(b2 >= sum / 24 - 1e-12);
    CHECK(b2 <= best / 12 + 1e-12);
    CHECK(w2 >= worst / 12 - 1e-12);
    CHECK(finite_number(row, "val-core/arith/reward/best@2/std"));
    CHECK(finite_number(row, "val-aux/arith/reward/worst@2/std"));
    CHECK_FALSE(row.contains("val-core/arith/reward/maj@2/mean"));  // arith reports no pred to vote on
    // The older names (one release): the mean score per source and over all responses.
    CHECK(row.at("val/arith/acc").get<double>() == Approx(sum / 24).margin(1e-12));
    CHECK(row.at("val/acc").get<double>() == Approx(sum / 24).margin(1e-12));
  }
  // The console line carries the val-core figures.
  CHECK(read_file(run + ".log").find("val-core/arith/reward/mean@2") != std::string::npos);
}

// The generation dumps carry the reward extras as verl's _dump_generations does: a key every
// sample of the dump has (math_dapo's acc and pred) follows the fixed fields, one some scorers
// did not report (arith reports none) is left out; validation's "reward" comes first.
TEST_CASE("verlpp train: the rollout and validation dumps carry the reward extras every sample has", "[e2e]") {
  const std::string dir = make_fixture("dump_extras");
  const std::string run = dir + "/run";
  // Training rows scored by math_dapo; validation alternating arith and math_dapo.
  auto rewrite = [&](const std::string& file, bool alternate) {
    std::vector<json> rows;
    {
      std::ifstream in(file);
      for (std::string line; std::getline(in, line);)
        if (!line.empty()) rows.push_back(json::parse(line));
    }
    for (size_t i = 0; i < rows.size(); ++i)
      if (!alternate || i % 2 == 1) rows[i]["data_source"] = "math_dapo";
    std::ofstream out(file);
    for (const json& r : rows) out << r.dump() << "\n";
  };
  rewrite(dir + "/train.jsonl", false);
  rewrite(dir + "/val.jsonl", true);
  const std::string config = write_config(dir, run, "grpo");
  json c = json::parse(read_file(config));
  c["trainer"]["total_training_steps"] = 1;
  c["trainer"]["save_freq"] = -1;
  c["trainer"]["test_freq"] = 1;
  c["trainer"]["rollout_data_dir"] = run + "/rollouts";
  c["trainer"]["validation_data_dir"] = run + "/val_dump";
  c["sft"]["enable"] = false;
  std::ofstream(config) << c.dump(2);
  run_to_end(config, run + ".log");

  auto lines = [](const std::string& path) {
    std::vector<nlohmann::ordered_json> out;
    std::ifstream in(path);
    for (std::string line; std::getline(in, line);)
      if (!line.empty()) out.push_back(nlohmann::ordered_json::parse(line));
    return out;
  };
  auto keys = [](const nlohmann::ordered_json& row) {
    std::vector<std::string> out;
    for (const auto& [key, value] : row.items()) out.push_back(key);
    return out;
  };
  const auto rollouts = lines(run + "/rollouts/1.jsonl");
  REQUIRE(rollouts.size() == 16);  // 4 prompts x 4 samples
  for (const auto& row : rollouts) {
    INFO(row.dump());
    CHECK(keys(row) == std::vector<std::string>{"input", "output", "gts", "score", "step", "advantage", "acc", "pred"});
    // math_dapo: +1 with acc, -1 without (verl's math_dapo.compute_score).
    CHECK(row["acc"].get<bool>() == (row["score"].get<double>() == 1.0));
    CHECK(row["pred"].is_string());
  }
  // Validation before training (step 0) and at the last step: arith rows report no extras, so
  // only "reward" (the score) follows.
  for (const char* step : {"0", "1"}) {
    const auto val = lines(run + "/val_dump/" + step + ".jsonl");
    REQUIRE(val.size() == 12);
    for (const auto& row : val) {
      INFO(row.dump());
      CHECK(keys(row) == std::vector<std::string>{"input", "output", "gts", "score", "step", "reward"});
      CHECK(row["reward"] == row["score"]);
    }
  }
}
