// verlpp-bench-rollout [--model DIR] [--repeat R]: generated tokens/s of RolloutEngine for
// fixed shapes (batch, prompt, response), greedy, EOS ignored so every sample runs its full
// length; the model is DIR's config (examples/tiny by default) with random weights (seed 1).
// Prints a table and one JSON line per shape.
#include <verlpp/model/model_config.hpp>
#include <verlpp/rollout/engine.hpp>

#include <fmt/format.h>

#include <cstring>
#include <iostream>
#include <string>

int main(int argc, char** argv) {
  std::string dir = std::string(VERLPP_SOURCE_DIR) + "/examples/tiny";
  int repeat = 3;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--model")) dir = argv[i + 1];
    else if (!std::strcmp(argv[i], "--repeat")) repeat = std::stoi(argv[i + 1]);
  }
  using namespace verlpp;
  const model::ModelConfig config = model::load_model_config(dir);
  struct Shape { int64_t batch, prompt, response; };
  const Shape shapes[] = {{1, 32, 128}, {8, 32, 128}, {32, 64, 128}, {64, 128, 256}};
  std::cout << fmt::format("{:>6} {:>7} {:>9} {:>12} {:>10} {:>12}\n", "batch", "prompt", "response", "tokens/s", "seconds", "preemptions");
  for (const Shape& s : shapes) {
    model::DecoderLM lm(config);
    lm.init_weights(1);
    rollout::RolloutEngine engine(std::move(lm), rollout::EngineOptions{});
    std::vector<rollout::GenerateRequest> reqs;
    for (int64_t b = 0; b < s.batch; ++b) {
      rollout::GenerateRequest r;
      for (int64_t t = 0; t < s.prompt; ++t) r.prompt_ids.push_back((b * 131 + t * 17) % config.vocab_size);
      r.sampling.temperature = 0;
      r.sampling.max_new_tokens = s.response;
      r.sampling.ignore_eos = true;
      reqs.push_back(std::move(r));
    }
    engine.generate(reqs);  // warm-up
    double best = 1e30;
    int64_t tokens = 0, preemptions = 0;
    for (int r = 0; r < repeat; ++r) {
      engine.generate(reqs);
      best = std::min(best, engine.last_stats().seconds);
      tokens = engine.last_stats().num_generated_tokens;
      preemptions = engine.last_stats().num_preemptions;
    }
    const double tps = double(tokens) / best;
    std::cout << fmt::format("{:>6} {:>7} {:>9} {:>12.1f} {:>10.3f} {:>12}\n", s.batch, s.prompt, s.response, tps, best, preemptions);
    std::cout << fmt::format("{{\"bench\":\"rollout\",\"model\":\"{}\",\"batch\":{},\"prompt\":{},\"response\":{},\"tokens_per_s\":{:.1f},\"seconds\":{:.4f}}}\n",
                             config.architecture, s.batch, s.prompt, s.response, tps, best);
  }
  return 0;
}
