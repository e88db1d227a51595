// The data side of agent-loop rollouts against plain loops and texts rendered by hand: a
// trajectory's [prompt | response] layout (mask 0 inside the response, attention over all of
// it, verl's cumsum positions), the outcome score on the last response token past interior 0s,
// which loop a dataset row runs (agent_name, the default, verl's agent loop YAML), tool_agent
// prompts rendered with the tools' schemas, and the errors that name the row or entry.
#include <verlpp/agent/agent_loop_config.hpp>
#include <verlpp/controller/dataset.hpp>
#include <verlpp/core/error.hpp>
#include <verlpp/data/records.hpp>
#include <verlpp/data/rl_batch.hpp>

#include <ATen/ops/from_blob.h>

// Catch2 last: LibTorch 2.x headers define glog's CHECK, which would otherwise replace Catch's.
#include <catch2/catch.hpp>

using namespace verlpp;
using namespace verlpp::controller;
using Catch::Contains;
using json = nlohmann::json;

namespace {

const model::Tokenizer& tokenizer() {
  static const model::Tokenizer t = model::Tokenizer::from_file(std::string(VERLPP_SOURCE_DIR) + "/examples/tiny");
  return t;
}

// A calculator schema in verl's tool config shape (the function's name, description, parameters).
nlohmann::ordered_json calculator_schema() {
  return nlohmann::ordered_json::parse(R"({"type": "function", "function": {"name": "calc",
      "description": "Evaluates an arithmetic expression", "parameters": {"type": "object",
      "properties": {"expression": {"type": "string"}}, "required": ["expression"]}}})");
}

}  // namespace

TEST_CASE("append_trajectories: masks inside the response, attention over all of it, cumsum positions",
          "[agent_rollout]") {
  const TokenId pad = 349;
  const std::vector<TokenIds> prompt_ids = {{10, 11, 12}, {20}, {30, 31}};
  const data::Batch prompts = data::collate_prompt_ids(prompt_ids, pad);
  // Row 0: the model's 2 tokens, a 3-token tool segment, the model's 1; row 1: no tool; row 2: empty.
  const std::vector<TokenIds> responses = {{40, 41, 50, 51, 52, 42}, {60, 61}, {}};
  const std::vector<std::vector<float>> masks = {{1, 1, 0, 0, 0, 1}, {1, 1}, {}};
  const std::vector<std::vector<float>> log_probs = {{-0.5f, -1.0f, 0, 0, 0, -2.0f}, {-0.25f, -0.75f}, {}};
  const int64_t R = 7;
  const data::Batch b = data::append_trajectories(prompts, responses, masks, log_probs, R, pad);
  const int64_t P = 3;
  REQUIRE(b.tensor("input_ids").sizes() == at::IntArrayRef({3, P + R}));
  for (int64_t row = 0; row < 3; ++row) {
    const TokenIds& prompt = prompt_ids[size_t(row)];
    const TokenIds& resp = responses[size_t(row)];
    // The row as a plain list: left padding, prompt, response, right padding.
    std::vector<int64_t> ids, attention, mask, positions;
    for (int64_t k = 0; k < P - int64_t(prompt.size()); ++k) ids.push_back(pad), attention.push_back(0);
    for (TokenId t : prompt) ids.push_back(t), attention.push_back(1);
    for (size_t k = 0; k < size_t(R); ++k) {
      const bool real = k < resp.size();
      ids.push_back(real ? resp[k] : pad);
      attention.push_back(real ? 1 : 0);
      mask.push_back(real ? int64_t(masks[size_t(row)][k]) : 0);
    }
    int64_t seen = 0;
    for (int64_t a : attention) {
      seen += a;
      positions.push_back(std::max<int64_t>(seen - 1, 0));
    }
    for (int64_t k = 0; k < P + R; ++k) {
      CHECK(b.tensor("input_ids")[row][k].item<int64_t>() == ids[size_t(k)]);
      CHECK(b.tensor("attention_mask")[row][k].item<int64_t>() == attention[size_t(k)]);
      CHECK(b.tensor("position_ids")[row][k].item<int64_t>() == positions[size_t(k)]);
    }
    for (int64_t k = 0; k < R; ++k) {
      const bool real = k < int64_t(resp.size());
      CHECK(b.tensor("responses")[row][k].item<int64_t>() == ids[size_t(P + k)]);
      CHECK(b.tensor("response_mask")[row][k].item<float>() == float(mask[size_t(k)]));
      CHECK(b.tensor("rollout_log_probs")[row][k].item<float>() == (real ? log_probs[size_t(row)][size_t(k)] : 0.0f));
    }
  }
  // The response's attention and lengths count the tool segment; the mask does not.
  const at::Tensor lengths = data::response_lengths(b), model_tokens = b.tensor("response_mask").sum(1);
  const int64_t expected_lengths[] = {6, 2, 0};
  const float expected_model_tokens[] = {3, 2, 0};
  for (int64_t row = 0; row < 3; ++row) {
    CHECK(lengths[row].item<int64_t>() == expected_lengths[row]);
    CHECK(model_tokens[row].item<float>() == expected_model_tokens[row]);
  }

  CHECK_THROWS_WITH(data::append_trajectories(prompts, responses, {{1, 1}, {1, 1}, {}}, log_probs, R, pad),
                    Contains("row 0") && Contains("2 mask values for a response of 6 tokens"));
  CHECK_THROWS_WITH(
      data::append_trajectories(prompts, responses, {{1, 1, 0, 0.5f, 0, 1}, {1, 1}, {}}, log_probs, R, pad),
      Contains("row 0") && Contains("0.5") && Contains("token 3"));
  CHECK_THROWS_WITH(data::append_trajectories(prompts, responses, masks, log_probs, 5, pad), Contains("row 0"));
}

TEST_CASE("outcome scores land on the last response token, past a mask's interior 0s", "[agent_rollout]") {
  // Row 0 ends with a model token after a tool segment; row 1 ends in 0s (the last 1 is k = 1);
  // row 2 is empty and gets no score.
  std::vector<float> valid = {1, 1, 0, 0, 1, 0, 0,  //
                              1, 1, 0, 0, 0, 0, 0,  //
                              0, 0, 0, 0, 0, 0, 0};
  const at::Tensor v = at::from_blob(valid.data(), {3, 7}, at::TensorOptions().dtype(at::kFloat)).clone();
  const at::Tensor scores = data::outcome_token_scores(v, {2.5, -1.0, 7.0});
  for (int64_t row = 0; row < 3; ++row)
    for (int64_t k = 0; k < 7; ++k) {
      const double expected = row == 0 && k == 4 ? 2.5 : row == 1 && k == 1 ? -1.0 : 0.0;
      CHECK(scores[row][k].item<double>() == expected);
    }
  CHECK_THROWS_WITH(data::outcome_token_scores(v, {1.0}), Contains("1 scores for 3 rows"));
}

TEST_CASE("agent loop names: the built-ins, verl's YAML entries, errors naming the entry", "[agent_rollout]") {
  agent::AgentLoopNames names;
  CHECK(names.loop_of("single_turn_agent", "here") == agent::kSingleTurnAgent);
  CHECK(names.loop_of("tool_agent", "here") == agent::kToolAgent);
  names.add_config(R"(
- name: math_expression
  _target_: verl.experimental.agent_loop.tool_agent_loop.ToolAgentLoop
- name: plain
  _target_: verl.experimental.agent_loop.single_turn_agent_loop.SingleTurnAgentLoop
)",
                   "loops.yaml");
  CHECK(names.loop_of("math_expression", "here") == agent::kToolAgent);
  CHECK(names.loop_of("plain", "here") == agent::kSingleTurnAgent);
  CHECK_THROWS_WITH(
      names.loop_of("react_agent", "data.jsonl:3: agent_name"),
      Contains("data.jsonl:3") && Contains("'react_agent'") && Contains("math_expression") && Contains("tool_agent"));
  CHECK_THROWS_WITH(names.add_config("- name: mine\n  _target_: my_pkg.MyAgentLoop\n", "custom.yaml"),
                    Contains("custom.yaml: [0]") && Contains("my_pkg.MyAgentLoop") && Contains("Python"));
  CHECK_THROWS_WITH(names.add_config("- name: a\n  _target_: verl.experimental.agent_loop.ToolAgentLoop\n"
                                     "- name: a\n  _target_: verl.experimental.agent_loop.ToolAgentLoop\n",
                                     "twice.yaml"),
                    Contains("twice.yaml: [1]") && Contains("a second agent loop named 'a'"));
  CHECK_THROWS_WITH(names.add_config("- _target_: verl.experimental.agent_loop.ToolAgentLoop\n", "noname.yaml"),
                    Contains("noname.yaml: [0]") && Contains("'name'"));
  CHECK_THROWS_WITH(names.add_config("name: a\n", "map.yaml"), Contains("map.yaml") && Contains("list"));
  // A failed file adds nothing.
  CHECK_THROWS(names.loop_of("mine", "here"));
}

TEST_CASE("dataset rows: agent_name picks the loop, tool_agent prompts carry the tools", "[agent_rollout]") {
  const std::string path = "/tmp/verlpp-agent-rows.jsonl";
  const json question = json::array({{{"role", "user"}, {"content", "12*34?"}}});
  data::write_jsonl(path,
                    {
                        {{"prompt", question},
                         {"data_source", "calc"},
                         {"reward_model", {{"ground_truth", "408"}}},
                         {"agent_name", "tool_agent"},
                         {"extra_info", {{"tools_kwargs", {{"calc", {{"create_kwargs", {{"x", 1}}}}}}}}}},
                        {{"prompt", question}, {"data_source", "calc"}, {"reward_model", {{"ground_truth", "408"}}}},
                        {{"prompt", question},
                         {"data_source", "calc"},
                         {"reward_model", {{"ground_truth", "408"}}},
                         {"agent_name", "single_turn_agent"}},
                    });
  const model::ChatTemplate qwen25 = model::ChatTemplate::builtin("qwen2.5");
  agent::AgentLoopNames names;
  DatasetOptions options;
  options.max_prompt_length = 4096;
  options.agent_loops = &names;
  options.tool_schemas = {calculator_schema()};
  options.default_agent_name = "tool_agent";
  const PromptDataset data = PromptDataset::load({path}, tokenizer(), qwen25, options);
  REQUIRE(data.size() == 3);
  model::ChatOptions with_tools;
  with_tools.tools = options.tool_schemas;
  const TokenIds with = tokenizer().encode(qwen25.render({{"user", "12*34?"}}, with_tools));
  const TokenIds without = tokenizer().encode(qwen25.render({{"user", "12*34?"}}, model::ChatOptions{}));
  CHECK(with != without);
  CHECK(data[0].agent_loop == agent::kToolAgent);
  CHECK(data[0].prompt_ids == with);
  CHECK(data[0].tools_kwargs == json{{"calc", {{"create_kwargs", {{"x", 1}}}}}});
  CHECK(data[1].agent_name == "tool_agent");  // no column: the default loop
  CHECK(data[1].prompt_ids == with);
  CHECK(data[1].tools_kwargs == json::object());
  CHECK(data[2].agent_loop == agent::kSingleTurnAgent);
  CHECK(data[2].prompt_ids == without);

  const data::Batch b = collate_prompts(data, {2, 0}, 349);
  CHECK(b.column("agent_name") == std::vector<json>{"single_turn_agent", "tool_agent"});
  CHECK(b.column("agent_loop") == std::vector<json>{agent::kSingleTurnAgent, agent::kToolAgent});
  CHECK(b.column("tools_kwargs")[1] == data[0].tools_kwargs);

  // Without an agent loop table every row is single-turn and the column is not read.
  DatasetOptions plain;
  plain.max_prompt_length = 4096;
  const PromptDataset single = PromptDataset::load({path}, tokenizer(), qwen25, plain);
  CHECK(single[0].agent_loop == agent::kSingleTurnAgent);
  CHECK(single[0].prompt_ids == without);

  // A tool_agent row without tools, an unknown name, a non-string name, tools_kwargs not an object.
  DatasetOptions no_tools = options;
  no_tools.tool_schemas.clear();
  CHECK_THROWS_WITH(PromptDataset::load({path}, tokenizer(), qwen25, no_tools),
                    Contains(path + ":1") && Contains("tool_agent") && Contains("multi_turn.tool_config_path"));
  data::write_jsonl(path, {{{"prompt", question},
                            {"data_source", "calc"},
                            {"reward_model", {{"ground_truth", "408"}}},
                            {"agent_name", "react"}}});
  CHECK_THROWS_WITH(PromptDataset::load({path}, tokenizer(), qwen25, options),
                    Contains(path + ":1") && Contains("'react' is not a known agent loop"));
  data::write_jsonl(path, {{{"prompt", question},
                            {"data_source", "calc"},
                            {"reward_model", {{"ground_truth", "408"}}},
                            {"agent_name", 3}}});
  CHECK_THROWS_WITH(PromptDataset::load({path}, tokenizer(), qwen25, options),
                    Contains(path + ":1") && Contains("'agent_name' must be a string"));
  data::write_jsonl(path, {{{"prompt", question},
                            {"data_source", "calc"},
                            {"reward_model", {{"ground_truth", "408"}}},
                            {"extra_info", {{"tools_kwargs", "calc"}}}}});
  CHECK_THROWS_WITH(PromptDataset::load({path}, tokenizer(), qwen25, options),
                    Contains(path + ":1") && Contains("'extra_info.tools_kwargs' must be an object"));
  std::remove(path.c_str());
}

TEST_CASE("dataset rows: interaction_kwargs reach the batch; with interactions a tool_agent row must name one",
          "[agent_rollout]") {
  const std::string path = "/tmp/verlpp-agent-interaction-rows.jsonl";
  const json question =
      json::array({{{"role", "system"}, {"content", "Be brief."}}, {{"role", "user"}, {"content", "2+4?"}}});
  const json kwargs = {{"name", "gsm8k"}, {"query", "2+4?"}, {"ground_truth", "6"}};
  data::write_jsonl(path, {{{"prompt", question},
                            {"data_source", "calc"},
                            {"agent_name", "tool_agent"},
                            {"extra_info", {{"interaction_kwargs", kwargs}}}}});
  const agent::InteractionSet interactions = agent::parse_interaction_config(
      "interaction:\n  - name: gsm8k\n    class_name: verl.interactions.gsm8k_interaction.Gsm8kInteraction\n",
      "i.yaml");
  const model::ChatTemplate qwen25 = model::ChatTemplate::builtin("qwen2.5");
  agent::AgentLoopNames names;
  DatasetOptions options;
  options.max_prompt_length = 4096;
  options.agent_loops = &names;
  options.interactions = &interactions;  // no tools: an interaction alone drives tool_agent rows
  const PromptDataset data = PromptDataset::load({path}, tokenizer(), qwen25, options);
  CHECK(data[0].interaction_kwargs == kwargs);
  CHECK(data[0].prompt_ids == tokenizer().encode(qwen25.render({{"system", "Be brief."}, {"user", "2+4?"}}, {})));
  const data::Batch b = collate_prompts(data, {0}, 349);
  CHECK(b.column("interaction_kwargs")[0] == kwargs);
  CHECK(b.column("raw_prompt")[0] == question);

  data::write_jsonl(path, {{{"prompt", question}, {"data_source", "calc"}, {"agent_name", "tool_agent"}},
                           {{"prompt", question},
                            {"data_source", "calc"},
                            {"agent_name", "tool_agent"},
                            {"extra_info", {{"interaction_kwargs", {{"name", "weather"}}}}}}});
  CHECK_THROWS_WITH(PromptDataset::load({path}, tokenizer(), qwen25, options),
                    Contains(path + ":1") && Contains("interaction_kwargs needs a string 'name'"));
  data::write_jsonl(path, {{{"prompt", question},
                            {"data_source", "calc"},
                            {"agent_name", "tool_agent"},
                            {"extra_info", {{"interaction_kwargs", {{"name", "weather"}}}}}}});
  CHECK_THROWS_WITH(PromptDataset::load({path}, tokenizer(), qwen25, options),
                    Contains(path + ":1") && Contains("'weather' names no configured interaction"));
  // SFT rows run no loop: their kwargs are not checked.
  DatasetOptions sft = options;
  sft.response_key = "response";
  data::write_jsonl(path,
                    {{{"prompt", question}, {"data_source", "calc"}, {"agent_name", "tool_agent"}, {"response", "6"}}});
  CHECK(PromptDataset::load({path}, tokenizer(), qwen25, sft).size() == 1);
  // Neither tools nor interactions: the row is refused naming both keys.
  DatasetOptions neither = options;
  neither.interactions = nullptr;
  CHECK_THROWS_WITH(PromptDataset::load({path}, tokenizer(), qwen25, neither),
                    Contains(path + ":1") && Contains("multi_turn.tool_config_path") &&
                        Contains("multi_turn.interaction_config_path"));
  std::remove(path.c_str());
}
