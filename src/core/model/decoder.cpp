// DecoderLM: parameters by HF name, seeded init, and the three forwards over one layer stack.
// The forwards differ only in the attention callback they hand to run(): a masked dense
// attention (padded), a loop over segments (packed), or the engine's backend (cached), which
// may also take over RoPE (a plugin kernel); the layer math is written once.
#include <verlpp/model/decoder.hpp>

#include <verlpp/model/layers.hpp>
#include <verlpp/model/lora.hpp>
#include <verlpp/model/tensor_parallel.hpp>

#include <verlpp/core/error.hpp>

#include "shape_string.hpp"

#include <ATen/TensorOperators.h>

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/core/grad_mode.h>

#include "checkpointing.hpp"
#include <ATen/ops/arange.h>
#include <ATen/ops/argmax.h>
#include <ATen/ops/cat.h>
#include <ATen/ops/embedding.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/eye.h>
#include <ATen/ops/linear.h>
#include <ATen/ops/silu.h>
#include <ATen/ops/split_with_sizes.h>

#include <cmath>

namespace verlpp::model {

std::vector<ParamSpec> parameter_specs(const ModelConfig& c) {
  using Init = ParamSpec::Init;
  const int64_t C = c.hidden_size, F = c.intermediate_size, D = c.head_dim;
  const int64_t HD = c.num_attention_heads * D, KVD = c.num_key_value_heads * D;
  std::vector<ParamSpec> specs;
  specs.push_back({"model.embed_tokens.weight", {c.vocab_size, C}, Init::kNormal});
  for (int64_t i = 0; i < c.num_hidden_layers; ++i) {
    const std::string p = "model.layers." + std::to_string(i) + ".";
    auto linear = [&](const std::string& name, int64_t out, int64_t in, bool bias) {
      specs.push_back({p + name + ".weight", {out, in}, Init::kNormal});
      if (bias) specs.push_back({p + name + ".bias", {out}, Init::kZeros});
    };
    linear("self_attn.q_proj", HD, C, c.qkv_bias);
    linear("self_attn.k_proj", KVD, C, c.qkv_bias);
    linear("self_attn.v_proj", KVD, C, c.qkv_bias);
    linear("self_attn.o_proj", C, HD, c.o_bias);
    if (c.qk_norm) {
      specs.push_back({p + "self_attn.q_norm.weight", {D}, Init::kOnes});
      specs.push_back({p + "self_attn.k_norm.weight", {D}, Init::kOnes});
    }
    linear("mlp.gate_proj", F, C, c.mlp_bias);
    linear("mlp.up_proj", F, C, c.mlp_bias);
    linear("mlp.down_proj", C, F, c.mlp_bias);
    specs.push_back({p + "input_layernorm.weight", {C}, Init::kOnes});
    specs.push_back({p + "post_attention_layernorm.weight", {C}, Init::kOnes});
  }
  specs.push_back({"model.norm.weight", {C}, Init::kOnes});
  if (c.head == ModelHead::kCausalLM) {
    if (!c.tie_word_embeddings) specs.push_back({"lm_head.weight", {c.vocab_size, C}, Init::kNormal});
  } else {
    specs.push_back({"score.weight", {c.num_labels, C}, Init::kNormal});
    if (c.score_bias) specs.push_back({"score.bias", {c.num_labels}, Init::kZeros});
  }
  return specs;
}

int64_t parameter_count(const ModelConfig& config) {
  int64_t total = 0;
  for (const ParamSpec& s : parameter_specs(config)) total += s.numel();
  return total;
}

at::ScalarType dtype_from_name(const std::string& name) {
  if (name == "float32" || name == "fp32" || name == "float") return at::kFloat;
  if (name == "bfloat16" || name == "bf16") return at::kBFloat16;
  if (name == "float16" || name == "fp16" || name == "half") return at::kHalf;
  throw Error("dtype", fmt::format("unknown dtype '{}' (float32, bfloat16, float16)", name));
}

std::string dtype_name(at::ScalarType dtype) {
  switch (dtype) {
    case at::kFloat:
      return "float32";
    case at::kBFloat16:
      return "bfloat16";
    case at::kHalf:
      return "float16";
    default:
      break;
  }
  throw Error("dtype", fmt::format("dtype {} is not a model dtype (float32, bfloat16, float16)", c10::toString(dtype)));
}

DecoderLM::DecoderLM(ModelConfig config, ModelOptions options, NoAllocation)
    : config_(std::move(config)), options_(options) {
  VERLPP_CHECK(options_.dtype == at::kFloat || options_.dtype == at::kBFloat16 || options_.dtype == at::kHalf ||
                   options_.dtype == at::kDouble,
               "DecoderLM: dtype {} is not float32, bfloat16, float16 (or float64)", c10::toString(options_.dtype));
}

DecoderLM::DecoderLM(ModelConfig config, ModelOptions options) : DecoderLM(std::move(config), options, NoAllocation{}) {
  auto opts = at::TensorOptions().dtype(options_.dtype).device(options_.device);
  for (const ParamSpec& s : parameter_specs(config_)) {
    index_[s.name] = params_.size();
    params_.emplace_back(s.name, at::empty(s.shape, opts).requires_grad_(options_.requires_grad));
  }
  bind();
}

DecoderLM DecoderLM::over(ModelConfig config, ModelOptions options, std::vector<at::Tensor> params) {
  DecoderLM m(std::move(config), options, NoAllocation{});
  const std::vector<ParamSpec> specs = parameter_specs(m.config_);
  VERLPP_CHECK(params.size() == specs.size(), "{}: {} tensors given for {} parameters", m.config_.architecture,
               params.size(), specs.size());
  for (size_t i = 0; i < specs.size(); ++i) {
    const at::Tensor& p = params[i];
    VERLPP_CHECK(p.defined() && p.sizes() == c10::IntArrayRef(specs[i].shape),
                 "{}: parameter '{}' wants shape {}, got {}", m.config_.architecture, specs[i].name,
                 shape_string(specs[i].shape), p.defined() ? shape_string(p.sizes()) : std::string("none"));
    VERLPP_CHECK(p.scalar_type() == options.dtype && p.device() == options.device,
                 "{}: parameter '{}' is {} on {}, the model {} on {}", m.config_.architecture, specs[i].name,
                 c10::toString(p.scalar_type()), p.device().str(), c10::toString(options.dtype), options.device.str());
    m.index_[specs[i].name] = m.params_.size();
    m.params_.emplace_back(specs[i].name, p);
  }
  m.bind();
  return m;
}

void DecoderLM::bind() {
  auto get = [&](const std::string& name) -> at::Tensor {
    auto it = index_.find(name);
    return it == index_.end() ? at::Tensor() : params_[it->second].second;
  };
  embed_tokens_ = get("model.embed_tokens.weight");
  layers_.assign(size_t(config_.num_hidden_layers), Layer{});
  for (int64_t i = 0; i < config_.num_hidden_layers; ++i) {
    const std::string p = "model.layers." + std::to_string(i) + ".";
    Layer& l = layers_[size_t(i)];
    l.input_layernorm = get(p + "input_layernorm.weight");
    l.q_proj = get(p + "self_attn.q_proj.weight"), l.q_bias = get(p + "self_attn.q_proj.bias");
    l.k_proj = get(p + "self_attn.k_proj.weight"), l.k_bias = get(p + "self_attn.k_proj.bias");
    l.v_proj = get(p + "self_attn.v_proj.weight"), l.v_bias = get(p + "self_attn.v_proj.bias");
    l.o_proj = get(p + "self_attn.o_proj.weight"), l.o_bias = get(p + "self_attn.o_proj.bias");
    l.q_norm = get(p + "self_attn.q_norm.weight"), l.k_norm = get(p + "self_attn.k_norm.weight");
    l.post_attention_layernorm = get(p + "post_attention_layernorm.weight");
    l.gate_proj = get(p + "mlp.gate_proj.weight"), l.gate_bias = get(p + "mlp.gate_proj.bias");
    l.up_proj = get(p + "mlp.up_proj.weight"), l.up_bias = get(p + "mlp.up_proj.bias");
    l.down_proj = get(p + "mlp.down_proj.weight"), l.down_bias = get(p + "mlp.down_proj.bias");
    auto fused = [&](const std::string& name) {
      auto it = fused_buffers_.find(p + name);
      return it == fused_buffers_.end() ? at::Tensor() : it->second;
    };
    l.qkv_proj = fused("self_attn.qkv_proj.weight"), l.qkv_bias = fused("self_attn.qkv_proj.bias");
    l.gate_up_proj = fused("mlp.gate_up_proj.weight"), l.gate_up_bias = fused("mlp.gate_up_proj.bias");
  }
  norm_ = get("model.norm.weight");
  lm_head_ = config_.head != ModelHead::kCausalLM ? at::Tensor()
             : config_.tie_word_embeddings        ? embed_tokens_
                                                  : get("lm_head.weight");
  score_ = get("score.weight");
  score_bias_ = get("score.bias");
  inv_freq_ = rope_inv_freq(config_, options_.device);
}

const at::Tensor& DecoderLM::parameter(const std::string& name) const {
  if (gather_ && name.rfind("model.layers.", 0) != 0) gather_->gather_outer();
  if (name == "lm_head.weight" && config_.head == ModelHead::kCausalLM && config_.tie_word_embeddings)
    return params_[index_.at("model.embed_tokens.weight")].second;
  auto it = index_.find(name);
  if (it == index_.end()) throw Error(config_.architecture, fmt::format("the model has no parameter '{}'", name));
  return params_[it->second].second;
}

std::vector<at::Tensor> DecoderLM::layer_parameters(int64_t index) const {
  const Layer& l = layers_[size_t(index)];
  std::vector<at::Tensor> out;
  for (const at::Tensor* t : {&l.input_layernorm, &l.q_proj, &l.q_bias, &l.k_proj, &l.k_bias, &l.v_proj, &l.v_bias,
                              &l.o_proj, &l.o_bias, &l.q_norm, &l.k_norm, &l.post_attention_layernorm, &l.gate_proj,
                              &l.gate_bias, &l.up_proj, &l.up_bias, &l.down_proj, &l.down_bias})
    if (t->defined()) out.push_back(*t);
  if (lora_)
    for (const at::Tensor& t : lora_->layer_parameters(index)) out.push_back(t);
  return out;
}

void DecoderLM::set_requires_grad(bool requires_grad) {
  options_.requires_grad = requires_grad;
  for (auto& [name, p] : params_) p.requires_grad_(requires_grad);
}

void DecoderLM::to(at::ScalarType dtype, c10::Device device) {
  at::NoGradGuard no_grad;
  options_.dtype = dtype;
  options_.device = device;
  // Fused views become tensors of their own; a view would keep the whole old buffer alive.
  fused_buffers_.clear();
  fused_names_.clear();
  for (auto& [name, p] : params_)
    p = p.detach()
            .to(at::TensorOptions().dtype(dtype).device(device), /*non_blocking=*/false, /*copy=*/p.is_view())
            .requires_grad_(options_.requires_grad);
  bind();
}

void DecoderLM::fuse_projections() {
  if (!fused_buffers_.empty()) return;
  at::NoGradGuard no_grad;
  // Concatenates the named parameters (in order) along rows into one buffer named `fused`,
  // then makes each a row view of it. Rows of a row-major matrix are contiguous, so the views
  // are contiguous tensors of the same shape as before.
  auto fuse = [&](const std::string& fused, const std::vector<std::string>& names) {
    std::vector<at::Tensor> parts;
    for (const std::string& n : names) {
      auto it = index_.find(n);
      if (it == index_.end()) return;  // e.g. no biases: nothing to fuse
      parts.push_back(params_[it->second].second);
    }
    at::Tensor buffer = at::cat(parts, 0);
    int64_t row = 0;
    for (const std::string& n : names) {
      at::Tensor& param = params_[index_.at(n)].second;
      const int64_t rows = param.size(0);
      param = buffer.narrow(0, row, rows);
      row += rows;
      fused_names_.insert(n);
    }
    fused_buffers_[fused] = buffer;
  };
  for (int64_t i = 0; i < config_.num_hidden_layers; ++i) {
    const std::string a = "model.layers." + std::to_string(i) + ".self_attn.";
    const std::string m = "model.layers." + std::to_string(i) + ".mlp.";
    for (const char* kind : {"weight", "bias"}) {
      const std::string k = kind;
      fuse(a + "qkv_proj." + k, {a + "q_proj." + k, a + "k_proj." + k, a + "v_proj." + k});
      fuse(m + "gate_up_proj." + k, {m + "gate_proj." + k, m + "up_proj." + k});
    }
  }
  bind();
}

void DecoderLM::init_weights(uint64_t seed) {
  at::NoGradGuard no_grad;
  at::Generator gen = at::detail::createCPUGenerator(seed);
  std::vector<ParamSpec> specs = parameter_specs(config_);
  for (size_t i = 0; i < specs.size(); ++i) {
    at::Tensor t = at::empty(specs[i].shape, at::TensorOptions().dtype(at::kFloat));
    switch (specs[i].init) {
      case ParamSpec::Init::kNormal:
        t.normal_(0.0, config_.initializer_range, gen);
        break;
      case ParamSpec::Init::kZeros:
        t.zero_();
        break;
      case ParamSpec::Init::kOnes:
        t.fill_(1.0);
        break;
    }
    if (specs[i].name == "model.embed_tokens.weight" && config_.pad_token_id && *config_.pad_token_id >= 0 &&
        *config_.pad_token_id < config_.vocab_size)
      t[*config_.pad_token_id].zero_();  // as HF's init does for the padding row
    params_[i].second.copy_(t);
  }
  note_weights_changed();
}

std::pair<at::Tensor, at::Tensor> DecoderLM::add_norm(const at::Tensor& residual, const at::Tensor& delta,
                                                      const at::Tensor& weight, const LayerKernels* fused) const {
  const double eps = config_.rms_norm_eps;
  if (!delta.defined()) return {residual, rms_norm(residual, weight, eps)};
  if (fused != nullptr) {
    at::Tensor sum = residual;  // the kernel may write the sum into it (the caller owns it)
    std::pair<at::Tensor, at::Tensor> out = fused->add_rms_norm(delta, sum, weight, eps);
    if (out.first.defined()) return out;
  }
  at::Tensor h = residual + delta;
  return {h, rms_norm(h, weight, eps)};
}

namespace {

// Whether a model being trained (its weight `w` requires grad) computes q/k/v (and, with
// kernels for it, gate/up) as one GEMM each (layer_forward): by default on accelerators, where
// fewer and wider GEMMs pay (docs/benchmarks.md), not on the CPU, where they do not and the
// reference runs keep their arithmetic. ForwardOptions::training_projections forces either way
// (tests; side-by-side timing).
bool training_projections_fused(const at::Tensor& w, TrainingProjections choice) {
  if (!w.requires_grad()) return false;
  switch (choice) {
    case TrainingProjections::kFused:
      return true;
    case TrainingProjections::kSplit:
      return false;
    case TrainingProjections::kAuto:
      break;
  }
  return !w.is_cpu();
}

}  // namespace

std::pair<at::Tensor, at::Tensor> DecoderLM::layer_forward(int64_t index, const at::Tensor& hidden,
                                                           const at::Tensor& pending, const RotateFn& rotate,
                                                           const AttendFn& attend, const LayerKernels* kernels,
                                                           bool own_hidden) const {
  const Layer& l = layers_[size_t(index)];
  const LayerKernels* fused_adds = own_hidden ? kernels : nullptr;
  const double eps = config_.rms_norm_eps;
  std::vector<int64_t> lead(hidden.sizes().begin(), hidden.sizes().end() - 1);
  auto heads = [&](const at::Tensor& t, int64_t n) {
    std::vector<int64_t> shape = lead;
    shape.push_back(n);
    shape.push_back(config_.head_dim);
    return t.view(shape);
  };
  auto [residual, x] = add_norm(hidden, pending, l.input_layernorm, fused_adds);
  const int64_t HD = config_.num_attention_heads * config_.head_dim,
                KVD = config_.num_key_value_heads * config_.head_dim;
  at::Tensor q, k, v;
  if (l.qkv_proj.defined()) {  // fuse_projections: one GEMM, q/k/v are column slices (strided rows)
    const at::Tensor qkv = at::linear(x, l.qkv_proj, l.qkv_bias);
    q = qkv.narrow(-1, 0, HD), k = qkv.narrow(-1, HD, KVD), v = qkv.narrow(-1, HD + KVD, KVD);
  } else if (training_projections_fused(l.q_proj, options_.forward.training_projections)) {
    // A model being trained: q, k and v from one GEMM over the weights concatenated for this
    // forward (a few MB), so the backward is one GEMM per operand too, where three GEMMs (two of
    // them narrow: K*D columns) and two adds of their input gradients were. split_with_sizes'
    // backward gathers the three output gradients with one copy. The choice depends on the
    // parameters only, so a no-grad pass of this model (old_log_prob) computes the same.
    const at::Tensor w = at::cat({l.q_proj, l.k_proj, l.v_proj}, 0);
    const at::Tensor b = l.q_bias.defined() ? at::cat({l.q_bias, l.k_bias, l.v_bias}, 0) : at::Tensor();
    const std::vector<at::Tensor> parts = at::split_with_sizes(at::linear(x, w, b), {HD, KVD, KVD}, -1);
    q = parts[0], k = parts[1], v = parts[2];
  } else {
    q = at::linear(x, l.q_proj, l.q_bias), k = at::linear(x, l.k_proj, l.k_bias), v = at::linear(x, l.v_proj, l.v_bias);
  }
  if (lora_) {
    q = with_lora(q, index, LoraProjection::kQ, x);
    k = with_lora(k, index, LoraProjection::kK, x);
    v = with_lora(v, index, LoraProjection::kV, x);
  }
  q = heads(q, config_.num_attention_heads);
  k = heads(k, config_.num_key_value_heads);
  v = heads(v, config_.num_key_value_heads);
  if (config_.qk_norm) {
    q = rms_norm(q, l.q_norm, eps);
    k = rms_norm(k, l.k_norm, eps);
  }
  rotate(q, k, v);
  at::Tensor a = attend(index, q, k, v);  // [..., H, D]
  std::vector<int64_t> flat = lead;
  flat.push_back(HD);
  at::Tensor h;
  const at::Tensor attended = a.reshape(flat);
  at::Tensor o = row_parallel_linear(attended, l.o_proj, l.o_bias);
  if (lora_) o = with_lora(o, index, LoraProjection::kO, attended);
  std::tie(h, x) = add_norm(residual, o, l.post_attention_layernorm, fused_adds);
  at::Tensor gate, up, mlp;
  const int64_t F = config_.intermediate_size;
  // [gate | up] whole into the product kernel has no place for the adapters' terms.
  const bool gate_up_adapted = lora_ && (lora_->find(index, LoraProjection::kGate) != nullptr ||
                                         lora_->find(index, LoraProjection::kUp) != nullptr);
  if (l.gate_up_proj.defined()) {
    const at::Tensor gate_up = at::linear(x, l.gate_up_proj, l.gate_up_bias);
    gate = gate_up.narrow(-1, 0, F), up = gate_up.narrow(-1, F, F);
  } else if (training_projections_fused(l.gate_proj, options_.forward.training_projections) && kernels != nullptr &&
             kernels->offers_silu_mul_halves() && !gate_up_adapted) {
    // Training with kernels that take [gate | up] whole (silu_mul_halves): one GEMM each way, as
    // for q/k/v above, and the product's backward writes both gradients into one tensor.
    const at::Tensor w = at::cat({l.gate_proj, l.up_proj}, 0);
    const at::Tensor b = l.gate_bias.defined() ? at::cat({l.gate_bias, l.up_bias}, 0) : at::Tensor();
    const at::Tensor gate_up = at::linear(x, w, b);
    mlp = kernels->silu_mul_halves(gate_up);
    if (!mlp.defined()) {
      const std::vector<at::Tensor> parts = at::split_with_sizes(gate_up, {F, F}, -1);
      gate = parts[0], up = parts[1];
    }
  } else {
    gate = at::linear(x, l.gate_proj, l.gate_bias), up = at::linear(x, l.up_proj, l.up_bias);
  }
  if (gate_up_adapted) {
    gate = with_lora(gate, index, LoraProjection::kGate, x);
    up = with_lora(up, index, LoraProjection::kUp, x);
  }
  if (!mlp.defined() && kernels != nullptr) mlp = kernels->silu_mul(gate, up);
  if (!mlp.defined()) mlp = at::silu(gate) * up;
  at::Tensor down = row_parallel_linear(mlp, l.down_proj, l.down_bias);
  if (lora_) down = with_lora(down, index, LoraProjection::kDown, mlp);
  return {h, down};
}

bool DecoderLM::lora_trained() const {
  return lora_ && !lora_->named_parameters().empty() && lora_->named_parameters().front().second.requires_grad();
}

at::Tensor DecoderLM::with_lora(const at::Tensor& y, int64_t layer, LoraProjection p, const at::Tensor& x) const {
  at::Tensor d = lora_->delta(layer, p, x);
  return d.defined() ? y + d : y;
}

void DecoderLM::set_lora(std::shared_ptr<const LoraAdapters> adapters) {
  if (adapters) {
    VERLPP_CHECK(!tp_, "{}: LoRA adapters with tensor parallelism are not supported", config_.architecture);
    const ModelConfig& m = adapters->model_config();
    VERLPP_CHECK(m.num_hidden_layers == config_.num_hidden_layers && m.hidden_size == config_.hidden_size &&
                     m.intermediate_size == config_.intermediate_size &&
                     m.num_attention_heads == config_.num_attention_heads &&
                     m.num_key_value_heads == config_.num_key_value_heads && m.head_dim == config_.head_dim,
                 "{}: the LoRA adapters were made for another shape ({} layers, hidden {}, MLP {}, heads {}/{}, head "
                 "dim {}; this model: {} layers, hidden {}, MLP {}, heads {}/{}, head dim {})",
                 config_.architecture, m.num_hidden_layers, m.hidden_size, m.intermediate_size, m.num_attention_heads,
                 m.num_key_value_heads, m.head_dim, config_.num_hidden_layers, config_.hidden_size,
                 config_.intermediate_size, config_.num_attention_heads, config_.num_key_value_heads, config_.head_dim);
    const std::vector<at::Tensor> tensors = adapters->parameters();
    VERLPP_CHECK(tensors.empty() || tensors.front().device() == options_.device,
                 "{}: the LoRA adapters live on {}, the model on {}", config_.architecture,
                 tensors.front().device().str(), options_.device.str());
  }
  lora_ = std::move(adapters);
}

at::Tensor DecoderLM::row_parallel_linear(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias) const {
  if (!tp_) return at::linear(x, weight, bias);
  at::Tensor out = at::linear(x, weight).contiguous();
  tp_->all_reduce_sum(out);
  return bias.defined() ? out + bias : out;
}

void DecoderLM::set_tensor_parallel(std::shared_ptr<const TensorParallelGroup> group, const ModelConfig& whole) {
  VERLPP_CHECK(group == nullptr || !lora_, "{}: tensor parallelism with LoRA adapters is not supported",
               config_.architecture);
  if (group != nullptr) {
    const TensorParallelLayout layout = tensor_parallel_layout(whole, group->size());
    const ModelConfig mine = rank_config(whole, layout);
    VERLPP_CHECK(mine.num_attention_heads == config_.num_attention_heads &&
                     mine.num_key_value_heads == config_.num_key_value_heads &&
                     mine.intermediate_size == config_.intermediate_size && mine.vocab_size == config_.vocab_size,
                 "{}: this model (heads {}, KV heads {}, MLP width {}, vocabulary {}) is not one rank's part of the "
                 "whole over {} ranks (heads {}, KV heads {}, MLP width {}, vocabulary {})",
                 config_.architecture, config_.num_attention_heads, config_.num_key_value_heads,
                 config_.intermediate_size, config_.vocab_size, group->size(), mine.num_attention_heads,
                 mine.num_key_value_heads, mine.intermediate_size, mine.vocab_size);
  }
  tp_ = std::move(group);
  tp_whole_ = whole;
}

at::Tensor DecoderLM::run(const at::Tensor& input_ids, const at::Tensor& position_ids, const AttendFn& attend,
                          const RotateFn& rotate, std::shared_ptr<const LayerKernels> kernels) const {
  VERLPP_CHECK(input_ids.scalar_type() == at::kLong, "{}: input_ids must be int64, got {}", config_.architecture,
               c10::toString(input_ids.scalar_type()));
  VERLPP_CHECK(position_ids.sizes() == input_ids.sizes(), "{}: position_ids {} and input_ids {} differ in shape",
               config_.architecture, shape_string(position_ids.sizes()), shape_string(input_ids.sizes()));
  if (gather_) gather_->gather_outer();
  at::Tensor hidden;
  if (tp_) {
    // Vocabulary-parallel lookup: each rank the ids in its rows, zeros elsewhere, summed.
    const int64_t rows = config_.vocab_size;
    const at::Tensor local = input_ids - tp_->rank() * rows;
    const at::Tensor mine = local.ge(0).logical_and(local.lt(rows));
    hidden = at::embedding(embed_tokens_, local.clamp(0, rows - 1)).masked_fill_(mine.logical_not().unsqueeze(-1), 0);
    tp_->all_reduce_sum(hidden);
  } else {
    hidden = at::embedding(embed_tokens_, input_ids);
  }
  RotateFn rope = rotate;
  if (!rope) {
    // cos/sin once per forward, shared by every layer; captured by value (see below), as are
    // the layer kernels, the positions and inv_freq.
    std::pair<at::Tensor, at::Tensor> cos_sin = rope_cos_sin(inv_freq_, position_ids, options_.dtype);
    rope = [cos_sin, kernels, position_ids, inv_freq = inv_freq_](at::Tensor& q, at::Tensor& k, at::Tensor& v) {
      if (kernels) {
        auto [rq, rk, rv] = kernels->rotate(q, k, v, position_ids, inv_freq);
        if (rq.defined()) {
          q = std::move(rq);
          k = std::move(rk);
          v = std::move(rv);
          return;
        }
      }
      q = apply_rope(q, cos_sin.first, cos_sin.second);
      k = apply_rope(k, cos_sin.first, cos_sin.second);
    };
  }
  const bool checkpoint =
      gradient_checkpointing_ && at::GradMode::is_enabled() && (options_.requires_grad || lora_trained());
  // The recomputation would draw another dropout mask than the forward did.
  VERLPP_CHECK(!(checkpoint && lora_ && lora_->config().dropout > 0),
               "{}: LoRA dropout ({}) with gradient checkpointing is not supported: set lora_dropout to 0 or turn "
               "enable_gradient_checkpointing off",
               config_.architecture, lora_ ? lora_->config().dropout : 0.0);
  // Without checkpointing, a layer's MLP output rides to the next layer (or the final norm)
  // unadded, so that the residual add and that RMSNorm can run as one kernel.
  at::Tensor pending;
  const bool gathered_layers = gather_ && gather_->gathers_layers();
  for (int64_t i = 0; i < config_.num_hidden_layers; ++i) {
    if (gathered_layers) {
      // Sharded parameters: the layer runs inside the gather's bracket, as a whole function of
      // its input (captured by value, as for checkpointing: its backward may run it again).
      AttendFn a = attend;
      hidden = gather_->run_layer(
          i,
          [this, i, rope, a, kernels](const at::Tensor& h) {
            std::pair<at::Tensor, at::Tensor> out = layer_forward(i, h, at::Tensor(), rope, a, kernels.get(), false);
            return out.first + out.second;
          },
          hidden, checkpoint);
      continue;
    }
    if (!checkpoint) {
      std::tie(hidden, pending) = layer_forward(i, hidden, pending, rope, attend, kernels.get(), /*own_hidden=*/true);
      continue;
    }
    // Everything the recomputation needs is copied into the closure (the RoPE function with
    // its cos/sin, the attention function): the backward runs after this call has returned.
    AttendFn a = attend;
    hidden = detail::checkpointed(
        [this, i, rope, a, kernels](const at::Tensor& h) {
          std::pair<at::Tensor, at::Tensor> out = layer_forward(i, h, at::Tensor(), rope, a, kernels.get(), false);
          return out.first + out.second;
        },
        hidden, layer_parameters(i));
  }
  return add_norm(hidden, pending, norm_, kernels.get()).second;
}

at::Tensor DecoderLM::forward_padded(const at::Tensor& input_ids, const at::Tensor& attention_mask,
                                     const at::Tensor& position_ids,
                                     std::shared_ptr<const LayerKernels> kernels) const {
  VERLPP_CHECK(input_ids.dim() == 2, "{}: forward_padded wants input_ids [B, T], got {}", config_.architecture,
               shape_string(input_ids.sizes()));
  const int64_t B = input_ids.size(0), T = input_ids.size(1);
  const c10::Device dev = input_ids.device();
  at::Tensor allowed;  // [B, T, T] bool, with a mask
  at::Tensor positions = position_ids;
  if (attention_mask.defined()) {
    VERLPP_CHECK(attention_mask.sizes() == input_ids.sizes(), "{}: attention_mask {} and input_ids {} differ",
                 config_.architecture, shape_string(attention_mask.sizes()), shape_string(input_ids.sizes()));
    at::Tensor valid = attention_mask.to(at::kBool);  // [B, T]
    at::Tensor eye = at::eye(T, at::TensorOptions().dtype(at::kBool).device(dev));
    allowed = causal_mask(T, T, dev).unsqueeze(0).logical_and(valid.unsqueeze(1).logical_or(eye.unsqueeze(0)));
    if (!positions.defined()) positions = (valid.to(at::kLong).cumsum(-1) - 1).clamp_min(0);
  }
  if (!positions.defined())
    positions = at::arange(T, at::TensorOptions().dtype(at::kLong).device(dev)).unsqueeze(0).expand({B, T});
  const double scale = 1.0 / std::sqrt(double(config_.head_dim));
  // Captures by value: with gradient checkpointing this runs again in the backward. Without a
  // mask every row is whole, and causal attention needs no [B, T, T] mask: fused kernels then
  // skip the blocks above the diagonal (half the work) instead of reading a mask.
  const AttentionOptions how = options_.forward.attention;
  if (!attention_mask.defined())
    return run(
        input_ids, positions,
        [scale, how](int64_t, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v) {
          return causal_attention(q, k, v, scale, how);
        },
        {}, std::move(kernels));
  return run(
      input_ids, positions,
      [allowed, scale, how](int64_t, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v) {
        return attention(q, k, v, allowed, scale, how);
      },
      {}, std::move(kernels));
}

at::Tensor DecoderLM::forward_packed(const at::Tensor& input_ids, const at::Tensor& position_ids,
                                     const at::Tensor& cu_seqlens, std::shared_ptr<const LayerKernels> kernels) const {
  VERLPP_CHECK(input_ids.dim() == 1, "{}: forward_packed wants input_ids [N], got {}", config_.architecture,
               shape_string(input_ids.sizes()));
  at::Tensor cu = cu_seqlens.to(at::kCPU).to(at::kLong).contiguous();
  VERLPP_CHECK(cu.dim() == 1 && cu.numel() >= 2, "{}: cu_seqlens must be [S + 1], got {}", config_.architecture,
               shape_string(cu.sizes()));
  std::vector<int64_t> bounds(cu.data_ptr<int64_t>(), cu.data_ptr<int64_t>() + cu.numel());
  VERLPP_CHECK(bounds.front() == 0 && bounds.back() == input_ids.size(0),
               "{}: cu_seqlens must run from 0 to N = {}, got {} .. {}", config_.architecture, input_ids.size(0),
               bounds.front(), bounds.back());
  for (size_t s = 1; s < bounds.size(); ++s)
    VERLPP_CHECK(bounds[s] >= bounds[s - 1], "{}: cu_seqlens decreases at index {} ({} after {})", config_.architecture,
                 s, bounds[s], bounds[s - 1]);
  const double scale = 1.0 / std::sqrt(double(config_.head_dim));
  // Runs of adjacent segments of one length, each attended as one batch [count, len, H, D]: rows
  // of one length (responses cut at max_response_length, prompts of one template) cost one SDPA
  // call a layer instead of one per sequence (each a few host ops and a small kernel, forward and
  // backward).
  struct Run {
    int64_t start, len, count;
  };
  std::vector<Run> runs;
  for (size_t s = 0; s + 1 < bounds.size(); ++s) {
    const int64_t start = bounds[s], len = bounds[s + 1] - bounds[s];
    if (len == 0) continue;
    if (!runs.empty() && runs.back().len == len && runs.back().start + runs.back().len * runs.back().count == start)
      ++runs.back().count;
    else
      runs.push_back({start, len, 1});
  }
  // Captures by value: with gradient checkpointing this runs again in the backward.
  const AttentionOptions how = options_.forward.attention;
  return run(
      input_ids, position_ids,
      [runs, scale, how](int64_t, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v) {
        std::vector<at::Tensor> outs;
        for (const Run& r : runs) {
          auto batch = [&](const at::Tensor& t) {
            return t.narrow(0, r.start, r.len * r.count).reshape({r.count, r.len, t.size(1), t.size(2)});
          };
          outs.push_back(causal_attention(batch(q), batch(k), batch(v), scale, how)
                             .reshape({r.count * r.len, q.size(1), v.size(2)}));
        }
        if (outs.empty()) return q.narrow(0, 0, 0);
        return outs.size() == 1 ? outs.front() : at::cat(outs, 0);
      },
      {}, std::move(kernels));
}

at::Tensor DecoderLM::forward_cached(const at::Tensor& input_ids, const at::Tensor& position_ids,
                                     AttentionBackend& backend, std::shared_ptr<const LayerKernels> kernels) const {
  VERLPP_CHECK(input_ids.dim() == 1, "{}: forward_cached wants input_ids [N], got {}", config_.architecture,
               shape_string(input_ids.sizes()));
  const double scale = 1.0 / std::sqrt(double(config_.head_dim));
  RotateFn rotate;  // empty: the reference RoPE
  if (backend.rotates())
    rotate = [&](at::Tensor& q, at::Tensor& k, at::Tensor&) { backend.rotate(q, k, position_ids, inv_freq_); };
  return run(
      input_ids, position_ids,
      [&](int64_t layer, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v) {
        return backend.attend(layer, q, k, v, scale);
      },
      rotate, std::move(kernels));
}

at::Tensor DecoderLM::logits(const at::Tensor& hidden) const {
  VERLPP_CHECK(lm_head_.defined(), "{}: this model has a score head, not an LM head (use scores())",
               config_.architecture);
  if (gather_) gather_->gather_outer();
  if (tp_) {
    // Every rank's vocabulary rows, side by side, less the last rank's padding.
    const std::vector<int64_t> lead(hidden.sizes().begin(), hidden.sizes().end() - 1);
    const at::Tensor local = at::linear(hidden.reshape({-1, hidden.size(-1)}), lm_head_);
    std::vector<int64_t> shape = lead;
    shape.push_back(tp_whole_.vocab_size);
    return tp_->all_gather_columns(local).narrow(-1, 0, tp_whole_.vocab_size).reshape(shape);
  }
  return at::linear(hidden, lm_head_);
}

at::Tensor DecoderLM::scores(const at::Tensor& hidden) const {
  VERLPP_CHECK(score_.defined(), "{}: this model has an LM head, not a score head (use logits())",
               config_.architecture);
  if (gather_) gather_->gather_outer();
  return at::linear(hidden, score_, score_bias_);
}

at::Tensor last_token(const at::Tensor& values, const at::Tensor& attention_mask) {
  VERLPP_CHECK(attention_mask.dim() == 2 && values.dim() >= 2 && values.size(0) == attention_mask.size(0) &&
                   values.size(1) == attention_mask.size(1),
               "last_token: values {} and attention_mask {} do not share [B, T]", shape_string(values.sizes()),
               shape_string(attention_mask.sizes()));
  const int64_t B = values.size(0), T = values.size(1);
  at::Tensor steps = at::arange(T, at::TensorOptions().dtype(at::kLong).device(values.device()));
  at::Tensor last = (steps.unsqueeze(0) * attention_mask.to(at::kLong)).argmax(-1);  // [B]
  at::Tensor rows = at::arange(B, at::TensorOptions().dtype(at::kLong).device(values.device()));
  return values.flatten(0, 1).index_select(0, rows * T + last);
}

}  // namespace verlpp::model
