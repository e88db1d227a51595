// LoRA adapters: PEFT's module matching, its initialisation and the adapter's forward term.
#include <verlpp/model/lora.hpp>

#include <verlpp/core/error.hpp>

#include <ATen/TensorOperators.h>
#include <ATen/CPUGeneratorImpl.h>
#include <ATen/core/grad_mode.h>
#include <ATen/ops/dropout.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/linear.h>
#include <ATen/ops/matmul.h>

#include <cmath>
#include <regex>

namespace verlpp::model {
namespace {

constexpr std::array<LoraProjection, kLoraProjections> kAll = {
    LoraProjection::kQ,    LoraProjection::kK,  LoraProjection::kV,   LoraProjection::kO,
    LoraProjection::kGate, LoraProjection::kUp, LoraProjection::kDown};

// PEFT's rule for a list entry: the whole path, or its last dotted components.
bool matches_name(const std::string& path, const std::string& name) {
  if (path == name) return true;
  return path.size() > name.size() && path.compare(path.size() - name.size(), name.size(), name) == 0 &&
         path[path.size() - name.size() - 1] == '.';
}

bool matches(const std::string& path, const std::vector<std::string>& names, const std::optional<std::string>& regex) {
  if (regex) return std::regex_match(path, std::regex(*regex));
  for (const std::string& n : names)
    if (n == "all-linear" || matches_name(path, n)) return true;
  return false;
}

}  // namespace

const char* lora_projection_module(LoraProjection p) {
  switch (p) {
    case LoraProjection::kQ:
      return "self_attn.q_proj";
    case LoraProjection::kK:
      return "self_attn.k_proj";
    case LoraProjection::kV:
      return "self_attn.v_proj";
    case LoraProjection::kO:
      return "self_attn.o_proj";
    case LoraProjection::kGate:
      return "mlp.gate_proj";
    case LoraProjection::kUp:
      return "mlp.up_proj";
    case LoraProjection::kDown:
      return "mlp.down_proj";
  }
  return "";
}

std::string lora_module_path(int64_t layer, LoraProjection p) {
  return "model.layers." + std::to_string(layer) + "." + lora_projection_module(p);
}

std::string lora_parameter_name(int64_t layer, LoraProjection p, bool b) {
  return "base_model.model." + lora_module_path(layer, p) + (b ? ".lora_B.weight" : ".lora_A.weight");
}

std::string lora_base_weight_name(int64_t layer, LoraProjection p) { return lora_module_path(layer, p) + ".weight"; }

std::pair<int64_t, int64_t> lora_projection_shape(const ModelConfig& m, LoraProjection p) {
  const int64_t C = m.hidden_size, F = m.intermediate_size;
  const int64_t HD = m.num_attention_heads * m.head_dim, KVD = m.num_key_value_heads * m.head_dim;
  switch (p) {
    case LoraProjection::kQ:
      return {C, HD};
    case LoraProjection::kK:
    case LoraProjection::kV:
      return {C, KVD};
    case LoraProjection::kO:
      return {HD, C};
    case LoraProjection::kGate:
    case LoraProjection::kUp:
      return {C, F};
    case LoraProjection::kDown:
      return {F, C};
  }
  return {0, 0};
}

bool LoraConfig::targets(const std::string& path) const {
  if (!matches(path, target_modules, target_regex)) return false;
  return !matches(path, exclude_modules, exclude_regex);
}

void LoraConfig::validate(const std::string& where, int64_t layers) const {
  VERLPP_CHECK(rank >= 1, "{}: lora_rank {} must be at least 1", where, rank);
  VERLPP_CHECK(std::isfinite(alpha) && alpha > 0, "{}: lora_alpha {} must be a positive number", where, alpha);
  VERLPP_CHECK(dropout >= 0 && dropout < 1, "{}: lora_dropout {} must be in [0, 1)", where, dropout);
  for (const std::optional<std::string>* re : {&target_regex, &exclude_regex}) {
    if (!*re) continue;
    try {
      std::regex compiled(**re);
      (void)compiled;
    } catch (const std::regex_error& e) {
      throw Error(where, fmt::format("'{}' is not a regular expression: {}", **re, e.what()));
    }
  }
  if (!target_regex) {
    VERLPP_CHECK(!target_modules.empty(), "{}: target_modules is empty (give 'all-linear' or projection names)", where);
    // A name that matches no projection is almost always a typo (PEFT fails the same way).
    for (const std::string& name : target_modules) {
      if (name == "all-linear") continue;
      bool found = false;
      for (LoraProjection p : kAll) found = found || matches_name(lora_module_path(0, p), name);
      VERLPP_CHECK(found,
                   "{}: target module '{}' is no projection of this model (q_proj, k_proj, v_proj, o_proj, gate_proj, "
                   "up_proj, down_proj, or 'all-linear')",
                   where, name);
    }
  }
  int64_t targeted = 0;
  for (int64_t l = 0; l < layers; ++l)
    for (LoraProjection p : kAll) targeted += targets(lora_module_path(l, p)) ? 1 : 0;
  VERLPP_CHECK(targeted > 0, "{}: target_modules and exclude_modules leave no projection with an adapter", where);
}

LoraAdapters::LoraAdapters(const ModelConfig& model, LoraConfig config, at::ScalarType dtype, c10::Device device)
    : model_(model), config_(std::move(config)) {
  config_.validate("lora", model_.num_hidden_layers);
  const at::TensorOptions options = at::TensorOptions().dtype(dtype).device(device);
  layers_.resize(size_t(model_.num_hidden_layers));
  for (int64_t l = 0; l < model_.num_hidden_layers; ++l) {
    for (LoraProjection p : kAll) {
      if (!config_.targets(lora_module_path(l, p))) continue;
      const auto [in, out] = lora_projection_shape(model_, p);
      LoraPair pair{at::empty({config_.rank, in}, options), at::empty({out, config_.rank}, options)};
      named_.emplace_back(lora_parameter_name(l, p, false), pair.a);
      named_.emplace_back(lora_parameter_name(l, p, true), pair.b);
      layers_[size_t(l)][size_t(p)] = std::move(pair);
    }
  }
}

void LoraAdapters::init(uint64_t seed) {
  at::NoGradGuard no_grad;
  at::Generator gen = at::detail::createCPUGenerator(seed);
  for (auto& layer : layers_)
    for (auto& pair : layer) {
      if (!pair) continue;
      // kaiming_uniform_(a = sqrt(5)): gain sqrt(2 / (1 + 5)), bound gain * sqrt(3 / fan_in) = 1 / sqrt(fan_in).
      const double bound = 1.0 / std::sqrt(double(pair->a.size(1)));
      at::Tensor a = at::empty(pair->a.sizes(), at::TensorOptions().dtype(at::kFloat));
      a.uniform_(-bound, bound, gen);
      pair->a.copy_(a);
      pair->b.zero_();
    }
}

const LoraPair* LoraAdapters::find(int64_t layer, LoraProjection p) const {
  if (layer < 0 || layer >= int64_t(layers_.size())) return nullptr;
  const auto& pair = layers_[size_t(layer)][size_t(p)];
  return pair ? &*pair : nullptr;
}

std::vector<at::Tensor> LoraAdapters::parameters() const {
  std::vector<at::Tensor> out;
  for (const auto& [name, t] : named_) out.push_back(t);
  return out;
}

std::vector<at::Tensor> LoraAdapters::layer_parameters(int64_t layer) const {
  std::vector<at::Tensor> out;
  for (LoraProjection p : kAll)
    if (const LoraPair* pair = find(layer, p)) {
      out.push_back(pair->a);
      out.push_back(pair->b);
    }
  return out;
}

void LoraAdapters::set_requires_grad(bool requires_grad) {
  for (auto& [name, t] : named_) t.requires_grad_(requires_grad);
}

int64_t LoraAdapters::parameter_count() const {
  int64_t n = 0;
  for (const auto& [name, t] : named_) n += t.numel();
  return n;
}

LoraAdapters LoraAdapters::copy_to(at::ScalarType dtype, c10::Device device) const {
  LoraAdapters out(model_, config_, dtype, device);
  out.copy_from(*this);
  return out;
}

void LoraAdapters::copy_from(const LoraAdapters& source) {
  VERLPP_CHECK(source.named_.size() == named_.size(), "lora: {} adapter tensors cannot take the values of {}",
               named_.size(), source.named_.size());
  at::NoGradGuard no_grad;
  for (size_t i = 0; i < named_.size(); ++i) {
    VERLPP_CHECK(
        named_[i].first == source.named_[i].first && named_[i].second.sizes() == source.named_[i].second.sizes(),
        "lora: adapter {} does not match {} of the source", named_[i].first, source.named_[i].first);
    named_[i].second.copy_(source.named_[i].second);
  }
}

at::Tensor LoraAdapters::delta(int64_t layer, LoraProjection p, const at::Tensor& x) const {
  const LoraPair* pair = find(layer, p);
  if (pair == nullptr) return {};
  at::Tensor in = x;
  if (config_.dropout > 0 && at::GradMode::is_enabled()) in = at::dropout(x, config_.dropout, /*train=*/true);
  const at::Tensor a = pair->a.to(x.scalar_type()), b = pair->b.to(x.scalar_type());
  return at::linear(at::linear(in, a), b) * config_.scale();
}

at::Tensor LoraAdapters::merged_delta(int64_t layer, LoraProjection p) const {
  const LoraPair* pair = find(layer, p);
  if (pair == nullptr) return {};
  at::NoGradGuard no_grad;
  // fp32 at least; fp64 adapters (gradient checks) stay fp64.
  const at::ScalarType dtype = pair->a.scalar_type() == at::kDouble ? at::kDouble : at::kFloat;
  return at::matmul(pair->b.to(dtype), pair->a.to(dtype)) * config_.scale();
}

}  // namespace verlpp::model
