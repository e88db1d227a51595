// DecoderLM: Qwen2 / Qwen3 / Llama decoder-only transformers on plain LibTorch tensors.
// Parameters are at::Tensor leaves (not torch::nn modules: those headers cost ~18 s a file on
// these machines and break the lean-include rule), named exactly as HF names them, so
// named_parameters() maps 1:1 to checkpoint keys. Three forwards share one layer stack:
// padded batches and packed sequences for training, and a flat token step over an external
// KV cache (the engine's; see kv_cache.hpp) for rollout. Dimension letters: B batch, T time,
// N flat tokens, C hidden, H query heads, KV key/value heads, D head dim, V vocab.
#pragma once

#include <verlpp/model/forward_options.hpp>
#include <verlpp/model/model_config.hpp>

#include <ATen/core/Tensor.h>

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <set>
#include <memory>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

namespace verlpp::model {

// The caller's attention over its own KV cache, called once per layer per step. It stores the
// new tokens' k/v wherever it keeps them and returns attention over each token's sequence.
class AttentionBackend {
 public:
  virtual ~AttentionBackend() = default;
  // q: [N, H, D], k/v: [N, KV, D] for the step's N new tokens (RoPE and q/k-norm applied).
  // Returns [N, H, D] in q's dtype.
  virtual at::Tensor attend(int64_t layer, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                            double scale) = 0;
  // Whether rotate() replaces the model's RoPE for this step (asked once per forward; the
  // default is no: the model applies apply_rope itself).
  virtual bool rotates() const { return false; }
  // RoPE on q [N, H, D] and k [N, KV, D] (q/k-norm applied) at the step's positions
  // [N] int64, with the model's inv_freq [D/2] f32 (rope scaling already in it); may rotate in
  // place or replace q and k. Called only when rotates() is true.
  virtual void rotate(at::Tensor& q, at::Tensor& k, const at::Tensor& position_ids, const at::Tensor& inv_freq) {}
};

// Replacements for a layer's elementwise pieces (e.g. plugin kernels, with backwards of their
// own), each computing what the model's LibTorch ops compute, differentiably, or declining with
// an undefined result (a dtype or layout it does not take). Held by shared_ptr: with gradient
// checkpointing the backward re-runs layers after the forward call has returned.
class LayerKernels {
 public:
  virtual ~LayerKernels() = default;
  // RoPE (the training forwards; the engine's steps rotate through AttentionBackend): q
  // [..., H, D] and k [..., KV, D] (q/k-norm applied) at positions [...] int64 with the model's
  // inv_freq [D/2] f32; returns the rotated q and k, and v [..., KV, D] itself or a copy made in
  // the same pass (e.g. contiguous, for attention). {} declines.
  virtual std::tuple<at::Tensor, at::Tensor, at::Tensor> rotate(const at::Tensor& q, const at::Tensor& k,
                                                                const at::Tensor& v, const at::Tensor& positions,
                                                                const at::Tensor& inv_freq) const = 0;
  // The MLP's silu(gate) * up, rounded as HF's act_fn(gate) * up; gate, up [..., F].
  virtual at::Tensor silu_mul(const at::Tensor& gate, const at::Tensor& up) const = 0;
  // The same product for gate_up [..., 2F] = [gate | up] (one projection's output), with
  // gate_up as its one autograd input, so the backward writes both halves' gradients into one
  // tensor (two separate gradients would be gathered by a copy). {} when not offered.
  virtual at::Tensor silu_mul_halves(const at::Tensor& gate_up) const {
    (void)gate_up;
    return {};
  }
  // Whether silu_mul_halves is offered at all (a training forward then computes gate and up as
  // one GEMM for it; it may still decline a dtype, and the model then splits the result).
  virtual bool offers_silu_mul_halves() const { return false; }
  // A residual add and the next RMSNorm in one pass, for forwards without autograd:
  // {residual + x, rms_norm(residual + x, weight)} with the separate ops' roundings. May write
  // the sum into `residual` (the model owns it). {} when not offered: the model adds and norms.
  virtual std::pair<at::Tensor, at::Tensor> add_rms_norm(const at::Tensor& x, at::Tensor& residual,
                                                         const at::Tensor& weight, double eps) const {
    (void)x, (void)residual, (void)weight, (void)eps;
    return {};
  }
};

// One decoder layer as a function of its input hidden state [..., C] -> [..., C]. It owns (copies)
// what it uses: it may run again in the backward, after the forward that made it has returned.
using LayerFn = std::function<at::Tensor(const at::Tensor&)>;

class TensorParallelGroup;  // tensor_parallel.hpp
class LoraAdapters;         // lora.hpp
enum class LoraProjection;

// The seam through which a sharded trainer (ZeRO-3 / FSDP, train/sharded_weights.hpp) makes a
// model's parameters present only while they are used. The model calls gather_outer() before it
// reads a parameter outside the decoder layers (embedding, final norm, heads) and runs each
// layer through run_layer, which gathers the layer's parameters around the call (and around its
// backward). Implementations are shared by the model's copies and must be thread-compatible.
class ParameterGather {
 public:
  virtual ~ParameterGather() = default;
  // Makes the parameters outside the decoder layers present until the owner releases them.
  virtual void gather_outer() const = 0;
  // layer(hidden) with layer `index`'s parameters present while it runs, and again for its
  // backward when autograd records it. `recompute`: gradient checkpointing (the layer runs
  // without a graph and again in the backward).
  virtual at::Tensor run_layer(int64_t index, const LayerFn& layer, const at::Tensor& hidden, bool recompute) const = 0;
  // Whether the layers run through run_layer; false: only gather_outer is called (at the start
  // of every forward and head), and the layers run as without a gather (weights that stay whole
  // but may be away, e.g. offloaded to host memory: gather_outer refuses then).
  virtual bool gathers_layers() const { return true; }
};

// A parameter's HF name, shape and initialisation.
struct ParamSpec {
  enum class Init { kNormal, kZeros, kOnes };
  std::string name;  // e.g. "model.layers.0.self_attn.q_proj.weight"
  std::vector<int64_t> shape;
  Init init = Init::kNormal;
  // Elements of a tensor of this shape.
  int64_t numel() const {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    return n;
  }
};

// All parameters of a config, in HF's order. A tied lm_head is not listed (it is the embedding).
std::vector<ParamSpec> parameter_specs(const ModelConfig& config);
// Total scalar count of parameter_specs().
int64_t parameter_count(const ModelConfig& config);

// Where and how parameters live.
struct ModelOptions {
  at::ScalarType dtype = at::kFloat;  // fp32, bf16 or fp16 (fp64 for gradient checks)
  c10::Device device = c10::Device(c10::kCPU);
  bool requires_grad = false;  // leaves start frozen; a trainer turns them on
  ForwardOptions forward;      // path choices of every forward (forward_options.hpp)
};

// "float32" / "bfloat16" / "float16" (HF's names; "fp32", "bf16", "fp16" accepted) -> dtype.
at::ScalarType dtype_from_name(const std::string& name);
// The HF name of a dtype: "float32", "bfloat16", "float16".
std::string dtype_name(at::ScalarType dtype);

class DecoderLM {
 public:
  // Allocates every parameter (uninitialised); call init_weights() or load weights next.
  DecoderLM(ModelConfig config, ModelOptions options = {});
  // A model over `params` (named_parameters() order, the shapes parameter_specs gives; each of
  // options.dtype on options.device), allocating nothing: e.g. views into flat buffers whose
  // memory comes and goes (sharded weights).
  static DecoderLM over(ModelConfig config, ModelOptions options, std::vector<at::Tensor> params);

  const ModelConfig& config() const { return config_; }
  const ModelOptions& options() const { return options_; }

  // HF-style initialisation from a seed: weights ~ normal(0, initializer_range), biases 0,
  // norms 1. Drawn on the CPU in fp32 in parameter order, so the result is the same on every
  // device (then cast to the model's dtype).
  void init_weights(uint64_t seed);

  // (HF name, tensor) for every parameter, in HF order; tied lm_head omitted.
  const std::vector<std::pair<std::string, at::Tensor>>& named_parameters() const { return params_; }
  // One parameter by HF name ("lm_head.weight" resolves to the embedding when tied).
  const at::Tensor& parameter(const std::string& name) const;
  void set_requires_grad(bool requires_grad);

  // The weights' version: a counter that whoever writes the weights in place bumps (a trainer's
  // optimizer step, init_weights, load_weights, a mixed-precision refresh), so that a holder of
  // the same tensors (a rollout engine) can tell that what it holds changed. Copies of a model
  // share its tensors and therefore this counter (the lineage's version); a model constructed
  // anew starts its own at 0. Code that writes parameters itself calls note_weights_changed().
  int64_t weights_version() const { return weights_version_ ? weights_version_->load() : 0; }
  void note_weights_changed() const {
    if (weights_version_) weights_version_->fetch_add(1);
  }
  // The counter itself, for a holder that tracks this model's version beyond its lifetime.
  std::shared_ptr<const std::atomic<int64_t>> weights_version_counter() const { return weights_version_; }
  // Makes this model count versions with `source`'s counter: for a model whose weights are
  // always a function of source's (a mixed-precision compute copy of its fp32 masters), so that
  // a change of the masters shows as a change of this copy too.
  void share_weights_version(const DecoderLM& source) { weights_version_ = source.weights_version_; }
  // Activation checkpointing for training forwards (HF's gradient_checkpointing): with grad
  // enabled, each layer keeps only its input and is recomputed in the backward (less memory,
  // one more layer forward per layer).
  void set_gradient_checkpointing(bool enabled) { gradient_checkpointing_ = enabled; }
  bool gradient_checkpointing() const { return gradient_checkpointing_; }
  // Every forward and head from now on reads parameters through `gather` (null: none): see
  // ParameterGather. Copies made afterwards share it.
  void set_parameter_gather(std::shared_ptr<const ParameterGather> gather) { gather_ = std::move(gather); }
  const ParameterGather* parameter_gather() const { return gather_.get(); }
  // Tensor parallelism (tensor_parallel.hpp, which builds such models): this model is one rank's
  // part of the language model `whole` describes, split over `group`. Its forwards sum each
  // embedding lookup and the row-parallel layers' outputs over the group, and logits() gathers
  // every rank's vocabulary. Copies made afterwards share it.
  void set_tensor_parallel(std::shared_ptr<const TensorParallelGroup> group, const ModelConfig& whole);
  // LoRA (lora.hpp): every forward from now on adds the adapters' terms to the projections they
  // sit on (null: none, the base model). The adapters are shared, not copied: a trainer updating
  // them in place updates every model holding them. Copies made afterwards share them; a copy
  // given null is the base model over the same weights. Refused with tensor parallelism, and for
  // adapters made for another shape.
  void set_lora(std::shared_ptr<const LoraAdapters> adapters);
  const LoraAdapters* lora() const { return lora_.get(); }
  const std::shared_ptr<const LoraAdapters>& lora_adapters() const { return lora_; }
  const TensorParallelGroup* tensor_parallel() const { return tp_.get(); }
  // With tensor parallelism: the config of the whole model this one is a part of.
  const ModelConfig& whole_config() const { return tp_ ? tp_whole_ : config_; }
  // The vocabulary logits() covers: config().vocab_size, or the whole model's with tensor parallelism.
  int64_t vocab_size() const { return whole_config().vocab_size; }
  // The path choices of the forwards from here on (ModelOptions::forward). Copies made earlier
  // (a mixed-precision compute copy) keep theirs: set it before making them.
  void set_forward_options(const ForwardOptions& forward) { options_.forward = forward; }
  // Moves/casts every parameter (keeps tying; undoes fuse_projections).
  void to(at::ScalarType dtype, c10::Device device);

  // For inference (the rollout engine): each layer's q/k/v weights (and biases) move into one
  // [H*D + 2*KV*D, C] buffer and gate/up into one [2F, C], and those parameters become row views
  // of them, so a step runs two GEMMs where it ran five, with no second copy of the weights.
  // Writing a parameter (copy_) writes the buffer; re-pointing one (set_) would detach it, so
  // owners copy into fused parameters (is_fused). Inference only: the fused parameters no longer
  // require grad, and other holders of the old tensors (a trainer) keep them unchanged.
  void fuse_projections();
  bool is_fused(const std::string& name) const { return fused_names_.count(name) != 0; }

  // Training forward on a padded batch. attention_mask: 1 = token, 0 = padding (left or
  // right). position_ids default to cumsum(mask) - 1 clamped at 0 (arange without a mask).
  // Padding positions see only themselves; their outputs are finite and meaningless.
  // `kernels`: replacements for RoPE and the MLP's product (null: the model's own ops).
  at::Tensor forward_padded(const at::Tensor& input_ids /*[B, T] int64*/,
                            const at::Tensor& attention_mask = {} /*[B, T] int/bool*/,
                            const at::Tensor& position_ids = {} /*[B, T] int64*/,
                            std::shared_ptr<const LayerKernels> kernels = nullptr) const;  // -> [B, T, C]

  // Training forward on packed sequences: segment s is tokens [cu_seqlens[s], cu_seqlens[s+1]);
  // no attention crosses a segment boundary. `kernels` as for forward_padded.
  at::Tensor forward_packed(const at::Tensor& input_ids /*[N] int64*/, const at::Tensor& position_ids /*[N] int64*/,
                            const at::Tensor& cu_seqlens /*[S + 1] int64*/,
                            std::shared_ptr<const LayerKernels> kernels = nullptr) const;  // -> [N, C]

  // One engine step (prefill, decode or a mix) over the caller's KV cache. The backend may
  // take over RoPE (AttentionBackend::rotates), e.g. with a plugin kernel; `kernels` the MLP's product.
  at::Tensor forward_cached(const at::Tensor& input_ids /*[N] int64*/, const at::Tensor& position_ids /*[N] int64*/,
                            AttentionBackend& attention,
                            std::shared_ptr<const LayerKernels> kernels = nullptr) const;  // -> [N, C]

  // The heads, applied to final hidden states from any forward.
  at::Tensor logits(const at::Tensor& hidden /*[..., C]*/) const;  // -> [..., V] (CausalLM)
  at::Tensor scores(const at::Tensor& hidden /*[..., C]*/) const;  // -> [..., num_labels] (score head)

 private:
  struct Layer {
    at::Tensor input_layernorm;             // [C]
    at::Tensor q_proj, q_bias;              // [H*D, C], [H*D] (qkv_bias)
    at::Tensor k_proj, k_bias;              // [KV*D, C], [KV*D]
    at::Tensor v_proj, v_bias;              // [KV*D, C], [KV*D]
    at::Tensor o_proj, o_bias;              // [C, H*D], [C] (o_bias)
    at::Tensor q_norm, k_norm;              // [D] (Qwen3)
    at::Tensor post_attention_layernorm;    // [C]
    at::Tensor gate_proj, gate_bias;        // [F, C], [F] (mlp_bias)
    at::Tensor up_proj, up_bias;            // [F, C], [F]
    at::Tensor down_proj, down_bias;        // [C, F], [C]
    at::Tensor qkv_proj, qkv_bias;          // fuse_projections: [H*D + 2*KV*D, C], [...] (q/k/v are views)
    at::Tensor gate_up_proj, gate_up_bias;  // fuse_projections: [2F, C], [2F]
  };
  // Attention over q/k/v of one layer; q [..., H, D], k/v [..., KV, D] -> [..., H, D].
  using AttendFn = std::function<at::Tensor(int64_t layer, const at::Tensor&, const at::Tensor&, const at::Tensor&)>;
  // RoPE on one layer's q [..., H, D] and k [..., KV, D], replacing them (and v [..., KV, D],
  // which it may replace by an equal copy).
  using RotateFn = std::function<void(at::Tensor& q, at::Tensor& k, at::Tensor& v)>;

  struct NoAllocation {};
  DecoderLM(ModelConfig config, ModelOptions options, NoAllocation);
  void bind();                                                    // points the typed fields at params_
  std::vector<at::Tensor> layer_parameters(int64_t index) const;  // layer `index`'s defined tensors
  // embed -> layers -> final norm, for ids of any shape [...]; positions of the same shape.
  // `rotate` empty: `kernels`' RoPE if given (and it takes the tensors), else the reference
  // (rope_cos_sin + apply_rope) at position_ids. `kernels` also takes the MLP's product.
  at::Tensor run(const at::Tensor& input_ids, const at::Tensor& position_ids, const AttendFn& attend,
                 const RotateFn& rotate = {}, std::shared_ptr<const LayerKernels> kernels = nullptr) const;
  // Layer `index` on hidden + pending (pending undefined: hidden alone), returning {h, mlp}
  // with the layer's output = h + mlp; the caller adds mlp, or hands it to the next layer
  // as `pending` so that the add fuses with that layer's first RMSNorm (LayerKernels::add_rms_norm).
  // `own_hidden`: the caller owns `hidden`, so the fused adds may write their sums into it; a
  // checkpointed layer's input is saved for its recomputation and must stay as it is.
  std::pair<at::Tensor, at::Tensor> layer_forward(int64_t index, const at::Tensor& hidden, const at::Tensor& pending,
                                                  const RotateFn& rotate, const AttendFn& attend,
                                                  const LayerKernels* kernels, bool own_hidden) const;
  // {residual + delta, rms_norm of it} (delta undefined: residual itself), through `fused`'s
  // add_rms_norm when given (it may write the sum into `residual`), else LibTorch's ops.
  std::pair<at::Tensor, at::Tensor> add_norm(const at::Tensor& residual, const at::Tensor& delta,
                                             const at::Tensor& weight, const LayerKernels* fused) const;

  ModelConfig config_;
  ModelOptions options_;
  std::vector<std::pair<std::string, at::Tensor>> params_;
  std::map<std::string, size_t> index_;  // name -> position in params_
  at::Tensor embed_tokens_;              // [V, C]
  std::vector<Layer> layers_;
  at::Tensor norm_;                // [C]
  at::Tensor lm_head_;             // [V, C] (the embedding when tied)
  at::Tensor score_, score_bias_;  // [num_labels, C], [num_labels]
  at::Tensor inv_freq_;            // [D/2] float32 on the device
  bool gradient_checkpointing_ = false;
  std::shared_ptr<const ParameterGather> gather_;  // set_parameter_gather
  std::shared_ptr<const TensorParallelGroup> tp_;  // set_tensor_parallel
  std::shared_ptr<const LoraAdapters> lora_;       // set_lora
  ModelConfig tp_whole_;                           // the whole model's config, with tp_
  // A row-parallel layer's output: x W^T summed over the tensor-parallel group, then the bias
  // (whole on every rank: added once). Without tp_, at::linear(x, weight, bias).
  at::Tensor row_parallel_linear(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias) const;
  // y plus the adapter's term for projection `p` of `layer` on input x (y itself where none).
  at::Tensor with_lora(const at::Tensor& y, int64_t layer, LoraProjection p, const at::Tensor& x) const;
  bool lora_trained() const;  // adapters set and requiring grad
  // Shared by copies (they share the tensors); see weights_version().
  std::shared_ptr<std::atomic<int64_t>> weights_version_ = std::make_shared<std::atomic<int64_t>>(0);
  std::set<std::string> fused_names_;  // parameters that are views of a fused buffer
  // fuse_projections' buffers by name ("model.layers.<i>.self_attn.qkv_proj.weight", ".mlp.gate_up_proj.bias", ...).
  std::map<std::string, at::Tensor> fused_buffers_;
};

// The final hidden state of each row's last real token (HF's sequence-classification pooling
// for right padding; also right for left padding).
at::Tensor last_token(const at::Tensor& values /*[B, T, ...]*/, const at::Tensor& attention_mask /*[B, T]*/);

}  // namespace verlpp::model
