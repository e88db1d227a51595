// checkpointed(): a torch::autograd::Function whose forward runs the layer without a graph and
// whose backward recomputes it with one (see checkpointing.hpp). The C++ frontend's custom
// Function needs full autograd headers, hence the #undef of the lean-include guard.
#undef TORCH_ASSERT_ONLY_METHOD_OPERATORS
#include "checkpointing.hpp"

#include <torch/csrc/autograd/autograd.h>
#include <torch/csrc/autograd/custom_function.h>

namespace verlpp::model::detail {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// The layer function, kept in the autograd context until the backward (contexts hold IValues).
struct LayerClosure : torch::CustomClassHolder {
  explicit LayerClosure(LayerFn f) : fn(std::move(f)) {}
  LayerFn fn;
};

struct CheckpointedLayer : torch::autograd::Function<CheckpointedLayer> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& hidden, c10::intrusive_ptr<LayerClosure> closure,
                            at::TensorList params) {
    at::Tensor out = closure->fn(hidden);  // a custom Function's forward runs without a graph
    // Saved: the input (the one activation kept) and the parameters (already alive anyway), so
    // that the backward can differentiate the recomputed layer by exactly these tensors.
    variable_list saved = {hidden};
    saved.insert(saved.end(), params.begin(), params.end());
    ctx->save_for_backward(saved);
    ctx->saved_data["layer"] = c10::IValue::make_capsule(std::move(closure));
    return out;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
    variable_list saved = ctx->get_saved_variables();
    auto closure = c10::static_intrusive_pointer_cast<LayerClosure>(ctx->saved_data["layer"].toCapsule());
    variable_list wrt = saved;
    wrt[0] = saved[0].detach().requires_grad_(true);
    at::Tensor out;
    {
      at::AutoGradMode grad(true);
      out = closure->fn(wrt[0]);
    }
    // Parameters that do not require grad (frozen) get none.
    variable_list targets, result(saved.size() + 1);
    std::vector<size_t> where;
    for (size_t i = 0; i < wrt.size(); ++i)
      if (wrt[i].requires_grad()) {
        targets.push_back(wrt[i]);
        where.push_back(i);
      }
    variable_list grads = torch::autograd::grad({out}, targets, {grad_outputs[0]}, /*retain_graph=*/false,
                                                /*create_graph=*/false, /*allow_unused=*/true);
    // One gradient per forward argument: hidden, the closure (none), then each parameter.
    for (size_t k = 0; k < where.size(); ++k) result[where[k] == 0 ? 0 : where[k] + 1] = grads[k];
    return result;
  }
};

}  // namespace

at::Tensor checkpointed(LayerFn fn, const at::Tensor& hidden, const std::vector<at::Tensor>& params) {
  return CheckpointedLayer::apply(hidden, c10::make_intrusive<LayerClosure>(std::move(fn)), at::TensorList(params));
}

}  // namespace verlpp::model::detail
