// Suite "e2e": a short GRPO run of RlTrainer (tiny model, seeded random weights, generated
// arithmetic prompts, the `arith` reward) with trainer.device set to the plugin's torch device
// type. Decision: one run of warmup + reps steps; the first `warmup` steps are excluded and each
// later step is one repetition of every stage, read from its timing_s/* metrics (gen, reward,
// old_log_prob, ref, adv, update_actor, ..., step). No SFT, validation or checkpoints.
#include "bench.hpp"

#include <verlpp/tasks/arith_task.hpp>
#include <verlpp/data/records.hpp>
#include <verlpp/config/config.hpp>
#include <verlpp/controller/rl_trainer.hpp>
#include <verlpp/model/checkpoint.hpp>
#include <verlpp/model/decoder.hpp>

#include <fmt/format.h>

#include "util/files.hpp"  // POSIX, not std::filesystem: the wheel's libtorch exports its own (docs/building.md)

#include <fstream>
#include <map>
#include <unistd.h>

namespace verlpp::bench {
namespace {

// A fresh folder with the tiny model (weights from seed 1) and small arithmetic splits.
std::string make_run_inputs(const std::string& dir) {
  files::remove_tree(dir);
  files::make_dirs(dir + "/model");
  const std::string tiny = std::string(VERLPP_SOURCE_DIR) + "/examples/tiny/";
  for (const char* f : {"config.json", "tokenizer.json", "tokenizer_config.json"})
    files::copy_file(tiny + f, dir + "/model/" + f);
  model::DecoderLM m(model::load_model_config(dir + "/model"));
  m.init_weights(1);
  model::save_pretrained(m, dir + "/model");
  tasks::ArithTaskOptions task;
  task.max_operand = 9;
  task.sft_count = 1;
  task.train_count = 64;
  task.val_count = 4;
  const tasks::ArithSplits splits = tasks::make_arith_splits(task);
  tasks::register_arith_reward();  // the rows' data_source, for runs in this process
  data::write_jsonl(dir + "/train.jsonl", splits.train);
  data::write_jsonl(dir + "/val.jsonl", splits.val);
  return dir;
}

}  // namespace

std::vector<Measurement> run_e2e(const Options& o, const Target& t) {
  const int64_t prompts = o.quick ? 2 : 8, n = o.quick ? 2 : 4, response = o.quick ? 6 : 8;
  const int64_t steps = o.warmup + o.reps;
  const std::string dir = make_run_inputs(fmt::format("/tmp/verlpp-bench-e2e-{}-{}", ::getpid(), t.name));
  const nlohmann::json given = {{"data",
                                 {{"train_files", dir + "/train.jsonl"},
                                  {"val_files", dir + "/val.jsonl"},
                                  {"max_prompt_length", 32},
                                  {"max_response_length", response},
                                  {"train_batch_size", prompts}}},
                                {"actor_rollout_ref",
                                 {{"model", {{"path", dir + "/model"}, {"enable_gradient_checkpointing", false}}},
                                  {"actor",
                                   {{"ppo_mini_batch_size", prompts},
                                    {"ppo_micro_batch_size_per_gpu", prompts * n},
                                    {"use_kl_loss", true},
                                    {"optim", {{"lr", 1e-4}}}}},
                                  {"rollout", {{"n", n}, {"tensor_model_parallel_size", 1}, {"dtype", "float32"}}}}},
                                {"algorithm", {{"adv_estimator", "grpo"}}},
                                {"trainer",
                                 {{"default_local_dir", dir + "/run"},
                                  {"total_training_steps", steps},
                                  {"save_freq", -1},
                                  {"test_freq", -1},
                                  {"val_before_train", false},
                                  {"resume_mode", "disable"},
                                  {"device", t.device.is_cpu()               ? "cpu"
                                             : t.device.type() == c10::kCUDA ? "cuda"
                                                                             : t.device.str()},
                                  {"seed", 5}}},
                                {"sft", {{"enable", false}}}};
  config::Config config = config::Config::from_json(given, "verlpp-bench e2e");
  config.resolve();
  std::vector<nlohmann::json> rows;
  controller::TrainerHooks hooks;
  hooks.on_step = [&](const nlohmann::json& row) { rows.push_back(row); };
  {
    controller::RlTrainer trainer(config, hooks);
    trainer.fit();
  }
  files::remove_tree(dir);

  // stage -> seconds per timed step, in the order the metrics name them.
  std::map<std::string, std::vector<double>> stages;
  double tokens = 0;
  for (size_t i = size_t(o.warmup); i < rows.size(); ++i) {
    for (auto it = rows[i].begin(); it != rows[i].end(); ++it)
      if (it.key().rfind("timing_s/", 0) == 0 && it.value().is_number())
        stages[it.key().substr(9)].push_back(it.value().get<double>());
    tokens += rows[i].value("perf/total_num_tokens", 0.0);
  }
  if (rows.size() != size_t(steps) || stages.empty())
    throw Error("e2e", fmt::format("the run recorded {} step rows with {} stages; expected {} steps", rows.size(),
                                   stages.size(), steps));
  // The same text on every plugin, so the table compares them (ratios match workloads by shape).
  const std::string shape = fmt::format(
      "GRPO, tiny model f32, {} prompts x n={}, response <= {}, KL loss, micro-batch {}, trainer.device = the plugin's "
      "device type (plugin kernels are called on accelerators only)",
      prompts, n, response, prompts * n);
  std::vector<Measurement> out;
  for (const auto& [stage, seconds] : stages) {
    Measurement m = make_measurement("e2e", "grpo_step/" + stage, shape, t);
    m.seconds = seconds;
    if (stage == "step" && o.reps > 0) {
      m.work = tokens / double(o.reps);
      m.work_unit = "tokens";
    }
    out.push_back(m);
  }
  return out;
}

}  // namespace verlpp::bench
