// gathered_layer (sharded_units.hpp): a torch::autograd::Function around one decoder layer of
// sharded weights. Its forward gathers the layer's unit, runs the layer and frees the unit; its
// backward gathers the unit again, differentiates the layer (the kept graph, or a recomputation
// with gradient checkpointing), starts the reduce-scatter of the parameter gradients into this
// rank's shard and frees the unit. Resident units (ZeRO-2) skip the gathering and freeing. The custom Function needs
// full autograd headers, hence the #undef below.
#undef TORCH_ASSERT_ONLY_METHOD_OPERATORS
#include "sharded_units.hpp"

#include <torch/csrc/autograd/autograd.h>
#include <torch/csrc/autograd/custom_function.h>

namespace verlpp::train::detail {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// What the backward needs besides the saved input: the unit, the layer, and (without
// recomputation) the forward's own graph: its input leaf and its output.
struct UnitCall : torch::CustomClassHolder {
  UnitCall(const ShardedUnits* u, size_t i, model::LayerFn f, bool r)
      : units(u), unit(i), layer(std::move(f)), recompute(r) {}
  const ShardedUnits* units;
  size_t unit;
  model::LayerFn layer;
  bool recompute;
  at::Tensor input, output;  // the kept graph (recompute == false)
};

struct GatheredLayer : torch::autograd::Function<GatheredLayer> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& hidden, const at::Tensor& anchor,
                            c10::intrusive_ptr<UnitCall> call) {
    (void)anchor;
    call->units->gather(call->unit);
    if (call->units->options.forward_prefetch) call->units->prefetch(call->unit + 1);
    at::Tensor out;
    if (call->recompute) {
      out = call->layer(hidden);  // a custom Function's forward runs without a graph
      ctx->save_for_backward({hidden});
    } else {
      // The layer's own graph, kept for the backward. Its saved weights are views of the unit's
      // full buffer, released below and restored (same storage, new memory) by the backward's
      // gather, which writes through the communicator and so leaves their versions alone.
      at::AutoGradMode grad(true);
      call->input = hidden.detach().requires_grad_(true);
      call->output = call->layer(call->input);
      out = call->output.detach();
    }
    call->units->release(call->unit);
    ctx->saved_data["call"] = c10::IValue::make_capsule(std::move(call));
    return out;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
    auto call = c10::static_intrusive_pointer_cast<UnitCall>(ctx->saved_data["call"].toCapsule());
    const ShardedUnits& units = *call->units;
    const UnitState& unit = units.units[call->unit];
    units.gather(call->unit);
    // The backward runs the layers last to first: the one below is next.
    if (units.options.backward_prefetch) units.prefetch(call->unit - 1);
    at::Tensor input = call->input, output = call->output;
    if (call->recompute) {
      input = ctx->get_saved_variables()[0].detach().requires_grad_(true);
      at::AutoGradMode grad(true);
      output = call->layer(input);
    }
    variable_list targets = {input};
    std::vector<size_t> where;  // targets[1 + k] is the unit's parameter where[k]
    for (size_t k = 0; k < unit.views.size(); ++k)
      if (unit.views[k].requires_grad()) {
        targets.push_back(unit.views[k]);
        where.push_back(k);
      }
    variable_list grads = torch::autograd::grad({output}, targets, {grad_outputs[0]}, /*retain_graph=*/false,
                                                /*create_graph=*/false, /*allow_unused=*/true);
    std::vector<at::Tensor> param_grads(unit.views.size());
    for (size_t k = 0; k < where.size(); ++k) param_grads[where[k]] = grads[k + 1];
    call->input = at::Tensor();
    call->output = at::Tensor();
    units.reduce_gradients(call->unit, param_grads);
    units.release(call->unit);
    // One gradient per forward argument: hidden, the anchor (none), the call (none).
    return {grads[0], at::Tensor(), at::Tensor()};
  }
};

}  // namespace

at::Tensor gathered_layer(const ShardedUnits& units, size_t u, const model::LayerFn& layer, const at::Tensor& hidden,
                          bool recompute) {
  return GatheredLayer::apply(hidden, units.anchor, c10::make_intrusive<UnitCall>(&units, u, layer, recompute));
}

}  // namespace verlpp::train::detail
