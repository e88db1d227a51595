// The run's generated samples as verl records them: trainer.rollout_data_dir (each training
// step), trainer.validation_data_dir (each evaluation) and trainer.log_val_generations (a few
// samples per evaluation, in the log and, through val_generations.jsonl, in the report).
#include "rl_state.hpp"

#include "../util/files.hpp"

#include <ATen/ops/masked_select.h>

#include <map>

namespace verlpp::controller {

namespace {

// verl dumps a reward extra only where every sample has it (a list of the dump's length), so a
// key some scorers did not report is left out of every line.
void drop_partial_extras(std::vector<tracking::GenerationRecord>& records) {
  std::map<std::string, size_t> holders;  // key -> records that have it
  for (const tracking::GenerationRecord& r : records)
    for (const auto& [key, value] : r.extra.items()) ++holders[key];
  for (const auto& [key, count] : holders)
    if (count < records.size())
      for (tracking::GenerationRecord& r : records) r.extra.erase(key);
}

}  // namespace

std::vector<tracking::GenerationRecord> generation_records(const RlTrainer::State& s, const Batch& batch,
                                                           bool with_advantage,
                                                           const std::vector<std::string>& reward_extras) {
  const at::Tensor prompts = batch.tensor("prompts").cpu().contiguous();
  const int64_t rows = batch.size(), width = prompts.size(1);
  const at::Tensor prompt_mask = batch.tensor("attention_mask").narrow(1, 0, width).cpu().to(at::kBool).contiguous();
  at::Tensor advantages, response_mask;
  if (with_advantage) {
    advantages = batch.tensor("advantages").cpu().to(at::kDouble);
    response_mask = batch.tensor("response_mask").cpu().to(at::kBool);
  }
  const auto& texts = batch.column("response_text");
  const auto& scores = batch.column("score");
  const auto& truths = batch.column("ground_truth");
  std::vector<tracking::GenerationRecord> out(static_cast<size_t>(rows));
  for (int64_t i = 0; i < rows; ++i) {
    tracking::GenerationRecord& r = out[size_t(i)];
    const int64_t* ids = prompts.data_ptr<int64_t>() + i * width;
    const bool* mask = prompt_mask.data_ptr<bool>() + i * width;
    TokenIds prompt;
    for (int64_t k = 0; k < width; ++k)
      if (mask[k]) prompt.push_back(ids[k]);
    r.input = s.tokenizer->decode(prompt, /*skip_special_tokens=*/true);
    r.output = texts[size_t(i)].get<std::string>();
    r.gts = truths[size_t(i)];
    r.score = scores[size_t(i)].get<double>();
    if (with_advantage) {
      const at::Tensor a = at::masked_select(advantages[i], response_mask[i]);
      r.extra["advantage"] = a.numel() == 0 ? 0.0 : a.mean().item<double>();
    }
    // Rows whose scorer did not report an extra hold null in its column (compute_scores).
    for (const std::string& key : reward_extras) {
      const nlohmann::json& value = batch.column(key)[size_t(i)];
      if (!value.is_null()) r.extra[key] = value;
    }
  }
  return out;
}

void dump_rollout_generations(RlTrainer::State& s, const Batch& batch, const std::vector<std::string>& reward_extras) {
  const std::optional<std::string>& dir = s.settings.trainer.rollout_data_dir;
  if (!dir || !s.is_writer()) return;
  std::vector<tracking::GenerationRecord> records =
      generation_records(s, batch, /*with_advantage=*/true, reward_extras);
  drop_partial_extras(records);
  tracking::dump_generations(*dir, s.global_step, records);
}

void record_val_generations(RlTrainer::State& s, const std::vector<tracking::GenerationRecord>& records) {
  if (!s.is_writer()) return;
  const config::TrainerSettings& t = s.settings.trainer;
  if (t.validation_data_dir) {
    // verl's reward_extra_infos_dict in validation: "reward" (the score) first, then the extras.
    std::vector<tracking::GenerationRecord> with_reward = records;
    drop_partial_extras(with_reward);
    for (tracking::GenerationRecord& r : with_reward) {
      nlohmann::ordered_json extra = {{"reward", r.score}};
      for (const auto& [key, value] : r.extra.items())
        if (key != "reward") extra[key] = value;
      r.extra = std::move(extra);
    }
    tracking::dump_generations(*t.validation_data_dir, s.global_step, with_reward);
  }
  if (t.log_val_generations <= 0) return;
  std::vector<tracking::ValGeneration> samples;
  samples.reserve(records.size());
  for (const tracking::GenerationRecord& r : records) samples.push_back({r.input, r.output, r.score});
  samples = tracking::pick_val_generations(std::move(samples), t.log_val_generations);
  for (const auto& logger : s.loggers) logger->log_val_generations(samples, s.global_step);
  if (!s.val_generations_out.is_open()) return;
  nlohmann::json row = {{"step", s.global_step}, {"samples", nlohmann::json::array()}};
  for (const tracking::ValGeneration& g : samples)
    row["samples"].push_back({{"input", g.input}, {"output", g.output}, {"score", g.score}});
  s.val_generations_out.write(row.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n");
  s.val_generations_out.flush();
}

}  // namespace verlpp::controller
