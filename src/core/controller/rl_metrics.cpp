// Step metrics with verl's names (compute_data_metrics, compute_throughout_metrics) and memory:
// the device's as LibTorch's allocator counts it, the process's as Linux reports it.
#include "rl_state.hpp"

#include <verlpp/hw/torch_memory.hpp>

#include <ATen/ops/masked_select.h>
#include <ATen/ops/tensor.h>

#include <algorithm>
#include <fstream>
#include <map>

namespace verlpp::controller {
namespace {

using json = nlohmann::json;
constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

void add_stats(const std::string& prefix, const at::Tensor& values, json& m) {
  if (values.numel() == 0) return;
  at::Tensor v = values.to(at::kDouble);
  m[prefix + "/mean"] = v.mean().item<double>();
  m[prefix + "/max"] = v.max().item<double>();
  m[prefix + "/min"] = v.min().item<double>();
}

// A field of /proc/self/status in kB, as GiB (0 when unreadable).
double status_gib(const std::string& field) {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind(field + ":", 0) == 0) return std::stod(line.substr(field.size() + 1)) / (1024.0 * 1024.0);
  return 0.0;
}

// A numeric column (one value per row) as a double tensor.
at::Tensor column_values(const Batch& batch, const std::string& name) {
  std::vector<double> values;
  for (const json& v : batch.column(name)) values.push_back(v.get<double>());
  return at::tensor(values, at::TensorOptions().dtype(at::kDouble));
}

// verl's multi-turn metrics (num_turns/*, tool_call_counts/*) and verlpp's own agent/* counts, for
// a batch the agent loop generated (its columns num_turns, tool_call_counts, malformed_tool_calls
// and termination).
void add_agent_metrics(const Batch& batch, json& m) {
  if (!batch.has_column("num_turns")) return;
  add_stats("num_turns", column_values(batch, "num_turns"), m);
  add_stats("tool_call_counts", column_values(batch, "tool_call_counts"), m);
  m["agent/malformed_tool_calls"] = column_values(batch, "malformed_tool_calls").sum().item<double>();
  std::map<std::string, double> ends;
  for (const json& why : batch.column("termination")) ends[why.get<std::string>()] += 1.0;
  for (const auto& [why, count] : ends) m["agent/termination/" + why] = count / double(batch.size());
}

}  // namespace

double resident_gib() { return status_gib("VmRSS"); }
double peak_resident_gib() { return status_gib("VmHWM"); }

void begin_stage_memory(const RlTrainer::State& s) { hw::reset_torch_memory_peak(s.device); }

double stage_memory_gib(RlTrainer::State& s) {
  hw::TorchMemoryStats stats;
  if (!hw::torch_memory_stats(s.device, &stats)) return resident_gib();
  s.step_peak_allocated = std::max(s.step_peak_allocated, stats.peak_allocated);
  s.step_peak_reserved = std::max(s.step_peak_reserved, stats.peak_reserved);
  return double(stats.peak_allocated) / kGiB;
}

void add_memory_metrics(RlTrainer::State& s, json& m) {
  hw::TorchMemoryStats stats;
  if (hw::torch_memory_stats(s.device, &stats)) {
    m["perf/max_memory_allocated_gb"] = double(std::max(s.step_peak_allocated, stats.peak_allocated)) / kGiB;
    m["perf/max_memory_reserved_gb"] = double(std::max(s.step_peak_reserved, stats.peak_reserved)) / kGiB;
  }
  s.step_peak_allocated = s.step_peak_reserved = 0;
  m["perf/max_memory_rss_gib"] = peak_resident_gib();
}

void add_data_metrics(const Batch& batch, bool with_critic, json& m) {
  const at::Tensor mask = batch.tensor("response_mask").to(at::kBool);
  add_stats("critic/score", batch.tensor("token_level_scores").sum(-1), m);
  add_stats("critic/rewards", batch.tensor("token_level_rewards").sum(-1), m);
  add_stats("critic/advantages", at::masked_select(batch.tensor("advantages"), mask), m);
  add_stats("critic/returns", at::masked_select(batch.tensor("returns"), mask), m);
  if (with_critic && batch.has_tensor("values")) {
    at::Tensor values = at::masked_select(batch.tensor("values"), mask).to(at::kDouble);
    at::Tensor returns = at::masked_select(batch.tensor("returns"), mask).to(at::kDouble);
    add_stats("critic/values", values, m);
    const double var_returns = returns.var(/*unbiased=*/false).item<double>();
    m["critic/vf_explained_var"] = 1.0 - returns.sub(values).var(false).item<double>() / (var_returns + 1e-5);
  }
  // As verl: the attended response tokens (a multi-turn response's tool segments included).
  const at::Tensor response_length = data::response_attention(batch).sum(-1).to(at::kDouble);
  const int64_t max_response = batch.tensor("responses").size(1);
  add_stats("response_length", response_length, m);
  m["response_length/clip_ratio"] = response_length.eq(double(max_response)).to(at::kDouble).mean().item<double>();
  const at::Tensor prompt_mask = batch.tensor("attention_mask").narrow(1, 0, batch.tensor("prompts").size(1));
  add_stats("prompt_length", prompt_mask.sum(-1), m);
  add_agent_metrics(batch, m);
}

void add_rollout_drift_metrics(const Batch& batch, json& m) {
  if (!batch.has_tensor("rollout_log_probs") || !batch.has_tensor("old_log_probs")) return;
  const at::Tensor mask = batch.tensor("response_mask").to(at::kBool);
  at::Tensor diff =
      at::masked_select(batch.tensor("rollout_log_probs").exp().sub(batch.tensor("old_log_probs").exp()).abs(), mask);
  if (diff.numel() == 0) return;
  m["training/rollout_probs_diff_max"] = diff.max().item<double>();
  m["training/rollout_probs_diff_mean"] = diff.mean().item<double>();
}

void add_throughput_metrics(const Batch& batch, double step_seconds, json& m) {
  const double tokens = batch.tensor("attention_mask").sum().item<double>();
  m["perf/total_num_tokens"] = tokens;
  m["perf/time_per_step"] = step_seconds;
  m["perf/throughput"] = tokens / std::max(step_seconds, 1e-9);  // one device per process
}

}  // namespace verlpp::controller
