// Sampling parameters and the sampler: greedy, temperature, top-k, top-p, per-sample seeds.
// The one decision to know: a sample's random draw at step t is a pure function of (its seed,
// t) — a counter-based hash, never a shared generator stream — so the same seed gives the same
// tokens whatever else is in the batch and across preemption. Log-probs are those of the
// sampled token under softmax(logits / temperature) before top-k/top-p filtering (verl's
// rollout log-probs); greedy (temperature 0) reports them under softmax(logits).
#pragma once

#include <verlpp/core/token_id.hpp>

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace verlpp::hw {
class Kernels;
}

namespace verlpp::rollout {

// How one request is sampled. Checked by validate(); the engine reports a failing request as
// an error output and runs the rest of the batch.
struct SamplingParams {
  int64_t n = 1;                 // samples per prompt (share the prompt's KV blocks)
  int64_t max_new_tokens = 16;   // generated tokens at most (also capped by the context)
  double temperature = 1.0;      // 0 = greedy
  int64_t top_k = 0;             // 0 (or -1) = all tokens
  double top_p = 1.0;            // in (0, 1]; 1 = all tokens
  std::optional<uint64_t> seed;  // none: derived from the engine's seed and request order
  TokenIds stop_token_ids;       // finish ("stop") after emitting one of these
  bool ignore_eos = false;       // true: the model's EOS ids do not stop generation
};

// Throws verlpp::Error naming the offending field when `params` is unusable.
void validate(const SamplingParams& params);

// Why a sample ended: an EOS/stop id was emitted, max_new_tokens (or the context) was reached,
// or the request was refused/cancelled (the output's error says why).
enum class FinishReason { kStop, kLength, kAborted };
// "stop", "length", "aborted".
const char* finish_reason_name(FinishReason reason);

// One row's settings for a sampler call.
struct RowSampling {
  double temperature = 1.0;
  int64_t top_k = 0;
  double top_p = 1.0;
  uint64_t seed = 0;  // the sample's seed
  int64_t step = 0;   // the sample's own count of generated tokens
};

// What sample() returns, one entry per row.
struct SampleResult {
  at::Tensor token_ids;  // [B] int64, CPU
  at::Tensor logprobs;   // [B] float32, CPU
};

// The uniform draw in [0, 1) of (seed, step): splitmix64 of both, 53 bits.
double uniform_draw(uint64_t seed, int64_t step);
// The seed of sample `index` of a request seeded `seed` (distinct streams per sample).
uint64_t sample_seed(uint64_t seed, int64_t index);

// Samples one token per row of `logits` [B, V] (any float dtype, any device). Uses the
// plugin's `sample` kernel when `kernels` has one, the LibTorch reference path otherwise.
SampleResult sample(const at::Tensor& logits, const std::vector<RowSampling>& rows,
                    const hw::Kernels* kernels = nullptr);

// Per-row sampler settings already on the device, as the plugin's `sample` kernel reads them:
// temperature f32, top_k i32 (0 = all), top_p f32, seed i64 (sample_seed(seed, step): each
// row's own draw). All [B].
struct DeviceSampling {
  at::Tensor temperature, top_k, top_p, seed;
};

// sample_on_device's results on the device: tokens [B] int64 and their log-probs [B] f32, views
// of one int64 buffer `packed` of B + ceil(B / 2) elements (tokens first, then the log-probs'
// bytes), so that the host fetches both with one copy and one wait.
struct DeviceSamples {
  at::Tensor tokens, logprobs, packed;
};

// The plugin's `sample` kernel (`kernels` must have one) with everything on the device, queued on
// LibTorch's current stream. No host copy and no synchronisation, so a device graph can capture
// it. bf16 / f16 logits go to an ABI 1.3 plugin as they are (same result as their fp32
// conversion), others as fp32.
DeviceSamples sample_on_device(const at::Tensor& logits, const DeviceSampling& rows, const hw::Kernels& kernels);

// The first `rows` tokens and log-probs of `samples`, brought to the host in one copy (which
// waits for the kernel that wrote them).
SampleResult read_samples(const DeviceSamples& samples, int64_t rows);

// The reference path alone (what sample() runs without a plugin kernel).
SampleResult sample_reference(const at::Tensor& logits, const std::vector<RowSampling>& rows);

}  // namespace verlpp::rollout
