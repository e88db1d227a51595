// How a trained model's state is held over the ranks and between the device and host memory:
// the ZeRO stage and the offloads (verl's fsdp_config and trainer.zero_stage). A small header of
// its own so that the settings can name it without the trainer's headers.
#pragma once

namespace verlpp::hw {
class Plugin;
}

namespace verlpp::train {

// Where AdamW runs when the optimizer state is offloaded to host memory. kDevice is the default:
// its copies run at the host link's speed while the host pass is bound by host memory, several
// times slower on a GPU host (docs/scale-out.md); on a CPU device both step in host memory.
enum class OffloadedStep {
  kHost,    // on the host: one multi-threaded pass over each chunk of the state
  kDevice,  // streamed through the device: each chunk of the state copied up, stepped, copied down
};

// How a trained model's state is held over the ranks and between the device and host memory
// (verl's fsdp_config and trainer.zero_stage).
struct ShardingOptions {
  // 0: replicated; 1: AdamW state sharded; 2: gradients and fp32 masters too, each layer's
  // gradients reduce-scattered from its backward; 3: parameters too, each decoder layer gathered
  // only while it runs. Stages 2 and 3 hold the state in ShardedWeights' units. With one rank
  // every stage is 0.
  int zero_stage = 0;
  // fsdp_config.param_offload: the compute weights can be moved to host memory between uses
  // (TrainedModel::offload_parameters / reload_parameters).
  bool param_offload = false;
  // fsdp_config.optimizer_offload: the fp32 masters and AdamW's moments live in host memory.
  bool optimizer_offload = false;
  OffloadedStep offloaded_step = OffloadedStep::kDevice;
  // fsdp_config.forward_prefetch: at ZeRO-3 on several ranks, a forward starts the next layer's
  // all-gather while the current layer computes.
  bool forward_prefetch = false;
  // At ZeRO-3 on several ranks, each layer's backward starts the gather of the layer below (FSDP's
  // default BACKWARD_PRE); false: each layer is gathered when its backward runs.
  bool backward_prefetch = true;
  // At ZeRO-2 and 3 on several ranks, each layer's gradient reduce-scatter runs in the background
  // while the layers below differentiate; false waits for each one (for comparisons).
  bool overlap_reduce = true;
  // The plugin whose pinned host memory offloaded state uses (null: plain host memory).
  const hw::Plugin* host_memory = nullptr;
};

}  // namespace verlpp::train
