// The agent tests' scripted policy (a TurnSource that answers from fixed turns) and the tiny
// tokenizer's helpers for writing expected ids as literal text.
#pragma once

#include <verlpp/agent/turn_source.hpp>
#include <verlpp/model/tokenizer.hpp>

#include <catch2/catch.hpp>

#include <map>
#include <string>
#include <vector>

namespace verlpp::agent_test {

using verlpp::agent::GeneratedTurn;
using verlpp::agent::TurnSource;

inline const model::Tokenizer& tiny_tokenizer() {
  static const model::Tokenizer tokenizer =
      model::Tokenizer::from_file(std::string(VERLPP_SOURCE_DIR) + "/examples/tiny/tokenizer.json");
  return tokenizer;
}

inline TokenIds ids_of(const std::string& text) { return tiny_tokenizer().encode(text); }
inline TokenIds cat(std::initializer_list<TokenIds> parts) {
  TokenIds out;
  for (const TokenIds& part : parts) out.insert(out.end(), part.begin(), part.end());
  return out;
}

// A policy that answers each trajectory's turns from a script, honouring each turn's budget (a
// turn cut by its budget loses its tail, as the engine's would); log-prob of the k-th id the
// source ever emits is -(k+1)/100, so every position's value is known.
class ScriptedSource : public TurnSource {
 public:
  explicit ScriptedSource(std::vector<std::vector<TokenIds>> scripts) : scripts_(std::move(scripts)) {}
  int64_t start(const TokenIds& prompt, int64_t max_new_tokens, int64_t index) override {
    const int64_t handle = 100 + index;
    seqs_[handle] = Seq{static_cast<size_t>(index), 0, max_new_tokens, true, prompt};
    return handle;
  }
  void resume(int64_t handle, const TokenIds& appended, int64_t max_new_tokens) override {
    Seq& s = seqs_.at(handle);
    REQUIRE_FALSE(s.active);
    s.context.insert(s.context.end(), appended.begin(), appended.end());
    s.budget = max_new_tokens;
    s.active = true;
    resumes.push_back({handle, appended});
  }
  void finish(int64_t handle) override { finished.push_back(handle); }
  bool has_work() const override {
    for (const auto& item : seqs_)
      if (item.second.active) return true;
    return false;
  }
  std::vector<GeneratedTurn> step() override {
    std::vector<GeneratedTurn> out;
    for (auto& item : seqs_) {
      Seq& s = item.second;
      if (!s.active) continue;
      const std::vector<TokenIds>& script = scripts_.at(s.script);
      REQUIRE(s.turn < script.size());
      GeneratedTurn turn;
      turn.handle = item.first;
      turn.token_ids = script[s.turn++];
      if (static_cast<int64_t>(turn.token_ids.size()) > s.budget) turn.token_ids.resize(static_cast<size_t>(s.budget));
      for (size_t k = 0; k < turn.token_ids.size(); ++k) turn.logprobs.push_back(-float(++emitted_) / 100.0f);
      s.context.insert(s.context.end(), turn.token_ids.begin(), turn.token_ids.end());
      s.active = false;
      out.push_back(std::move(turn));
    }
    return out;
  }
  std::vector<std::pair<int64_t, TokenIds>> resumes;
  std::vector<int64_t> finished;
  const TokenIds& context(int64_t handle) const { return seqs_.at(handle).context; }

 private:
  struct Seq {
    size_t script = 0, turn = 0;
    int64_t budget = 0;
    bool active = false;
    TokenIds context;
  };
  std::vector<std::vector<TokenIds>> scripts_;
  std::map<int64_t, Seq> seqs_;
  int64_t emitted_ = 0;
};

// Log-probs -1/100 ... -n/100 starting after `first` ids emitted before.
inline std::vector<float> scripted_logprobs(size_t first, size_t n) {
  std::vector<float> out;
  for (size_t k = 0; k < n; ++k) out.push_back(-float(first + k + 1) / 100.0f);
  return out;
}

}  // namespace verlpp::agent_test
