// GenerationSession (the engine's incremental interface) against the naive full-recompute
// generator and an fp64 full forward: a turn resumed after appended tokens continues exactly
// as a fresh generation over the whole context would, whether its KV blocks were kept (only the
// appended tokens are computed), taken back by the pool (the context is recomputed) or shared
// with sibling samples; other sequences keep decoding meanwhile; and the session's misuse is
// refused with Errors that name the sequence.
#include <verlpp/core/error.hpp>
#include <verlpp/rollout/engine.hpp>
#include <verlpp/rollout/generation_session.hpp>

#include "engine_fixture.hpp"

#include <catch2/catch.hpp>
#include <fmt/format.h>

#include <map>
#include <optional>

using namespace verlpp;
using namespace verlpp::rollout;
using namespace verlpp::test;
using Catch::Contains;

namespace {

SamplingParams greedy_turn(int64_t max_new, int64_t n = 1) {
  SamplingParams p;
  p.temperature = 0;
  p.max_new_tokens = max_new;
  p.n = n;
  p.ignore_eos = true;
  return p;
}

// A tool's answer: `len` ids, different for each `salt`.
TokenIds tool_tokens(int64_t len, int64_t salt) {
  TokenIds ids;
  for (int64_t i = 0; i < len; ++i) ids.push_back((i * 53 + salt * 29 + 11) % 300);
  return ids;
}

// Steps until nothing waits or runs; returns every turn that ended, by sequence.
std::map<SequenceId, TurnOutput> run_all(GenerationSession& session) {
  std::map<SequenceId, TurnOutput> ended;
  while (session.has_work())
    for (TurnOutput& t : session.step()) ended[t.sequence] = std::move(t);
  return ended;
}

// The log-probs of a turn against an fp64 full forward over `before` + the turn's tokens.
double worst_turn_error(const model::DecoderLM& m, const TokenIds& before, const TurnOutput& turn, double T) {
  GenerateOutput out;
  out.token_ids = turn.token_ids;
  out.logprobs = turn.logprobs;
  return worst_logprob_error(m, before, out, T);
}

}  // namespace

TEST_CASE("session: a resumed turn equals a fresh greedy generation over the whole context, prefix kept",
          "[rollout][session]") {
  model::DecoderLM ref = tiny_model(21);
  RolloutEngine engine(tiny_model(21), EngineOptions{});
  GenerationSession session(engine);
  const std::vector<int64_t> lens = {3, 9, 17};
  std::vector<SequenceId> ids;
  for (size_t i = 0; i < lens.size(); ++i)
    ids.push_back(session.submit({prompt_of(lens[i], int64_t(i)), greedy_turn(6)}, int64_t(i)).front());
  std::map<SequenceId, TurnOutput> first = run_all(session);
  REQUIRE(first.size() == lens.size());
  CHECK(session.num_parked() == int64_t(lens.size()));
  for (size_t i = 0; i < lens.size(); ++i) {
    const TurnOutput& t = first.at(ids[i]);
    CHECK(t.turn == 0);
    CHECK(t.request_index == int64_t(i));
    CHECK(t.token_ids == naive_greedy(ref, prompt_of(lens[i], int64_t(i)), 6));
    CHECK(session.is_parked(ids[i]));
  }

  // Each sequence gets a tool answer of a different length and a second turn.
  std::vector<TokenIds> before(lens.size());
  const int64_t prompt_tokens_before = session.stats().steps.num_prompt_tokens;
  int64_t appended_total = 0;
  for (size_t i = 0; i < lens.size(); ++i) {
    const TokenIds tool = tool_tokens(int64_t(2 + 5 * i), int64_t(i));
    session.resume(ids[i], tool, 5);
    appended_total += int64_t(tool.size());
    before[i] = session.context(ids[i]);
    CHECK_FALSE(session.is_parked(ids[i]));
  }
  std::map<SequenceId, TurnOutput> second = run_all(session);
  REQUIRE(second.size() == lens.size());
  for (size_t i = 0; i < lens.size(); ++i) {
    const TurnOutput& t = second.at(ids[i]);
    INFO(fmt::format("sequence {}", ids[i]));
    CHECK(t.turn == 1);
    CHECK(t.token_ids == naive_greedy(ref, before[i], 5));
    CHECK(worst_turn_error(ref, before[i], t, 1.0) <= 2.5e-5);
    TokenIds whole = before[i];
    whole.insert(whole.end(), t.token_ids.begin(), t.token_ids.end());
    CHECK(session.context(ids[i]) == whole);
  }
  // The prefix stayed in the pool: the resumed prefills computed the appended tokens and each
  // sequence's last sampled token (never fed before its turn ended), nothing more.
  const SessionStats stats = session.stats();
  CHECK(stats.num_resumes == int64_t(lens.size()));
  CHECK(stats.num_resumed_tokens == appended_total);
  CHECK(stats.num_parked_evictions == 0);
  CHECK(stats.steps.num_prompt_tokens - prompt_tokens_before == appended_total + int64_t(lens.size()));

  for (SequenceId id : ids) session.release(id);
  CHECK(session.num_parked() == 0);
  CHECK(session.num_free_blocks() == engine.num_blocks());
}

TEST_CASE("session: sequences keep decoding while another is resumed; sampled turns match a full forward",
          "[rollout][session]") {
  model::DecoderLM ref = tiny_model(22);
  RolloutEngine engine(tiny_model(22), EngineOptions{});
  GenerationSession session(engine);
  const SequenceId longer = session.submit({prompt_of(7, 1), greedy_turn(24)}, 0).front();
  SamplingParams sampled;
  sampled.max_new_tokens = 3;
  sampled.temperature = 0.8;
  sampled.top_k = 40;
  sampled.seed = 5;
  sampled.ignore_eos = true;
  const SequenceId shorter = session.submit({prompt_of(11, 2), sampled}, 1).front();

  std::optional<TurnOutput> longer_turn, short_first, short_second;
  TokenIds short_before;
  bool overlapped = false;  // a step ran with the resumed sequence and the long one both running
  while (session.has_work()) {
    for (TurnOutput& t : session.step()) {
      if (t.sequence == longer) {
        longer_turn = std::move(t);
      } else if (!short_first) {
        short_first = std::move(t);
        REQUIRE(session.num_running() == 1);  // the long one still decodes
        session.resume(shorter, tool_tokens(6, 3), 8);
        short_before = session.context(shorter);
      } else {
        short_second = std::move(t);
      }
    }
    overlapped |= session.num_running() == 2 && short_first.has_value() && !short_second.has_value();
  }
  REQUIRE(longer_turn);
  REQUIRE(short_first);
  REQUIRE(short_second);
  CHECK(overlapped);
  CHECK(longer_turn->token_ids == naive_greedy(ref, prompt_of(7, 1), 24));
  CHECK(short_second->turn == 1);
  CHECK(short_second->token_ids.size() == 8);
  CHECK(worst_turn_error(ref, prompt_of(11, 2), *short_first, 0.8) <= 2.5e-5);
  CHECK(worst_turn_error(ref, short_before, *short_second, 0.8) <= 2.5e-5);
}

TEST_CASE("session: parked blocks go back to the pool when it runs short, and resume recomputes",
          "[rollout][session]") {
  model::DecoderLM ref = tiny_model(23);
  EngineOptions opts;
  opts.block_size = 4;
  opts.num_blocks = 12;  // 48 tokens: three parked 4-block sequences fill it
  RolloutEngine engine(tiny_model(23), opts);
  GenerationSession session(engine);
  std::vector<SequenceId> ids;
  for (int64_t i = 0; i < 3; ++i) ids.push_back(session.submit({prompt_of(10, i), greedy_turn(6)}, i).front());
  std::map<SequenceId, TurnOutput> first = run_all(session);
  REQUIRE(first.size() == 3);
  CHECK(session.num_free_blocks() == 0);  // 10 + 6 - 1 = 15 tokens each: 4 blocks parked per sequence
  for (int64_t i = 0; i < 3; ++i) CHECK(first.at(ids[size_t(i)]).token_ids == naive_greedy(ref, prompt_of(10, i), 6));

  // A new request needs blocks: the longest-parked sequences give theirs back.
  const SequenceId fresh = session.submit({prompt_of(13, 7), greedy_turn(9)}, 3).front();
  std::map<SequenceId, TurnOutput> fresh_turn = run_all(session);
  CHECK(fresh_turn.at(fresh).token_ids == naive_greedy(ref, prompt_of(13, 7), 9));
  const int64_t evicted = session.stats().num_parked_evictions;
  CHECK(evicted >= 1);
  session.release(fresh);

  // Every parked sequence resumes correctly, evicted (recomputed) or not (appended only).
  std::vector<TokenIds> before;
  for (size_t i = 0; i < ids.size(); ++i) {
    session.resume(ids[i], tool_tokens(3, int64_t(i)), 4);
    before.push_back(session.context(ids[i]));
  }
  std::map<SequenceId, TurnOutput> second = run_all(session);
  for (size_t i = 0; i < ids.size(); ++i) {
    INFO(fmt::format("sequence {}", ids[i]));
    CHECK(second.at(ids[i]).token_ids == naive_greedy(ref, before[i], 4));
    session.release(ids[i]);
  }
  CHECK(session.num_free_blocks() == engine.num_blocks());
}

TEST_CASE("session: a resumed sequence at the head of the queue takes the blocks of those waiting behind it",
          "[rollout][session]") {
  // Blocks of 4, 12 in all. A parks 8 blocks, B 4; B resumes needing 11 and A resumes behind it
  // still holding its 8: nothing runs or is parked to free blocks, so A gives its up.
  model::DecoderLM ref = tiny_model(26);
  EngineOptions opts;
  opts.block_size = 4;
  opts.num_blocks = 12;
  RolloutEngine engine(tiny_model(26), opts);
  GenerationSession session(engine);
  const SequenceId a = session.submit({prompt_of(20, 1), greedy_turn(12)}, 0).front();
  const SequenceId b = session.submit({prompt_of(10, 2), greedy_turn(6)}, 1).front();
  std::map<SequenceId, TurnOutput> first = run_all(session);
  REQUIRE(first.size() == 2);
  CHECK(session.num_free_blocks() == 0);
  session.resume(b, tool_tokens(20, 5), 8);  // 36 tokens + 8 - 1: 11 blocks
  session.resume(a, tool_tokens(2, 6), 2);
  const TokenIds before_a = session.context(a), before_b = session.context(b);
  std::map<SequenceId, TurnOutput> second = run_all(session);
  CHECK(session.stats().num_parked_evictions >= 1);
  CHECK(second.at(b).token_ids == naive_greedy(ref, before_b, 8));
  CHECK(second.at(a).token_ids == naive_greedy(ref, before_a, 2));
}

TEST_CASE("session: a request's samples share the prompt's blocks; each resumes on its own", "[rollout][session]") {
  // Prompt of 6 with blocks of 4: the samples share a partly filled block; a sample that ended
  // at its first token still shares it and must copy it before its second turn writes there.
  model::DecoderLM ref = tiny_model(24);
  EngineOptions opts;
  opts.block_size = 4;
  RolloutEngine engine(tiny_model(24), opts);
  GenerationSession session(engine);
  const std::vector<SequenceId> samples = session.submit({prompt_of(6, 4), greedy_turn(1, 3)}, 0);
  REQUIRE(samples.size() == 3);
  std::map<SequenceId, TurnOutput> first = run_all(session);
  REQUIRE(first.size() == 3);
  const TokenIds expected_first = naive_greedy(ref, prompt_of(6, 4), 1);
  for (SequenceId s : samples) CHECK(first.at(s).token_ids == expected_first);

  std::vector<TokenIds> before;
  for (size_t i = 0; i < samples.size(); ++i) {
    session.resume(samples[i], tool_tokens(int64_t(1 + i), int64_t(i)), 5);
    before.push_back(session.context(samples[i]));
  }
  std::map<SequenceId, TurnOutput> second = run_all(session);
  for (size_t i = 0; i < samples.size(); ++i) {
    INFO(fmt::format("sample {}", i));
    CHECK(second.at(samples[i]).sample_index == int64_t(i));
    CHECK(second.at(samples[i]).token_ids == naive_greedy(ref, before[i], 5));
  }
}

TEST_CASE("session: misuse is refused, naming the sequence, and the engine is free again once it closes",
          "[rollout][session]") {
  model::DecoderLM m = tiny_model(25);
  RolloutEngine engine(m, EngineOptions{});
  std::vector<GenerateOutput> before_session = engine.generate({{prompt_of(5, 1), greedy_turn(4)}});
  {
    GenerationSession session(engine);
    CHECK_THROWS_WITH(GenerationSession(engine), Contains("a GenerationSession is open"));
    CHECK_THROWS_WITH(engine.generate({{prompt_of(5, 1), greedy_turn(4)}}), Contains("a GenerationSession is open"));
    CHECK_THROWS_WITH(engine.sleep(), Contains("a GenerationSession is open"));
    CHECK_THROWS_WITH(engine.release_weights(), Contains("a GenerationSession is open"));
    CHECK_THROWS_WITH(engine.update_weights(m), Contains("a GenerationSession is open"));
    CHECK_THROWS_WITH(session.submit({{}, greedy_turn(4)}, 3), Contains("request 3: the prompt is empty"));

    const SequenceId s = session.submit({prompt_of(5, 1), greedy_turn(4)}, 0).front();
    CHECK_THROWS_WITH(session.resume(s, {1, 2}, 4), Contains("sequence 0 is still generating"));
    CHECK_THROWS_WITH(session.release(s), Contains("sequence 0 is still generating"));
    CHECK_THROWS_WITH(session.resume(7, {1}, 4), Contains("unknown sequence 7"));
    std::map<SequenceId, TurnOutput> first = run_all(session);
    CHECK(first.at(s).token_ids == before_session[0].token_ids);  // generate() is a session too
    CHECK(first.at(s).logprobs == before_session[0].logprobs);
    CHECK_THROWS_WITH(session.resume(s, {1, 100000}, 4),
                      Contains("sequence 0: appended token 100000 at position 1 is outside the vocabulary"));
    CHECK_THROWS_WITH(session.resume(s, {1}, 0), Contains("sequence 0: max_new_tokens is 0"));
    const int64_t context = m.config().max_position_embeddings;
    REQUIRE(context > 0);
    CHECK_THROWS_WITH(session.resume(s, TokenIds(size_t(context), 1), 4),
                      Contains("(max_position_embeddings), leaving no room to generate"));
    CHECK(session.is_parked(s));  // a refused resume changes nothing
    CHECK(session.context(s).size() == 5 + 4);
    session.release(s);
    CHECK_THROWS_WITH(session.resume(s, {1}, 4), Contains("sequence 0 was released"));
    CHECK_THROWS_WITH(session.context(s), Contains("sequence 0 was released"));
    CHECK(session.step().empty());  // no work: nothing happens
  }
  // Closed: the engine generates, sleeps and wakes again, with the same outputs as before.
  std::vector<GenerateOutput> after_session = engine.generate({{prompt_of(5, 1), greedy_turn(4)}});
  CHECK(after_session[0].token_ids == before_session[0].token_ids);
  engine.sleep();
  CHECK_THROWS_WITH(GenerationSession(engine), Contains("the engine is asleep"));
  engine.wake();
  GenerationSession again(engine);
  CHECK(again.num_free_blocks() == engine.num_blocks());
}
