// PreferenceDataset and pair collation (see preference_data.hpp).
#include <verlpp/config/keys.hpp>
#include <verlpp/controller/preference_data.hpp>

#include <verlpp/controller/dataset.hpp>
#include <verlpp/core/error.hpp>
#include <verlpp/data/records.hpp>
#include <verlpp/train/reward_model_trainer.hpp>

#include <ATen/ops/from_blob.h>

#include <algorithm>

namespace verlpp::controller {
namespace {

using json = nlohmann::json;

const std::string& response_field(const json& row, const std::string& key, const std::string& where,
                                  const char* option) {
  if (!row.contains(key) || !row[key].is_string())
    throw Error(where, fmt::format("the row has no string '{}' ({}){}", key, option,
                                   row.contains(key) ? fmt::format(", got {}", row[key].dump()) : std::string()));
  return row[key].get_ref<const std::string&>();
}

// Applies the length rule to one side; true when it was cut.
bool fit(TokenIds& ids, const PreferenceDataOptions& o, const std::string& where, const char* side) {
  const size_t max_len = size_t(o.max_length);
  if (ids.size() <= max_len) return false;
  if (o.truncation == "left") {
    ids.erase(ids.begin(), ids.end() - std::ptrdiff_t(max_len));
  } else if (o.truncation == "right") {
    ids.resize(max_len);
  } else {
    throw Error(where, fmt::format("the {} side has {} tokens, more than rm_train.max_length = {} (raise it, or set "
                                   "rm_train.truncation to left or right)",
                                   side, ids.size(), o.max_length));
  }
  return true;
}

}  // namespace

std::string render_preference_side(const model::ChatTemplate& chat_template,
                                   const std::vector<model::ChatMessage>& prompt, const std::string& response) {
  std::vector<model::ChatMessage> chat = prompt;
  chat.push_back({"assistant", response});
  model::ChatOptions options;
  options.add_generation_prompt = false;
  return chat_template.render(chat, options);
}

PreferenceDataset PreferenceDataset::load(const std::vector<std::string>& files, const model::Tokenizer& tokenizer,
                                          const model::ChatTemplate& chat_template,
                                          const PreferenceDataOptions& options) {
  PreferenceDataset out;
  for (const std::string& file : files) {
    for (data::DataRecord& record : data::read_data_records(file)) {
      PreferencePair p;
      p.origin = record.origin;
      const json& row = record.row;
      if (!row.contains(options.prompt_key))
        throw Error(p.origin, fmt::format("the row has no '{}' (rm_train.prompt_key)", options.prompt_key));
      p.prompt = parse_prompt_messages(row[options.prompt_key], p.origin, options.prompt_key);
      p.chosen = response_field(row, options.chosen_key, p.origin, config::keys::kRmTrainChosenKey);
      p.rejected = response_field(row, options.rejected_key, p.origin, config::keys::kRmTrainRejectedKey);
      p.chosen_ids = tokenizer.encode(render_preference_side(chat_template, p.prompt, p.chosen));
      p.rejected_ids = tokenizer.encode(render_preference_side(chat_template, p.prompt, p.rejected));
      out.truncated_ += size_t(fit(p.chosen_ids, options, p.origin, "chosen"));
      out.truncated_ += size_t(fit(p.rejected_ids, options, p.origin, "rejected"));
      out.pairs_.push_back(std::move(p));
    }
  }
  if (out.pairs_.empty())
    throw Error(files.empty() ? std::string(config::keys::kRmTrainTrainFiles) : files.front(),
                "no preference pairs in the files");
  return out;
}

data::Batch collate_preference_pairs(const PreferenceDataset& dataset, const std::vector<size_t>& indices,
                                     TokenId pad_token_id) {
  VERLPP_CHECK(!indices.empty(), "no pairs to collate");
  size_t longest = 1;
  for (size_t i : indices) longest = std::max({longest, dataset[i].chosen_ids.size(), dataset[i].rejected_ids.size()});
  const int64_t rows = int64_t(indices.size()), t = int64_t(longest);
  data::Batch out;
  for (const bool chosen : {true, false}) {
    std::vector<int64_t> ids(size_t(rows * t), pad_token_id), mask(size_t(rows * t), 0);
    for (int64_t r = 0; r < rows; ++r) {
      const TokenIds& side = chosen ? dataset[indices[size_t(r)]].chosen_ids : dataset[indices[size_t(r)]].rejected_ids;
      VERLPP_CHECK(!side.empty(), "{}: an empty side", dataset[indices[size_t(r)]].origin);
      std::copy(side.begin(), side.end(), ids.begin() + r * t);
      std::fill(mask.begin() + r * t, mask.begin() + r * t + int64_t(side.size()), 1);
    }
    const auto long_options = at::TensorOptions().dtype(at::kLong);
    const at::Tensor ids_t = at::from_blob(ids.data(), {rows, t}, long_options).clone();
    const at::Tensor mask_t = at::from_blob(mask.data(), {rows, t}, long_options).clone();
    namespace f = train::pair_fields;
    out.set(chosen ? f::kChosenIds : f::kRejectedIds, ids_t);
    out.set(chosen ? f::kChosenMask : f::kRejectedMask, mask_t);
    out.set(chosen ? f::kChosenPositions : f::kRejectedPositions, mask_t.cumsum(1).sub(1).clamp_min(0));
  }
  return out;
}

}  // namespace verlpp::controller
