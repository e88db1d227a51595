// Reward models end to end: `verlpp train-rm` after the SFT step writes checkpoints, metrics, a
// report and a ...ForSequenceClassification folder whose scores reproduce its held-out accuracy;
// killed and resumed it ends with the uninterrupted run's weights bit for bit; on 2 ranks its
// first step equals the 1-rank step. `verlpp train` with reward_model.enable trains on the reward
// model's scores and validates with the rule; bad reward-model folders and bad pairs are
// refused before any work, naming the file (and line) and the key.
#include "e2e_util.hpp"

#include <verlpp/data/records.hpp>
#include <verlpp/controller/preference_data.hpp>
#include <verlpp/model/chat_template.hpp>
#include <verlpp/model/tokenizer.hpp>
#include <verlpp/train/reward_model.hpp>

#include <ATen/ops/arange.h>
#include <ATen/ops/ones_like.h>
#include <ATen/ops/tensor.h>

using namespace verlpp;
using namespace verlpp::e2e;

namespace {

// The fixture's arithmetic splits again (make_fixture's options), as preference pairs.
void write_pairs(const std::string& dir) {
  tasks::ArithTaskOptions task;
  task.max_operand = 9;
  task.sft_count = 48;
  task.train_count = 40;
  task.val_count = 12;
  const auto splits = tasks::make_arith_splits(task);
  data::write_jsonl(dir + "/pairs.jsonl", tasks::make_arith_preference_pairs(splits.sft, 1));
  data::write_jsonl(dir + "/pairs_val.jsonl", tasks::make_arith_preference_pairs(splits.val, 2));
}

std::string write_rm_config(const std::string& dir, const std::string& run, int64_t steps) {
  const std::string path = write_config(dir, run, "grpo");
  json c = json::parse(read_file(path));
  c["rm_train"] = {{"train_files", dir + "/pairs.jsonl"},
                   {"val_files", dir + "/pairs_val.jsonl"},
                   {"max_length", 48},
                   {"sft_warm_start", true},
                   {"total_steps", steps},
                   {"batch_size", 8},
                   {"micro_batch_size_per_gpu", 4},
                   {"test_freq", 3},
                   {"save_freq", 2},
                   {"optim", {{"lr", 1e-3}}}};
  c["trainer"]["dist_timeout_s"] = 20;
  c["sft"]["micro_batch_size_per_gpu"] = 4;
  c["sft"]["enable"] = false;  // the warm start runs for train-rm all the same (rm_train.sft_warm_start)
  std::ofstream(path) << c.dump(2);
  return path;
}

std::vector<json> rm_rows(const std::string& rm_dir) {
  std::vector<json> rows = tracking::read_metrics(rm_dir + "/metrics.jsonl");
  for (json& row : rows) row.erase("timing_s/step");
  return rows;
}

}  // namespace

TEST_CASE("verlpp train-rm: SFT step, training, checkpoints, report and an HF sequence-classification folder",
          "[e2e][reward_model]") {
  const std::string dir = make_fixture("train-rm");
  write_pairs(dir);
  const std::string run = dir + "/run";
  run_to_end(write_rm_config(dir, run, 6), dir + "/rm.log", {}, "train-rm");
  const std::string rm_dir = run + "/reward_model", model_dir = rm_dir + "/rm_model";
  INFO(read_file(dir + "/rm.log"));
  CHECK(exists(rm_dir + "/sft_model/config.json"));  // the chain's SFT step
  CHECK(exists(rm_dir + "/report.html"));
  for (int step : {2, 4, 6})
    CHECK(exists(rm_dir + "/global_step_" + std::to_string(step) + "/reward_model/optimizer.safetensors"));
  const json config = json::parse(read_file(model_dir + "/config.json"));
  CHECK(config["architectures"] == json::array({"Qwen2ForSequenceClassification"}));
  CHECK(config["num_labels"] == 1);
  CHECK(config.contains("pad_token_id"));
  const model::SafetensorsFile tensors(model_dir + "/model.safetensors");
  CHECK(tensors.contains("score.weight"));
  CHECK_FALSE(tensors.contains("lm_head.weight"));
  CHECK(exists(model_dir + "/tokenizer.json"));

  const std::vector<json> rows = rm_rows(rm_dir);
  REQUIRE(rows.size() == 7);  // step 0 (held-out before training) and 6 steps
  CHECK(rows[0]["step"] == 0);
  for (int step = 1; step <= 6; ++step) {
    CHECK(rows[size_t(step)]["step"] == step);
    CHECK(finite_number(rows[size_t(step)], "rm/loss"));
    CHECK(finite_number(rows[size_t(step)], "rm/grad_norm"));
    CHECK(rows[size_t(step)].contains("val/rm/accuracy") == (step % 3 == 0));
  }
  // The saved folder's scores give back the last held-out accuracy: the pairs scored by hand.
  const model::DecoderLM rm = model::load_pretrained(model_dir);
  const model::Tokenizer tok = model::Tokenizer::from_file(model_dir);
  const model::ChatTemplate chat = model::ChatTemplate::from_config_file(model_dir);
  double correct = 0;
  int pairs = 0;
  std::ifstream in(dir + "/pairs_val.jsonl");
  for (std::string line; std::getline(in, line);) {
    const json pair = json::parse(line);
    const std::vector<model::ChatMessage> prompt = {{"user", pair["prompt"][0]["content"].get<std::string>()}};
    auto score = [&](const std::string& response) {
      const TokenIds ids = tok.encode(controller::render_preference_side(chat, prompt, response));
      data::Batch b;
      const at::Tensor t = at::tensor(ids).unsqueeze(0);
      b.set("input_ids", t);
      b.set("attention_mask", at::ones_like(t));
      b.set("position_ids", at::arange(t.size(1)).unsqueeze(0));
      return train::reward_model_scores(rm, b).item<double>();
    };
    const double margin = score(pair["chosen"].get<std::string>()) - score(pair["rejected"].get<std::string>());
    correct += margin > 0 ? 1.0 : (margin == 0 ? 0.5 : 0.0);
    ++pairs;
  }
  REQUIRE(pairs >= 3 * 12);  // each problem's wrong answers: off by one, by ten, (swapped, carry)
  CHECK(correct / pairs == Approx(rows.back()["val/rm/accuracy"].get<double>()).margin(1e-12));
}

TEST_CASE("verlpp train-rm: stopped after a checkpoint and resumed, it ends as the uninterrupted run",
          "[e2e][reward_model]") {
  const std::string dir = make_fixture("train-rm-resume");
  write_pairs(dir);
  const std::string straight = dir + "/straight", resumed = dir + "/resumed";
  run_to_end(write_rm_config(dir, straight, 6), dir + "/a.log", {}, "train-rm");
  run_to_end(write_rm_config(dir, resumed, 4), dir + "/b.log", {}, "train-rm");
  run_to_end(write_rm_config(dir, resumed, 6), dir + "/c.log", {}, "train-rm");
  INFO(read_file(dir + "/c.log"));
  CHECK(read_file(dir + "/c.log").find("resumed from") != std::string::npos);
  const model::SafetensorsFile a(straight + "/reward_model/rm_model/model.safetensors");
  const model::SafetensorsFile b(resumed + "/reward_model/rm_model/model.safetensors");
  REQUIRE(a.entries().size() == b.entries().size());
  for (const auto& entry : a.entries()) {
    INFO(entry.name);
    CHECK(a.tensor(entry.name).equal(b.tensor(entry.name)));
  }
  // The rows after the checkpoint are the uninterrupted run's (the 4-step run's last evaluation
  // at its end aside: the resumed run trims the rows past step 4 and writes 5 and 6 again).
  const std::vector<json> x = rm_rows(straight + "/reward_model"), y = rm_rows(resumed + "/reward_model");
  REQUIRE(x.size() == y.size());
  for (size_t i = 0; i < x.size(); ++i) {
    json xi = x[i], yi = y[i];
    if (i == 4) {  // step 4 was the short run's last step: it evaluated there
      for (const char* key : {"val/rm/loss", "val/rm/accuracy", "val/rm/margin"}) yi.erase(key);
    }
    CHECK(xi == yi);
  }
}

#if VERLPP_CPU_REF_HAS_GLOO
TEST_CASE("verlpp train-rm --nproc 2: the first step equals the 1-rank step", "[e2e][reward_model]") {
  const std::string dir = make_fixture("train-rm-dist");
  write_pairs(dir);
  const std::string one = dir + "/one", two = dir + "/two";
  run_to_end(write_rm_config(dir, one, 2), dir + "/one.log", {}, "train-rm");
  run_to_end(write_rm_config(dir, two, 2), dir + "/two.log", {"--nproc", "2"}, "train-rm");
  const std::vector<json> x = rm_rows(one + "/reward_model"), y = rm_rows(two + "/reward_model");
  REQUIRE(x.size() == 3);
  REQUIRE(y.size() == 3);
  for (const char* key : {"rm/loss", "rm/accuracy", "rm/margin", "rm/chosen_score", "rm/grad_norm"}) {
    INFO(key);
    CHECK(y[1][key].get<double>() == Approx(x[1][key].get<double>()).epsilon(1e-5).margin(1e-6));
  }
  CHECK(y[0]["val/rm/accuracy"] == x[0]["val/rm/accuracy"]);
}
#endif

TEST_CASE("verlpp train with reward_model.enable: training scored by the reward model, validation by the rule",
          "[e2e][reward_model]") {
  const std::string dir = make_fixture("ppo-rm");
  // A reward model from the policy's decoder with a fresh head (no training needed to score).
  model::DecoderLM rm(train::sequence_classification_config(model::load_model_config(dir + "/model")));
  rm.init_weights(17);
  model::SaveOptions save;
  save.source_dir = dir + "/model";
  model::save_pretrained(rm, dir + "/rm", save);
  const std::string run = dir + "/run";
  const std::string config = write_config(dir, run, "grpo");
  run_to_end(config, dir + "/train.log",
             {"trainer.total_training_steps=2", "trainer.test_freq=2", "reward_model.enable=true",
              "reward_model.model.path=" + dir + "/rm", "reward_model.micro_batch_size_per_gpu=3",
              "trainer.rollout_data_dir=" + run + "/rollouts"});
  INFO(read_file(dir + "/train.log"));
  CHECK(read_file(dir + "/train.log").find("reward model " + dir + "/rm") != std::string::npos);
  const std::vector<json> rows = tracking::read_metrics(run + "/metrics.jsonl");
  REQUIRE(rows.size() == 3);
  // Training scores are the reward model's (real numbers, not the rule's 0/1) ...
  int fractional = 0;
  std::ifstream dump(run + "/rollouts/1.jsonl");
  for (std::string line; std::getline(dump, line);) {
    const double score = json::parse(line)["score"].get<double>();
    if (score != 0.0 && score != 1.0) ++fractional;
  }
  CHECK(fractional >= 8);
  // ... and validation's are the rule's: each a multiple of 1/12 over the 12 problems.
  for (const json& row : {rows[0], rows[2]}) {
    const double acc = row["val-core/arith/reward/mean@1"].get<double>() * 12;
    CHECK(std::abs(acc - std::round(acc)) < 1e-9);
  }
#if VERLPP_CPU_REF_HAS_GLOO
  // On 2 ranks each scores its half of the rows: the first step's scores are the 1-rank run's.
  const std::string two = dir + "/run2";
  run_to_end(write_config(dir, two, "grpo"), dir + "/train2.log",
             {"--nproc", "2", "trainer.total_training_steps=1", "trainer.dist_timeout_s=20",
              "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=2", "reward_model.enable=true",
              "reward_model.model.path=" + dir + "/rm", "reward_model.micro_batch_size_per_gpu=3"});
  const std::vector<json> two_rows = tracking::read_metrics(two + "/metrics.jsonl");
  REQUIRE(two_rows.size() == 2);
  for (const char* key : {"critic/score/mean", "critic/score/max", "critic/score/min"}) {
    INFO(key);
    CHECK(two_rows[1][key].get<double>() == Approx(rows[1][key].get<double>()).epsilon(1e-5));
  }
  // verl's reward pool: the actor on rank 0 (trainer.n_gpus_per_node = 1), the reward model alone
  // on rank 1, which sends the scores to rank 0: the same scores again.
  const std::string pooled = dir + "/run-pool";
  run_to_end(write_config(dir, pooled, "grpo"), dir + "/train-pool.log",
             {"--nproc", "2", "trainer.total_training_steps=1", "trainer.dist_timeout_s=20", "trainer.nnodes=1",
              "trainer.n_gpus_per_node=1", "reward_model.enable=true", "reward_model.model.path=" + dir + "/rm",
              "reward_model.micro_batch_size_per_gpu=3", "reward_model.enable_resource_pool=true",
              "reward_model.n_gpus_per_node=1", "reward_model.nnodes=1"});
  const std::string pool_log = read_file(dir + "/train-pool.log");
  INFO(pool_log);
  CHECK(pool_log.find("resource pools: global_pool (rank 0): actor_rollout, ref; reward_pool (rank 1): reward_model") !=
        std::string::npos);
  const std::vector<json> pool_rows = tracking::read_metrics(pooled + "/metrics.jsonl");
  REQUIRE(pool_rows.size() == 2);
  for (const char* key : {"critic/score/mean", "critic/score/max", "critic/score/min", "actor/pg_loss"}) {
    INFO(key);
    CHECK(pool_rows[1][key].get<double>() == Approx(rows[1][key].get<double>()).epsilon(1e-5));
  }
#endif
}

TEST_CASE("reward-model inputs that cannot work are refused before any work", "[e2e][reward_model]") {
  const std::string dir = make_fixture("rm-errors");
  write_pairs(dir);
  const std::string config = write_config(dir, dir + "/run", "grpo");
  auto fails_with = [&](const std::string& subcommand, const std::vector<std::string>& extra,
                        const std::vector<std::string>& needles) {
    const std::string log = dir + "/err.log";
    const int status = wait_for(start_verlpp(subcommand, config, log, extra));
    const std::string text = read_file(log);
    INFO(text);
    CHECK(WIFEXITED(status));
    CHECK(WEXITSTATUS(status) != 0);
    for (const std::string& needle : needles) CHECK(text.find(needle) != std::string::npos);
    CHECK(text.find("terminate called") == std::string::npos);
    CHECK_FALSE(exists(dir + "/run/metrics.jsonl"));
  };
  // A reward model folder without a classification head (a causal LM), and one with 2 labels.
  const std::string micro = "reward_model.micro_batch_size_per_gpu=2";
  fails_with("train", {"reward_model.enable=true", micro, "reward_model.model.path=" + dir + "/model"},
             {"reward_model.model.path", "without a classification head"});
  json two = json::parse(read_file(dir + "/model/config.json"));
  REQUIRE(std::system(("cp -r " + dir + "/model " + dir + "/two_labels").c_str()) == 0);
  two["architectures"] = json::array({"Qwen2ForSequenceClassification"});
  two["num_labels"] = 2;
  std::ofstream(dir + "/two_labels/config.json") << two.dump(2);
  fails_with("train", {"reward_model.enable=true", micro, "reward_model.model.path=" + dir + "/two_labels"},
             {"num_labels = 2"});
  fails_with("train", {"reward_model.enable=true", micro}, {"reward_model.model.path"});
  fails_with("train", {"reward_model.enable=true", "reward_model.model.path=" + dir + "/model"},
             {"reward_model.micro_batch_size_per_gpu", "use_dynamic_bsz"});
  // Malformed pairs: a line that is not JSON, and a row without the chosen response.
  std::string lines = read_file(dir + "/pairs.jsonl");
  std::ofstream(dir + "/bad.jsonl") << lines.substr(0, lines.find('\n') + 1) << "{\"prompt\": \"1+1=\", \"chosen\": \n";
  fails_with("train-rm", {"rm_train.train_files=" + dir + "/bad.jsonl"}, {"bad.jsonl:2"});
  std::ofstream(dir + "/bad.jsonl") << "{\"prompt\": \"1+1=\", \"rejected\": \"3\"}\n";
  fails_with("train-rm", {"rm_train.train_files=" + dir + "/bad.jsonl"},
             {"bad.jsonl:1", "no string 'chosen'", "rm_train.chosen_key"});
  fails_with("train-rm", {"rm_train.train_files=" + dir + "/pairs.jsonl", "rm_train.max_length=5"},
             {"pairs.jsonl:1", "rm_train.max_length = 5"});
  fails_with("train-rm",
             {"rm_train.train_files=" + dir + "/pairs.jsonl", "rm_train.sft_warm_start=true", "rm_train.batch_size=8",
              "sft.enable=false", "sft.train_files=null"},
             {"rm_train.sft_warm_start", "sft.train_files"});
  CHECK_FALSE(exists(dir + "/run/reward_model/metrics.jsonl"));
}
