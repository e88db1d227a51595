// Per-token log-probabilities and entropies of the response part of a padded batch, in verl's
// layout: input_ids = [prompt (left-padded) | response (right-padded)], so the logits at
// positions [P-1, T-2] score the response tokens at [P, T-1]. The LM head runs over chunks of
// rows, so a no-grad pass (old log-probs, reference) never holds [tokens x vocab] fp32 logits
// for the whole batch, and the backward recomputes each chunk (linear_log_probs.hpp).
#pragma once

#include <verlpp/model/decoder.hpp>
#include <verlpp/train/linear_log_probs.hpp>

#include <ATen/core/Tensor.h>

namespace verlpp::hw {
class Kernels;
}

namespace verlpp::train {

struct ResponseLogProbs {
  at::Tensor log_probs;  // [B, R] fp32: log p(response token | prefix) under softmax(logits / T)
  at::Tensor entropy;    // [B, R] fp32, or undefined when not asked for
};

// `response_length` = R, the trailing columns of input_ids that are the response.
// `chunk_rows`: batch rows per LM-head chunk (>= 1). `remove_padding` (verl's use_remove_padding)
// runs the decoder on the real tokens only, packed into one sequence per row; each row's real
// tokens must be contiguous (left-padded prompt, right-padded response), as in verl's layout.
// `kernels`: a plugin's kernels for the forward's RoPE (rotary_embedding, with a backward of its
// own) and the LM head's softmax math (linear_log_probs.hpp), where it offers them; null: LibTorch's.
// They must outlive the backward. `logits`: the LM head's logits kept for the backward or
// recomputed there (linear_log_probs.hpp). `rotate_qkv`: RoPE through ABI 1.3's rotary_kv_store
// where offered (false: rotary_embedding on contiguous copies, for side-by-side timing).
ResponseLogProbs response_log_probs(const model::DecoderLM& model, const at::Tensor& input_ids /*[B, T] int64*/,
                                    const at::Tensor& attention_mask /*[B, T]*/,
                                    const at::Tensor& position_ids /*[B, T]*/, int64_t response_length,
                                    double temperature, bool with_entropy, int64_t chunk_rows = 4,
                                    bool remove_padding = false, const hw::Kernels* kernels = nullptr,
                                    LogitsInBackward logits = LogitsInBackward::kKeep, bool rotate_qkv = true);

}  // namespace verlpp::train
