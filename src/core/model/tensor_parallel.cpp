// Tensor-parallel layouts and slices (see the header). Query heads go to ranks in contiguous
// blocks of H / t, so that a rank's heads use a contiguous block of KV heads (GQA groups never
// straddle ranks); with replicated KV heads each rank keeps the one KV head its block uses.
#include <verlpp/model/tensor_parallel.hpp>

#include <verlpp/core/error.hpp>

#include <ATen/ops/zeros.h>

#include "shape_string.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <utility>
#include <vector>

namespace verlpp::model {
namespace {

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// Rows [begin, begin + count) of `whole` along `dim`, zero-padded past its end, as a new tensor.
at::Tensor padded_range(const at::Tensor& whole, int64_t dim, int64_t begin, int64_t count) {
  const int64_t have = std::max<int64_t>(0, std::min(count, whole.size(dim) - begin));
  if (have == count) return whole.narrow(dim, begin, count).contiguous();
  std::vector<int64_t> shape(whole.sizes().begin(), whole.sizes().end());
  shape[size_t(dim)] = count;
  at::Tensor out = at::zeros(shape, whole.options());
  if (have > 0) out.narrow(dim, 0, have).copy_(whole.narrow(dim, begin, have));
  return out;
}

}  // namespace

TensorParallelLayout tensor_parallel_layout(const ModelConfig& c, int64_t size) {
  if (size < 1) throw Error("tensor_model_parallel_size", fmt::format("{} must be >= 1", size));
  if (c.head != ModelHead::kCausalLM)
    throw Error("tensor_model_parallel_size",
                fmt::format("{} has a classification head: only language models (an LM head) split over ranks",
                            c.architecture));
  const int64_t H = c.num_attention_heads, KV = c.num_key_value_heads, F = c.intermediate_size;
  if (H % size != 0)
    throw Error("tensor_model_parallel_size",
                fmt::format("{} does not divide the {} attention heads of {}: each rank needs whole heads", size, H,
                            c.architecture));
  if (KV % size != 0 && size % KV != 0)
    throw Error("tensor_model_parallel_size",
                fmt::format("{} and the {} KV heads of {} do not divide one another: the KV heads are split over "
                            "the ranks or each replicated over size / KV of them",
                            size, KV, c.architecture));
  if (F % size != 0)
    throw Error("tensor_model_parallel_size",
                fmt::format("{} does not divide the MLP width (intermediate_size {}) of {}", size, F, c.architecture));
  TensorParallelLayout l;
  l.size = size;
  l.heads = H / size;
  l.kv_replicated = size > KV;
  l.kv_heads = l.kv_replicated ? 1 : KV / size;
  l.intermediate = F / size;
  l.vocab = (c.vocab_size + size - 1) / size;
  return l;
}

ModelConfig rank_config(const ModelConfig& config, const TensorParallelLayout& layout) {
  ModelConfig c = config;
  c.num_attention_heads = layout.heads;
  c.num_key_value_heads = layout.kv_heads;
  c.intermediate_size = layout.intermediate;
  c.vocab_size = layout.vocab;
  return c;
}

TensorParallelPart tensor_parallel_part(const ModelConfig& c, const TensorParallelLayout& l, const std::string& name,
                                        int64_t rank) {
  VERLPP_CHECK(rank >= 0 && rank < l.size, "tensor_parallel_part: rank {} of {}", rank, l.size);
  const int64_t D = c.head_dim;
  // The first KV head of this rank's block (the one it keeps when they are replicated).
  const int64_t group = c.num_attention_heads / c.num_key_value_heads;
  const int64_t kv_first = l.kv_replicated ? rank * l.heads / group : rank * l.kv_heads;
  auto rows = [](int64_t begin, int64_t count) { return TensorParallelPart{0, begin, count}; };
  auto columns = [](int64_t begin, int64_t count) { return TensorParallelPart{1, begin, count}; };
  if (name == "model.embed_tokens.weight" || name == "lm_head.weight") return rows(rank * l.vocab, l.vocab);
  if (ends_with(name, ".self_attn.q_proj.weight") || ends_with(name, ".self_attn.q_proj.bias"))
    return rows(rank * l.heads * D, l.heads * D);
  if (ends_with(name, ".self_attn.k_proj.weight") || ends_with(name, ".self_attn.k_proj.bias") ||
      ends_with(name, ".self_attn.v_proj.weight") || ends_with(name, ".self_attn.v_proj.bias"))
    return rows(kv_first * D, l.kv_heads * D);
  if (ends_with(name, ".self_attn.o_proj.weight")) return columns(rank * l.heads * D, l.heads * D);
  if (ends_with(name, ".mlp.gate_proj.weight") || ends_with(name, ".mlp.gate_proj.bias") ||
      ends_with(name, ".mlp.up_proj.weight") || ends_with(name, ".mlp.up_proj.bias"))
    return rows(rank * l.intermediate, l.intermediate);
  if (ends_with(name, ".mlp.down_proj.weight")) return columns(rank * l.intermediate, l.intermediate);
  return TensorParallelPart{};  // norms, row-parallel biases: whole on every rank
}

at::Tensor tensor_parallel_slice(const ModelConfig& c, const TensorParallelLayout& l, const std::string& name,
                                 const at::Tensor& whole, int64_t rank) {
  VERLPP_CHECK(rank >= 0 && rank < l.size, "tensor_parallel_slice: rank {} of {}", rank, l.size);
  // The whole shape `name` has (a tied lm_head is the embedding).
  const std::string spec_name =
      name == "lm_head.weight" && c.tie_word_embeddings ? std::string("model.embed_tokens.weight") : name;
  const std::vector<ParamSpec> specs = parameter_specs(c);
  const auto spec = std::find_if(specs.begin(), specs.end(), [&](const ParamSpec& s) { return s.name == spec_name; });
  if (spec == specs.end())
    throw Error("tensor_parallel_slice", fmt::format("{} has no parameter '{}'", c.architecture, name));
  if (whole.sizes() != c10::IntArrayRef(spec->shape))
    throw Error("tensor_parallel_slice", fmt::format("'{}' is {}, but the whole model's is {}", name,
                                                     shape_string(whole.sizes()), shape_string(spec->shape)));
  const TensorParallelPart part = tensor_parallel_part(c, l, name, rank);
  if (part.dim < 0) return whole.contiguous();
  return padded_range(whole, part.dim, part.begin, part.count);
}

DecoderLM tensor_parallel_model(const DecoderLM& whole, std::shared_ptr<const TensorParallelGroup> group) {
  VERLPP_CHECK(group != nullptr, "tensor_parallel_model: no group");
  const ModelConfig& c = whole.config();
  const TensorParallelLayout layout = tensor_parallel_layout(c, group->size());
  std::vector<at::Tensor> params;
  for (const auto& [name, tensor] : whole.named_parameters())
    params.push_back(tensor_parallel_slice(c, layout, name, tensor.detach(), group->rank()));
  ModelOptions options = whole.options();
  options.requires_grad = false;
  DecoderLM local = DecoderLM::over(rank_config(c, layout), options, std::move(params));
  local.set_tensor_parallel(std::move(group), c);
  return local;
}

}  // namespace verlpp::model
