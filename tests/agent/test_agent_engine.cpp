// The agent loop over the rollout engine (SessionTurnSource): a trajectory's first turn is the
// engine's generate() output for its prompt, bit for bit, and its log-probs are the engine's.
#include <verlpp/agent/tool_agent_loop.hpp>
#include <verlpp/rollout/engine.hpp>
#include <verlpp/rollout/generation_session.hpp>

#include "../rollout/engine_fixture.hpp"

#include <catch2/catch.hpp>

using namespace verlpp;
using namespace verlpp::agent;

TEST_CASE("agent loop on the engine: single-turn trajectories are generate()'s samples", "[agent_loop][engine]") {
  const model::Tokenizer tokenizer =
      model::Tokenizer::from_file(std::string(VERLPP_SOURCE_DIR) + "/examples/tiny/tokenizer.json");
  const auto chat = model::ChatTemplate::builtin("qwen2.5");
  const ToolSegmentFormat format(tokenizer, chat);
  rollout::SamplingParams sampling;
  sampling.temperature = 0.8;
  sampling.seed = std::nullopt;
  const int64_t response_length = 12;

  std::vector<rollout::GenerateRequest> requests;
  std::vector<AgentSample> samples;
  for (int64_t i = 0; i < 5; ++i) {
    rollout::GenerateRequest request;
    request.prompt_ids = test::prompt_of(4 + 3 * i, i);
    request.sampling = sampling;
    request.sampling.max_new_tokens = response_length;
    requests.push_back(request);
    AgentSample sample;
    sample.prompt_ids = request.prompt_ids;
    sample.agent_name = i % 2 ? kToolAgent : kSingleTurnAgent;  // no calls in random text: both end after a turn
    samples.push_back(sample);
  }
  rollout::RolloutEngine reference(test::tiny_model(5), rollout::EngineOptions{});
  const std::vector<rollout::GenerateOutput> expected = reference.generate(requests);

  rollout::RolloutEngine engine(test::tiny_model(5), rollout::EngineOptions{});
  std::vector<Trajectory> out;
  {
    rollout::GenerationSession session(engine);
    SessionTurnSource source(session, sampling);
    const ToolSet tools = parse_tool_config(
        "tools:\n  - class_name: verlpp.tools.Calculator\n    tool_schema: {function: {name: calculator}}\n", "t");
    AgentLoopSettings settings;
    settings.response_length = response_length;
    out = run_agent_loop(source, samples, tools, format, tokenizer, settings);
    CHECK(session.num_parked() == 0);
    CHECK(session.num_free_blocks() > 0);
  }
  REQUIRE(out.size() == expected.size());
  for (size_t i = 0; i < out.size(); ++i) {
    INFO("trajectory " << i);
    CHECK(out[i].response_ids == expected[i].token_ids);
    CHECK(out[i].response_logprobs == expected[i].logprobs);
    CHECK(out[i].response_mask == std::vector<int8_t>(expected[i].token_ids.size(), 1));
    CHECK(out[i].assistant_turns == 1);
  }
}
