// Mixed-precision training, as verl's FSDP mixed_precision (param_dtype bf16, reduce_dtype and
// master weights fp32): the optimizer keeps fp32 master weights; forwards and backwards run on
// a copy in the compute dtype. After each backward the compute gradients are added into the
// masters' fp32 gradients (micro-batches accumulate in fp32, and data-parallel sums run on
// fp32), and after each optimizer step the masters are cast back into the compute copy.
#pragma once

#include <verlpp/model/decoder.hpp>

#include <optional>
#include <vector>

namespace verlpp::train {

class MixedPrecision {
 public:
  // `master` stays the optimizer's model; a compute copy is made when compute_dtype differs
  // from its dtype (otherwise compute() is the master itself and every call below is a no-op).
  MixedPrecision(model::DecoderLM& master, at::ScalarType compute_dtype);

  bool enabled() const { return compute_.has_value(); }
  // The model forwards and backwards run on.
  model::DecoderLM& compute() { return compute_ ? *compute_ : master_; }
  const model::DecoderLM& compute() const { return compute_ ? *compute_ : master_; }

  // After a backward: master.grad += compute.grad (in the master's dtype); compute grads freed.
  // With deferred casts, a gradient whose master has no sum yet is kept aside in the compute
  // dtype instead (and cast by the next call or flush_gradients()).
  void accumulate_gradients();
  // Deferred casts, for an optimizer that reads 16-bit gradients itself
  // (OptimizerStep::clip_and_step(MixedPrecision&)): an update of one micro-batch then skips the
  // cast into fp32 and the fp32 gradient's memory. Off by default; turn it off (or flush) before
  // anything that reads the masters' gradients, such as a data-parallel all-reduce.
  void defer_casts(bool on) { defer_ = on; }
  bool defers_casts() const { return defer_; }
  // Casts every deferred gradient into its master's fp32 gradient (added where one exists).
  void flush_gradients();
  // The deferred gradients by parameter (named_parameters() order; undefined where none), handed
  // over: none are deferred afterwards.
  std::vector<at::Tensor> take_deferred_gradients();
  // The compute copy's parameters in named_parameters() order (empty when not enabled).
  std::vector<at::Tensor> compute_parameters() const;
  // The model whose weights are the fp32 masters.
  const model::DecoderLM& master() const { return master_; }
  // After an optimizer step (or a load): the compute weights = the master weights, cast.
  void refresh_compute();
  // Frees the compute copy (the weights moved elsewhere: sharded units); compute() is then the
  // master and enabled() false.
  void drop_compute() { compute_.reset(); }

 private:
  model::DecoderLM& master_;
  std::optional<model::DecoderLM> compute_;
  bool defer_ = false;
  std::vector<at::Tensor> deferred_;  // by parameter; undefined where none
};

}  // namespace verlpp::train
