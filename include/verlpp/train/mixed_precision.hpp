// Mixed-precision training, as verl's FSDP mixed_precision (param_dtype bf16, reduce_dtype and
// master weights fp32): the optimizer keeps fp32 master weights; forwards and backwards run on
// a copy in the compute dtype. After each backward the compute gradients are added into the
// masters' fp32 gradients (micro-batches accumulate in fp32, and data-parallel sums run on
// fp32), and after each optimizer step the masters are cast back into the compute copy.
#pragma once

#include <verlpp/model/decoder.hpp>

#include <optional>

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
  void accumulate_gradients();
  // After an optimizer step (or a load): the compute weights = the master weights, cast.
  void refresh_compute();

 private:
  model::DecoderLM& master_;
  std::optional<model::DecoderLM> compute_;
};

}  // namespace verlpp::train
