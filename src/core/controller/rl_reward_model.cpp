// The model-based reward (reward_model.enable), as verl's RewardModelWorker computes it: the
// reward model scores each prompt + response at its last valid token, either on the policy's
// tokens as they are or, with reward_model.model.input_tokenizer set (verl's default), on the
// conversation decoded with the policy's tokenizer and re-encoded with the reward model's own
// tokenizer and chat template (verl's _switch_chat_template); the score sits at the response's
// last valid token (verl's _expand_to_token_level).
#include "rl_state.hpp"

#include <verlpp/model/checkpoint.hpp>
#include <verlpp/train/reward_model.hpp>

#include <ATen/ops/from_blob.h>

#include <algorithm>

namespace verlpp::controller {
namespace {

// The reward model's input for `batch` with re-encoding: per row, the prompt's messages plus the
// response decoded (special tokens kept, the EOS text removed) as an assistant turn, rendered by
// the reward model's template without a generation prompt, encoded with its tokenizer, cut to
// reward_model.max_length (default: the batch's sequence length) from the right, right-padded.
Batch reencoded_batch(const RlTrainer::State& s, const Batch& batch) {
  const RewardModelSettings& r = s.settings.reward_model;
  const at::Tensor responses = batch.tensor(data::fields::kResponses).cpu().contiguous();
  const at::Tensor lengths = batch.tensor(data::fields::kResponseMask).sum(1).to(at::kLong).cpu().contiguous();
  const int64_t rows = batch.size(), width = responses.size(1);
  const int64_t max_length = r.max_length.value_or(batch.tensor(data::fields::kAttentionMask).size(1));
  const std::string eos = s.eos_ids.empty() ? std::string() : s.tokenizer->decode({s.eos_ids.front()});
  const auto& index = batch.column("index");
  const int64_t vocab = s.reward_model->config().vocab_size;
  std::vector<TokenIds> encoded;
  size_t longest = 1;
  for (int64_t row = 0; row < rows; ++row) {
    const TokenId* ids = responses.data_ptr<int64_t>() + row * width;
    std::string text = s.tokenizer->decode(TokenIds(ids, ids + lengths.data_ptr<int64_t>()[row]), false);
    if (!eos.empty())
      for (size_t at = text.find(eos); at != std::string::npos; at = text.find(eos, at)) text.erase(at, eos.size());
    std::vector<model::ChatMessage> chat = (*s.train_set)[index[size_t(row)].get<size_t>()].prompt;
    chat.push_back({"assistant", text});
    model::ChatOptions options;
    options.add_generation_prompt = false;
    const std::string rendered = s.rm_chat->render(chat, options);
    TokenIds out = s.rm_tokenizer->encode(rendered, /*add_special_tokens=*/false);
    // A tokenizer without a symbol for some text drops it (as Hugging Face's does without an unk
    // token): the reward model would score another text, so this is refused, naming the row.
    const std::string back = s.rm_tokenizer->decode(out, false);
    if (back != rendered) {
      size_t first = 0;
      while (first < back.size() && first < rendered.size() && back[first] == rendered[first]) ++first;
      const size_t from = first < 20 ? 0 : first - 20;
      throw Error(fmt::format("reward model (reward_model.model.path {})", r.path),
                  fmt::format("row {}: its tokenizer ({}) cannot encode the text to score: at byte {}, '{}' comes "
                              "back as '{}'. Use a reward model whose vocabulary covers the policy's text, or "
                              "reward_model.model.input_tokenizer=null to score the policy's own tokens",
                              row, s.rm_tokenizer->origin(), first, rendered.substr(from, 60),
                              back.substr(std::min(from, back.size()), 60)));
    }
    for (TokenId id : out)
      if (id < 0 || id >= vocab)
        throw Error(fmt::format("reward model (reward_model.model.path {})", r.path),
                    fmt::format("row {}: its tokenizer gives id {}, outside the model's vocabulary of {}", row, id,
                                vocab));
    if (int64_t(out.size()) > max_length) out.resize(size_t(max_length));  // verl's truncation "right"
    longest = std::max(longest, out.size());
    encoded.push_back(std::move(out));
  }
  std::vector<int64_t> ids(size_t(rows) * longest, s.rm_pad_id), mask(size_t(rows) * longest, 0);
  for (int64_t row = 0; row < rows; ++row)
    for (size_t k = 0; k < encoded[size_t(row)].size(); ++k) {
      ids[size_t(row) * longest + k] = encoded[size_t(row)][k];
      mask[size_t(row) * longest + k] = 1;
    }
  const auto long_options = at::TensorOptions().dtype(at::kLong);
  const at::Tensor ids_t = at::from_blob(ids.data(), {rows, int64_t(longest)}, long_options).clone();
  const at::Tensor mask_t = at::from_blob(mask.data(), {rows, int64_t(longest)}, long_options).clone();
  const c10::Device device = batch.tensor(data::fields::kInputIds).device();
  Batch out;
  out.set(data::fields::kInputIds, ids_t.to(device));
  out.set(data::fields::kAttentionMask, mask_t.to(device));
  out.set(data::fields::kPositionIds, mask_t.cumsum(1).sub(1).clamp_min(0).to(device));
  return out;
}

// The policy's own tokens (reward_model.model.input_tokenizer = null).
Batch policy_token_batch(const RlTrainer::State& s, const Batch& batch) {
  const at::Tensor& ids = batch.tensor(data::fields::kInputIds);
  const int64_t largest = ids.max().item<int64_t>(), vocab = s.reward_model->config().vocab_size;
  if (largest >= vocab)
    throw Error(fmt::format("reward model (reward_model.model.path {})", s.settings.reward_model.path),
                fmt::format("the policy's token id {} is outside the reward model's vocabulary of {}: with "
                            "reward_model.model.input_tokenizer=null both must share one tokenizer (set it to re-encode "
                            "the text with the reward model's tokenizer)",
                            largest, vocab));
  Batch out;
  for (const char* name : {data::fields::kInputIds, data::fields::kAttentionMask, data::fields::kPositionIds})
    out.set(name, batch.tensor(name));
  return out;
}

}  // namespace

void build_reward_model(RlTrainer::State& s) {
  const RewardModelSettings& r = s.settings.reward_model;
  const std::string where = fmt::format("reward_model.model.path ({})", r.path);
  const model::ModelConfig mc = model::load_model_config(r.path);
  train::check_reward_model_config(mc, where);
  model::ModelOptions options;
  // verl's reward-model worker runs in bf16; the CPU keeps fp32.
  options.dtype = s.device.is_cpu() ? at::kFloat : at::kBFloat16;
  options.device = s.device;
  options.forward = s.settings.paths.forward;
  s.reward_model = std::make_unique<model::DecoderLM>(model::load_pretrained(r.path, options));
  s.reward_model->set_requires_grad(false);
  if (r.input_tokenizer) {
    s.rm_tokenizer = model::Tokenizer::from_file(r.path);
    s.rm_chat = model::ChatTemplate::from_config_file(r.path);
    s.rm_pad_id = mc.pad_token_id.value_or(mc.eos_token_ids.empty() ? 0 : mc.eos_token_ids.front());
  } else if (s.tokenizer->vocab_size() > mc.vocab_size) {
    throw Error(where, fmt::format("the policy's tokenizer has {} ids but the reward model's vocabulary only {}: with "
                                   "reward_model.model.input_tokenizer=null it reads the policy's tokens as they "
                                   "are; set input_tokenizer to re-encode the text with the reward model's tokenizer",
                                   s.tokenizer->vocab_size(), mc.vocab_size));
  }
  s.message(fmt::format("reward model {} ({}, {:.2f}M parameters): {}", r.path, mc.architecture,
                        double(model::parameter_count(mc)) / 1e6,
                        r.input_tokenizer ? "responses re-encoded with its tokenizer and chat template"
                                          : "scores the policy's tokens as they are"));
}

void compute_rm_scores(RlTrainer::State& s, Batch& batch) {
  const RewardModelSettings& r = s.settings.reward_model;
  train::RewardModelOptions options;
  options.micro_batch_size = r.micro_batch_size_per_gpu;
  options.use_dynamic_bsz = r.use_dynamic_bsz;
  options.max_token_len = r.forward_max_token_len_per_gpu;
  const Batch input = s.rm_tokenizer ? reencoded_batch(s, batch) : policy_token_batch(s, batch);
  const at::Tensor scores = dispatch_rows(
      s, input, [&](const Batch& rows) { return train::reward_model_scores(*s.reward_model, rows, options); });
  batch.set(data::fields::kRmScores,
            train::token_level_rm_scores(batch.tensor(data::fields::kAttentionMask),
                                         batch.tensor(data::fields::kPositionIds), scores,
                                         batch.tensor(data::fields::kResponses).size(1)));
}

}  // namespace verlpp::controller
