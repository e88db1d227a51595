// Config: verl's defaults, strict merging with suggestions, overrides, references, validation.
#include <verlpp/config/config.hpp>
#include <verlpp/config/run_settings.hpp>
#include <verlpp/core/error.hpp>

#include <cstdio>
#include <fstream>
// Catch2 last: LibTorch 2.x headers define glog's CHECK, which would otherwise replace Catch's.
#include <catch2/catch.hpp>

using Catch::Contains;
using verlpp::config::Config;
using verlpp::config::parse_run_settings;
using verlpp::config::RunSettings;

namespace {

std::string write_temp(const std::string& name, const std::string& text) {
  std::string path = "/tmp/verlpp-config-test-" + name + ".json";
  std::ofstream(path) << text;
  return path;
}

// A config that validates on one rank (verl's defaults need micro-batch sizes set).
Config small_valid() {
  Config c = Config::defaults();
  c.apply_overrides({"data.train_batch_size=8", "actor_rollout_ref.actor.ppo_mini_batch_size=4",
                     "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=2", "actor_rollout_ref.rollout.n=2",
                     "algorithm.adv_estimator=grpo", "actor_rollout_ref.rollout.tensor_model_parallel_size=1"});
  c.resolve();
  return c;
}

}  // namespace

TEST_CASE("defaults carry verl's names and values", "[config]") {
  Config c = Config::defaults();
  CHECK(c.get<std::string>("algorithm.adv_estimator") == "gae");
  CHECK(c.get<double>("algorithm.kl_ctrl.kl_coef") == 0.001);
  CHECK(c.get<int64_t>("actor_rollout_ref.actor.ppo_mini_batch_size") == 256);
  CHECK(c.get<std::string>("actor_rollout_ref.actor.loss_agg_mode") == "token-mean");
  CHECK(c.get<double>("actor_rollout_ref.actor.clip_ratio_c") == 3.0);
  CHECK(c.get<std::string>("actor_rollout_ref.actor.kl_loss_type") == "low_var_kl");
  CHECK(c.is_null("actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu"));
  CHECK(c.get<double>("actor_rollout_ref.rollout.val_kwargs.temperature") == 0.0);
}

TEST_CASE("references resolve after overrides, keeping types", "[config]") {
  Config c = Config::defaults();
  c.apply_overrides({"data.max_prompt_length=77", "trainer.project_name=p", "trainer.experiment_name=e",
                     "actor_rollout_ref.actor.ppo_epochs=3"});
  c.resolve();
  CHECK(c.get<int64_t>("actor_rollout_ref.rollout.prompt_length") == 77);
  CHECK(c.get<int64_t>("critic.ppo_epochs") == 3);
  CHECK(c.get<std::string>("trainer.default_local_dir") == "checkpoints/p/e");
  CHECK(c.at("critic.ppo_mini_batch_size") == c.at("actor_rollout_ref.actor.ppo_mini_batch_size"));
}

TEST_CASE("overrides: parsing, types and suggestions", "[config]") {
  Config c = Config::defaults();
  c.apply_override("algorithm.adv_estimator=grpo");
  CHECK(c.get<std::string>("algorithm.adv_estimator") == "grpo");
  c.apply_override("actor_rollout_ref.actor.optim.lr=3e-6");
  CHECK(c.get<double>("actor_rollout_ref.actor.optim.lr") == 3e-6);
  c.apply_override("trainer.logger=[\"console\",\"jsonl\"]");
  CHECK(c.at("trainer.logger").size() == 2);
  c.apply_override("actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=4");
  CHECK(c.get<int64_t>("actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu") == 4);
  c.apply_override("actor_rollout_ref.model.override_config.attention_dropout=0.0");  // free-form section
  CHECK(c.get<double>("actor_rollout_ref.model.override_config.attention_dropout") == 0.0);
  CHECK_THROWS_WITH(
      c.apply_override("algorithm.adv_estimater=grpo"),
      Contains("unknown key 'algorithm.adv_estimater'") && Contains("did you mean 'algorithm.adv_estimator'"));
  CHECK_THROWS_WITH(c.apply_override("actor_rollout_ref.actor.ppo_epochs=two"),
                    Contains("'actor_rollout_ref.actor.ppo_epochs' must be an integer") && Contains("\"two\""));
  CHECK_THROWS_WITH(c.apply_override("data.shuffle=1"), Contains("must be a boolean"));
  CHECK_THROWS_WITH(c.apply_override("algorithm.kl_ctrl=3"), Contains("must be an object"));
  CHECK_THROWS_WITH(c.apply_override("no_equals_sign"), Contains("expected '=' and a value (key=value"));
  CHECK_THROWS_WITH(c.apply_override("trainer.total_epochs=1.5"), Contains("must be an integer"));
}

TEST_CASE("a config file merges strictly and names the file", "[config]") {
  std::string good = write_temp("good", R"({"algorithm": {"adv_estimator": "rloo", "kl_ctrl": {"type": "adaptive"}},
                                            "data": {"train_batch_size": 16}})");
  Config c = Config::from_file(good);
  CHECK(c.get<std::string>("algorithm.adv_estimator") == "rloo");
  CHECK(c.get<std::string>("algorithm.kl_ctrl.type") == "adaptive");
  CHECK(c.get<double>("algorithm.kl_ctrl.kl_coef") == 0.001);  // siblings keep their defaults
  std::string typo = write_temp("typo", R"({"trainer": {"sav_freq": 5}})");
  CHECK_THROWS_WITH(Config::from_file(typo), Contains(typo) && Contains("did you mean 'trainer.save_freq'"));
  std::string broken = write_temp("broken", R"({"trainer": )");
  CHECK_THROWS_WITH(Config::from_file(broken), Contains(broken) && Contains("not valid JSON"));
  // Nested 10^5 deep: refused before parsing (the parser would overflow the stack) in a file,
  // and at the 513th level of an override's value; brackets inside strings do not count.
  std::string deep = write_temp("deep", "{\"trainer\": " + std::string(100000, '{') + std::string(100000, '}') + "}");
  CHECK_THROWS_WITH(Config::from_file(deep), Contains(deep) && Contains("JSON nested deeper than 512 levels"));
  std::remove(deep.c_str());
  Config fine = Config::defaults();
  CHECK_THROWS_WITH(
      fine.apply_override("trainer.logger=" + std::string(100000, '[')),
      Contains("override 'trainer.logger=") && Contains("at column 528: expected a value nested at most 512 levels"));
  std::string quoted = write_temp("quoted", "{\"trainer\": {\"project_name\": \"" + std::string(1000, '[') + "\"}}");
  CHECK(Config::from_file(quoted).get<std::string>("trainer.project_name") == std::string(1000, '['));
  std::remove(quoted.c_str());
  CHECK_THROWS_WITH(Config::from_file("/nonexistent/config.json"),
                    Contains("/nonexistent/config.json") && Contains("No such file or directory"));
  CHECK_THROWS_WITH(Config::from_file("/tmp"), Contains("/tmp: the config file is a directory, not a file"));
  std::remove(good.c_str());
  std::remove(typo.c_str());
  std::remove(broken.c_str());
}

TEST_CASE("reference cycles and unknown references are errors", "[config]") {
  Config c = Config::defaults();
  c.apply_override("trainer.project_name=${trainer.experiment_name}");
  c.apply_override("trainer.experiment_name=${trainer.project_name}");
  CHECK_THROWS_WITH(c.resolve(), Contains("reference cycle"));
  Config d = Config::defaults();
  d.apply_override("trainer.project_name=${trainer.nope}");
  CHECK_THROWS_WITH(d.resolve(), Contains("${trainer.nope}"));
}

TEST_CASE("validate: a good small config passes", "[config]") {
  CHECK_NOTHROW(small_valid().validate(1));
  CHECK_NOTHROW(small_valid().validate(1));
}

TEST_CASE("validate: inconsistent values are refused before any work, all at once", "[config]") {
  Config c = small_valid();
  c.set("actor_rollout_ref.actor.ppo_mini_batch_size", 3);  // 8 % 3 != 0
  c.set("actor_rollout_ref.rollout.top_p", 1.5);
  c.set("algorithm.adv_estimator", "grpo_typo");
  try {
    c.validate(1);
    FAIL("validated");
  } catch (const verlpp::Error& e) {
    std::string m = e.what();
    CHECK_THAT(m, Contains("3 problem(s)") || Contains("4 problem(s)"));
    CHECK_THAT(m, Contains("not a multiple of actor_rollout_ref.actor.ppo_mini_batch_size = 3"));
    CHECK_THAT(m, Contains("top_p = 1.5"));
    CHECK_THAT(m, Contains("'grpo_typo' is not one of") && Contains("grpo") && Contains("rloo"));
  }
  Config micro = small_valid();
  micro.set("actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu", 3);  // per-rank mini 4*2=8, 8 % 3 != 0
  CHECK_THROWS_WITH(micro.validate(1),
                    Contains("ppo_micro_batch_size_per_gpu = 3 does not divide the per-rank mini-batch of 8"));
  Config unset = small_valid();
  unset.set("actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu", nullptr);
  CHECK_THROWS_WITH(unset.validate(1), Contains("must be set"));
  unset.set("actor_rollout_ref.actor.use_dynamic_bsz", true);
  CHECK_NOTHROW(unset.validate(1));
  // The rollout's engines: tensor_model_parallel_size ranks each, dividing the ranks (a verl
  // script's 2 does not fit one rank, as in verl); unset, verlpp's default is 1.
  CHECK(Config::defaults().get<int64_t>("actor_rollout_ref.rollout.tensor_model_parallel_size") == 1);
  Config split = small_valid();
  split.set("actor_rollout_ref.rollout.tensor_model_parallel_size", 2);
  CHECK_THROWS_WITH(split.validate(1),
                    Contains("tensor_model_parallel_size = 2 splits each rollout engine over 2 ranks, but the run has "
                             "1 rank(s) (1 node(s) x 1 per node)") &&
                        Contains("set it to a divisor of 1"));
  CHECK_NOTHROW(split.validate(2));
  CHECK_NOTHROW(split.validate(4));
  split.set("actor_rollout_ref.rollout.tensor_model_parallel_size", 3);
  CHECK_THROWS_WITH(split.validate(4), Contains("tensor_model_parallel_size = 3 splits each rollout engine"));
  split.set("actor_rollout_ref.rollout.tensor_model_parallel_size", 0);
  CHECK_THROWS_WITH(split.validate(4), Contains("tensor_model_parallel_size = 0 must be >= 1"));
  // The layout: null takes the launched one; set values must match it, both layouts named.
  CHECK_NOTHROW(small_valid().validate(2));
  Config pinned = small_valid();
  pinned.apply_overrides({"trainer.nnodes=1", "trainer.n_gpus_per_node=1"});
  CHECK_THROWS_WITH(
      pinned.validate(2),
      Contains("1 x 1 = 1 rank(s) asked, but the run was launched as 1 node(s) x 2 rank(s) per node = 2 rank(s)"));
  Config big = small_valid();
  big.apply_overrides({"trainer.nnodes=4", "trainer.n_gpus_per_node=8", "data.train_batch_size=32",
                       "actor_rollout_ref.actor.ppo_mini_batch_size=16",
                       "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=1"});
  CHECK_THROWS_WITH(big.validate(32, 32),
                    Contains("4 x 8 = 32 rank(s) asked, but the run was launched as 1 node(s) x 32 rank(s) per node"));
  CHECK_NOTHROW(big.validate(32, 8));
  Config gae = small_valid();
  gae.set("algorithm.adv_estimator", "gae");
  gae.set("critic.enable", false);
  CHECK_THROWS_WITH(gae.validate(1), Contains("needs a critic"));
  Config kl = small_valid();
  kl.set("actor_rollout_ref.actor.kl_loss_type", "k3+");
  CHECK_NOTHROW(kl.validate(1));
  kl.set("actor_rollout_ref.actor.kl_loss_type", "k9");
  CHECK_THROWS_WITH(kl.validate(1), Contains("'k9' is not one of"));
  Config zero = small_valid();
  for (const int stage : {0, 1, 2, 3}) {
    zero.set("trainer.zero_stage", stage);
    CHECK_NOTHROW(zero.validate(2));
  }
  for (const int stage : {-1, 4}) {
    zero.set("trainer.zero_stage", stage);
    CHECK_THROWS_WITH(zero.validate(2),
                      Contains("trainer.zero_stage = " + std::to_string(stage) + " is not supported") &&
                          Contains("3 (parameters too)"));
  }
}

TEST_CASE("the sharding keys: strategies, stage and reshard_after_forward, fsdp_size", "[config]") {
  // Unset, the stage follows verl's FSDP: reshard_after_forward true is ZeRO-3, false ZeRO-2.
  Config c = small_valid();
  c.resolve();
  CHECK(parse_run_settings(c, 1, 1).actor.sharding.zero_stage == 3);
  Config grad_op = small_valid();
  grad_op.set("actor_rollout_ref.actor.fsdp_config.reshard_after_forward", false);
  grad_op.resolve();
  const RunSettings rs = parse_run_settings(grad_op, 1, 1);
  CHECK(rs.actor.sharding.zero_stage == 2);
  CHECK(rs.ref.sharding.zero_stage == 3);  // each role reads its own fsdp_config
  // Both said, and they disagree: refused naming both keys.
  Config both = small_valid();
  both.set("trainer.zero_stage", 3);
  both.set("critic.model.fsdp_config.reshard_after_forward", false);
  CHECK_THROWS_WITH(both.validate(2), Contains("trainer.zero_stage = 3") &&
                                          Contains("critic.model.fsdp_config.reshard_after_forward = false"));
  both.set("trainer.zero_stage", 2);
  CHECK_NOTHROW(both.validate(2));
  for (const char* strategy :
       {"actor_rollout_ref.actor.strategy", "actor_rollout_ref.ref.strategy", "critic.strategy"}) {
    Config s = small_valid();
    s.set(strategy, "fsdp2");
    CHECK_NOTHROW(s.validate(2));
    s.set(strategy, "megatron");
    CHECK_THROWS_WITH(s.validate(2), Contains(std::string(strategy) + " = 'megatron' is not supported"));
  }
  Config size = small_valid();
  size.set("actor_rollout_ref.actor.fsdp_config.fsdp_size", 2);
  CHECK_NOTHROW(size.validate(2));
  CHECK_THROWS_WITH(size.validate(4),
                    Contains("actor_rollout_ref.actor.fsdp_config.fsdp_size = 2") && Contains("hybrid sharding"));
  // offload_policy (FSDP2's CPU offload) offloads both; the reference has no optimizer to offload.
  Config policy = small_valid();
  policy.set("actor_rollout_ref.actor.fsdp_config.offload_policy", true);
  policy.set("actor_rollout_ref.ref.fsdp_config.offload_policy", true);
  policy.resolve();
  const RunSettings offload = parse_run_settings(policy, 1, 1);
  CHECK(offload.actor.sharding.param_offload);
  CHECK(offload.actor.sharding.optimizer_offload);
  CHECK(offload.ref.sharding.param_offload);
  CHECK_FALSE(offload.ref.sharding.optimizer_offload);
}

TEST_CASE("a value of the wrong type read by a check names its key, not the JSON library's code", "[config]") {
  Config c = small_valid();
  c.apply_override("data.train_batch_size=null");  // null is accepted as verl's "unset" ...
  // ... and refused where a number is needed, by key.
  CHECK_THROWS_WITH(c.validate(1), Contains("'data.train_batch_size' is null (unset); it must be an integer") &&
                                       !Contains("json.exception"));
  CHECK_THROWS_WITH(c.get<int64_t>("data.train_batch_size"), Contains("'data.train_batch_size'"));
  Config d = small_valid();
  d.set("trainer.project_name", 5);
  CHECK_THROWS_WITH(d.get<std::string>("trainer.project_name"),
                    Contains("'trainer.project_name' = 5 is an integer; it must be a string"));
}

TEST_CASE("validate: a step batch that cannot fit in this machine's memory is refused before any work", "[config]") {
  Config c = small_valid();
  c.set("actor_rollout_ref.rollout.n", 1000000000);  // divides everything, so only its size is wrong
  c.set("data.train_batch_size", 8);
  c.set("actor_rollout_ref.actor.ppo_mini_batch_size", 8);
  c.set("actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu", 1000000000);
  CHECK_THROWS_WITH(c.validate(1),
                    Contains("8 x 1000000000 x") && Contains("GiB of host memory") && Contains("this machine has"));
  CHECK_NOTHROW(small_valid().validate(1));  // the usual sizes are far from it
}

TEST_CASE("resource pools: consecutive ranks in the order declared, roles mapped, verl's reward pool",
          "[config][pools]") {
  using verlpp::config::pool_layout;
  using verlpp::config::PoolLayout;
  using verlpp::config::RlRole;
  // Colocated by default: one pool of every rank holds every role.
  const PoolLayout colocated = pool_layout(small_valid(), 4, 4);
  REQUIRE(colocated.pools.size() == 1);
  CHECK(colocated.colocated());
  CHECK(colocated.pools[0].ranks() == std::vector<int32_t>{0, 1, 2, 3});
  for (RlRole r : verlpp::config::all_roles()) CHECK(colocated.role_pool.at(r) == 0);

  // Two nodes of 4: the actor's pool takes 2 ranks per node on both (4 ranks), the critic's the next 4.
  Config c = small_valid();
  c.apply_overrides({"algorithm.adv_estimator=gae", "actor_rollout_ref.actor.use_kl_loss=true",
                     "trainer.resource_pools=[{name: train, n_gpus_per_node: 2, nnodes: 2}, {name: values, "
                     "n_gpus_per_node: 4}]",
                     "trainer.role_pools.critic=values"});
  c.resolve();
  const PoolLayout split = pool_layout(c, 8, 4);
  REQUIRE(split.pools.size() == 2);
  CHECK(split.pool_of(RlRole::kActorRollout).ranks() == std::vector<int32_t>{0, 1, 2, 3});
  CHECK(split.pool_of(RlRole::kCritic).ranks() == std::vector<int32_t>{4, 5, 6, 7});
  CHECK(split.pool_of(RlRole::kReference).name == "train");  // roles not named: the first pool
  CHECK(split.describe({RlRole::kActorRollout, RlRole::kReference, RlRole::kCritic}) ==
        "train (ranks 0-3): actor_rollout, ref; values (ranks 4-7): critic");
  // The batch checks use each role's ranks: 8 x 2 rows split over the critic's 4, not over 8.
  CHECK_NOTHROW(c.validate(8, 4));

  // verl's reward pool: trainer.n_gpus_per_node x nnodes is the global pool, the reward pool comes after.
  Config rm = small_valid();
  rm.apply_overrides({"reward_model.enable=true", "reward_model.enable_resource_pool=true",
                      "reward_model.n_gpus_per_node=1", "reward_model.nnodes=1", "trainer.n_gpus_per_node=2",
                      "trainer.nnodes=1"});
  rm.resolve();
  CHECK_NOTHROW(rm.validate(3, 3));
  const PoolLayout rm_layout = pool_layout(rm, 3, 3);
  REQUIRE(rm_layout.pools.size() == 2);
  CHECK(rm_layout.pools[0].name == "global_pool");
  CHECK(rm_layout.pools[0].size() == 2);
  CHECK(rm_layout.pool_of(RlRole::kRewardModel).name == "reward_pool");
  CHECK(rm_layout.pool_of(RlRole::kRewardModel).ranks() == std::vector<int32_t>{2});
  // verl's default reward_model.nnodes (0) does not size a pool; verl refuses it too.
  rm.set("reward_model.nnodes", 0);
  CHECK_THROWS_WITH(rm.validate(3, 3), Contains("reward_model.enable_resource_pool needs reward_model.n_gpus_per_node "
                                                "and reward_model.nnodes >= 1"));
}

TEST_CASE("resource pools that cannot work are refused by validate, with the asked and launched layouts",
          "[config][pools]") {
  auto refused = [](const std::vector<std::string>& overrides, int world, const std::string& message) {
    Config c = small_valid();
    c.apply_overrides(overrides);
    c.resolve();
    INFO(message);
    CHECK_THROWS_WITH(c.validate(world, world), Contains(message));
  };
  const std::string two = "trainer.resource_pools=[{name: a, n_gpus_per_node: 2}, {name: b, n_gpus_per_node: 2}]";
  refused({two, "trainer.role_pools.critic=b", "algorithm.adv_estimator=gae"}, 2,
          "the resource pools ask for a 1 x 2 + b 1 x 2 = 4 rank(s) but the run was launched as 1 node(s) x 2 "
          "rank(s) = 2 rank(s)");
  refused({two, "trainer.role_pools.actor_rollout=b", "trainer.role_pools.critic=a", "algorithm.adv_estimator=gae"}, 4,
          "the actor's pool must be the first declared");
  refused({two, "trainer.role_pools.critics=b"}, 4, "trainer.role_pools.critics: not a role");
  refused({two}, 4, "pool 'b' holds no role this run builds");
  refused({"trainer.resource_pools=[{name: a}]"}, 1, "needs n_gpus_per_node");
  refused({"trainer.resource_pools=[{name: a, n_gpus_per_node: 1, gpus: 2}]"}, 1,
          "trainer.resource_pools[0].gpus is not a pool key");
  refused({"trainer.resource_pools=[{name: a, n_gpus_per_node: 1}, {name: a, n_gpus_per_node: 1}]"}, 2,
          "pool 'a' is declared twice");
  // 8 x 2 rows do not split over a critic pool of 3 ranks.
  refused({"trainer.resource_pools=[{name: a, n_gpus_per_node: 1}, {name: b, n_gpus_per_node: 3}]",
           "trainer.role_pools.critic=b", "algorithm.adv_estimator=gae"},
          4, "is not divisible by the 3 rank(s) of pool 'b' (critic)");
}
