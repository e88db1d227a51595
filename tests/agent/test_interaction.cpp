// Interactions: verl's interaction config read as verl's registry reads it, verl's
// Gsm8kInteraction's replies, and the loop's layout with interaction turns against vectors
// derived by hand from verl's ToolAgentLoop (_handle_interacting_state) and the Qwen2.5 template.
#include <verlpp/agent/interaction.hpp>
#include <verlpp/agent/tool_agent_loop.hpp>
#include <verlpp/core/error.hpp>
#include <verlpp/model/chat_template.hpp>

#include "../error_of.hpp"
#include "scripted_source.hpp"

#include <catch2/catch.hpp>

#include <mutex>

using namespace verlpp;
using namespace verlpp::agent;
using namespace verlpp::agent_test;
using Catch::Matchers::Contains;
using json = nlohmann::json;

namespace {

// verl's examples/sglang_multiturn/config/interaction_config/gsm8k_interaction_config.yaml.
const char* kGsm8kConfig = R"(interaction:
  - name: "gsm8k"
    class_name: "verl.interactions.gsm8k_interaction.Gsm8kInteraction"
    config: {}
)";

const std::string kWrong = "Your response is incorrect! You need to reflect on your answer and try again.";
const std::string kRight = "Your response is correct!";

json conversation(std::initializer_list<std::pair<const char*, const char*>> turns) {
  json out = json::array();
  for (const auto& [role, content] : turns) out.push_back({{"role", role}, {"content", content}});
  return out;
}

// Records the conversations it is asked about; replies "ok" and ends the trajectory, no score.
class RecordingInteraction : public Interaction {
 public:
  explicit RecordingInteraction(const std::string& name) : Interaction(name) {}
  InteractionReply respond(const json& messages, const json& kwargs) const override {
    std::lock_guard<std::mutex> lock(mutex);
    seen.push_back(messages);
    if (kwargs.value("fail", false)) throw Error("recording interaction", "the grader is down");
    return {true, "ok", std::nullopt};
  }
  static inline std::mutex mutex;
  static inline std::vector<json> seen;
};

const bool registered = interaction_classes().add("tests.RecordingInteraction",
                                                  [](const std::string& name, const json&, const std::string&) {
                                                    return std::make_unique<RecordingInteraction>(name);
                                                  });

TokenIds user_segment(const std::string& content) {
  return ids_of("\n<|im_start|>user\n" + content + "<|im_end|>\n<|im_start|>assistant\n");
}

AgentSample gsm8k_sample(const std::string& question, const std::string& truth) {
  AgentSample s;
  s.prompt_ids = ids_of("<|im_start|>user\n" + question + "<|im_end|>\n<|im_start|>assistant\n");
  s.agent_name = kToolAgent;
  s.messages = conversation({{"user", question.c_str()}});
  s.interaction_kwargs = {{"name", "gsm8k"}, {"query", question}, {"ground_truth", truth}};
  return s;
}

}  // namespace

TEST_CASE("interaction config: verl's file, its default names, and errors naming the entry", "[interaction]") {
  REQUIRE(registered);
  const InteractionSet set = parse_interaction_config(kGsm8kConfig, "interaction.yaml");
  CHECK(set.names() == std::vector<std::string>{"gsm8k"});
  CHECK(default_interaction_name("verl.interactions.gsm8k_interaction.Gsm8kInteraction") == "gsm8k");
  CHECK(default_interaction_name("my_pkg.WeatherInteraction") == "weather");
  CHECK(default_interaction_name("my_pkg.Grader") == "grader");
  const InteractionSet unnamed = parse_interaction_config(
      "interaction:\n  - class_name: verl.interactions.gsm8k_interaction.Gsm8kInteraction\n", "u.yaml");
  CHECK(unnamed.names() == std::vector<std::string>{"gsm8k"});

  CHECK_THROWS_WITH(parse_interaction_config("interaction:\n"
                                             "  - class_name: verl.interactions.gsm8k_interaction.Gsm8kInteraction\n"
                                             "  - name: gsm8k\n"
                                             "    class_name: tests.RecordingInteraction\n",
                                             "d.yaml"),
                    Contains("d.yaml: interaction[1]") && Contains("a second interaction named 'gsm8k'"));
  CHECK_THROWS_WITH(parse_interaction_config("interaction:\n  - name: x\n    class_name: my_pkg.Mine\n", "c.yaml"),
                    Contains("c.yaml: interaction[0].class_name") && Contains("'my_pkg.Mine'") &&
                        Contains("verl.interactions.gsm8k_interaction.Gsm8kInteraction"));
  CHECK_THROWS_WITH(parse_interaction_config("tools: []\n", "t.yaml"),
                    Contains("t.yaml") && Contains("top-level 'interaction' list"));
  CHECK_THROWS_WITH(parse_interaction_config("interaction: []\n", "e.yaml"), Contains("e.yaml") && Contains("empty"));
  CHECK_THROWS_WITH(parse_interaction_config("interaction:\n  - name: x\n", "m.yaml"),
                    Contains("m.yaml: interaction[0]") && Contains("'class_name'"));
  CHECK_THROWS_WITH(load_interaction_config("/tmp/verlpp-no-such-interaction.yaml"),
                    Contains("/tmp/verlpp-no-such-interaction.yaml"));

  CHECK(&interaction_of(set, {{"name", "gsm8k"}}, "row 1") == set.find("gsm8k"));
  CHECK_THROWS_WITH(
      interaction_of(set, json(), "rows.jsonl:4"),
      Contains("rows.jsonl:4") && Contains("interaction_kwargs needs a string 'name'") && Contains("gsm8k"));
  CHECK_THROWS_WITH(interaction_of(set, {{"name", "weather"}}, "rows.jsonl:5"),
                    Contains("rows.jsonl:5") && Contains("'weather' names no configured interaction"));
}

TEST_CASE("Gsm8kInteraction replies as verl's: the last assistant turn, flexible gsm8k, correct ends it",
          "[interaction]") {
  const InteractionSet set = parse_interaction_config(kGsm8kConfig, "interaction.yaml");
  const Interaction& gsm8k = *set.find("gsm8k");
  const json truth = {{"name", "gsm8k"}, {"ground_truth", "72"}};

  InteractionReply r = gsm8k.respond(conversation({{"user", "q"}, {"assistant", "So she has 72 clips."}}), truth);
  CHECK(r.terminate);
  CHECK(r.content == kRight);
  REQUIRE(r.reward);
  CHECK(*r.reward == 1.0);

  r = gsm8k.respond(conversation({{"user", "q"}, {"assistant", "#### 70"}}), truth);
  CHECK_FALSE(r.terminate);
  CHECK(r.content == kWrong);
  CHECK(*r.reward == 0.0);
  // Only the last assistant turn counts.
  r = gsm8k.respond(conversation({{"user", "q"}, {"assistant", "72"}, {"user", kWrong.c_str()}, {"assistant", "71"}}),
                    truth);
  CHECK_FALSE(r.terminate);
  // The flexible rule takes the last number as written (verl drops commas only in its strict rule).
  CHECK(gsm8k.respond(conversation({{"assistant", "first 5, then 1,234"}}), {{"ground_truth", "1,234"}}).terminate);
  CHECK_FALSE(
      gsm8k.respond(conversation({{"assistant", "first 5, then 1,234"}}), {{"ground_truth", "1234"}}).terminate);
  // No assistant turn, or no ground truth: never correct.
  CHECK_FALSE(gsm8k.respond(conversation({{"user", "72"}}), truth).terminate);
  CHECK_FALSE(gsm8k.respond(conversation({{"assistant", "72"}}), {{"name", "gsm8k"}}).terminate);
}

TEST_CASE("interaction turns: ids, mask, log-probs, counts and scores as verl's loop builds them", "[interaction]") {
  const InteractionSet interactions = parse_interaction_config(kGsm8kConfig, "interaction.yaml");
  const ToolSet no_tools;
  const auto qwen25 = model::ChatTemplate::builtin("qwen2.5");
  const ToolSegmentFormat format(tiny_tokenizer(), qwen25);
  const TokenIds im_end = ids_of("<|im_end|>");
  const TokenIds wrong = cat({ids_of("It is 5."), im_end}), right = cat({ids_of("#### 6"), im_end});

  AgentLoopSettings settings;
  settings.response_length = 200;
  std::vector<AgentSample> samples = {gsm8k_sample("2+4?", "6"), gsm8k_sample("2+4?", "6")};
  samples[1].agent_name = kSingleTurnAgent;  // no interaction for a single-turn row
  samples[1].interaction_kwargs = nullptr;
  ScriptedSource source({{wrong, right}, {wrong}});
  AgentLoopStats stats;
  std::vector<Trajectory> out =
      run_agent_loop(source, samples, no_tools, format, tiny_tokenizer(), settings, &stats, &interactions);
  REQUIRE(out.size() == 2);
  const TokenIds again = user_segment(kWrong), done = user_segment(kRight);
  const Trajectory& t = out[0];
  CHECK(t.response_ids == cat({wrong, again, right, done}));
  std::vector<int8_t> mask(wrong.size(), 1);
  mask.insert(mask.end(), again.size(), 0);
  mask.insert(mask.end(), right.size(), 1);
  mask.insert(mask.end(), done.size(), 0);
  CHECK(t.response_mask == mask);
  // Step 1 emits sample 0's first turn, then sample 1's; step 2 sample 0's second.
  std::vector<float> logprobs = scripted_logprobs(0, wrong.size());
  logprobs.insert(logprobs.end(), again.size(), 0.0f);
  const std::vector<float> second = scripted_logprobs(2 * wrong.size(), right.size());
  logprobs.insert(logprobs.end(), second.begin(), second.end());
  logprobs.insert(logprobs.end(), done.size(), 0.0f);
  CHECK(t.response_logprobs == logprobs);
  CHECK(t.assistant_turns == 2);
  CHECK(t.user_turns == 2);
  CHECK(t.num_turns == 5);
  CHECK(t.tool_calls == 0);
  CHECK(t.turn_scores == std::vector<double>{0.0, 1.0});
  CHECK(t.termination == Termination::kInteractionDone);
  REQUIRE(source.resumes.size() == 1);  // the final reply is appended, not generated after
  CHECK(source.resumes[0].second == again);
  CHECK(out[1].response_ids == wrong);
  CHECK(out[1].termination == Termination::kNoToolCall);
  CHECK(stats.interaction_turns == 2);

  SECTION("max_user_turns is checked after the next assistant turn, as verl does") {
    settings.max_user_turns = 1;
    ScriptedSource limited({{wrong, wrong}});
    out = run_agent_loop(limited, {gsm8k_sample("2+4?", "6")}, no_tools, format, tiny_tokenizer(), settings, nullptr,
                         &interactions);
    CHECK(out[0].response_ids == cat({wrong, again, wrong}));
    CHECK(out[0].termination == Termination::kMaxUserTurns);
  }
  SECTION("a reply is appended past the budget, then the response is cut") {
    settings.response_length = int64_t(wrong.size()) + 3;
    ScriptedSource tight({{wrong}});
    out = run_agent_loop(tight, {gsm8k_sample("2+4?", "6")}, no_tools, format, tiny_tokenizer(), settings, nullptr,
                         &interactions);
    CHECK(out[0].response_ids == cat({wrong, TokenIds(again.begin(), again.begin() + 3)}));
    CHECK(out[0].response_mask.size() == wrong.size() + 3);
    CHECK(out[0].response_mask.back() == 0);
    CHECK(out[0].termination == Termination::kResponseLength);
    CHECK(tight.resumes.empty());
  }
}

TEST_CASE("interactions with tools: calls first, the interaction reads the whole conversation", "[interaction]") {
  const ToolSet tools = parse_tool_config(R"(tools:
  - class_name: verlpp.tools.Calculator
    tool_schema: {type: function, function: {name: calculator, description: exact arithmetic,
                  parameters: {type: object, properties: {expression: {type: string}}, required: [expression]}}}
)",
                                          "tools.yaml");
  const InteractionSet interactions =
      parse_interaction_config("interaction:\n  - name: rec\n    class_name: tests.RecordingInteraction\n", "i.yaml");
  const auto qwen25 = model::ChatTemplate::builtin("qwen2.5");
  const ToolSegmentFormat format(tiny_tokenizer(), qwen25);
  const TokenIds im_end = ids_of("<|im_end|>");
  const std::string call_text =
      "<tool_call>\n{\"name\": \"calculator\", \"arguments\": {\"expression\": \"2+4\"}}\n</tool_call>";
  const TokenIds call = cat({ids_of(call_text), im_end}), answer = cat({ids_of("#### 6"), im_end});
  AgentSample sample = gsm8k_sample("2+4?", "6");
  sample.interaction_kwargs = {{"name", "rec"}};
  ScriptedSource source({{call, answer}});
  AgentLoopSettings settings;
  settings.response_length = 300;
  RecordingInteraction::seen.clear();
  std::vector<Trajectory> out =
      run_agent_loop(source, {sample}, tools, format, tiny_tokenizer(), settings, nullptr, &interactions);
  const TokenIds tool = ids_of(
      "\n<|im_start|>user\n<tool_response>\n6\n</tool_response><|im_end|>\n"
      "<|im_start|>assistant\n");
  CHECK(out[0].response_ids == cat({call, tool, answer, user_segment("ok")}));
  CHECK(out[0].tool_calls == 1);
  CHECK(out[0].user_turns == 2);
  CHECK(out[0].turn_scores.empty());  // the reply gave no score
  CHECK(out[0].termination == Termination::kInteractionDone);
  // verl's messages: the prompt, each turn decoded without special tokens, the tool's reply.
  REQUIRE(RecordingInteraction::seen.size() == 1);
  CHECK(RecordingInteraction::seen[0] ==
        conversation({{"user", "2+4?"}, {"assistant", call_text.c_str()}, {"tool", "6"}, {"assistant", "#### 6"}}));

  // Refusals: a tool_agent sample whose kwargs name nothing, or an interaction that throws.
  AgentSample nameless = sample;
  nameless.interaction_kwargs = nullptr;
  ScriptedSource unused({{call}});
  CHECK_THROWS_WITH(
      run_agent_loop(unused, {nameless}, tools, format, tiny_tokenizer(), settings, nullptr, &interactions),
      Contains("sample 0") && Contains("interaction_kwargs needs a string 'name'") && Contains("rec"));
  AgentSample failing = sample;
  failing.interaction_kwargs = {{"name", "rec"}, {"fail", true}};
  ScriptedSource once({{answer}});
  CHECK_THROWS_WITH(run_agent_loop(once, {failing}, tools, format, tiny_tokenizer(), settings, nullptr, &interactions),
                    Contains("sample 0") && Contains("interaction 'rec'") && Contains("the grader is down"));
  // Without interactions, a tool_agent sample needs tools.
  ScriptedSource none({{answer}});
  CHECK_THROWS_WITH(run_agent_loop(none, {sample}, ToolSet(), format, tiny_tokenizer(), settings),
                    Contains("sample 0") && Contains("needs tools or an interaction"));
}
