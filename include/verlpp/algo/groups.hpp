// Group ids and per-group statistics for the outcome-reward estimators (GRPO and relatives).
// Decision: the string uids are turned into dense int64 ids once on the host (one pass over
// rows, first-seen order); every statistic afterwards is a scatter (index_add) over the
// [B] scores plus a gather back, so no per-row host loop touches tensor data.
#pragma once

#include <ATen/ops/index_add.h>
#include <ATen/ops/ones_like.h>
#include <ATen/ops/sqrt.h>
#include <ATen/ops/tensor.h>
#include <ATen/ops/where.h>
#include <ATen/ops/zeros.h>

#include <string>
#include <unordered_map>
#include <vector>

#include <verlpp/algo/common.hpp>

namespace verlpp::algo {

// Rows grouped by prompt: ids[i] is the group of row i.
struct Groups {
  torch::Tensor ids;       // [B] int64, on the scores' device, values in [0, num_groups)
  int64_t num_groups = 0;  // G
};

// Dense ids from string uids, numbered in order of first appearance.
inline Groups make_groups(const std::vector<std::string>& index, at::Device device) {
  std::unordered_map<std::string, int64_t> id_of;
  std::vector<int64_t> ids;
  ids.reserve(index.size());
  for (const std::string& uid : index)
    ids.push_back(id_of.emplace(uid, static_cast<int64_t>(id_of.size())).first->second);
  Groups g;
  g.ids = at::tensor(at::ArrayRef<int64_t>(ids), at::TensorOptions().dtype(at::kLong)).to(device);
  g.num_groups = static_cast<int64_t>(id_of.size());
  return g;
}

// Groups from integer ids already on a device: [B] integer tensor with values >= 0. Ids need not
// be dense (an id that no row uses is an empty group that nothing reads). Reads max/min on host.
inline Groups make_groups(const torch::Tensor& ids) {
  VERLPP_CHECK(ids.defined() && ids.dim() == 1, "make_groups: ids has shape {}; expected [batch]",
               detail::shape_str(ids));
  VERLPP_CHECK(!at::isFloatingType(ids.scalar_type()) && ids.scalar_type() != at::kBool,
               "make_groups: ids has dtype {}; expected an integer dtype", c10::toString(ids.scalar_type()));
  Groups g;
  g.ids = ids.to(at::kLong);
  if (ids.numel() == 0) return g;
  const int64_t lo = g.ids.min().item<int64_t>();
  VERLPP_CHECK(lo >= 0, "make_groups: ids must be >= 0; found {}", lo);
  g.num_groups = g.ids.max().item<int64_t>() + 1;
  return g;
}

// Per-group reductions of a [B] tensor.
struct GroupStats {
  torch::Tensor count;   // [G] rows per group, dtype of the scores
  torch::Tensor sum;     // [G] Σ scores
  torch::Tensor mean;    // [G] sum / count (NaN for an empty group)
  torch::Tensor stddev;  // [G] unbiased std (NaN for count < 2); undefined unless requested
};

// Σ over each group of src: [B] -> [G].
inline torch::Tensor group_sum(const torch::Tensor& src, const Groups& groups) {
  return at::zeros({groups.num_groups}, src.options()).index_add_(0, groups.ids, src);
}

// Group count, sum and mean of scores [B] (float); with_std adds the unbiased std, two-pass
// (Σ(s − μ)² / (n − 1)) as torch.std computes it, not the cancellation-prone Σs² − (Σs)²/n.
inline GroupStats group_stats(const torch::Tensor& scores, const Groups& groups, bool with_std = false) {
  VERLPP_CHECK(scores.dim() == 1 && scores.size(0) == groups.ids.size(0),
               "group_stats: scores has shape {} but there are {} group ids", detail::shape_str(scores),
               groups.ids.size(0));
  GroupStats st;
  st.count = group_sum(at::ones_like(scores), groups);
  st.sum = group_sum(scores, groups);
  st.mean = st.sum / st.count;
  if (with_std) {
    torch::Tensor centered = scores - st.mean.index_select(0, groups.ids);
    st.stddev = at::sqrt(group_sum(centered * centered, groups) / (st.count - 1));
  }
  return st;
}

// Gathers a per-group value back to rows: [G] -> [B].
inline torch::Tensor per_row(const torch::Tensor& per_group, const Groups& groups) {
  return per_group.index_select(0, groups.ids);
}

}  // namespace verlpp::algo
