// ShardedAdamW: ZeRO-2's step (see the header). AdamW's arithmetic is torch::optim::AdamW's, op
// for op, on the flat shard (flat_adamw.hpp), per run of parameters with one step count.
#include "sharded_adamw.hpp"

#include "flat_adamw.hpp"

#include <verlpp/core/error.hpp>
#include <verlpp/hw/process_group.hpp>
#include <verlpp/train/optimizer.hpp>

#include <ATen/core/grad_mode.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/linalg_vector_norm.h>
#include <ATen/ops/zeros.h>

#include <algorithm>
#include <cmath>

namespace verlpp::train {

ShardedAdamW::ShardedAdamW(std::vector<at::Tensor> params, DataParallel dp, int64_t bucket_elements)
    : params_(std::move(params)), dp_(dp), bucket_elements_(std::max<int64_t>(bucket_elements, 1)) {
  VERLPP_CHECK(!params_.empty(), "ZeRO-2: no parameters to shard");
  VERLPP_CHECK(dp_.group() != nullptr, "ZeRO-2 needs a process group");
  int64_t total = 0;
  for (size_t i = 0; i < params_.size(); ++i) {
    const at::Tensor& p = params_[i];
    VERLPP_CHECK(p.is_contiguous(), "ZeRO-2: parameter {} is not contiguous", i);
    VERLPP_CHECK(p.scalar_type() == params_[0].scalar_type() && p.device() == params_[0].device(),
                 "ZeRO-2: parameter {} is {} on {}, parameter 0 {} on {}: the flat shard needs one dtype and device", i,
                 c10::toString(p.scalar_type()), p.device().str(), c10::toString(params_[0].scalar_type()),
                 params_[0].device().str());
    offsets_.push_back(total);
    total += p.numel();
  }
  offsets_.push_back(total);
  const int64_t world = dp_.world_size();
  shard_ = std::max<int64_t>((total + world - 1) / world, 1);
  const auto options = params_[0].options().requires_grad(false);
  exp_avg_ = at::zeros({shard_}, options);
  exp_avg_sq_ = at::zeros({shard_}, options);
  grad_ = at::zeros({shard_}, options);
  steps_.assign(params_.size(), 0);
}

std::vector<ShardedAdamW::Piece> ShardedAdamW::pieces(int64_t flat_begin, int64_t flat_end) const {
  std::vector<Piece> out;
  flat_end = std::min(flat_end, offsets_.back());
  if (flat_begin >= flat_end) return out;
  // The parameter holding flat_begin: the last offset <= flat_begin.
  auto it = std::upper_bound(offsets_.begin(), offsets_.end() - 1, flat_begin);
  for (size_t i = size_t(it - offsets_.begin()) - 1; i < params_.size() && offsets_[i] < flat_end; ++i) {
    const int64_t begin = std::max(flat_begin, offsets_[i]), end = std::min(flat_end, offsets_[i + 1]);
    if (begin < end) out.push_back({i, begin - offsets_[i], begin, end - begin});
  }
  return out;
}

void ShardedAdamW::read_flat(int64_t begin, at::Tensor& out, bool gradients) const {
  const int64_t end = begin + out.numel();
  int64_t covered = begin;
  for (const Piece& piece : pieces(begin, end)) {
    const at::Tensor& source = gradients ? params_[piece.index].grad() : params_[piece.index];
    at::Tensor target = out.narrow(0, piece.flat_begin - begin, piece.length);
    if (source.defined()) {
      target.copy_(source.reshape({-1}).narrow(0, piece.param_begin, piece.length));
    } else {
      target.zero_();
    }
    covered = piece.flat_begin + piece.length;
  }
  if (covered < end) out.narrow(0, covered - begin, end - covered).zero_();  // the padding past the last parameter
}

void ShardedAdamW::write_values(int64_t begin, const at::Tensor& values) const {
  for (const Piece& piece : pieces(begin, begin + values.numel()))
    params_[piece.index]
        .view({-1})
        .narrow(0, piece.param_begin, piece.length)
        .copy_(values.narrow(0, piece.flat_begin - begin, piece.length));
}

void ShardedAdamW::drop_gradients() {
  for (auto& p : params_)
    if (p.grad().defined()) p.mutable_grad() = at::Tensor();
}

double ShardedAdamW::step(const AdamWConfig& c, double lr) {
  at::NoGradGuard no_grad;
  const hw::ProcessGroup& group = *dp_.group();
  const int64_t world = dp_.world_size(), mine = int64_t(dp_.rank()) * shard_;
  const int64_t chunk = std::max<int64_t>(1, std::min(shard_, bucket_elements_ / world));
  const auto options = grad_.options();

  // 1. Reduce-scatter: bucket k holds sub-range k of every rank's shard, in rank order.
  for (int64_t k = 0; k < shard_; k += chunk) {
    const int64_t length = std::min(chunk, shard_ - k);
    at::Tensor send = at::empty({world * length}, options);
    for (int64_t r = 0; r < world; ++r) {
      at::Tensor part = send.narrow(0, r * length, length);
      read_flat(r * shard_ + k, part, /*gradients=*/true);
    }
    at::Tensor recv = grad_.narrow(0, k, length);
    group.reduce_scatter_sum(send, recv);
  }
  drop_gradients();

  // 2. The global norm from each shard's sum of squares (in fp64), then clip_grad_norm's factor.
  at::Tensor squares = at::linalg_vector_norm(grad_, 2, c10::nullopt, false, at::kDouble).pow(2).reshape({1});
  group.all_reduce_sum(squares);
  const double norm = std::sqrt(squares.item<double>());
  if (!std::isfinite(norm)) return norm;
  const double coef = std::min(1.0, c.grad_clip / (norm + 1e-6));
  if (coef < 1.0) grad_.mul_(coef);

  // 3. AdamW on the shard. Every parameter steps, as in the replicated data-parallel path (the
  // all-reduce gives each one a gradient there too).
  for (auto& s : steps_) ++s;
  at::Tensor values = at::empty({shard_}, options);
  read_flat(mine, values, /*gradients=*/false);
  // Runs of consecutive parameters with one step count share the bias corrections.
  std::vector<detail::AdamwRun> runs;
  for (const Piece& piece : pieces(mine, mine + shard_)) {
    const int64_t step = steps_[piece.index];
    if (!runs.empty() && runs.back().step == step) {
      runs.back().length += piece.length;
    } else {
      runs.push_back({piece.flat_begin - mine, piece.length, step});
    }
  }
  detail::adamw_flat(values, grad_, exp_avg_, exp_avg_sq_, runs, c, lr);

  // 4. Every rank's new values into every replica.
  for (int64_t k = 0; k < shard_; k += chunk) {
    const int64_t length = std::min(chunk, shard_ - k);
    const at::Tensor gathered = group.all_gather(values.narrow(0, k, length));
    for (int64_t r = 0; r < world; ++r) write_values(r * shard_ + k, gathered.narrow(0, r * length, length));
  }
  return norm;
}

void ShardedAdamW::gather_state(std::vector<at::Tensor>& exp_avg, std::vector<at::Tensor>& exp_avg_sq) const {
  exp_avg.assign(params_.size(), at::Tensor());
  exp_avg_sq.assign(params_.size(), at::Tensor());
  if (std::all_of(steps_.begin(), steps_.end(), [](int64_t s) { return s == 0; })) return;
  const at::Tensor m = dp_.group()->all_gather(exp_avg_), v = dp_.group()->all_gather(exp_avg_sq_);
  for (size_t i = 0; i < params_.size(); ++i) {
    if (steps_[i] == 0) continue;
    exp_avg[i] = m.narrow(0, offsets_[i], params_[i].numel()).view(params_[i].sizes());
    exp_avg_sq[i] = v.narrow(0, offsets_[i], params_[i].numel()).view(params_[i].sizes());
  }
}

void ShardedAdamW::set_state(const std::vector<int64_t>& steps, const std::vector<at::Tensor>& exp_avg,
                             const std::vector<at::Tensor>& exp_avg_sq) {
  VERLPP_CHECK(
      steps.size() == params_.size() && exp_avg.size() == params_.size() && exp_avg_sq.size() == params_.size(),
      "ZeRO-2 set_state: {} parameters, {} steps, {} + {} states", params_.size(), steps.size(), exp_avg.size(),
      exp_avg_sq.size());
  at::NoGradGuard no_grad;
  const int64_t mine = int64_t(dp_.rank()) * shard_;
  exp_avg_.zero_();
  exp_avg_sq_.zero_();
  for (const Piece& piece : pieces(mine, mine + shard_)) {
    const size_t i = piece.index;
    VERLPP_CHECK(exp_avg[i].defined() == (steps[i] > 0) && exp_avg_sq[i].defined() == (steps[i] > 0),
                 "ZeRO-2 set_state: parameter {} has step {} but {} state", i, steps[i],
                 exp_avg[i].defined() ? "a" : "no");
    if (steps[i] == 0) continue;
    const int64_t at = piece.flat_begin - mine;
    exp_avg_.narrow(0, at, piece.length).copy_(exp_avg[i].reshape({-1}).narrow(0, piece.param_begin, piece.length));
    exp_avg_sq_.narrow(0, at, piece.length)
        .copy_(exp_avg_sq[i].reshape({-1}).narrow(0, piece.param_begin, piece.length));
  }
  steps_ = steps;
}

}  // namespace verlpp::train
