// Hugging Face model folders in and out: config.json + safetensors (+ generation_config.json
// and tokenizer files). Loading checks every parameter the config implies (missing or
// mis-shaped: an error naming the tensor, the file and both shapes); saving writes a folder
// transformers' from_pretrained loads as is.
#pragma once

#include <verlpp/model/decoder.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace verlpp::model {

struct LoadOptions {
  // Parameters that may be absent and keep their current values (e.g. {"score."} when a critic
  // starts from an actor checkpoint).
  std::vector<std::string> allow_missing_prefixes;
};

struct LoadReport {
  std::vector<std::string> loaded;      // parameter names filled from the checkpoint
  std::vector<std::string> missing;     // allowed-missing parameters left as they were
  std::vector<std::string> unexpected;  // checkpoint tensors the model has no use for
};

// Copies the weights at `path` (a folder, sharded or not, or one .safetensors file) into
// `model`, converting to the model's dtype and device.
LoadReport load_weights(DecoderLM& model, const std::string& path, const LoadOptions& options = {});

// config.json + weights of the HF folder `dir`.
DecoderLM load_pretrained(const std::string& dir, ModelOptions options = {}, const LoadOptions& load = {});

struct SaveOptions {
  std::optional<at::ScalarType> dtype;           // the dtype written; default: the model's
  uint64_t max_shard_bytes = uint64_t(5) << 30;  // above this, shard (HF's default, 5 GB)
  // A folder to copy tokenizer files and generation_config.json from ("" = none). Without a
  // generation_config.json there, one is written from the config's bos/eos/pad ids.
  std::string source_dir;
};

// Writes config.json, model.safetensors (or shards + index), generation_config.json and the
// source's tokenizer files into `dir` (created if needed). Returns the files written.
std::vector<std::string> save_pretrained(const DecoderLM& model, const std::string& dir,
                                         const SaveOptions& options = {});

// The tokenizer files copied by save_pretrained when present in the source folder.
const std::vector<std::string>& tokenizer_file_names();

}  // namespace verlpp::model
