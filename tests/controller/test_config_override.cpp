// Hydra's override grammar (config_override.hpp) and how Config applies overrides: each value
// type, +, ++, ~, lists of files, quoted strings with commas and brackets, and the errors with
// their columns. Expected values are the ones Hydra's grammar documentation and its lexer rules
// (hydra/grammar/OverrideLexer.g4) give for each input.
#include <verlpp/config/config.hpp>
#include <verlpp/config/config_override.hpp>
#include <verlpp/core/error.hpp>

#include <cmath>
// Catch2 last: LibTorch 2.x headers define glog's CHECK, which would otherwise replace Catch's.
#include <catch2/catch.hpp>

#include "../error_of.hpp"

using Catch::Contains;
using nlohmann::json;
using verlpp::config::Config;
using verlpp::config::Override;
using verlpp::config::OverrideAction;
using verlpp::config::parse_override;

namespace {

using verlpp::test::error_of;

json value_of(const std::string& value) { return parse_override("k=" + value).value; }

// The JSON type and value, with integers and floats told apart (json's == does not).
bool same(const json& a, const json& b) {
  if (a.is_number_integer() != b.is_number_integer() || a.is_number_float() != b.is_number_float()) return false;
  if (a.type() != b.type() && !(a.is_number_integer() && b.is_number_integer())) return false;
  if (a.is_array() || a.is_object()) {
    if (a.size() != b.size()) return false;
    auto ia = a.begin();
    auto ib = b.begin();
    for (; ia != a.end(); ++ia, ++ib) {
      if (a.is_object() && ia.key() != ib.key()) return false;
      if (!same(*ia, *ib)) return false;
    }
    return true;
  }
  return a == b;
}

}  // namespace

TEST_CASE("override values: null and booleans in any case", "[config][override]") {
  for (const char* text : {"null", "NULL", "Null", "nUlL"}) CHECK(value_of(text).is_null());
  for (const char* text : {"true", "True", "TRUE", "tRuE"}) CHECK(same(value_of(text), json(true)));
  for (const char* text : {"false", "False", "FALSE"}) CHECK(same(value_of(text), json(false)));
  // Words that only start like a keyword are strings (the longest token wins).
  CHECK(same(value_of("trueish"), json("trueish")));
  CHECK(same(value_of("nullable"), json("nullable")));
  CHECK(same(value_of("yes"), json("yes")));  // YAML 1.1's yes is not Hydra's boolean
}

TEST_CASE("override values: integers", "[config][override]") {
  CHECK(same(value_of("0"), json(0)));
  CHECK(same(value_of("42"), json(42)));
  CHECK(same(value_of("-20"), json(-20)));
  CHECK(same(value_of("+7"), json(7)));
  CHECK(same(value_of("1_000_000"), json(1000000)));
  CHECK(same(value_of("9223372036854775807"), json(INT64_MAX)));
  CHECK(same(value_of("-9223372036854775808"), json(INT64_MIN)));
  // Not integers: a leading zero splits the text into two tokens, so it is a string.
  CHECK(same(value_of("01"), json("01")));
  CHECK(same(value_of("1__0"), json("1__0")));
  CHECK(same(value_of("10abc"), json("10abc")));
  CHECK(same(value_of("1_"), json("1_")));
  CHECK_THAT(error_of([] { value_of("99999999999999999999999"); }), Contains("out of range"));
}

TEST_CASE("override values: floats", "[config][override]") {
  CHECK(same(value_of("1.5"), json(1.5)));
  CHECK(same(value_of("-20.0"), json(-20.0)));
  CHECK(same(value_of("1e-6"), json(1e-6)));
  CHECK(same(value_of("3e-6"), json(3e-6)));
  CHECK(same(value_of("1E5"), json(1e5)));
  CHECK(same(value_of("-2.5e+3"), json(-2.5e3)));
  CHECK(same(value_of(".5"), json(0.5)));
  CHECK(same(value_of("-.5"), json(-0.5)));
  CHECK(same(value_of("1."), json(1.0)));
  CHECK(same(value_of("1_0.5"), json(10.5)));
  CHECK(same(value_of("0.0"), json(0.0)));
  for (const char* text : {"inf", "INF", "Inf", "+inf"}) CHECK(value_of(text).get<double>() == INFINITY);
  CHECK(value_of("-inf").get<double>() == -INFINITY);
  for (const char* text : {"nan", "NaN", "NAN"}) CHECK(std::isnan(value_of(text).get<double>()));
  // Not floats.
  CHECK(same(value_of("1.2.3"), json("1.2.3")));
  CHECK(same(value_of("1e"), json("1e")));
  CHECK(same(value_of("info"), json("info")));
  CHECK(same(value_of("1.5e"), json("1.5e")));
}

TEST_CASE("override values: unquoted strings", "[config][override]") {
  CHECK(same(value_of("grpo"), json("grpo")));
  CHECK(same(value_of("token-mean"), json("token-mean")));
  CHECK(same(value_of("/data/gsm8k/train.parquet"), json("/data/gsm8k/train.parquet")));
  CHECK(same(value_of("Qwen/Qwen2.5-0.5B-Instruct"), json("Qwen/Qwen2.5-0.5B-Instruct")));
  CHECK(same(value_of("2024-01-01"), json("2024-01-01")));
  CHECK(same(value_of("a b"), json("a b")));                      // inner blanks are kept
  CHECK(same(value_of("  hello world  "), json("hello world")));  // outer blanks are not
  CHECK(same(value_of("x:y"), json("x:y")));
  CHECK(same(value_of("C:\\path"), json("C:\\path")));
  CHECK(same(value_of("50%"), json("50%")));
  CHECK(same(value_of("a\\,b\\[c\\]"), json("a,b[c]")));  // escapes for grammar characters
  CHECK(same(value_of("job\\{a\\=1\\}"), json("job{a=1}")));
  CHECK(same(value_of("a\\ b"), json("a b")));
  CHECK(same(value_of(""), json("")));          // key= is the empty string
  CHECK(same(value_of("实验"), json("实验")));  // UTF-8 text (a verlpp extension)
}

TEST_CASE("override values: quoted strings with escapes", "[config][override]") {
  CHECK(same(value_of("'hello there'"), json("hello there")));
  CHECK(same(value_of("\"a,b\""), json("a,b")));
  CHECK(same(value_of("'[1,2]'"), json("[1,2]")));
  CHECK(same(value_of("\"{a: 10} ${xyz}\""), json("{a: 10} ${xyz}")));
  CHECK(same(value_of("'1e-6'"), json("1e-6")));
  CHECK(same(value_of("\"True\""), json("True")));
  CHECK(same(value_of("\"null\""), json("null")));
  CHECK(same(value_of("''"), json("")));
  CHECK(same(value_of("\"'single' inside\""), json("'single' inside")));
  // Hydra's rule: a backslash run before a quote of the string's kind halves; others stay.
  CHECK(same(value_of(R"("escaped \"double quote\"")"), json(R"(escaped "double quote")")));
  CHECK(same(value_of(R"('escaped \'single quote\'')"), json("escaped 'single quote'")));
  CHECK(same(value_of(R"("the path is C:\\\"some folder\"\\")"), json(R"(the path is C:\"some folder"\)")));
  CHECK(same(value_of(R"('abc\\')"), json(R"(abc\)")));
  CHECK(same(value_of(R"("a\nb")"), json(R"(a\nb)")));  // no other escapes
  CHECK(parse_override("k='x'").value_quoted);
  CHECK_FALSE(parse_override("k=x").value_quoted);
}

TEST_CASE("override values: lists and dicts, typed and nested", "[config][override]") {
  CHECK(same(value_of("[]"), json::array()));
  CHECK(same(value_of("[1,2,3]"), json::array({1, 2, 3})));
  CHECK(same(value_of("[ a , 1.5 ,true, null ]"), json::array({"a", 1.5, true, nullptr})));
  CHECK(same(value_of("[a,[b,[c]]]"), json::parse(R"(["a",["b",["c"]]])")));
  CHECK(same(value_of("['a,b', \"c]d\", e]"), json::array({"a,b", "c]d", "e"})));
  CHECK(same(value_of("{}"), json::object()));
  CHECK(same(value_of("{a:10,b:20}"), json::parse(R"({"a":10,"b":20})")));
  CHECK(same(value_of("{k: v, k2: [1, 2], n: {x: null}}"), json::parse(R"({"k":"v","k2":[1,2],"n":{"x":null}})")));
  CHECK(same(value_of("{1: a, true: b}"), json::parse(R"({"1":"a","true":"b"})")));
  CHECK(same(value_of(R"({"quoted": 1})"), json::parse(R"({"quoted":1})")));  // JSON objects still parse
  CHECK(same(value_of(R"(["console","file"])"), json::array({"console", "file"})));
  CHECK(same(value_of("[${a.b}, x]"), json::array({"${a.b}", "x"})));
}

TEST_CASE("override values: interpolations stay text for the resolver", "[config][override]") {
  CHECK(same(value_of("${data.max_prompt_length}"), json("${data.max_prompt_length}")));
  CHECK(same(value_of("${oc.select:a.b,1}"), json("${oc.select:a.b,1}")));
  CHECK(same(value_of("ckpt/${trainer.project_name}/x"), json("ckpt/${trainer.project_name}/x")));
  CHECK(same(value_of("${a.${b}}"), json("${a.${b}}")));
}

TEST_CASE("override keys and actions", "[config][override]") {
  Override o = parse_override("a.b_c-d.$e=1");
  CHECK(o.action == OverrideAction::change);
  CHECK(o.key == "a.b_c-d.$e");
  CHECK((parse_override("+a=1").action == OverrideAction::add));
  CHECK((parse_override("++a=1").action == OverrideAction::add_or_change));
  Override del = parse_override("~a.b");
  CHECK(del.action == OverrideAction::remove);
  CHECK_FALSE(del.has_value);
  Override del_value = parse_override("~a.b=3");
  CHECK(del_value.has_value);
  CHECK(same(del_value.value, json(3)));
  CHECK(parse_override("a.0=x").key == "a.0");  // a list index
  CHECK(parse_override("k=  spaced").value_text == "spaced");
}

TEST_CASE("override errors name the override, the column and what was expected", "[config][override]") {
  CHECK_THAT(error_of([] { parse_override("no_equals_sign"); }),
             Contains("override 'no_equals_sign'") && Contains("column 15") && Contains("expected '='"));
  CHECK_THAT(error_of([] { parse_override("=3"); }), Contains("column 1") && Contains("expected a key"));
  CHECK_THAT(error_of([] { parse_override("a b=3"); }), Contains("column 2") && Contains("a key character"));
  CHECK_THAT(error_of([] { parse_override("a..b=3"); }), Contains("column 3") && Contains("empty one"));
  CHECK_THAT(error_of([] { parse_override("k=[1,2"); }), Contains("override 'k=[1,2'") && Contains("column 7") &&
                                                             Contains("',' or ']'") && Contains("end of the value"));
  CHECK(same(value_of("[1 2]"), json::array({"1 2"})));  // blanks join tokens into one string
  CHECK_THAT(error_of([] { parse_override("k={a 1}"); }), Contains("column 7") && Contains("':' after the dict key"));
  CHECK_THAT(error_of([] { parse_override("k='abc"); }), Contains("column 3") && Contains("closing '"));
  CHECK_THAT(error_of([] { parse_override("k=${a.b"); }), Contains("column 3") && Contains("'}' to close"));
  CHECK_THAT(error_of([] { parse_override("k=a]"); }), Contains("column 4") && Contains("end of the value"));
  CHECK_THAT(error_of([] { parse_override("k=~/data/x"); }),
             Contains("column 3") && Contains("'~' is not allowed") && Contains("quote the value"));
  CHECK_THAT(error_of([] { parse_override("k=a=b"); }), Contains("column 4"));
  CHECK_THAT(error_of([] { parse_override("k=a,b"); }), Contains("column 4") && Contains("sweep") && Contains("[a,b]"));
  CHECK_THAT(error_of([] { parse_override("k=choice(a,b)"); }), Contains("choice(...)"));
  CHECK_THAT(error_of([] { parse_override("k=a\"b\""); }), Contains("column 4"));
  CHECK(same(value_of("   "), json("")));  // '=' takes the blanks after it: the empty string
  CHECK_THAT(error_of([] { parse_override("db/mysql=x"); }), Contains("column 3") && Contains("config-group"));
  CHECK_THAT(error_of([] { parse_override("db@pkg=x"); }), Contains("config-group"));
  CHECK_THAT(error_of([] {
               parse_override(
                   "k=a\xff"
                   "b");
             }),
             Contains("at column 4: the byte 0xff is not UTF-8"));
  CHECK_THAT(error_of([] { parse_override("k=\xc3"); }), Contains("at column 3: the byte 0xc3 is not UTF-8"));
  CHECK_THAT(error_of([] { parse_override("k=" + std::string(100000, '[')); }), Contains("nested at most 512 levels"));
}

TEST_CASE("config overrides: Hydra's booleans, numbers and strings fit verl's keys", "[config][override]") {
  Config c = Config::defaults();
  c.apply_overrides({"actor_rollout_ref.model.use_remove_padding=True", "data.shuffle=False",
                     "actor_rollout_ref.actor.optim.lr=1e-6", "actor_rollout_ref.actor.entropy_coeff=0",
                     "data.train_batch_size=1e3", "trainer.experiment_name=2024", "trainer.project_name='007'"});
  CHECK(c.get<bool>("actor_rollout_ref.model.use_remove_padding") == true);
  CHECK(c.get<bool>("data.shuffle") == false);
  CHECK(c.get<double>("actor_rollout_ref.actor.optim.lr") == 1e-6);
  CHECK(c.get<double>("actor_rollout_ref.actor.entropy_coeff") == 0.0);
  CHECK(c.at("data.train_batch_size").is_number_integer());  // an integral float stored as an integer
  CHECK(c.get<int64_t>("data.train_batch_size") == 1000);
  CHECK(c.get<std::string>("trainer.experiment_name") == "2024");  // a string key takes the text
  CHECK(c.get<std::string>("trainer.project_name") == "007");
  CHECK_THROWS_WITH(c.apply_override("data.shuffle=1"), Contains("must be a boolean"));
  CHECK_THROWS_WITH(c.apply_override("data.shuffle=yes"), Contains("must be a boolean"));
  CHECK_THROWS_WITH(c.apply_override("data.train_batch_size=1.5"), Contains("must be an integer"));
  CHECK_THROWS_WITH(c.apply_override("algorithm.kl_ctrl=3"), Contains("must be an object"));
}

TEST_CASE("config overrides: strings where verl takes a list, and lists of files", "[config][override]") {
  Config c = Config::defaults();
  c.apply_override("trainer.logger=console");
  CHECK(c.at("trainer.logger") == json::array({"console"}));
  c.apply_override("trainer.logger=[console,file]");
  CHECK(c.at("trainer.logger") == json::array({"console", "file"}));
  c.apply_override("trainer.logger=['console']");
  CHECK(c.at("trainer.logger") == json::array({"console"}));
  c.apply_override("data.train_files=['/d/a.parquet','/d/b.parquet']");
  CHECK(c.at("data.train_files") == json::array({"/d/a.parquet", "/d/b.parquet"}));
  c.apply_override("data.train_files=[/d/a.parquet, /d/b.parquet]");
  CHECK(c.at("data.train_files") == json::array({"/d/a.parquet", "/d/b.parquet"}));
  c.apply_override("data.val_files=/d/test.parquet");
  CHECK(c.at("data.val_files") == json("/d/test.parquet"));
  c.apply_override("data.val_files=\"/d/with,comma.parquet\"");
  CHECK(c.at("data.val_files") == json("/d/with,comma.parquet"));
}

TEST_CASE("config overrides: + adds, ++ adds or changes, as Hydra", "[config][override]") {
  Config c = Config::defaults();
  // + into free-form sections, creating the sections on the way.
  c.apply_override("+actor_rollout_ref.model.override_config.attention_dropout=0.1");
  CHECK(c.get<double>("actor_rollout_ref.model.override_config.attention_dropout") == 0.1);
  c.apply_override("+actor_rollout_ref.model.override_config.rope.scaling={type: linear, factor: 2}");
  CHECK(c.get<std::string>("actor_rollout_ref.model.override_config.rope.scaling.type") == "linear");
  // + on a key that holds a value is refused, naming both ways out.
  CHECK_THAT(error_of([&] { c.apply_override("+actor_rollout_ref.model.override_config.attention_dropout=0.2"); }),
             Contains("already set (to 0.1)") && Contains("drop the +") &&
                 Contains("++actor_rollout_ref.model.override_config.attention_dropout=0.2"));
  CHECK_THAT(error_of([&] { c.apply_override("+data.train_batch_size=4"); }), Contains("already set (to 1024)"));
  // + on a null key sets it (Hydra's rule), with the type checks of a change.
  c.apply_override("+data.val_batch_size=16");
  CHECK(c.get<int64_t>("data.val_batch_size") == 16);
  // ++ changes or adds.
  c.apply_override("++actor_rollout_ref.model.override_config.attention_dropout=0.2");
  CHECK(c.get<double>("actor_rollout_ref.model.override_config.attention_dropout") == 0.2);
  c.apply_override("++actor_rollout_ref.model.override_config.new_key=x");
  CHECK(c.get<std::string>("actor_rollout_ref.model.override_config.new_key") == "x");
  c.apply_override("++data.train_batch_size=8");
  CHECK(c.get<int64_t>("data.train_batch_size") == 8);
  // A key verlpp does not know is refused with the nearest one, whatever the prefix.
  CHECK_THAT(error_of([&] { c.apply_override("+data.train_batch_sise=8"); }),
             Contains("unknown key 'data.train_batch_sise'") && Contains("did you mean 'data.train_batch_size'"));
  CHECK_THAT(error_of([&] { c.apply_override("++trainer.not_a_key=1"); }), Contains("unknown key 'trainer.not_a_key'"));
  // A dict value merges into a section; unknown keys inside it are still refused.
  c.apply_override("algorithm.kl_ctrl={type: adaptive, kl_coef: 0.01}");
  CHECK(c.get<std::string>("algorithm.kl_ctrl.type") == "adaptive");
  CHECK(c.get<double>("algorithm.kl_ctrl.kl_coef") == 0.01);
  CHECK(c.get<int64_t>("algorithm.kl_ctrl.horizon") == Config::defaults().get<int64_t>("algorithm.kl_ctrl.horizon"));
  CHECK_THAT(error_of([&] { c.apply_override("algorithm.kl_ctrl={tipe: fixed}"); }),
             Contains("unknown key 'algorithm.kl_ctrl.tipe'"));
  // A value is not a section.
  CHECK_THAT(error_of([&] { c.apply_override("+trainer.project_name.x=1"); }), Contains("not a section"));
  // verl's _target_ class names are accepted and change nothing; other classes are refused.
  const json before = c.tree();
  c.apply_override("actor_rollout_ref.actor._target_=verl.workers.config.FSDPActorConfig");
  CHECK(c.tree() == before);
  CHECK_THAT(error_of([&] { c.apply_override("actor_rollout_ref.actor._target_=my.Actor"); }),
             Contains("cannot instantiate Python classes"));
}

TEST_CASE("config overrides: ~ deletes, with a value only when it matches", "[config][override]") {
  Config c = Config::defaults();
  c.apply_override("+actor_rollout_ref.model.override_config.a=1");
  c.apply_override("+actor_rollout_ref.model.override_config.b=x");
  CHECK_THAT(error_of([&] { c.apply_override("~actor_rollout_ref.model.override_config.a=2"); }),
             Contains("its value is 1, not 2"));
  c.apply_override("~actor_rollout_ref.model.override_config.a=1");
  CHECK_FALSE(c.at("actor_rollout_ref.model.override_config").contains("a"));
  c.apply_override("~actor_rollout_ref.model.override_config.b");
  CHECK(c.at("actor_rollout_ref.model.override_config").empty());
  CHECK_THAT(error_of([&] { c.apply_override("~actor_rollout_ref.model.override_config.b"); }),
             Contains("cannot delete") && Contains("not in the config"));
  // A key verlpp reads cannot be deleted (it would be unset with no way to tell).
  CHECK_THAT(error_of([&] { c.apply_override("~trainer.total_epochs"); }),
             Contains("verlpp reads it") && Contains("trainer.total_epochs=null"));
}

TEST_CASE("config overrides: list entries by index", "[config][override]") {
  Config c = Config::defaults();
  c.apply_override("actor_rollout_ref.actor.optim.betas.1=0.95");
  CHECK(c.at("actor_rollout_ref.actor.optim.betas") == json::array({0.9, 0.95}));
  CHECK_THAT(error_of([&] { c.apply_override("actor_rollout_ref.actor.optim.betas.5=0.95"); }),
             Contains("the list has 2 entries"));
}
