// RolloutEngine: request checks, the generate loop (schedule -> run_step -> postprocess), the
// runner (flat batch + PagedStep, copy-on-write block copies, last-row logits, sampler) and
// the hybrid-engine hooks. Only the last position of each computed sequence goes through the
// LM head, so a prefill never materialises [N, V] logits.
#include <verlpp/rollout/engine.hpp>
#include <verlpp/rollout/generation_session.hpp>

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
  check_no_session("RolloutEngine::release_weights");
  const auto start = std::chrono::steady_clock::now();
  drop_graphs();  // they read the weights' storage, which comes back elsewhere
  for (const auto& [name, p] : model_.named_parameters()) {
    if (std::find(shared_params_.begin(), shared_params_.end(), name) != shared_params_.end()) continue;
    hw::release_storage(p);
    released_params_.insert(name);
  }
  return seconds_since(start);
}

double RolloutEngine::sleep() {
  check_no_session("RolloutEngine::sleep");
  const auto start = std::chrono::steady_clock::now();
  drop_graphs();   // they write into this pool; a new pool lies elsewhere
  cache_.reset();  // on CUDA the memory goes back to LibTorch's caching allocator (docs/rollout.md)
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

GenerateOutput refused_output(size_t request_index, const std::string& error) {
  GenerateOutput out;
  out.request_index = int64_t(request_index);
  out.finish_reason = FinishReason::kAborted;
  out.error = error;
  return out;
}

}  // namespace

void RolloutEngine::check_no_session(const char* call) const {
  if (session_open_)
    VERLPP_FAIL_AT(call,
                   "a GenerationSession is open on this engine (it holds the KV pool and the weights): close it "
                   "first");
}

void RolloutEngine::prepare_to_generate(const char* call) {
  check_no_session(call);
  VERLPP_CHECK(cache_ != nullptr, "{}: the engine is asleep (call wake() first)", call);
  VERLPP_CHECK(released_params_.empty(),
               "{}: the engine's weights were released (release_weights) and {} of them, '{}' first, were not "
               "written again: call update_weights first",
               call, released_params_.size(), released_params_.empty() ? "" : *released_params_.begin());
  if (weights_stale()) {
    const int64_t now = source_version_ ? source_version_->load() : 0;
    if (options_.stale_weights == StaleWeights::kRefuse || source_params_.empty())
      VERLPP_FAIL_AT(call,
                     "the weights of the model this engine tracks changed (version {}, the engine took version {}): "
                     "it would generate with a mix of new shared and stale fused weights. Call "
                     "update_weights(model) after the optimizer step, or build the engine with "
                     "EngineOptions::stale_weights = StaleWeights::kSync",
                     now, synced_version_);
    update_weights(source_params_);
  }
}

void RolloutEngine::ensure_graph_width(int64_t num_blocks) {
  if (!graphs_off_reason_.empty() || (graphs_ && graphs_->table_width() >= num_blocks)) return;
  int64_t width = 16;
  while (width < num_blocks) width *= 2;
  drop_graphs();  // settles a step queued ahead first
  graphs_ = std::make_unique<detail::DecodeGraphs>(model_.options().device, num_blocks_, *options_.kernels,
                                                   options_.limits.max_num_seqs, width, options_.rotary_attention);
}

void RolloutEngine::drop_graphs() {
  if (!graphs_) return;
  graph_totals_ = graph_counters();
  graphs_.reset();
}

RolloutEngine::GraphCounters RolloutEngine::graph_counters() const {
  GraphCounters c = graph_totals_;
  if (graphs_) {
    c.captures += graphs_->num_captures();
    c.overlapped += graphs_->num_overlapped();
    c.discarded += graphs_->num_discarded();
    c.early_launch_edges += graphs_->early_launch_edges();
    c.capture_seconds += graphs_->capture_seconds();
  }
  return c;
}

std::vector<GenerateOutput> RolloutEngine::generate(const std::vector<GenerateRequest>& requests,
                                                    const std::function<void(int64_t, int64_t)>& progress,
                                                    const std::function<void(GenerateOutput&&)>& on_output) {
  const auto start = std::chrono::steady_clock::now();
  prepare_to_generate("RolloutEngine::generate");
  std::vector<std::string> errors(requests.size());
  int64_t longest = 1;  // tokens of KV the longest sample can need (its last sampled token is never fed)
  for (size_t i = 0; i < requests.size(); ++i) {
    errors[i] = check_request(requests[i]);
    if (!errors[i].empty()) continue;
    const int64_t len = int64_t(requests[i].prompt_ids.size());
    int64_t max_new = requests[i].sampling.max_new_tokens;
    if (model_.config().max_position_embeddings > 0)
      max_new = std::min(max_new, model_.config().max_position_embeddings - len);
    longest = std::max(longest, len + max_new - 1);
  }
  GenerationSession session(*this);
  session.reserve_context(longest);
  // Outputs by sequence id (ids are given in submission order, which is request order).
  std::vector<GenerateOutput> by_sequence;
  std::vector<SequenceId> first_of(requests.size(), -1);
  for (size_t i = 0; i < requests.size(); ++i)
    if (errors[i].empty()) first_of[i] = session.submit(requests[i], int64_t(i)).front();
  const int64_t total = session.num_waiting();
  if (!on_output) by_sequence.resize(size_t(total));
  for (size_t i = 0; i < requests.size() && on_output; ++i)
    if (!errors[i].empty()) on_output(refused_output(i, errors[i]));

  int64_t done = 0;
  while (session.has_work()) {
    std::vector<TurnOutput> ended = session.step();
    for (TurnOutput& turn : ended) {
      session.release(turn.sequence);  // its blocks go back at once, as the batch needs them
      GenerateOutput out;
      out.request_index = turn.request_index;
      out.sample_index = turn.sample_index;
      out.token_ids = std::move(turn.token_ids);
      out.logprobs = std::move(turn.logprobs);
      out.finish_reason = turn.finish_reason;
      out.num_preemptions = turn.num_preemptions;
      if (on_output)
        on_output(std::move(out));
      else
        by_sequence[size_t(turn.sequence)] = std::move(out);
    }
    done += int64_t(ended.size());
    if (progress && !ended.empty()) progress(done, total);
  }
  VERLPP_CHECK(session.num_free_blocks() == num_blocks_,
               "RolloutEngine: {} blocks still held after every request finished",
               num_blocks_ - session.num_free_blocks());
  stats_ = session.stats().steps;

  std::vector<GenerateOutput> outputs;
  for (size_t i = 0; i < requests.size() && !on_output; ++i) {
    if (!errors[i].empty()) {
      outputs.push_back(refused_output(i, errors[i]));
      continue;
    }
    for (int64_t j = 0; j < requests[i].sampling.n; ++j)
      outputs.push_back(std::move(by_sequence[size_t(first_of[i] + j)]));
  }
  stats_.seconds = seconds_since(start);
  return outputs;
}

bool RolloutEngine::run_step(const ScheduledStep& step, std::vector<int64_t>& token_ids, std::vector<float>& logprobs,
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
      if (graphs_->run(model_, *cache_, step, token_ids, logprobs, next_is_decode && options_.overlap_decode))
        return true;
    } catch (const Error& e) {
      // A capture that fails (an op that synchronises, a driver without graph support) costs
      // speed, not the generation: this and every later step run eagerly.
      graphs_off_reason_ = e.what();
      drop_graphs();
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
  return false;
}

WeightUpdateReport RolloutEngine::update_weights(const std::vector<std::pair<std::string, at::Tensor>>& named,
                                                 WeightSharing sharing) {
  check_no_session("RolloutEngine::update_weights");
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
        if (dst.data_ptr() != src.data_ptr()) drop_graphs();  // they read the old storage
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
        drop_graphs();
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
