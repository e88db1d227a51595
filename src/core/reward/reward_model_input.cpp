// reencode_for_reward_model (see reward_model_input.hpp).
#include <verlpp/reward/reward_model_input.hpp>

#include <verlpp/core/error.hpp>
#include <verlpp/data/rl_batch.hpp>

#include <ATen/ops/from_blob.h>

#include <algorithm>

namespace verlpp::reward {

data::Batch reencode_for_reward_model(const data::Batch& batch,
                                      const std::vector<std::vector<model::ChatMessage>>& prompts,
                                      const model::Tokenizer& policy_tokenizer, const std::string& eos_text,
                                      const RewardModelText& rm, int64_t max_length) {
  VERLPP_CHECK(rm.tokenizer != nullptr && rm.chat != nullptr, "the reward model's tokenizer and template are needed");
  VERLPP_CHECK(max_length >= 1, "max_length {} must be >= 1", max_length);
  const at::Tensor responses = batch.tensor(data::fields::kResponses).cpu().contiguous();
  const at::Tensor lengths = data::response_lengths(batch);  // the whole response, tool segments included
  const int64_t rows = batch.size(), width = responses.size(1);
  VERLPP_CHECK(int64_t(prompts.size()) == rows, "{} prompts for {} rows", prompts.size(), rows);
  std::vector<TokenIds> encoded;
  size_t longest = 1;
  for (int64_t row = 0; row < rows; ++row) {
    const TokenId* ids = responses.data_ptr<int64_t>() + row * width;
    std::string text = policy_tokenizer.decode(TokenIds(ids, ids + lengths.data_ptr<int64_t>()[row]), false);
    if (!eos_text.empty())
      for (size_t at = text.find(eos_text); at != std::string::npos; at = text.find(eos_text, at))
        text.erase(at, eos_text.size());
    std::vector<model::ChatMessage> chat = prompts[size_t(row)];
    chat.push_back({"assistant", text});
    model::ChatOptions options;
    options.add_generation_prompt = false;
    const std::string rendered = rm.chat->render(chat, options);
    TokenIds out = rm.tokenizer->encode(rendered, /*add_special_tokens=*/false);
    // A tokenizer without a symbol for some text drops it (as Hugging Face's does without an unk
    // token): the reward model would score another text, so this is refused, naming the row.
    const std::string back = rm.tokenizer->decode(out, false);
    if (back != rendered) {
      size_t first = 0;
      while (first < back.size() && first < rendered.size() && back[first] == rendered[first]) ++first;
      const size_t from = first < 20 ? 0 : first - 20;
      throw Error(rm.where,
                  fmt::format("row {}: its tokenizer ({}) cannot encode the text to score: from byte {}, '{}' comes "
                              "back as '{}'. Use a reward model whose vocabulary covers the policy's text,"
                              " or reward_model.model.input_tokenizer=null to score the policy's own tokens",
                              row, rm.tokenizer->origin(), from, rendered.substr(from, 60),
                              back.substr(std::min(from, back.size()), 60)));
    }
    for (TokenId id : out)
      if (id < 0 || id >= rm.vocab_size)
        throw Error(rm.where, fmt::format("row {}: its tokenizer gives id {}, outside the model's vocabulary of {}",
                                          row, id, rm.vocab_size));
    if (int64_t(out.size()) > max_length) out.resize(size_t(max_length));  // verl's truncation "right"
    longest = std::max(longest, out.size());
    encoded.push_back(std::move(out));
  }
  std::vector<int64_t> ids(size_t(rows) * longest, rm.pad_token_id), mask(size_t(rows) * longest, 0);
  for (int64_t row = 0; row < rows; ++row)
    for (size_t k = 0; k < encoded[size_t(row)].size(); ++k) {
      ids[size_t(row) * longest + k] = encoded[size_t(row)][k];
      mask[size_t(row) * longest + k] = 1;
    }
  const auto long_options = at::TensorOptions().dtype(at::kLong);
  const at::Tensor ids_t = at::from_blob(ids.data(), {rows, int64_t(longest)}, long_options).clone();
  const at::Tensor mask_t = at::from_blob(mask.data(), {rows, int64_t(longest)}, long_options).clone();
  const c10::Device device = batch.tensor(data::fields::kInputIds).device();
  data::Batch out;
  out.set(data::fields::kInputIds, ids_t.to(device));
  out.set(data::fields::kAttentionMask, mask_t.to(device));
  out.set(data::fields::kPositionIds, mask_t.cumsum(1).sub(1).clamp_min(0).to(device));
  return out;
}

}  // namespace verlpp::reward
