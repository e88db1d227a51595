// verlpp's RL math, header-only and stateless on LibTorch tensors (usable without the rest of
// verlpp): masked statistics, advantage estimators, KL penalties and controllers, loss
// aggregation, policy/value/entropy losses. Names, formulas and constants follow verl
// (volcengine/verl, trainer/ppo/core_algos.py) so numbers carry over; see docs/algorithms.md.
// Lean: includes ATen/core/Tensor.h and the ATen/ops headers used, never torch/torch.h.
#pragma once

#include <verlpp/algo/advantages.hpp>
#include <verlpp/algo/agg_loss.hpp>
#include <verlpp/algo/common.hpp>
#include <verlpp/algo/entropy.hpp>
#include <verlpp/algo/groups.hpp>
#include <verlpp/algo/kl.hpp>
#include <verlpp/algo/masked.hpp>
#include <verlpp/algo/policy_loss.hpp>
#include <verlpp/algo/value_loss.hpp>
