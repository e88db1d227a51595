// Activation checkpointing of one decoder layer (HF's gradient_checkpointing): the forward keeps
// only the layer's input; the backward runs the layer again with grad and differentiates it.
// Internal to the model layer (decoder.cpp); the one file that includes autograd's custom
// Function header.
#pragma once

#include <verlpp/model/decoder.hpp>

#include <ATen/core/Tensor.h>

#include <vector>

namespace verlpp::model::detail {

// fn(hidden), recorded for autograd so that the backward recomputes it; `params` are the
// tensors fn reads (their gradients flow through).
at::Tensor checkpointed(LayerFn fn, const at::Tensor& hidden, const std::vector<at::Tensor>& params);

}  // namespace verlpp::model::detail
