// Engine outputs as the trainer's batch (see training_batch.hpp).
#include <verlpp/core/error.hpp>
#include <verlpp/data/rl_batch.hpp>
#include <verlpp/rollout/training_batch.hpp>

#include <nlohmann/json.hpp>

#include <string>

namespace verlpp::rollout {

data::Batch to_training_batch(const std::vector<GenerateRequest>& requests, const std::vector<GenerateOutput>& outputs,
                              int64_t response_length, TokenId pad_token_id) {
  if (outputs.empty()) throw Error("to_training_batch", "no outputs");
  std::vector<TokenIds> prompts, responses;
  std::vector<std::vector<float>> log_probs;
  std::vector<nlohmann::json> uids;
  for (const GenerateOutput& out : outputs) {
    if (out.request_index < 0 || out.request_index >= int64_t(requests.size()))
      throw Error("to_training_batch", fmt::format("an output of request {}, but {} requests were given",
                                                   out.request_index, requests.size()));
    if (!out.error.empty()) throw Error(fmt::format("to_training_batch: request {}", out.request_index), out.error);
    prompts.push_back(requests[size_t(out.request_index)].prompt_ids);
    responses.push_back(out.token_ids);
    log_probs.push_back(out.logprobs);
    uids.push_back(std::to_string(out.request_index));
  }
  data::Batch batch = data::append_samples(data::collate_prompt_ids(prompts, pad_token_id), responses, log_probs,
                                           response_length, pad_token_id);
  batch.set_column(data::fields::kUid, std::move(uids));
  return batch;
}

}  // namespace verlpp::rollout
