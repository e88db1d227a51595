// The key tree follows verl's generated trainer config, and every key is in exactly one state:
// read by a reader (its effect), or listed in config_key_states.cpp as no-effect or refused.
// The readers are run for real (RunSettings with validate, the demo's settings) over configs
// that take each of their branches, and Config records every key they look up.
#include <verlpp/tasks/arith_task.hpp>
#include <verlpp/config/config.hpp>
#include <verlpp/config/config_key_states.hpp>
#include <verlpp/config/run_settings.hpp>
#include <verlpp/core/error.hpp>

#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <sstream>
// Catch2 last: LibTorch 2.x headers define glog's CHECK, which would otherwise replace Catch's.
#include <catch2/catch.hpp>

using Catch::Contains;
using nlohmann::json;
using namespace verlpp::config;
using namespace verlpp::reward;
using namespace verlpp::tasks;

namespace {

const json* find_key(const json& root, const std::string& dotted) {
  const json* node = &root;
  std::stringstream parts(dotted);
  std::string part;
  while (std::getline(parts, part, '.')) {
    if (!node->is_object() || !node->contains(part)) return nullptr;
    node = &(*node)[part];
  }
  return node;
}

Config resolved(const std::vector<std::string>& overrides) {
  Config c = Config::defaults();
  c.apply_overrides(overrides);
  c.resolve();
  return c;
}

// PPO with a critic (gae), on one rank: every role's section is read.
const std::vector<std::string> kWithCritic = {"data.train_batch_size=8",
                                              "actor_rollout_ref.actor.ppo_mini_batch_size=4",
                                              "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=2",
                                              "critic.ppo_micro_batch_size_per_gpu=2",
                                              "actor_rollout_ref.rollout.n=2",
                                              "actor_rollout_ref.rollout.tensor_model_parallel_size=1"};

// GRPO with the branches the first config does not take: clip_ratio as the fallback of unset
// low/high, a step count instead of epochs, a custom reward's name, the SFT warm start, a reward
// model with dynamic batch size, and `verlpp train-rm`'s section.
const std::vector<std::string> kBranches = {"data.train_batch_size=8",
                                            "actor_rollout_ref.actor.ppo_mini_batch_size=4",
                                            "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=2",
                                            "actor_rollout_ref.rollout.n=2",
                                            "actor_rollout_ref.rollout.tensor_model_parallel_size=1",
                                            "algorithm.adv_estimator=grpo",
                                            "actor_rollout_ref.actor.clip_ratio_low=null",
                                            "actor_rollout_ref.actor.clip_ratio_high=null",
                                            "trainer.total_training_steps=3",
                                            "custom_reward_function.path=/nonexistent/reward.so",
                                            "sft.enable=true",
                                            "sft.train_files=/nonexistent/sft.jsonl",
                                            "reward_model.enable=true",
                                            "reward_model.model.path=/nonexistent/rm",
                                            "reward_model.use_dynamic_bsz=true",
                                            "rm_train.train_files=/nonexistent/pairs.jsonl",
                                            "rm_train.model_path=/nonexistent/model"};

// The keys each reader looked up while parsing `c`.
std::set<std::string> keys_read_by_readers(const Config& c) {
  (void)parse_run_settings(c, 1, 1);
  (void)parse_demo_settings(c);
  if (!c.is_null("rm_train.train_files")) (void)parse_rm_train_settings(c);
  return c.read_keys();
}

// The keys `${...}` references in the defaults of `keys` name, followed transitively.
std::set<std::string> referenced_by(const std::set<std::string>& keys) {
  const Config config = Config::defaults();
  const json& defaults = config.tree();
  const std::regex ref(R"(\$\{([^}]*)\})");
  std::set<std::string> out;
  std::vector<std::string> todo(keys.begin(), keys.end());
  while (!todo.empty()) {
    const std::string key = todo.back();
    todo.pop_back();
    const json* v = find_key(defaults, key);
    if (v == nullptr || !v->is_string()) continue;
    const std::string text = v->get<std::string>();
    for (std::sregex_iterator it(text.begin(), text.end(), ref), end; it != end; ++it)
      if (out.insert((*it)[1]).second) todo.push_back((*it)[1]);
  }
  return out;
}

// A value of the same type as `v` that differs from it.
json other_value(const json& v) {
  if (v.is_boolean()) return !v.get<bool>();
  if (v.is_number_integer()) return v.get<int64_t>() + 1;
  if (v.is_number_float()) return v.get<double>() + 0.5;
  if (v.is_string()) return v.get<std::string>() + "_other";
  if (v.is_array()) {
    json a = v;
    a.push_back("other");
    return a;
  }
  if (v.is_object()) return json{{"other", 1}};
  return "other";  // null: any value is a change
}

}  // namespace

TEST_CASE("every leaf key of verl's generated trainer config is a key of verlpp's tree", "[config][keys]") {
  std::ifstream in(std::string(VERLPP_SOURCE_DIR) + "/tests/controller/verl_ppo_trainer_keys.txt");
  REQUIRE(in.good());
  const Config defaults = Config::defaults();
  const json& tree = defaults.tree();
  std::vector<std::string> missing;
  int count = 0;
  for (std::string line; std::getline(in, line);) {
    if (line.empty() || line[0] == '#') continue;
    ++count;
    if (find_key(tree, line) == nullptr) missing.push_back(line);
  }
  CHECK(count > 500);  // the whole list was read
  INFO("keys of verl's config missing from verlpp's defaults: " << json(missing).dump());
  CHECK(missing.empty());
}

TEST_CASE("every key with an effect is read by a reader; no reader reads a no-effect or refused key",
          "[config][keys]") {
  std::set<std::string> read;
  for (const auto& overrides : {kWithCritic, kBranches}) {
    const std::set<std::string> keys = keys_read_by_readers(resolved(overrides));
    read.insert(keys.begin(), keys.end());
  }
  // A key read through a reference (trainer.project_name inside default_local_dir) has its effect.
  const std::set<std::string> referenced = referenced_by(read);
  std::vector<std::string> unread_effect, read_but_listed;
  for (const std::string& key : default_leaf_keys()) {
    const bool is_read = read.count(key) > 0;
    if (config_key_state(key) == KeyState::effect) {
      if (!is_read && referenced.count(key) == 0) unread_effect.push_back(key);
    } else if (is_read) {
      read_but_listed.push_back(key);
    }
  }
  INFO("keys nothing reads that config_key_states.cpp does not list: " << json(unread_effect).dump());
  CHECK(unread_effect.empty());
  INFO(
      "keys a reader reads that config_key_states.cpp lists as no-effect or refused: " << json(read_but_listed).dump());
  CHECK(read_but_listed.empty());
  CHECK(read.count("trainer.total_epochs"));  // both branches of the step count were taken
  CHECK(read.count("actor_rollout_ref.actor.clip_ratio"));
}

TEST_CASE("every row of the key-state table decides at least one key", "[config][keys]") {
  const std::vector<std::string> keys = default_leaf_keys();
  for (const KeyRule& rule : config_key_rules()) {
    INFO("row " << rule.pattern);
    bool decides = false;
    for (const std::string& key : keys) {
      const KeyRule* r = config_key_rule(key);
      if (rule.state == KeyState::effect ? (r == nullptr && std::string(key).rfind(rule.pattern, 0) == 0) : r == &rule)
        decides = true;
    }
    CHECK(decides);
    if (rule.state != KeyState::effect) CHECK(std::string(rule.reason).size() > 10);
  }
}

TEST_CASE("the table's patterns: wildcards, sections, first match", "[config][keys]") {
  CHECK(config_key_state("actor_rollout_ref.actor.fsdp_config.param_offload") == KeyState::effect);
  CHECK(config_key_state("actor_rollout_ref.ref.fsdp_config.optimizer_offload") == KeyState::no_effect);
  CHECK(config_key_state("actor_rollout_ref.actor.fsdp_config.use_orig_params") == KeyState::no_effect);
  CHECK(config_key_state("critic.model.fsdp_config.wrap_policy.min_num_params") == KeyState::no_effect);
  CHECK(config_key_state("actor_rollout_ref.actor.fsdp_config.mixed_precision.param_dtype") == KeyState::effect);
  CHECK(config_key_state("actor_rollout_ref.actor.fsdp_config.ulysses_sequence_parallel_size") == KeyState::refused);
  CHECK(config_key_state("critic.optim._target_") == KeyState::no_effect);
  CHECK(config_key_state("actor_rollout_ref.rollout.profiler.tool_config") == KeyState::no_effect);
  CHECK(config_key_state("critic.profiler.enable") == KeyState::refused);
  CHECK(config_key_state("actor_rollout_ref.rollout.agent.default_agent_loop") == KeyState::effect);
  CHECK(config_key_state("actor_rollout_ref.rollout.agent.num_workers") == KeyState::effect);
  CHECK(config_key_state("actor_rollout_ref.rollout.agent.custom_async_server.path") == KeyState::refused);
  CHECK(config_key_state("actor_rollout_ref.rollout.val_kwargs.n") == KeyState::effect);
  CHECK(config_key_state("actor_rollout_ref.rollout.multi_turn.enable") == KeyState::no_effect);
  CHECK(config_key_state("actor_rollout_ref.rollout.multi_turn.format") == KeyState::effect);
  CHECK(config_key_state("actor_rollout_ref.rollout.multi_turn.interaction_config_path") == KeyState::effect);
  CHECK(config_key_state("algorithm.adv_estimator") == KeyState::effect);
  CHECK(config_key_state("reward_model.enable") == KeyState::effect);
  CHECK(config_key_state("reward_model.model.fsdp_config.param_offload") == KeyState::no_effect);
  // verl's reward pool has its effect (resource_pools.hpp), with the keys that size it.
  CHECK(config_key_state("reward_model.enable_resource_pool") == KeyState::effect);
  CHECK(config_key_state("reward_model.n_gpus_per_node") == KeyState::effect);
  REQUIRE(config_key_rule("actor_rollout_ref.nccl_timeout") != nullptr);
  CHECK(std::string(config_key_rule("actor_rollout_ref.nccl_timeout")->pattern) == "actor_rollout_ref.nccl_timeout");
}

TEST_CASE("a refused key changed from its default is refused by validate, naming it and why", "[config][keys]") {
  const Config base = resolved(kWithCritic);
  CHECK_NOTHROW(base.validate(1));
  const Config default_config = Config::defaults();
  const json& defaults = default_config.tree();
  int refused = 0;
  for (const std::string& key : default_leaf_keys()) {
    const KeyRule* rule = config_key_rule(key);
    if (rule == nullptr || rule->state != KeyState::refused) continue;
    ++refused;
    Config c = base;
    c.set(key, other_value(*find_key(base.tree(), key)));
    INFO(key << " = " << find_key(c.tree(), key)->dump() << " (default " << find_key(defaults, key)->dump() << ")");
    CHECK_THROWS_WITH(c.validate(1), Contains(key + " = ") && Contains(rule->reason));
  }
  CHECK(refused > 50);
}

TEST_CASE("no-effect keys changed are listed once at start with why; keys that follow a changed key are not",
          "[config][keys]") {
  CHECK(no_effect_notice(resolved(kWithCritic)).empty());
  std::vector<std::string> overrides = kWithCritic;
  for (const char* o :
       {"actor_rollout_ref.rollout.name=\"vllm\"", "actor_rollout_ref.actor.fsdp_config.use_orig_params=true",
        "trainer.balance_batch=false", "actor_rollout_ref.actor.optim.lr=3e-6",
        "actor_rollout_ref.actor.use_dynamic_bsz=true", "data.max_prompt_length=64"})
    overrides.push_back(o);
  const Config c = resolved(overrides);
  CHECK_NOTHROW(c.validate(1));  // rollout.prompt_length (refused when changed) follows data.max_prompt_length
  const std::string notice = no_effect_notice(c);
  CHECK_THAT(notice, Contains("3 key(s)"));
  for (const char* key : {"actor_rollout_ref.rollout.name", "actor_rollout_ref.actor.fsdp_config.use_orig_params",
                          "trainer.balance_batch"})
    CHECK_THAT(notice, Contains(std::string(key) + " = ") && Contains(config_key_rule(key)->reason));
  // ref.log_prob_use_dynamic_bsz follows actor.use_dynamic_bsz: not a change of its own.
  CHECK_THAT(notice, !Contains("log_prob_use_dynamic_bsz"));
  CHECK_THAT(notice, !Contains("optim.lr"));
  // Setting the follower itself to another value is a change.
  Config follower = resolved(kWithCritic);
  follower.set("actor_rollout_ref.ref.log_prob_use_dynamic_bsz", true);
  CHECK_THAT(no_effect_notice(follower), Contains("actor_rollout_ref.ref.log_prob_use_dynamic_bsz = true"));
}

TEST_CASE("verlpp config --keys marks every key's state", "[config][keys]") {
  const std::string text = describe_config_keys(Config::defaults());
  std::map<std::string, std::string> lines;
  std::stringstream in(text);
  for (std::string line; std::getline(in, line);) lines[line.substr(0, line.find(" = "))] = line;
  CHECK(lines.size() == default_leaf_keys().size());
  CHECK_THAT(lines["actor_rollout_ref.rollout.name"],
             Contains("[no effect: ") && Contains(config_key_rule("actor_rollout_ref.rollout.name")->reason));
  CHECK_THAT(lines["actor_rollout_ref.nccl_timeout"], Contains("[refused unless left at its default: "));
  CHECK(lines["algorithm.adv_estimator"] == "algorithm.adv_estimator = \"gae\"");
}

TEST_CASE("docs/training.md lists the key-state table's rows", "[config][keys][docs]") {
  std::ifstream in(std::string(VERLPP_SOURCE_DIR) + "/docs/training.md");
  REQUIRE(in.good());
  // Rows of the docs' tables between the key-states markers: | `pattern` | state | reason |
  const std::regex row(R"(^\| `([^`]+)` \| (no effect|refused unless default) \| (.*) \|$)");
  std::vector<std::string> documented, table;
  bool inside = false;
  for (std::string line; std::getline(in, line);) {
    if (line.find("<!-- key-states:begin -->") != std::string::npos) inside = true;
    if (line.find("<!-- key-states:end -->") != std::string::npos) inside = false;
    std::smatch m;
    if (inside && std::regex_match(line, m, row))
      documented.push_back(m[1].str() + " | " + m[2].str() + " | " + m[3].str());
  }
  for (const KeyRule& rule : config_key_rules()) {
    if (rule.state == KeyState::effect) continue;
    table.push_back(std::string(rule.pattern) + " | " +
                    (rule.state == KeyState::no_effect ? "no effect" : "refused unless default") + " | " + rule.reason);
  }
  CHECK(documented == table);
}
