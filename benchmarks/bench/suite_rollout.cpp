// Suite "rollout": RolloutEngine::generate of the tiny model (examples/tiny, random weights,
// fp32) on the plugin's torch device with the plugin's kernels, as the RL trainer wires it on an
// accelerator. Decision: greedy with EOS ignored, so every sample generates exactly `response`
// tokens and the work per repetition is fixed; one engine serves all shapes, its KV pool sized
// for the largest, so no shape is slowed by preemption.
#include "bench.hpp"

#include <verlpp/hw/kernels.hpp>
#include <verlpp/model/decoder.hpp>
#include <verlpp/rollout/engine.hpp>

#include <fmt/format.h>

#include <algorithm>

namespace verlpp::bench {
namespace {

struct RolloutShape {
  const char* name;
  int64_t batch, prompt, response;
};

std::vector<rollout::GenerateRequest> requests_for(const RolloutShape& s, int64_t vocab) {
  std::vector<rollout::GenerateRequest> reqs;
  for (int64_t b = 0; b < s.batch; ++b) {
    rollout::GenerateRequest r;
    for (int64_t i = 0; i < s.prompt; ++i) r.prompt_ids.push_back((b * 37 + i * 11 + 5) % vocab);
    r.sampling.temperature = 0;
    r.sampling.max_new_tokens = s.response;
    r.sampling.ignore_eos = true;
    reqs.push_back(std::move(r));
  }
  return reqs;
}

}  // namespace

std::vector<Measurement> run_rollout(const Options& o, const Target& t) {
  const std::vector<RolloutShape> shapes =
      o.quick ? std::vector<RolloutShape>{{"generate_small", 2, 8, 8}, {"generate_batch", 8, 8, 8}}
              : std::vector<RolloutShape>{{"generate_small", 1, 32, 64}, {"generate_batch", 16, 32, 64}};
  const model::ModelConfig config = model::load_model_config(std::string(VERLPP_SOURCE_DIR) + "/examples/tiny");
  const hw::Kernels kernels(*t.plugin);
  rollout::EngineOptions options;
  options.kernels = &kernels;
  const int64_t bs = options.block_size;
  for (const RolloutShape& s : shapes) {
    options.kv_token_budget = std::max(options.kv_token_budget, s.batch * ((s.prompt + s.response + bs - 1) / bs) * bs);
    options.limits.max_num_seqs = std::max(options.limits.max_num_seqs, s.batch);
  }
  model::DecoderLM lm(config);
  lm.init_weights(1);
  lm.to(at::kFloat, t.device);
  rollout::RolloutEngine engine(std::move(lm), options);
  std::string used;
  for (const std::string& k : kernels.available())
    if (k == "paged_attention_decode" || k == "sample") used += (used.empty() ? "" : "+") + k;

  std::vector<Measurement> out;
  for (const RolloutShape& s : shapes) {
    const std::string shape =
        fmt::format("tiny model (L={} hidden={} V={}) f32, batch={} prompt={} response={}, greedy, plugin kernels: {}",
                    config.num_hidden_layers, config.hidden_size, config.vocab_size, s.batch, s.prompt, s.response,
                    used.empty() ? "none" : used);
    Measurement m = make_measurement("rollout", s.name, shape, t);
    const auto reqs = requests_for(s, config.vocab_size);
    int64_t generated = 0;
    std::string failure;
    m.seconds = time_reps(o, t, [&] {
      const auto outputs = engine.generate(reqs);
      for (const auto& r : outputs)
        if (!r.error.empty() && failure.empty()) failure = r.error;
      generated = engine.last_stats().num_generated_tokens;
    });
    if (!failure.empty() || generated != s.batch * s.response) {
      m.status = Status::error;
      m.reason =
          !failure.empty() ? failure : fmt::format("generated {} tokens, expected {}", generated, s.batch * s.response);
      m.seconds.clear();
    }
    m.work = double(s.batch * s.response);
    m.work_unit = "tokens";
    out.push_back(m);
  }
  return out;
}

}  // namespace verlpp::bench
