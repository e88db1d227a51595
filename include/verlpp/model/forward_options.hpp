// How a model's forwards compute: choices between paths that agree to rounding and differ in
// speed, chosen once by the owner of the model (the trainer from verlpp.model.*, a benchmark from
// its flags) and carried in ModelOptions, so copies of the model (a mixed-precision compute copy,
// the engine's handle) compute alike and nothing in a forward depends on the process environment.
#pragma once

namespace verlpp::model {

// Attention through LibTorch's fused SDPA (16-bit on LibTorch 2.x).
struct AttentionOptions {
  // K/V with fewer heads than q go into SDPA as they are (enable_gqa, LibTorch 2.5+) where a
  // fused kernel takes them; false repeats them for their query groups first.
  bool sdpa_gqa = true;
  // The paged reference backend's bound on one masked call over sequences with a cached prefix:
  // query x key pairs of a padded chunk (more sequences go into further calls).
  long long cached_chunk_pairs = 1LL << 21;
};

// Whether a model being trained computes q/k/v (and gate/up, with kernels that take them whole)
// as one GEMM each over its weights concatenated per forward.
enum class TrainingProjections {
  kAuto,   // on accelerators (fewer, wider GEMMs pay there), not on the CPU
  kFused,  // everywhere
  kSplit,  // nowhere: one GEMM per projection
};

struct ForwardOptions {
  TrainingProjections training_projections = TrainingProjections::kAuto;
  AttentionOptions attention;
};

}  // namespace verlpp::model
