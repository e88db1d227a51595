// ZeRO-2 for OptimizerStep: the parameters, laid end to end as one flat vector padded to a
// multiple of the world size, split into one contiguous shard per rank. Each rank keeps the
// summed gradient and AdamW's moments of its shard only. A step reduce-scatters the full
// gradients (in buckets) into the shard and drops them, takes the global L2 norm from every
// shard's sum of squares, clips, steps AdamW on the shard, and all-gathers the updated
// parameters back into every replica (the parameters themselves stay whole on every rank).
// Internal to the train layer.
#pragma once

#include <verlpp/train/data_parallel.hpp>

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <vector>

namespace verlpp::train {

struct AdamWConfig;

class ShardedAdamW {
 public:
  // `params`: contiguous tensors of one dtype on dp's device, the same list on every rank.
  // Collectives move at most `bucket_elements` elements per call.
  ShardedAdamW(std::vector<at::Tensor> params, DataParallel dp, int64_t bucket_elements = int64_t(1) << 24);

  // Collective. Sums the parameters' gradients over the ranks into this rank's shard (an
  // undefined gradient counts as zero) and drops the full gradients; then, when the global norm
  // is finite, clips (as clip_grad_norm) and steps every parameter (as torch::optim::AdamW, each
  // parameter with its own step count) and all-gathers the new values into every replica.
  // Returns the norm before clipping; a non-finite norm changes nothing.
  double step(const AdamWConfig& config, double lr);
  // Drops the full gradients (the shard's are rebuilt by every step).
  void drop_gradients();

  // Elements this rank holds: AdamW's moments (exp_avg + exp_avg_sq) of its shard, and the
  // summed gradient of its shard.
  int64_t state_elements() const { return 2 * shard_; }
  int64_t gradient_elements() const { return shard_; }
  // Each parameter's AdamW step count (0: no state yet); the same on every rank.
  const std::vector<int64_t>& steps() const { return steps_; }

  // Collective: every parameter's whole exp_avg and exp_avg_sq (views into one gathered buffer;
  // undefined for a parameter with no state), on every rank.
  void gather_state(std::vector<at::Tensor>& exp_avg, std::vector<at::Tensor>& exp_avg_sq) const;
  // Takes this rank's part of whole states (undefined tensors for a parameter without state,
  // whose step must be 0).
  void set_state(const std::vector<int64_t>& steps, const std::vector<at::Tensor>& exp_avg,
                 const std::vector<at::Tensor>& exp_avg_sq);

 private:
  // A parameter's part of a flat range: elements [param_begin, param_begin + length) of parameter
  // `index` are flat elements [flat_begin, flat_begin + length).
  struct Piece {
    size_t index;
    int64_t param_begin, flat_begin, length;
  };
  std::vector<Piece> pieces(int64_t flat_begin, int64_t flat_end) const;
  // The flat elements [begin, begin + out.numel()) of every parameter's gradient or value.
  void read_flat(int64_t begin, at::Tensor& out, bool gradients) const;
  void write_values(int64_t begin, const at::Tensor& values) const;

  std::vector<at::Tensor> params_;
  std::vector<int64_t> offsets_;  // flat offset of each parameter, then the total
  DataParallel dp_;
  int64_t bucket_elements_, shard_ = 0;
  at::Tensor exp_avg_, exp_avg_sq_, grad_;  // [shard_]: this rank's part
  std::vector<int64_t> steps_;
};

}  // namespace verlpp::train
