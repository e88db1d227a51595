// Log-probabilities (and entropies) of target tokens straight from hidden states and the LM
// head, over chunks of rows: neither the forward nor the backward ever holds more than one
// chunk's [rows x vocab] fp32 logits. Between the two, the logits h W^T are either kept in the
// weight's dtype (LogitsInBackward::kKeep: tokens x vocab x 2 bytes for a bf16 model, 2.5 GB for
// 8k tokens of a 152k vocabulary; what verl keeps without its fused kernels) or recomputed in the
// backward (kRecompute: one more LM-head product, ~3 ms a 16 x 512 step of Qwen2.5-0.5B on an
// H200; verl's use_fused_kernels). Either way no softmax is kept alive, which is what autograd
// through a chunked log_softmax would do (tokens x vocab x 4 bytes).
#pragma once

#include <ATen/core/Tensor.h>

namespace verlpp::hw {
class Kernels;
}

namespace verlpp::train {

// What the backward gets its logits from (see above).
enum class LogitsInBackward { kKeep, kRecompute };

struct LinearLogProbs {
  at::Tensor log_probs;       // [N] fp32 (fp64 for fp64 inputs): log softmax((hidden @ weight^T) / T)[target]
  at::Tensor entropy;         // [N] likewise, or undefined when not asked for
  bool used_kernels = false;  // whether the plugin's kernels ran (else LibTorch's path)
};

// hidden [N, C] and weight [V, C] of one floating dtype; targets [N] int64 in [0, V).
// Differentiable in hidden and weight (each only when it requires grad). Logits are formed
// in the weight's dtype (as at::linear would) and then taken to fp32 for the softmax, as verl
// casts logits to float (fp64 inputs stay fp64). `chunk_tokens` >= 1 rows per chunk.
// `kernels`: a plugin offering logprob_entropy and logprob_backward (ABI 1.2) for the tensors'
// device takes the softmax math (fp32 inside, logits never copied to fp32); it must outlive the
// backward. Null, a dtype the kernels do not take (fp64) or a missing entry: LibTorch's path.
// `logits`: kept or recomputed for the backward; kept only when a backward can follow (grad mode
// on, hidden or weight requiring grad), and a second backward through a retained graph
// recomputes them (the first overwrites them with their gradient).
LinearLogProbs linear_log_probs(const at::Tensor& hidden, const at::Tensor& weight, const at::Tensor& targets,
                                double temperature, bool with_entropy, int64_t chunk_tokens,
                                const hw::Kernels* kernels = nullptr,
                                LogitsInBackward logits = LogitsInBackward::kKeep);

}  // namespace verlpp::train
