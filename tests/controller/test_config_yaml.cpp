// YAML config files (config_yaml.hpp): scalar typing against PyYAML (with OmegaConf's loader
// changes) on fixtures whose expected JSON PyYAML wrote (config_files/make_expected.py), verl's
// own generated trainer config, Hydra defaults lists, and the interpolation resolvers.
#include <verlpp/config/config.hpp>
#include <verlpp/config/config_yaml.hpp>
#include <verlpp/core/error.hpp>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
// Catch2 last: LibTorch 2.x headers define glog's CHECK, which would otherwise replace Catch's.
#include <catch2/catch.hpp>

#include "../error_of.hpp"

using Catch::Contains;
using nlohmann::json;
using verlpp::config::Config;
using verlpp::config::yaml_plain_scalar;
using verlpp::config::yaml_to_json;

namespace {

using verlpp::test::error_of;

const std::string kFiles = std::string(VERLPP_SOURCE_DIR) + "/tests/controller/config_files/";

std::string read(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  REQUIRE(in.good());
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

std::string write_temp(const std::string& name, const std::string& text) {
  std::string path = "/tmp/verlpp-config-yaml-test-" + name;
  std::ofstream(path) << text;
  return path;
}

// Compares a converted value with PyYAML's: the same JSON types (integers and floats apart),
// {"$float": "inf" | "-inf" | "nan"} for the floats JSON cannot hold. Returns the first
// difference's path, or "" when equal.
std::string difference(const json& got, const json& want, const std::string& path) {
  if (want.is_object() && want.size() == 1 && want.contains("$float")) {
    const std::string kind = want["$float"];
    if (!got.is_number_float()) return path + ": not a float: " + got.dump();
    const double v = got.get<double>();
    const bool ok = kind == "nan" ? std::isnan(v) : kind == "inf" ? v == INFINITY : v == -INFINITY;
    return ok ? "" : path + ": not " + kind;
  }
  const bool got_int = got.is_number_integer(), want_int = want.is_number_integer();
  if (got_int != want_int || got.is_number_float() != want.is_number_float() || (!got_int && got.type() != want.type()))
    return path + ": " + got.dump() + " (got) vs " + want.dump() + " (PyYAML)";
  if (want.is_object()) {
    if (got.size() != want.size()) return path + ": keys differ: " + got.dump() + " vs " + want.dump();
    for (auto it = want.begin(); it != want.end(); ++it) {
      if (!got.contains(it.key())) return path + "." + it.key() + ": missing";
      std::string d = difference(got[it.key()], it.value(), path + "." + it.key());
      if (!d.empty()) return d;
    }
    return "";
  }
  if (want.is_array()) {
    if (got.size() != want.size()) return path + ": lengths differ";
    for (size_t i = 0; i < want.size(); ++i) {
      std::string d = difference(got[i], want[i], path + "[" + std::to_string(i) + "]");
      if (!d.empty()) return d;
    }
    return "";
  }
  if (want.is_number_float()) {  // the same double, and the sign of a zero too
    const double a = got.get<double>(), b = want.get<double>();
    return a == b && std::signbit(a) == std::signbit(b) ? "" : path + ": " + got.dump() + " vs " + want.dump();
  }
  return got == want ? "" : path + ": " + got.dump() + " (got) vs " + want.dump() + " (PyYAML)";
}

// The part of `given` whose keys verlpp's tree has (free-form sections whole, `_target_` kept
// for Config to check and drop), and the count of leaves left out.
json known_part(const json& given, const json& defaults, size_t& dropped) {
  json out = json::object();
  for (auto it = given.begin(); it != given.end(); ++it) {
    if (it.key() == "_target_") {
      out[it.key()] = it.value();
      continue;
    }
    if (!defaults.contains(it.key())) {
      ++dropped;
      continue;
    }
    const json& d = defaults[it.key()];
    if (d.is_object() && !d.empty() && it.value().is_object())
      out[it.key()] = known_part(it.value(), d, dropped);
    else
      out[it.key()] = it.value();
  }
  return out;
}

}  // namespace

TEST_CASE("YAML scalars are typed as PyYAML with OmegaConf's loader types them", "[config][yaml]") {
  const json got = yaml_to_json(read(kFiles + "yaml_scalars.yaml"), "yaml_scalars.yaml");
  const json want = json::parse(read(kFiles + "yaml_scalars.expected.json"));
  CHECK(difference(got, want, "") == "");
  // The differences from plain PyYAML that OmegaConf makes, spelled out.
  CHECK(yaml_plain_scalar("1e-6").is_number_float());
  CHECK(yaml_plain_scalar("2001-12-14").is_string());
}

TEST_CASE("verl's generated trainer config converts as PyYAML reads it", "[config][yaml]") {
  // verl commit b178a3cd56f58b2d502255daba591e92833930a7, verl/trainer/config/_generated_ppo_trainer.yaml.
  const json got = yaml_to_json(read(kFiles + "verl_generated_ppo_trainer.yaml"), "verl_generated_ppo_trainer.yaml");
  const json want = json::parse(read(kFiles + "verl_generated_ppo_trainer.expected.json"));
  CHECK(difference(got, want, "") == "");
  CHECK(got["actor_rollout_ref"]["actor"]["optim"]["lr"].get<double>() == 1e-6);
}

TEST_CASE("verl's generated trainer config: the keys verlpp knows load, merge and resolve", "[config][yaml]") {
  const json given = yaml_to_json(read(kFiles + "verl_generated_ppo_trainer.yaml"), "verl");
  size_t dropped = 0;
  const json known = known_part(given, Config::defaults().tree(), dropped);
  INFO(dropped << " leaves of verl's tree are not in verlpp's yet");
  Config c = Config::from_json(known, "verl_generated_ppo_trainer.yaml (known keys)");
  c.resolve();
  // verl's values, through verlpp's tree; oc.select references resolve to the referenced keys.
  CHECK(c.get<double>("actor_rollout_ref.actor.optim.lr") == 1e-6);
  CHECK(c.get<std::string>("actor_rollout_ref.actor.loss_agg_mode") == "token-mean");
  CHECK(c.get<int64_t>("actor_rollout_ref.rollout.prompt_length") == 512);
  CHECK(c.get<std::string>("trainer.default_local_dir") ==
        "checkpoints/" + given["trainer"]["project_name"].get<std::string>() + "/" +
            given["trainer"]["experiment_name"].get<std::string>());
}

// verl's whole generated config: every key of it is one of verlpp's (none unknown).
TEST_CASE("verl's generated trainer config loads whole", "[config][yaml][verl-tree]") {
  Config c = Config::from_file(kFiles + "verl_generated_ppo_trainer.yaml");
  c.resolve();
  CHECK(c.get<double>("actor_rollout_ref.actor.optim.lr") == 1e-6);
}

TEST_CASE("YAML errors name the file, the line and the key", "[config][yaml]") {
  CHECK_THAT(error_of([] { yaml_to_json("a: 1\nb:\n  c: 2\n  c: 3\n", "f.yaml"); }),
             Contains("f.yaml: 'b.c' at line 4, column 3: a duplicate key"));
  CHECK_THAT(error_of([] { yaml_to_json("a: &x [1, *x]\n", "f.yaml"); }), Contains("recursive alias"));
  CHECK_THAT(error_of([] { yaml_to_json("a: !python/name:os.system x\n", "f.yaml"); }),
             Contains("'a' at line 1") && Contains("the tag") && Contains("not supported"));
  CHECK_THAT(error_of([] { yaml_to_json("a: 1\n---\nb: 2\n", "f.yaml"); }),
             Contains("a second YAML document starts at line 2"));
  // A ',' outside brackets (yaml-cpp alone would read empty documents from it forever).
  CHECK_THAT(error_of([] { yaml_to_json(",a: 1\n", "f.yaml"); }), Contains("a second YAML document starts"));
  CHECK_THAT(error_of([] { yaml_to_json("\"x\",\n", "f.yaml"); }), Contains("a second YAML document starts"));
  CHECK_THAT(error_of([] { yaml_to_json("a: [1, 2\n", "f.yaml"); }), Contains("f.yaml: not valid YAML at line"));
  CHECK_THAT(error_of([] { yaml_to_json("a: =\n", "f.yaml"); }), Contains("'a' at line 1") && Contains("quote it"));
  CHECK_THAT(error_of([] { yaml_to_json("a: 0x_\n", "f.yaml"); }), Contains("'0x_' is not a valid integer"));
  CHECK_THAT(error_of([] { yaml_to_json("a: 99999999999999999999\n", "f.yaml"); }), Contains("out of range"));
  CHECK_THAT(error_of([] { yaml_to_json("? [k]\n: v\n", "f.yaml"); }), Contains("must be a scalar"));
  CHECK_THAT(error_of([] { yaml_to_json("a: !!int abc\n", "f.yaml"); }), Contains("'abc' is not a valid integer"));
  // Aliases that multiply (a "billion laughs") stop at the node limit.
  std::string laughs = "a: &a [x, x, x, x, x, x, x, x, x, x]\n";
  for (char c = 'b'; c <= 'h'; ++c)
    laughs += fmt::format("{}: &{} [*{}, *{}, *{}, *{}, *{}, *{}, *{}, *{}, *{}, *{}]\n", c, c, char(c - 1),
                          char(c - 1), char(c - 1), char(c - 1), char(c - 1), char(c - 1), char(c - 1), char(c - 1),
                          char(c - 1), char(c - 1));
  CHECK_THAT(error_of([&] { yaml_to_json(laughs, "f.yaml"); }), Contains("more than 100000 nodes"));
  CHECK_THAT(error_of([] { yaml_to_json("a: 1\nb: x\xff\n", "f.yaml"); }),
             Contains("f.yaml: line 2, column 5: the byte 0xff is not UTF-8"));
  // Deep nesting: yaml-cpp stops at its own depth limit; aliases nesting deeper stop at 512.
  CHECK_THAT(error_of([] { yaml_to_json("a: " + std::string(100000, '['), "f.yaml"); }),
             Contains("f.yaml: not valid YAML at line 1"));
  const std::string chain = "a0: &a0 " + std::string(300, '[') + "x" + std::string(300, ']') +
                            "\na1: " + std::string(300, '[') + "*a0" + std::string(300, ']') + "\n";
  const std::string deep = error_of([&] { yaml_to_json(chain, "f.yaml"); });
  CHECK_THAT(deep, Contains("nested deeper than 512 levels"));
  CHECK(deep.size() < 300);  // the key path is shortened in the message
  CHECK(yaml_to_json("", "f.yaml") == json::object());
  CHECK(yaml_to_json("# only a comment\n", "f.yaml") == json::object());
  CHECK_THAT(error_of([] { Config::from_json(yaml_to_json("- a\n", "f.yaml"), "f.yaml"); }),
             Contains("must be a JSON object (a YAML mapping)"));
}

TEST_CASE("a YAML config file loads with Hydra's defaults list and OmegaConf's types", "[config][yaml]") {
  const std::string path = write_temp("user.yaml", R"(hydra:
  searchpath:
    - file://verl/trainer/config

defaults:
  - ppo_trainer
  - _self_

data:
  train_batch_size: 16
  train_files: /data/train.parquet
actor_rollout_ref:
  model:
    use_remove_padding: True
    override_config:
      attention_dropout: 0.0
  actor:
    optim:
      lr: 1e-6
trainer:
  logger: console
)");
  Config c = Config::from_file(path);
  CHECK(c.get<int64_t>("data.train_batch_size") == 16);
  CHECK(c.get<std::string>("data.train_files") == "/data/train.parquet");
  CHECK(c.get<bool>("actor_rollout_ref.model.use_remove_padding") == true);
  CHECK(c.get<double>("actor_rollout_ref.actor.optim.lr") == 1e-6);
  CHECK(c.at("trainer.logger") == json::array({"console"}));
  CHECK(c.get<double>("actor_rollout_ref.model.override_config.attention_dropout") == 0.0);
  CHECK(c.get<int64_t>("data.max_prompt_length") == Config::defaults().get<int64_t>("data.max_prompt_length"));
  // Overrides apply on top, as on the command line.
  c.apply_overrides({"data.train_batch_size=32", "+actor_rollout_ref.model.override_config.rope_theta=1e6"});
  CHECK(c.get<int64_t>("data.train_batch_size") == 32);
  CHECK(c.get<double>("actor_rollout_ref.model.override_config.rope_theta") == 1e6);
  std::remove(path.c_str());

  // _self_ first: verl's base config is merged after the file, so its values win; a
  // free-form section's keys (which the base does not have) stay.
  const std::string self_first = write_temp("self_first.yml", R"(defaults: [_self_, ppo_trainer]
data: {train_batch_size: 16}
actor_rollout_ref: {model: {override_config: {attention_dropout: 0.5}}}
)");
  Config base_wins = Config::from_file(self_first);
  CHECK(base_wins.get<int64_t>("data.train_batch_size") == Config::defaults().get<int64_t>("data.train_batch_size"));
  CHECK(base_wins.get<double>("actor_rollout_ref.model.override_config.attention_dropout") == 0.5);
  std::remove(self_first.c_str());

  // No _self_ listed: Hydra appends it, so the file's keys win.
  const std::string implicit = write_temp("implicit.yaml", "defaults: [ppo_trainer]\ndata: {train_batch_size: 16}\n");
  CHECK(Config::from_file(implicit).get<int64_t>("data.train_batch_size") == 16);
  std::remove(implicit.c_str());
}

TEST_CASE("other Hydra compositions are refused by name", "[config][yaml]") {
  auto refused = [](const std::string& name, const std::string& text) {
    const std::string path = write_temp(name, text);
    std::string message = error_of([&] { Config::from_file(path); });
    std::remove(path.c_str());
    return message;
  };
  CHECK_THAT(refused("megatron.yaml", "defaults: [ppo_megatron_trainer, _self_]\n"),
             Contains("megatron.yaml") && Contains("the defaults entry \"ppo_megatron_trainer\" is not supported") &&
                 Contains("ppo_trainer"));
  CHECK_THAT(refused("group.yaml", "defaults:\n  - actor@actor_rollout_ref.actor: dp_actor\n  - _self_\n"),
             Contains("{\"actor@actor_rollout_ref.actor\":\"dp_actor\"} is not supported"));
  CHECK_THAT(refused("override.yaml", "defaults:\n  - ppo_trainer\n  - override hydra/job_logging: disabled\n"),
             Contains("\"override hydra/job_logging\""));
  CHECK_THAT(refused("twice.yaml", "defaults: [ppo_trainer, ppo_trainer]\n"), Contains("names \"ppo_trainer\" twice"));
  CHECK_THAT(refused("notlist.yaml", "defaults: ppo_trainer\n"), Contains("'defaults' must be Hydra's defaults list"));
  CHECK_THAT(refused("hydra_run.yaml", "hydra:\n  run:\n    dir: outputs\n"),
             Contains("'hydra.run' is not supported") && Contains("only hydra.searchpath"));
  CHECK_THAT(refused("typo.yaml", "trainer:\n  sav_freq: 5\n"), Contains("did you mean 'trainer.save_freq'"));
  CHECK_THAT(refused("target.yaml", "actor_rollout_ref:\n  actor:\n    _target_: my.Actor\n"),
             Contains("'actor_rollout_ref.actor._target_' = \"my.Actor\"") && Contains("cannot instantiate"));
}

TEST_CASE("interpolations: relative keys, oc.select, oc.env, escapes; others refused by name", "[config][yaml]") {
  ::setenv("VERLPP_TEST_CONFIG_ENV", "from-env", 1);
  ::unsetenv("VERLPP_TEST_CONFIG_UNSET");
  const json given = yaml_to_json(R"(actor_rollout_ref:
  model:
    override_config:
      b: 3
      sibling: ${.b}
      up: ${..path}
      select_present: ${oc.select:data.max_prompt_length,1}
      select_absent: ${oc.select:.nope,7}
      select_null_default: ${oc.select:.nope, null}
      select_list_default: ${oc.select:.nope,[]}
      select_quoted_default: ${oc.select:.nope,"~/models/x"}
      select_relative: ${oc.select:.b,0}
      env: ${oc.env:VERLPP_TEST_CONFIG_ENV}
      env_default: ${oc.env:VERLPP_TEST_CONFIG_UNSET,dflt}
      joined: x${.b}y-${data.max_prompt_length}
      escaped: \${not.a.ref}
      nested_key: ${data.${.which}}
      which: max_prompt_length
      in_list: ["${..b}", 4]  # a list is a level: .. is its section
    path: /models/m
)",
                                  "interp.yaml");
  Config c = Config::from_json(given, "interp.yaml");
  c.resolve();
  const std::string s = "actor_rollout_ref.model.override_config.";
  CHECK(c.at(s + "sibling") == json(3));
  CHECK(c.at(s + "up") == json("/models/m"));
  CHECK(c.at(s + "select_present") == c.at("data.max_prompt_length"));
  CHECK(c.at(s + "select_absent") == json(7));
  CHECK(c.at(s + "select_null_default").is_null());
  CHECK(c.at(s + "select_list_default") == json::array());
  CHECK(c.at(s + "select_quoted_default") == json("~/models/x"));
  CHECK(c.at(s + "select_relative") == json(3));
  CHECK(c.at(s + "env") == json("from-env"));
  CHECK(c.at(s + "env_default") == json("dflt"));
  CHECK(c.at(s + "joined") == json("x3y-" + std::to_string(c.get<int64_t>("data.max_prompt_length"))));
  CHECK(c.at(s + "escaped") == json("${not.a.ref}"));
  CHECK(c.at(s + "nested_key") == c.at("data.max_prompt_length"));
  CHECK(c.at(s + "in_list") == json::array({3, 4}));

  auto resolve_error = [](const std::string& value) {
    Config bad = Config::defaults();
    bad.apply(verlpp::config::parse_override("+actor_rollout_ref.model.override_config.v=x"), "setup");
    bad.set("actor_rollout_ref.model.override_config.v", value);
    return error_of([&] { bad.resolve(); });
  };
  CHECK_THAT(resolve_error("${oc.decode:'1'}"), Contains("the resolver 'oc.decode' is not supported") &&
                                                    Contains("actor_rollout_ref.model.override_config.v"));
  CHECK_THAT(resolve_error("${oc.create:{a: 1}}"), Contains("'oc.create' is not supported"));
  CHECK_THAT(resolve_error("${my_resolver:1}"), Contains("'my_resolver' is not supported"));
  CHECK_THAT(resolve_error("${oc.env:VERLPP_TEST_CONFIG_UNSET}"), Contains("VERLPP_TEST_CONFIG_UNSET is not set"));
  CHECK_THAT(resolve_error("${.....too.far}"), Contains("above the top of the config"));
  CHECK_THAT(resolve_error("${trainer.nope}"), Contains("${trainer.nope}") && Contains("unknown key"));
  CHECK_THAT(resolve_error("${oc.select:}"), Contains("expected ${oc.select:key}"));
}
