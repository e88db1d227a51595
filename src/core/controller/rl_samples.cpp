// Moving a step's samples between ranks (see rl_samples.hpp).
#include "rl_samples.hpp"

#include <ATen/ops/from_blob.h>
#include <ATen/ops/zeros.h>

#include <algorithm>

namespace verlpp::controller {
namespace {

constexpr int64_t kCountFields = 4;  // TrajectoryCounts' fields

// Samples as padded host tensors, the form they travel in between ranks: ids [rows, R] (padded
// with the pad id), lengths [rows], log-probs [rows, R] (padded with 0), and for multi-turn
// samples masks [rows, R] and counts [rows, 4]; on the CPU.
struct PaddedSamples {
  at::Tensor ids, lens, lps, masks, counts;
};

template <class T>
at::Tensor host_tensor(std::vector<T>& data, std::vector<int64_t> shape, at::ScalarType type) {
  return at::from_blob(data.data(), shape, at::TensorOptions().dtype(type)).clone();
}

// `samples` in the first rows of `rows` padded ones.
PaddedSamples pad_samples(const RlTrainer::State& s, const Samples& samples, int64_t rows, bool multi_turn) {
  const int64_t r_len = s.response_length;
  // Host buffers first (one element write each), then one tensor per field.
  std::vector<int64_t> ids(size_t(rows * r_len), s.pad_id), lens(size_t(rows), 0);
  std::vector<float> lps(size_t(rows * r_len), 0.0f), masks;
  std::vector<int64_t> counts;
  if (multi_turn) {
    masks.assign(size_t(rows * r_len), 0.0f);
    counts.assign(size_t(rows * kCountFields), 0);
  }
  for (size_t row = 0; row < samples.responses.size(); ++row) {
    lens[row] = int64_t(samples.responses[row].size());
    std::copy(samples.responses[row].begin(), samples.responses[row].end(), ids.begin() + int64_t(row) * r_len);
    std::copy(samples.logprobs[row].begin(), samples.logprobs[row].end(), lps.begin() + int64_t(row) * r_len);
    if (!multi_turn) continue;
    std::copy(samples.masks[row].begin(), samples.masks[row].end(), masks.begin() + int64_t(row) * r_len);
    const TrajectoryCounts& c = samples.counts[row];
    const int64_t fields[kCountFields] = {c.num_turns, c.tool_calls, c.malformed_calls, c.termination};
    std::copy(fields, fields + kCountFields, counts.begin() + int64_t(row) * kCountFields);
  }
  PaddedSamples out{host_tensor(ids, {rows, r_len}, at::kLong), host_tensor(lens, {rows}, at::kLong),
                    host_tensor(lps, {rows, r_len}, at::kFloat), at::Tensor(), at::Tensor()};
  if (multi_turn) {
    out.masks = host_tensor(masks, {rows, r_len}, at::kFloat);
    out.counts = host_tensor(counts, {rows, kCountFields}, at::kLong);
  }
  return out;
}

// Rows [first, first + count) of `padded` (on the CPU, contiguous) appended to `out`.
void append_padded_rows(const PaddedSamples& padded, int64_t first, int64_t count, Samples& out) {
  const int64_t r_len = padded.ids.size(1);
  for (int64_t g = first; g < first + count; ++g) {
    const int64_t len = padded.lens.data_ptr<int64_t>()[g];
    const int64_t* row_ids = padded.ids.data_ptr<int64_t>() + g * r_len;
    out.responses.emplace_back(row_ids, row_ids + len);
    const float* row_lps = padded.lps.data_ptr<float>() + g * r_len;
    out.logprobs.emplace_back(row_lps, row_lps + len);
    if (!padded.masks.defined()) continue;
    const float* row_mask = padded.masks.data_ptr<float>() + g * r_len;
    out.masks.emplace_back(row_mask, row_mask + len);
    const int64_t* c = padded.counts.data_ptr<int64_t>() + g * kCountFields;
    out.counts.push_back({c[0], c[1], c[2], c[3]});
  }
}

// Applies `f` to each tensor of `p` that is defined (the same set on every rank).
template <class F>
PaddedSamples map_padded(const PaddedSamples& p, F f) {
  auto apply = [&](const at::Tensor& t) { return t.defined() ? f(t) : at::Tensor(); };
  return {apply(p.ids), apply(p.lens), apply(p.lps), apply(p.masks), apply(p.counts)};
}

}  // namespace

Samples gather_samples(const RlTrainer::State& s, Samples local, const std::vector<int64_t>& begins, int64_t n,
                       bool multi_turn) {
  // Every rank sends its rows, padded to the longest range; the first rank's of each engine are
  // kept (every rank of a split engine generated the same ones).
  const int64_t engines = s.num_engines();
  int64_t chunk = 0;
  for (int64_t e = 0; e < engines; ++e) chunk = std::max(chunk, (begins[size_t(e) + 1] - begins[size_t(e)]) * n);
  const hw::ProcessGroup& group = *s.place(config::RlRole::kActorRollout).group;  // the actor pool's ranks
  const PaddedSamples all = map_padded(pad_samples(s, local, chunk, multi_turn), [&](const at::Tensor& t) {
    return group.all_gather(t.to(s.device)).cpu().contiguous();
  });
  Samples out;
  for (int64_t e = 0; e < engines; ++e)
    append_padded_rows(all, e * s.rollout_tp * chunk, (begins[size_t(e) + 1] - begins[size_t(e)]) * n, out);
  return out;
}

Samples share_samples(const RlTrainer::State& s, Samples samples, int64_t rows, bool multi_turn) {
  const RlTrainer::State::RolePlacement& actor = s.place(config::RlRole::kActorRollout);
  if (actor.whole_world) return samples;
  const bool root = s.world.rank == actor.root;
  PaddedSamples padded;
  if (root) {
    padded = pad_samples(s, samples, rows, multi_turn);
  } else {  // the shapes the root sends (share_from_pool fills them)
    Samples none;
    padded = pad_samples(s, none, rows, multi_turn);
  }
  padded = map_padded(padded, [&](const at::Tensor& t) {
    return share_from_pool(s, config::RlRole::kActorRollout, t).cpu().contiguous();
  });
  if (root) return samples;
  Samples out;
  append_padded_rows(padded, 0, rows, out);
  return out;
}

}  // namespace verlpp::controller
