// RolloutEngine: request checks, the generate loop (schedule -> run_step -> postprocess), the
// runner (flat batch + PagedStep, copy-on-write block copies, last-row logits, sampler) and
// the hybrid-engine hooks. Only the last position of each computed sequence goes through the
// LM head, so a prefill never materialises [N, V] logits.
#include <verlpp/rollout/engine.hpp>

#include <verlpp/model/tensor_parallel.hpp>

#include <verlpp/core/error.hpp>
#include <verlpp/core/strings.hpp>
#include <verlpp/hw/tensor_storage.hpp>
#include <verlpp/model/kv_cache.hpp>

#include "attention.hpp"
#include "decode_graphs.hpp"
#include "../ops/layer_kernels.hpp"

#include <verlpp/core/log.hpp>

#include <ATen/core/grad_mode.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/tensor.h>

#include <algorithm>
#include <optional>
#include <chrono>
#include <unistd.h>

namespace verlpp::rollout {
namespace {

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// Waits until the work queued before `t`'s last write on its device is done, so that a reported
// time covers the work and not just its launch (CUDA copies and fills are asynchronous).
// Reading one element back synchronises LibTorch's current stream, which needs no device
// headers (this library also builds against a CPU-only LibTorch).
void wait_for_device(const at::Tensor& t) {
  if (t.defined() && !t.is_cpu() && t.numel() > 0) (void)t.reshape({-1}).narrow(0, 0, 1).to(at::kCPU);
}

std::string shape_text(const at::Tensor& t) {
  std::vector<std::string> dims;
  for (int64_t d : t.sizes()) dims.push_back(std::to_string(d));
  return "[" + join(dims, ", ") + "]";
}

}  // namespace

RolloutEngine::RolloutEngine(model::DecoderLM model, EngineOptions options)
    : model_(std::move(model)),
      options_(std::move(options)),
      source_version_(model_.weights_version_counter()),
      synced_version_(model_.weights_version()),
      layer_kernels_(ops::layer_kernels_for(options_.kernels, ops::LayerKernelsOptions{/*fuse_adds=*/true})) {
  // Before fusing: the tensors of the model given, which a trainer updates in place.
  if (options_.stale_weights == StaleWeights::kSync) source_params_ = model_.named_parameters();
  VERLPP_CHECK(options_.block_size > 0, "RolloutEngine: block_size {} must be positive", options_.block_size);
  const int64_t per_block = bytes_per_block();
  if (options_.num_blocks > 0) {
    num_blocks_ = options_.num_blocks;
  } else if (options_.kv_token_budget > 0) {
    num_blocks_ = (options_.kv_token_budget + options_.block_size - 1) / options_.block_size;
  } else if (options_.memory_fraction > 0) {
    VERLPP_CHECK(options_.memory_fraction <= 1, "RolloutEngine: memory_fraction {} must be in (0, 1]",
                 options_.memory_fraction);
    int64_t total = options_.memory_total_bytes;
    // Physical RAM says nothing about a GPU's memory: sizing a device pool from it could ask for
    // more than the device has, or far less than intended.
    VERLPP_CHECK(total > 0 || model_.options().device.is_cpu(),
                 "RolloutEngine: memory_fraction {} on device {} needs memory_total_bytes (the device's memory, e.g. "
                 "from the plugin's memory figures); 0 means physical RAM, which is only right on the CPU",
                 options_.memory_fraction, model_.options().device.str());
    if (total <= 0) total = int64_t(::sysconf(_SC_PHYS_PAGES)) * int64_t(::sysconf(_SC_PAGESIZE));
    int64_t weights = 0;
    for (const auto& [name, p] : model_.named_parameters()) weights += p.numel() * int64_t(p.element_size());
    const int64_t pool = int64_t(options_.memory_fraction * double(total)) - weights;
    num_blocks_ = pool / per_block;
    VERLPP_CHECK(num_blocks_ > 0,
                 "RolloutEngine: memory_fraction {} of {} bytes leaves {} bytes after {} bytes of weights, less than "
                 "one KV block ({} bytes)",
                 options_.memory_fraction, total, pool, weights, per_block);
  } else {
    num_blocks_ = (16384 + options_.block_size - 1) / options_.block_size;
  }
  if (options_.fuse_projections) model_.fuse_projections();
  if (!options_.device_graphs)
    graphs_off_reason_ = "turned off (EngineOptions::device_graphs = false)";
  else
    graphs_off_reason_ = detail::DecodeGraphs::unavailable_reason(model_, options_.kernels);
  if (!model_.options().device.is_cpu())
    log(graphs_off_reason_.empty() ? LogLevel::debug : LogLevel::info,
        graphs_off_reason_.empty() ? "rollout: decode steps run as device graphs"
                                   : "rollout: decode steps run eagerly, not as device graphs: " + graphs_off_reason_);
  wake();
}

RolloutEngine::~RolloutEngine() = default;
RolloutEngine::RolloutEngine(RolloutEngine&&) noexcept = default;

int64_t RolloutEngine::bytes_per_block() const {
  const auto& c = model_.config();
  return 2 * c.num_hidden_layers * options_.block_size * c.num_key_value_heads * c.head_dim *
         int64_t(c10::elementSize(model_.options().dtype));
}

int64_t RolloutEngine::pool_bytes() const { return num_blocks_ * bytes_per_block(); }

double RolloutEngine::release_weights() {
  const auto start = std::chrono::steady_clock::now();
  graphs_.reset();  // they read the weights' storage, which comes back elsewhere
  for (const auto& [name, p] : model_.named_parameters()) {
    if (std::find(shared_params_.begin(), shared_params_.end(), name) != shared_params_.end()) continue;
    hw::release_storage(p);
    released_params_.insert(name);
  }
  return seconds_since(start);
}

double RolloutEngine::sleep() {
  const auto start = std::chrono::steady_clock::now();
  graphs_.reset();  // they write into this pool; a new pool lies elsewhere
  cache_.reset();   // on CUDA the memory goes back to LibTorch's caching allocator (docs/rollout.md)
  return seconds_since(start);
}

double RolloutEngine::wake() {
  const auto start = std::chrono::steady_clock::now();
  if (!cache_) {
    const int64_t scratch = graphs_off_reason_.empty() ? 1 : 0;  // the decode graphs' padding block
    cache_ = std::make_unique<model::PagedKvCache>(model_.config(), num_blocks_ + scratch, options_.block_size,
                                                   model_.options().dtype, model_.options().device);
    wait_for_device(cache_->v(cache_->num_layers() - 1));  // the pool is zero-filled asynchronously on a GPU
  }
  return seconds_since(start);
}

std::string RolloutEngine::check_request(const GenerateRequest& request) const {
  try {
    validate(request.sampling);
  } catch (const Error& e) {
    return e.what();
  }
  const auto& c = model_.config();
  const int64_t len = int64_t(request.prompt_ids.size());
  if (len == 0) return "the prompt is empty";
  for (size_t i = 0; i < request.prompt_ids.size(); ++i)
    if (request.prompt_ids[i] < 0 || request.prompt_ids[i] >= model_.vocab_size())
      return fmt::format("prompt token {} at position {} is outside the vocabulary [0, {})", request.prompt_ids[i], i,
                         model_.vocab_size());
  if (c.max_position_embeddings > 0 && len >= c.max_position_embeddings)
    return fmt::format(
        "the prompt has {} tokens; the model's context is {} (max_position_embeddings), leaving no room "
        "to generate",
        len, c.max_position_embeddings);
  int64_t max_new = request.sampling.max_new_tokens;
  if (c.max_position_embeddings > 0) max_new = std::min(max_new, c.max_position_embeddings - len);
  const int64_t cached = len + max_new - 1;  // the last sampled token is never fed
  if (cached > num_blocks_ * options_.block_size)
    return fmt::format(
        "prompt ({} tokens) + max_new_tokens ({}) needs {} tokens of KV cache; the whole pool holds {} "
        "({} blocks of {})",
        len, max_new, cached, num_blocks_ * options_.block_size, num_blocks_, options_.block_size);
  return "";
}

namespace {

// The output of a finished sample; its ids and log-probs move out of the sequence.
GenerateOutput output_of(Sequence& s) {
  GenerateOutput out;
  out.request_index = s.request_index;
  out.sample_index = s.sample_index;
  out.token_ids.assign(s.token_ids.begin() + s.num_prompt_tokens, s.token_ids.end());
  out.logprobs = std::move(s.logprobs);
  out.finish_reason = s.finish_reason;
  out.num_preemptions = s.num_preemptions;
  return out;
}

GenerateOutput refused_output(size_t request_index, const std::string& error) {
  GenerateOutput out;
  out.request_index = int64_t(request_index);
  out.finish_reason = FinishReason::kAborted;
  out.error = error;
  return out;
}

}  // namespace

std::vector<GenerateOutput> RolloutEngine::generate(const std::vector<GenerateRequest>& requests,
                                                    const std::function<void(int64_t, int64_t)>& progress,
                                                    const std::function<void(GenerateOutput&&)>& on_output) {
  VERLPP_CHECK(cache_ != nullptr, "RolloutEngine::generate: the engine is asleep (call wake() first)");
  VERLPP_CHECK(released_params_.empty(),
               "RolloutEngine::generate: the engine's weights were released (release_weights) and {} of them, '{}' "
               "first, were not written again: call update_weights first",
               released_params_.size(), released_params_.empty() ? "" : *released_params_.begin());
  if (weights_stale()) {
    const int64_t now = source_version_ ? source_version_->load() : 0;
    if (options_.stale_weights == StaleWeights::kRefuse || source_params_.empty())
      VERLPP_FAIL_AT("RolloutEngine::generate",
                     "the weights of the model this engine tracks changed (version {}, the engine took version {}): "
                     "it would generate with a mix of new shared and stale fused weights. Call "
                     "update_weights(model) after the optimizer step, or build the engine with "
                     "EngineOptions::stale_weights = StaleWeights::kSync",
                     now, synced_version_);
    update_weights(source_params_);
  }
  at::NoGradGuard no_grad;
  const auto start = std::chrono::steady_clock::now();
  stats_ = GenerateStats{};
  BlockManager blocks(num_blocks_, options_.block_size);
  // Overlapped decode steps need the next position's block before the step that feeds it.
  Scheduler scheduler(blocks, options_.limits, /*reserve_ahead=*/graphs_off_reason_.empty() && options_.overlap_decode);
  const auto& c = model_.config();

  std::vector<std::string> errors(requests.size());
  std::vector<std::vector<int64_t>> stop_lists(requests.size());
  std::vector<std::unique_ptr<Sequence>> seqs;
  for (size_t i = 0; i < requests.size(); ++i) {
    const GenerateRequest& r = requests[i];
    errors[i] = check_request(r);
    if (!errors[i].empty()) continue;
    stop_lists[i] = r.sampling.stop_token_ids;
    if (!r.sampling.ignore_eos)
      stop_lists[i].insert(stop_lists[i].end(), c.eos_token_ids.begin(), c.eos_token_ids.end());
    const uint64_t seed = r.sampling.seed.value_or(options_.seed + uint64_t(i));
    const int64_t len = int64_t(r.prompt_ids.size());
    std::vector<Sequence*> group;
    for (int64_t j = 0; j < r.sampling.n; ++j) {
      auto seq = std::make_unique<Sequence>();
      seq->id = int64_t(seqs.size());
      seq->request_index = int64_t(i);
      seq->sample_index = j;
      seq->token_ids = r.prompt_ids;
      seq->num_prompt_tokens = len;
      seq->max_new_tokens = c.max_position_embeddings > 0
                                ? std::min(r.sampling.max_new_tokens, c.max_position_embeddings - len)
                                : r.sampling.max_new_tokens;
      seq->sampling = RowSampling{r.sampling.temperature, r.sampling.top_k, r.sampling.top_p, sample_seed(seed, j), 0};
      seq->stop_ids = &stop_lists[i];
      group.push_back(seq.get());
      seqs.push_back(std::move(seq));
    }
    scheduler.add_group(std::move(group));
  }
  if (on_output)
    for (size_t i = 0; i < requests.size(); ++i)
      if (!errors[i].empty()) on_output(refused_output(i, errors[i]));

  if (graphs_off_reason_.empty()) {
    // Block tables of a graph are as wide as the longest sample can need, rounded up to a power
    // of two so that later calls with similar lengths reuse the graphs.
    int64_t need = 1;
    for (const auto& s : seqs)
      need = std::max(need,
                      (s->num_prompt_tokens + s->max_new_tokens - 1 + options_.block_size - 1) / options_.block_size);
    int64_t width = 16;
    while (width < need) width *= 2;
    if (!graphs_ || graphs_->table_width() < width)
      graphs_ = std::make_unique<detail::DecodeGraphs>(model_.options().device, num_blocks_, *options_.kernels,
                                                       options_.limits.max_num_seqs, width, options_.rotary_attention);
  }
  const int64_t captures_before = graphs_ ? graphs_->num_captures() : 0;
  const double capture_seconds_before = graphs_ ? graphs_->capture_seconds() : 0;
  const int64_t early_edges_before = graphs_ ? graphs_->early_launch_edges() : 0;
  const int64_t overlapped_before = graphs_ ? graphs_->num_overlapped() : 0;
  const int64_t discarded_before = graphs_ ? graphs_->num_discarded() : 0;
  // A step queued ahead belongs to this call's sequences: it must be done and dropped before
  // they go away, also when this call throws.
  struct Settle {
    std::unique_ptr<detail::DecodeGraphs>& graphs;
    ~Settle() {
      if (graphs) graphs->settle();
    }
  } settle{graphs_};

  const int64_t total = int64_t(seqs.size());
  int64_t done = 0;
  std::vector<int64_t> token_ids;
  std::vector<float> logprobs;
  while (scheduler.has_work()) {
    ScheduledStep step = scheduler.schedule();
    VERLPP_CHECK(!step.empty(),
                 "RolloutEngine: the scheduler made no progress ({} waiting, {} running, {} free blocks)",
                 scheduler.num_waiting(), scheduler.num_running(), blocks.num_free_blocks());
    if (step.is_prefill) {
      ++stats_.num_prefill_steps;
      for (const Sequence* s : step.compute) stats_.num_prompt_tokens += s->num_tokens() - s->num_cached_tokens;
    } else {
      ++stats_.num_decode_steps;
    }
    const auto step_start = std::chrono::steady_clock::now();
    run_step(step, token_ids, logprobs, scheduler.num_waiting() == 0);
    (step.is_prefill ? stats_.prefill_seconds : stats_.decode_seconds) += seconds_since(step_start);
    stats_.num_generated_tokens += int64_t(token_ids.size());
    const auto finished = scheduler.postprocess(step, token_ids, logprobs);
    done += int64_t(finished.size());
    if (on_output)
      for (Sequence* s : finished) {
        on_output(output_of(*s));
        std::vector<int64_t>().swap(s->token_ids);  // a finished sequence is never read again
      }
    if (progress && !finished.empty()) progress(done, total);
  }
  VERLPP_CHECK(blocks.num_free_blocks() == blocks.num_blocks(),
               "RolloutEngine: {} blocks still held after every request finished",
               blocks.num_blocks() - blocks.num_free_blocks());
  stats_.num_preemptions = scheduler.num_preemptions();
  if (graphs_) {
    stats_.num_graph_captures = graphs_->num_captures() - captures_before;
    stats_.graph_capture_seconds = graphs_->capture_seconds() - capture_seconds_before;
    stats_.graph_early_launch_edges = graphs_->early_launch_edges() - early_edges_before;
    stats_.num_overlapped_steps = graphs_->num_overlapped() - overlapped_before;
    stats_.num_discarded_steps = graphs_->num_discarded() - discarded_before;
  }

  std::vector<GenerateOutput> outputs;
  size_t next = 0;
  for (size_t i = 0; i < requests.size() && !on_output; ++i) {
    if (!errors[i].empty()) {
      outputs.push_back(refused_output(i, errors[i]));
      continue;
    }
    for (; next < seqs.size() && seqs[next]->request_index == int64_t(i); ++next)
      outputs.push_back(output_of(*seqs[next]));
  }
  stats_.seconds = seconds_since(start);
  return outputs;
}

void RolloutEngine::run_step(const ScheduledStep& step, std::vector<int64_t>& token_ids, std::vector<float>& logprobs,
                             bool next_is_decode) {
  const int64_t bs = options_.block_size;
  const auto dev = model_.options().device;
  auto i64 = at::TensorOptions().dtype(at::kLong);
  for (const BlockCopy& copy : step.copies)
    for (int64_t l = 0; l < cache_->num_layers(); ++l) {
      cache_->k(l).select(0, copy.dst).copy_(cache_->k(l).select(0, copy.src));
      cache_->v(l).select(0, copy.dst).copy_(cache_->v(l).select(0, copy.src));
    }
  if (!step.is_prefill && graphs_) {
    try {
      if (graphs_->run(model_, *cache_, step, token_ids, logprobs, next_is_decode && options_.overlap_decode)) {
        ++stats_.num_graph_steps;
        return;
      }
    } catch (const Error& e) {
      // A capture that fails (an op that synchronises, a driver without graph support) costs
      // speed, not the generation: this and every later step run eagerly.
      graphs_off_reason_ = e.what();
      graphs_.reset();
      log(LogLevel::warning, "rollout: decode graphs turned off, steps run eagerly: " + graphs_off_reason_);
    }
  }
  std::vector<int64_t> ids, positions, slots, cu{0}, lens, last_rows;
  size_t max_blocks = 1;
  for (const Sequence* s : step.compute) max_blocks = std::max(max_blocks, s->block_table.size());
  std::vector<int64_t> tables(step.compute.size() * max_blocks, 0);
  for (size_t i = 0; i < step.compute.size(); ++i) {
    const Sequence* s = step.compute[i];
    for (int64_t p = s->num_cached_tokens; p < s->num_tokens(); ++p) {
      ids.push_back(s->token_ids[size_t(p)]);
      positions.push_back(p);
      slots.push_back(s->block_table[size_t(p / bs)] * bs + p % bs);
    }
    cu.push_back(int64_t(ids.size()));
    last_rows.push_back(int64_t(ids.size()) - 1);
    lens.push_back(s->num_tokens());
    std::copy(s->block_table.begin(), s->block_table.end(), tables.begin() + int64_t(i * max_blocks));
  }
  std::vector<int64_t> rows;
  std::vector<RowSampling> sampling;
  for (const auto& [seq, index] : step.samplers) {
    rows.push_back(last_rows[size_t(index)]);
    sampling.push_back(seq->sampling);
  }
  // Every int64 input of the step in one buffer, one host-to-device copy (on a GPU: from pinned
  // memory, asynchronous), then views: ids | positions | slots | cu | lens | tables | rows.
  const std::vector<const std::vector<int64_t>*> parts = {&ids, &positions, &slots, &cu, &lens, &tables, &rows};
  int64_t total = 0;
  for (const auto* part : parts) total += int64_t(part->size());
  if (!staging_.defined() || staging_.numel() < total) {
    // Pinned staging is a CUDA/HIP facility; other device types copy from pageable memory.
    auto opts = i64.pinned_memory(dev.is_cuda());
    staging_ = at::empty({std::max<int64_t>(total, 4096)}, opts);
  }
  int64_t* out = staging_.data_ptr<int64_t>();
  for (const auto* part : parts) out = std::copy(part->begin(), part->end(), out);
  const at::Tensor device_inputs = staging_.narrow(0, 0, total).to(dev, /*non_blocking=*/dev.is_cuda());
  std::vector<at::Tensor> views;
  int64_t offset = 0;
  for (const auto* part : parts) {
    views.push_back(device_inputs.narrow(0, offset, int64_t(part->size())));
    offset += int64_t(part->size());
  }
  model::PagedStep paged{views[2], views[3], views[4],
                         views[5].view({int64_t(step.compute.size()), int64_t(max_blocks)})};
  detail::RolloutAttention attention(*cache_, std::move(paged), !step.is_prefill, options_.kernels,
                                     options_.rotary_attention);
  at::Tensor hidden = model_.forward_cached(views[0], views[1], attention, layer_kernels_);
  at::Tensor logits = model_.logits(hidden.index_select(0, views[6]));  // [samplers, V]
  SampleResult result = sample(logits, sampling, options_.kernels);
  const int64_t* t = result.token_ids.data_ptr<int64_t>();
  const float* lp = result.logprobs.data_ptr<float>();
  token_ids.assign(t, t + result.token_ids.numel());
  logprobs.assign(lp, lp + result.logprobs.numel());
}

WeightUpdateReport RolloutEngine::update_weights(const std::vector<std::pair<std::string, at::Tensor>>& named,
                                                 WeightSharing sharing) {
  at::NoGradGuard no_grad;
  const auto start = std::chrono::steady_clock::now();
  WeightUpdateReport report;
  const auto& c = model_.config();
  const at::Tensor* last_copied = nullptr;
  // A split engine slices whole tensors: its layout, once for the call.
  const model::TensorParallelGroup* tp = model_.tensor_parallel();
  const std::optional<model::TensorParallelLayout> layout =
      tp != nullptr ? std::optional(model::tensor_parallel_layout(model_.whole_config(), tp->size())) : std::nullopt;
  for (const auto& [given_name, given] : named) {
    std::string name = given_name;
    if (name == "lm_head.weight" && c.tie_word_embeddings) {
      // The engine's lm_head is its embedding; the trainer's tied lm_head is the same tensor.
      bool has_embed = false;
      for (const auto& item : named) has_embed |= item.first == "model.embed_tokens.weight";
      if (has_embed) continue;
      name = "model.embed_tokens.weight";
    }
    const at::Tensor& dst = model_.parameter(name);  // Error naming an unknown parameter
    at::Tensor src = given;
    if (layout && dst.sizes() != src.sizes())  // a whole tensor: this rank's slice of it (a fresh tensor)
      src = model::tensor_parallel_slice(model_.whole_config(), *layout, name, given.detach(), tp->rank());
    if (dst.sizes() != src.sizes())
      VERLPP_FAIL_AT("RolloutEngine::update_weights", "'{}': given shape {} but the engine's is {}", given_name,
                     shape_text(src), shape_text(dst));
    const auto shared = std::find(shared_params_.begin(), shared_params_.end(), name);
    // A fused parameter is a view of the engine's fused buffer: re-pointing it would detach it.
    if (sharing == WeightSharing::kShare && !model_.is_fused(name) && src.device() == dst.device() &&
        src.scalar_type() == dst.scalar_type() && src.is_contiguous()) {
      if (!dst.is_same(src)) {
        if (dst.data_ptr() != src.data_ptr()) graphs_.reset();  // they read the old storage
        const_cast<at::Tensor&>(dst).set_(src.detach());
      }
      released_params_.erase(name);
      if (shared == shared_params_.end()) shared_params_.push_back(name);
      ++report.num_shared;
    } else {
      // Never write through a storage we share with the trainer: take a private buffer first.
      if (shared != shared_params_.end()) {
        const_cast<at::Tensor&>(dst).set_(at::empty(dst.sizes(), dst.options()));
        shared_params_.erase(shared);
        graphs_.reset();
      }
      if (released_params_.erase(name) > 0) hw::restore_storage(dst);
      dst.copy_(src.detach());
      last_copied = &dst;
      ++report.num_copied;
    }
  }
  if (last_copied != nullptr) wait_for_device(*last_copied);  // copies on one stream finish in order
  synced_version_ = source_version_ ? source_version_->load() : 0;
  report.seconds = seconds_since(start);
  return report;
}

WeightUpdateReport RolloutEngine::update_weights(const model::DecoderLM& source) {
  // Read the version first: a change while copying then shows as stale, never the reverse.
  std::shared_ptr<const std::atomic<int64_t>> counter = source.weights_version_counter();
  const int64_t version = counter ? counter->load() : 0;
  WeightUpdateReport report = update_weights(source.named_parameters());
  source_version_ = std::move(counter);
  synced_version_ = version;
  if (options_.stale_weights == StaleWeights::kSync) source_params_ = source.named_parameters();
  return report;
}

bool RolloutEngine::weights_stale() const { return source_version_ && source_version_->load() != synced_version_; }

}  // namespace verlpp::rollout
