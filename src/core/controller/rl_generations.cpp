// The run's generated samples as verl records them: trainer.rollout_data_dir (each training
// step), trainer.validation_data_dir (each evaluation) and trainer.log_val_generations (a few
// samples per evaluation, in the log and, through val_generations.jsonl, in the report).
#include "rl_state.hpp"

#include "../util/files.hpp"

#include <ATen/ops/masked_select.h>

namespace verlpp::controller {

std::vector<GenerationRecord> generation_records(const RlTrainer::State& s, const Batch& batch, bool with_advantage) {
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
  std::vector<GenerationRecord> out(static_cast<size_t>(rows));
  for (int64_t i = 0; i < rows; ++i) {
    GenerationRecord& r = out[size_t(i)];
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
  }
  return out;
}

void dump_rollout_generations(RlTrainer::State& s, const Batch& batch) {
  const std::optional<std::string>& dir = s.settings.trainer.rollout_data_dir;
  if (!dir || !s.is_writer()) return;
  dump_generations(*dir, s.global_step, generation_records(s, batch, /*with_advantage=*/true));
}

void record_val_generations(RlTrainer::State& s, const std::vector<GenerationRecord>& records) {
  if (!s.is_writer()) return;
  const TrainerSettings& t = s.settings.trainer;
  if (t.validation_data_dir) {
    std::vector<GenerationRecord> with_reward = records;
    for (GenerationRecord& r : with_reward) r.extra["reward"] = r.score;  // verl's reward_extra_infos_dict["reward"]
    dump_generations(*t.validation_data_dir, s.global_step, with_reward);
  }
  if (t.log_val_generations <= 0) return;
  std::vector<ValGeneration> samples;
  samples.reserve(records.size());
  for (const GenerationRecord& r : records) samples.push_back({r.input, r.output, r.score});
  samples = pick_val_generations(std::move(samples), t.log_val_generations);
  for (const auto& logger : s.loggers) logger->log_val_generations(samples, s.global_step);
  if (!s.val_generations_out.is_open()) return;
  nlohmann::json row = {{"step", s.global_step}, {"samples", nlohmann::json::array()}};
  for (const ValGeneration& g : samples)
    row["samples"].push_back({{"input", g.input}, {"output", g.output}, {"score", g.score}});
  s.val_generations_out.write(row.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n");
  s.val_generations_out.flush();
}

}  // namespace verlpp::controller
