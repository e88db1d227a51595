// verl's own example run scripts (tests/e2e/third_party/verl_scripts, copied verbatim from verl at the commit
// docs/training.md pins) run as a verl user would run them with verlpp: the program name
// `python3 -m verl.trainer.main_ppo` becomes `verlpp config` / `verlpp train`, and nothing else
// in the script changes. The model paths the scripts name (Hugging Face ids such as
// Qwen/Qwen2-7B-Instruct, or $HOME/models/...) are folders holding the tiny model, and $HOME/data
// holds the demo's arithmetic splits as parquet under the file names the scripts use.
//
// For each script: every override it passes is a known key; `verlpp config` refuses exactly the
// settings the key-state table refuses (and wandb, a network logger), nothing else; the start-up
// block lists exactly the no-effect keys the script changes; and a 2-step `verlpp train` runs to
// the end with finite metrics. The train run appends arguments through the script's own `$@`
// (as verl's docs tell users to), only what a 2-core CPU and one process need: console logging,
// one rank (and so one-rank rollout engines, as verl also needs on one GPU), 2 steps, and small
// batch and response sizes.
#include <verlpp/config/config.hpp>
#include <verlpp/config/config_key_states.hpp>
#include <verlpp/tracking/metrics_log.hpp>

#include <set>
#include <sstream>

// Catch2 (through e2e_util.hpp) last: LibTorch 2.x headers define glog's CHECK.
#include "cli_run.hpp"
#include "e2e_util.hpp"

using namespace verlpp;
using namespace verlpp::e2e;

namespace {

const std::string kScripts = std::string(VERLPP_SOURCE_DIR) + "/tests/e2e/third_party/verl_scripts/";
const std::string kFixtures = std::string(VERLPP_SOURCE_DIR) + "/tests/data/parquet_fixtures/files/";
const std::string kRoot = "/tmp/verlpp-e2e-verl-scripts";

// The scripts, by their path under verl's examples/ (GRPO, PPO with a critic, RLOO,
// REINFORCE++, ReMax, GPG; list-valued data files, dynamic batch size, async rollout mode).
const std::vector<std::string> kScriptNames = {
    "grpo_trainer/run_qwen2-7b.sh",
    "grpo_trainer/run_qwen2-7b_math.sh",
    "grpo_trainer/run_qwen3-8b.sh",
    "grpo_trainer/run_deepseek7b_llm.sh",
    "grpo_trainer/run_qwen2-7b_seq_balance.sh",
    "grpo_trainer/run_deepseek7b_llm_seq_balance.sh",
    "ppo_trainer/run_deepseek7b_llm.sh",
    "ppo_trainer/run_gemma.sh",
    "ppo_trainer/run_qwen2-7b_seq_balance.sh",
    "rloo_trainer/run_qwen2-7b.sh",
    "reinforce_plus_plus_trainer/run_qwen2-7b_math_rf.sh",
    "remax_trainer/run_qwen2.5-3b_seq_balance.sh",
    "gpg_trainer/run_qwen2-7b_math.sh",
};

// What this machine needs on top of a script's own lines (appended through its `$@`).
const std::string kCpuScale =
    "trainer.logger=console trainer.n_gpus_per_node=1 actor_rollout_ref.rollout.tensor_model_parallel_size=1 "
    "trainer.total_training_steps=2 "
    "data.train_batch_size=32 actor_rollout_ref.actor.ppo_mini_batch_size=32 data.max_response_length=8";

// `bash SCRIPT ARGS` run in `dir` with HOME set to the fixture home.
ShellRun run_script(const std::string& dir, const std::string& script, const std::string& args = "") {
  return run_shell_apart("cd '" + dir + "' && HOME='" + kRoot + "/home' bash '" + script + "' " + args,
                         dir + "/stderr.txt");
}

// The last `n` characters of `text`, for failure messages.
std::string tail(const std::string& text, size_t n = 6000) {
  return text.size() > n ? text.substr(text.size() - n) : text;
}

// The script with verl's program replaced by `program` (the only change), written into `dir`.
std::string with_program(const std::string& name, const std::string& dir, const std::string& program) {
  std::string text = read_file(kScripts + name);
  const std::string verl = "python3 -m verl.trainer.main_ppo";
  const size_t at = text.find(verl);
  REQUIRE(at != std::string::npos);
  REQUIRE(text.find(verl, at + 1) == std::string::npos);
  text.replace(at, verl.size(), program);
  const std::string path = dir + "/script.sh";
  std::ofstream(path) << text;
  return path;
}

// The home folder: the tiny model with seeded weights, and the demo's arithmetic splits (written
// by an independent parquet writer, tests/data/parquet_fixtures) as the scripts' gsm8k and math
// files. The model paths the scripts name are links to the one folder.
void make_home() {
  REQUIRE(std::system(("rm -rf " + kRoot + " && mkdir -p " + kRoot + "/home/tiny").c_str()) == 0);
  for (const char* f : {"tokenizer.json", "tokenizer_config.json"})
    copy(std::string(VERLPP_SOURCE_DIR) + "/examples/tiny/" + f, kRoot + "/home/tiny/" + f);
  // The tiny model's shape with room for the longest prompt the scripts allow (4096 tokens).
  json config = json::parse(read_file(std::string(VERLPP_SOURCE_DIR) + "/examples/tiny/config.json"));
  config["max_position_embeddings"] = 8192;
  std::ofstream(kRoot + "/home/tiny/config.json") << config.dump(2);
  model::DecoderLM m(model::load_model_config(kRoot + "/home/tiny"));
  m.init_weights(3);
  model::save_pretrained(m, kRoot + "/home/tiny");
  for (const char* set : {"gsm8k", "math"}) {
    const std::string data = kRoot + "/home/data/" + set;
    REQUIRE(std::system(("mkdir -p " + data).c_str()) == 0);
    copy(kFixtures + "arith_train.parquet", data + "/train.parquet");
    copy(kFixtures + "arith_val.parquet", data + "/test.parquet");
  }
}

// The key an override argument sets ("+a.b=1" -> "a.b"), or "" for a non-override argument.
std::string override_key(const std::string& arg) {
  const size_t eq = arg.find('=');
  if (eq == std::string::npos) return "";
  size_t begin = 0;
  while (begin < eq && arg[begin] == '+') ++begin;
  return arg.substr(begin, eq - begin);
}

std::string value_of(const std::vector<std::string>& args, const std::string& key) {
  std::string value;
  for (const std::string& a : args)
    if (override_key(a) == key) value = a.substr(a.find('=') + 1);
  return value;
}

// The keys named in the start-up block ("  key = value: why" lines after its heading).
std::set<std::string> block_keys(const std::string& output) {
  std::set<std::string> keys;
  const size_t start = output.find("have no effect in verlpp:\n");
  if (start == std::string::npos) return keys;
  std::istringstream lines(output.substr(start));
  std::string line;
  std::getline(lines, line);
  while (std::getline(lines, line) && line.rfind("  ", 0) == 0) keys.insert(line.substr(2, line.find(" = ") - 2));
  return keys;
}

const nlohmann::json* find_dotted(const nlohmann::json& tree, const std::string& dotted) {
  const nlohmann::json* node = &tree;
  std::istringstream parts(dotted);
  std::string part;
  while (std::getline(parts, part, '.')) {
    if (!node->is_object() || !node->contains(part)) return nullptr;
    node = &(*node)[part];
  }
  return node;
}

}  // namespace

TEST_CASE("verl's example scripts run unchanged but for the program name", "[verl_scripts]") {
  make_home();
  const config::Config raw_defaults = config::Config::defaults();
  config::Config defaults = raw_defaults;
  defaults.resolve();

  for (const std::string& name : kScriptNames) {
    INFO("verl script examples/" << name);
    const std::string dir = kRoot + "/" + name.substr(0, name.find('/')) + "-" + name.substr(name.find('/') + 1);
    REQUIRE(std::system(("mkdir -p '" + dir + "'").c_str()) == 0);

    // The arguments as bash hands them to the program (the script's own quoting and variables).
    const ShellRun listed = run_script(dir, with_program(name, dir, "printf \"%s\\n\""));
    REQUIRE(listed.status == 0);
    std::vector<std::string> args;
    {
      std::istringstream lines(listed.out);
      for (std::string line; std::getline(lines, line);)
        if (!override_key(line).empty()) args.push_back(line);
    }
    REQUIRE(args.size() >= 30);

    // Each model folder the script names holds the tiny model.
    for (const char* key : {"actor_rollout_ref.model.path", "critic.model.path"}) {
      const std::string path = value_of(args, key);
      if (path.empty()) continue;
      const std::string where = path[0] == '/' ? path : dir + "/" + path;
      REQUIRE(std::system(("mkdir -p \"$(dirname '" + where + "')\" && ln -sfn " + kRoot + "/home/tiny '" + where + "'")
                              .c_str()) == 0);
    }

    // Which settings the table refuses, and which have no effect, among the script's changes.
    const ShellRun resolved = run_script(
        dir, with_program(name, dir, std::string(VERLPP_CLI) + " config --no-validate"), "trainer.logger=console");
    INFO(tail(resolved.err));
    REQUIRE(resolved.status == 0);
    const nlohmann::json tree = nlohmann::json::parse(resolved.out);
    std::set<std::string> refused, no_effect;
    for (const std::string& arg : args) {
      const std::string key = override_key(arg);
      const nlohmann::json* value = find_dotted(tree, key);
      INFO("override " << arg);
      REQUIRE(value != nullptr);  // a known key of verl's tree
      const nlohmann::json* fallback = find_dotted(defaults.tree(), key);
      if (fallback != nullptr && *fallback == *value) continue;  // set to verl's default
      // A key whose default is a reference (`${a.b}`) is unchanged when it equals what the
      // reference gives in this script's config (docs/training.md, Coming from verl).
      const nlohmann::json* raw = find_dotted(raw_defaults.tree(), key);
      if (raw != nullptr && raw->is_string()) {
        const std::string text = raw->get<std::string>();
        if (text.rfind("${", 0) == 0 && text.back() == '}' && text.find("${", 2) == std::string::npos) {
          const nlohmann::json* followed = find_dotted(tree, text.substr(2, text.size() - 3));
          if (followed != nullptr && *followed == *value) continue;
        }
      }
      const config::KeyState state = config::config_key_state(key);
      if (state == config::KeyState::refused) refused.insert(key);
      if (state == config::KeyState::no_effect) no_effect.insert(key);
    }
    const bool wandb = value_of(args, "trainer.logger").find("wandb") != std::string::npos;

    // `verlpp config` on the script as it is: refused exactly for those, else valid.
    const std::string config_script = with_program(name, dir, std::string(VERLPP_CLI) + " config");
    const ShellRun config = run_script(dir, config_script);
    INFO(tail(config.err));
    CHECK((config.status != 0) == (wandb || !refused.empty()));
    if (wandb) CHECK(config.err.find("'wandb' reports to a network service") != std::string::npos);
    for (const std::string& key : refused) CHECK(config.err.find(key + " = ") != std::string::npos);
    CHECK(config.err.find("unknown") == std::string::npos);
    if (!refused.empty()) continue;  // the script cannot run as verl wrote it; nothing more to run

    // With console logging instead of wandb: valid, and the block names exactly the no-effect keys.
    const ShellRun valid = run_script(dir, config_script, "trainer.logger=console");
    INFO(tail(valid.err));
    REQUIRE(valid.status == 0);
    CHECK(block_keys(valid.err) == no_effect);

    // Two training steps, scaled to this machine.
    const ShellRun train = run_script(dir, with_program(name, dir, std::string(VERLPP_CLI) + " train"), kCpuScale);
    INFO(tail(train.out + train.err));
    REQUIRE(train.status == 0);
    CHECK(block_keys(train.out + train.err) == no_effect);
    const std::string run = dir + "/checkpoints/" + tree["trainer"]["project_name"].get<std::string>() + "/" +
                            tree["trainer"]["experiment_name"].get<std::string>();
    const std::vector<json> rows = tracking::read_metrics(run + "/metrics.jsonl");
    std::set<int64_t> steps;
    for (const json& row : rows) {
      if (!row.contains("actor/pg_loss")) continue;
      steps.insert(row["step"].get<int64_t>());
      for (const char* key : {"actor/pg_loss", "actor/grad_norm", "critic/score/mean", "response_length/mean"})
        CHECK(finite_number(row, key));
      // A critic trains exactly when the script asks for GAE.
      CHECK(row.contains("critic/vf_loss") == (tree["algorithm"]["adv_estimator"] == "gae"));
    }
    CHECK(steps == std::set<int64_t>{1, 2});
  }
}
