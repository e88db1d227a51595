// Shared pieces of the header-only RL math: the lean tensor includes, the `torch::Tensor`
// alias, input checks and the name -> function Registry behind estimators, policy losses and
// KL types. Decision: these headers include only <ATen/core/Tensor.h> and the ATen/ops/<op>.h
// they call (never torch/torch.h, ~18 s of parsing per file), so `torch::Tensor` is provided
// by a using-declaration rather than by torch's own headers.
#pragma once

#include <ATen/TensorOperators.h>  // a + b, a * s, ... (lean: includes only ATen/core/Tensor.h)
#include <ATen/core/Tensor.h>
#include <fmt/format.h>

#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include <verlpp/core/error.hpp>
#include <verlpp/core/registry.hpp>

// `torch::Tensor` is `at::Tensor`. torch/types.h exposes it through `using namespace at;`
// inside namespace torch; this using-declaration names the same entity, so it coexists with
// <torch/torch.h> in a translation unit that includes both (a using-declaration may be
// repeated at namespace scope, and qualified lookup finds one entity either way).
namespace torch {
using at::Tensor;
}  // namespace torch

namespace verlpp::algo {

namespace detail {

// "[4, 8]" for a tensor's sizes, "undefined" for an undefined tensor.
inline std::string shape_str(const at::Tensor& t) {
  if (!t.defined()) return "undefined";
  std::string s = "[";
  for (int64_t d = 0; d < t.dim(); ++d) s += (d ? ", " : "") + std::to_string(t.size(d));
  return s + "]";
}

// Throws unless `t` is defined and 2-D: (batch, response_length).
inline void check_2d(const at::Tensor& t, const char* name, const std::string& where) {
  VERLPP_CHECK(t.defined(), "{}: {} is undefined; expected a [batch, response_length] tensor", where, name);
  VERLPP_CHECK(t.dim() == 2, "{}: {} has shape {}; expected [batch, response_length]", where, name, shape_str(t));
}

// Throws unless `t` has the same sizes as `like`.
inline void check_same_shape(const at::Tensor& t, const char* name, const at::Tensor& like, const char* like_name,
                             const std::string& where) {
  VERLPP_CHECK(t.defined() && t.sizes() == like.sizes(), "{}: {} has shape {}; expected {} like {}", where, name,
               shape_str(t), shape_str(like), like_name);
}

// Throws unless `t` is a floating-point tensor (int rewards or log-probs are a caller bug).
inline void check_floating(const at::Tensor& t, const char* name, const std::string& where) {
  VERLPP_CHECK(at::isFloatingType(t.scalar_type()), "{}: {} has dtype {}; expected a float dtype", where, name,
               c10::toString(t.scalar_type()));
}

}  // namespace detail

// The user-extensible choices (advantage estimators, policy losses, KL types) are entries of
// verlpp's one Registry (core/registry.hpp): entries are never removed, so a function obtained
// from get() stays valid.
using ::verlpp::Registry;

}  // namespace verlpp::algo
