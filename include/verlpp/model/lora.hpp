// LoRA (low-rank adaptation, as PEFT implements it): beside a frozen projection y = x W^T + b,
// an adapter adds s * B(A(dropout(x))) with A [r, in], B [out, r] and s = alpha / r. Only A and
// B are trained; the base weights stay as they are. A DecoderLM given adapters
// (DecoderLM::set_lora) applies them in every forward; a copy without them is the base model
// (the reference policy, with no second copy of the weights). Adapters are named as PEFT saves
// them ("base_model.model.<module>.lora_A.weight"), so its files map 1:1 (lora_files.hpp).
#pragma once

#include <verlpp/model/model_config.hpp>

#include <ATen/core/Tensor.h>

#include <array>
#include <cmath>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace verlpp::model {

// The seven linear projections of a decoder layer that an adapter can sit on.
enum class LoraProjection { kQ, kK, kV, kO, kGate, kUp, kDown };
inline constexpr int kLoraProjections = 7;

// The projection's module name inside its layer: "self_attn.q_proj", ..., "mlp.down_proj".
const char* lora_projection_module(LoraProjection p);
// The full module path PEFT matches against: "model.layers.<layer>.self_attn.q_proj".
std::string lora_module_path(int64_t layer, LoraProjection p);

// Which modules get adapters and how they scale (verl's model.lora_* keys, PEFT's LoraConfig).
struct LoraConfig {
  int64_t rank = 8;    // r (verl: lora_rank)
  double alpha = 16;   // scale = alpha / r (verl: lora_alpha)
  double dropout = 0;  // PEFT's lora_dropout, on the adapter's input in training forwards only
  // PEFT's target_modules: "all-linear" (every projection; the LM head never), a list of module
  // names each matching a module whose path is the name or ends in "." + name, or one regular
  // expression matched against the whole path (target_regex, used when set).
  std::vector<std::string> target_modules = {"all-linear"};
  std::optional<std::string> target_regex;
  // PEFT's exclude_modules, matched the same way; an excluded module gets no adapter.
  std::vector<std::string> exclude_modules;
  std::optional<std::string> exclude_regex;

  bool use_rslora = false;  // PEFT's rank-stabilised scale alpha / sqrt(r)

  double scale() const { return use_rslora ? alpha / std::sqrt(double(rank)) : alpha / double(rank); }
  // Whether the module at `path` gets an adapter (PEFT's matching rules, above).
  bool targets(const std::string& path) const;
  // Error naming `where` and the value for a rank < 1, a non-finite alpha, dropout outside
  // [0, 1), a bad regex, or targets that match no projection of a model with `layers` layers.
  void validate(const std::string& where, int64_t layers) const;
};

// One projection's adapter.
struct LoraPair {
  at::Tensor a;  // lora_A [r, in]
  at::Tensor b;  // lora_B [out, r]
};

// The adapters of one model: a LoraPair for every targeted projection of every layer.
class LoraAdapters {
 public:
  // Allocates A and B for every projection `config` targets in `model` (uninitialised: call
  // init() or load them), of `dtype` on `device` (fp32 for training: they are their own masters).
  LoraAdapters(const ModelConfig& model, LoraConfig config, at::ScalarType dtype = at::kFloat,
               c10::Device device = c10::Device(c10::kCPU));

  const LoraConfig& config() const { return config_; }
  const ModelConfig& model_config() const { return model_; }
  // PEFT's initialisation: A Kaiming-uniform with a = sqrt(5) (uniform in +-1/sqrt(in)), B zeros,
  // so a fresh adapter changes nothing. Drawn on the CPU in fp32 in named_parameters() order.
  void init(uint64_t seed);
  // The adapter on `p` of layer `layer`, or null where none is.
  const LoraPair* find(int64_t layer, LoraProjection p) const;
  // (PEFT name, tensor) for every A and B, layer by layer in projection order, A before B.
  const std::vector<std::pair<std::string, at::Tensor>>& named_parameters() const { return named_; }
  // The tensors of named_parameters(), in its order.
  std::vector<at::Tensor> parameters() const;
  // The adapter tensors of one layer (a checkpointed layer's gradients flow to them).
  std::vector<at::Tensor> layer_parameters(int64_t layer) const;
  void set_requires_grad(bool requires_grad);
  // Scalars in every A and B.
  int64_t parameter_count() const;
  // A copy with its own tensors of `dtype` on `device` (a rollout engine's), not requiring grad.
  LoraAdapters copy_to(at::ScalarType dtype, c10::Device device) const;
  // Writes `source`'s values into these tensors (same targets and shapes; an Error otherwise).
  void copy_from(const LoraAdapters& source);

  // s * B(A(dropout(x))) for x [..., in], in x's dtype (the adapter cast to it, differentiably);
  // undefined where `p` of `layer` has no adapter. Dropout only while autograd records.
  at::Tensor delta(int64_t layer, LoraProjection p, const at::Tensor& x) const;
  // s * B A [out, in] in fp32 (fp64 for fp64 adapters): what merging adds to the base weight
  // (undefined where none).
  at::Tensor merged_delta(int64_t layer, LoraProjection p) const;

 private:
  ModelConfig model_;
  LoraConfig config_;
  std::vector<std::array<std::optional<LoraPair>, kLoraProjections>> layers_;
  std::vector<std::pair<std::string, at::Tensor>> named_;
};

// The PEFT name of an adapter tensor: "base_model.model.<module path>.lora_A.weight" ("lora_B").
std::string lora_parameter_name(int64_t layer, LoraProjection p, bool b);
// The base model's parameter a projection's adapter belongs to: "<module path>.weight".
std::string lora_base_weight_name(int64_t layer, LoraProjection p);
// (in, out) of projection `p` in `model`.
std::pair<int64_t, int64_t> lora_projection_shape(const ModelConfig& model, LoraProjection p);

}  // namespace verlpp::model
