// response_log_probs: one transformer forward, then linear_log_probs (the LM head, log-softmax and
// entropy per chunk of rows in fp32, recomputed in the backward). Entropy = logsumexp(z) -
// sum softmax(z) z, as verl's entropy_from_logits. Given a plugin's kernels, the forward's RoPE
// (layer_kernels.hpp) and the LM head's softmax math (linear_log_probs.hpp) run through them.
#include <verlpp/train/logprob.hpp>
#include <verlpp/core/error.hpp>
#include <verlpp/train/linear_log_probs.hpp>

#include "../ops/layer_kernels.hpp"

#include <ATen/ops/cat.h>
#include <ATen/ops/zeros.h>

namespace verlpp::train {
namespace {

// The decoder over only the real tokens (verl's use_remove_padding): each row's tokens, which
// are contiguous in this layout, become one segment of a packed forward; the result is put back
// at the rows' positions of a zero [B, T, C] (padding positions get zeros: they score nothing).
at::Tensor packed_hidden(const model::DecoderLM& model, const at::Tensor& input_ids, const at::Tensor& attention_mask,
                         const at::Tensor& position_ids, std::shared_ptr<const model::LayerKernels> rope) {
  const int64_t b = input_ids.size(0), t = input_ids.size(1);
  at::Tensor keep = attention_mask.reshape({-1}).ne(0).nonzero().squeeze(1);  // [N] flat indices, row-major
  at::Tensor counts = attention_mask.ne(0).sum(1).to(at::kLong);
  at::Tensor cu = at::cat({at::zeros({1}, counts.options()), counts.cumsum(0)});
  at::Tensor packed =
      model.forward_packed(input_ids.reshape({-1}).index_select(0, keep),
                           position_ids.reshape({-1}).index_select(0, keep), cu, std::move(rope));  // [N, C]
  at::Tensor full = at::zeros({b * t, packed.size(1)}, packed.options());
  return full.index_copy(0, keep, packed).view({b, t, packed.size(1)});
}

}  // namespace

ResponseLogProbs response_log_probs(const model::DecoderLM& model, const at::Tensor& input_ids,
                                    const at::Tensor& attention_mask, const at::Tensor& position_ids,
                                    int64_t response_length, double temperature, bool with_entropy, int64_t chunk_rows,
                                    bool remove_padding, const hw::Kernels* kernels, LogitsInBackward logits,
                                    bool rotate_qkv) {
  VERLPP_CHECK(input_ids.dim() == 2, "input_ids must be [B, T], got {} dims", input_ids.dim());
  const int64_t b = input_ids.size(0), t = input_ids.size(1), r = response_length;
  VERLPP_CHECK(r >= 1 && r < t, "response_length {} must be in [1, T) with T = {}", r, t);
  VERLPP_CHECK(temperature > 0, "temperature {} must be > 0", temperature);
  VERLPP_CHECK(chunk_rows >= 1, "chunk_rows {} must be >= 1", chunk_rows);
  // The plugin's RoPE and SwiGLU kernels (with backwards of their own) where the kernels offer them.
  ops::LayerKernelsOptions layer_options;
  layer_options.rotate_qkv = rotate_qkv;
  const std::shared_ptr<const model::LayerKernels> rope = ops::layer_kernels_for(kernels, layer_options);
  at::Tensor hidden = remove_padding
                          ? packed_hidden(model, input_ids, attention_mask, position_ids, rope)
                          : model.forward_padded(input_ids, attention_mask, position_ids, rope);  // [B, T, C]
  at::Tensor scoring = hidden.narrow(1, t - r - 1, r).reshape({b * r, hidden.size(2)});           // [B R, C]
  at::Tensor targets = input_ids.narrow(1, t - r, r).reshape({b * r});                            // [B R]
  LinearLogProbs lp = linear_log_probs(scoring, model.parameter("lm_head.weight"), targets, temperature, with_entropy,
                                       chunk_rows * r, kernels, logits);
  ResponseLogProbs out;
  out.log_probs = lp.log_probs.view({b, r});
  if (with_entropy) out.entropy = lp.entropy.view({b, r});
  return out;
}

}  // namespace verlpp::train
