// Configs, safetensors and HF folders: parsing and its errors, the safetensors format (round
// trip of every dtype, sharding, truncated files and bad headers), and checkpoints (save ->
// load bit-exact, missing and mis-shaped tensors named in the error).
#include "model_test_util.hpp"

#include <verlpp/core/error.hpp>
#include <verlpp/model/checkpoint.hpp>
#include <verlpp/model/decoder.hpp>
#include <verlpp/model/safetensors.hpp>

#include <ATen/ops/arange.h>
#include <ATen/ops/equal.h>
#include <ATen/ops/randn.h>
#include <ATen/ops/zeros.h>

#include <fstream>
#include <sys/stat.h>
#include <unistd.h>

#include "../error_of.hpp"

using namespace verlpp::model;
using namespace verlpp::model::testing;
using Catch::Matchers::Contains;
using nlohmann::json;

namespace {

using verlpp::test::error_of;

void write_file(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), std::streamsize(bytes.size()));
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// A raw safetensors file from a header string and data bytes.
std::string raw_safetensors(const std::string& header, const std::string& data) {
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i) out[size_t(i)] = char((uint64_t(header.size()) >> (8 * i)) & 0xff);
  return out + header + data;
}

bool file_exists(const std::string& path) { return ::access(path.c_str(), F_OK) == 0; }

}  // namespace

TEST_CASE("config: each family parses with HF defaults and its own structure", "[model][config]") {
  ModelConfig q2 = tiny_config("Qwen2ForCausalLM");
  CHECK(q2.family == ModelFamily::kQwen2);
  CHECK(q2.head == ModelHead::kCausalLM);
  CHECK(q2.qkv_bias);
  CHECK_FALSE(q2.o_bias);
  CHECK_FALSE(q2.qk_norm);
  CHECK(q2.head_dim == 4);
  CHECK(q2.eos_token_ids == std::vector<int64_t>{2});

  ModelConfig q3 = tiny_config("Qwen3ForCausalLM");
  CHECK(q3.qk_norm);
  CHECK_FALSE(q3.qkv_bias);
  CHECK(q3.head_dim == 10);
  CHECK(q3.tie_word_embeddings);

  ModelConfig ll = tiny_config("LlamaForCausalLM");
  CHECK(ll.rope_scaling.type == RopeType::kLlama3);
  CHECK(ll.rope_scaling.original_max_position_embeddings == 100);
  CHECK(ll.qkv_bias);
  CHECK(ll.o_bias);
  CHECK(ll.mlp_bias);

  ModelConfig critic = tiny_config("Qwen2ForTokenClassification");
  CHECK(critic.head == ModelHead::kTokenClassification);
  CHECK(critic.num_labels == 1);
  CHECK(critic.score_bias);
  ModelConfig rm = tiny_config("LlamaForSequenceClassification");
  CHECK(rm.head == ModelHead::kSequenceClassification);
  CHECK_FALSE(rm.score_bias);

  // transformers 5.x layout: rope_parameters and dtype; eos as a list.
  json j = tiny_config_json("LlamaForCausalLM");
  j.erase("rope_scaling");
  j.erase("rope_theta");
  j.erase("torch_dtype");
  j["dtype"] = "bfloat16";
  j["eos_token_id"] = {2, 5};
  j["rope_parameters"] = {{"rope_type", "llama3"},   {"rope_theta", 500000.0},
                          {"factor", 32.0},          {"low_freq_factor", 1.0},
                          {"high_freq_factor", 4.0}, {"original_max_position_embeddings", 8192}};
  ModelConfig v5 = parse_model_config(j, "v5");
  CHECK(v5.rope_theta == 500000.0);
  CHECK(v5.rope_scaling.factor == 32.0);
  CHECK(v5.torch_dtype == "bfloat16");
  CHECK(v5.eos_token_ids == std::vector<int64_t>{2, 5});
  ModelConfig back = parse_model_config(to_hf_json(v5), "round trip");
  CHECK(back.rope_theta == 500000.0);
  CHECK(back.rope_scaling.type == RopeType::kLlama3);
  CHECK(back.torch_dtype == "bfloat16");
}

TEST_CASE("config: to_hf_json round-trips every interpreted field", "[model][config]") {
  for (const char* arch : {"Qwen2ForCausalLM", "Qwen3ForCausalLM", "LlamaForCausalLM", "Qwen2ForTokenClassification"}) {
    ModelConfig a = tiny_config(arch);
    ModelConfig b = parse_model_config(to_hf_json(a), "round trip");
    INFO(arch);
    CHECK(b.architecture == a.architecture);
    CHECK(b.hidden_size == a.hidden_size);
    CHECK(b.head_dim == a.head_dim);
    CHECK(b.num_key_value_heads == a.num_key_value_heads);
    CHECK(b.qkv_bias == a.qkv_bias);
    CHECK(b.o_bias == a.o_bias);
    CHECK(b.mlp_bias == a.mlp_bias);
    CHECK(b.tie_word_embeddings == a.tie_word_embeddings);
    CHECK(b.rope_scaling.type == a.rope_scaling.type);
    CHECK(b.rope_scaling.low_freq_factor == a.rope_scaling.low_freq_factor);
    CHECK(b.num_labels == a.num_labels);
    CHECK(b.initializer_range == a.initializer_range);
    CHECK(parameter_count(b) == parameter_count(a));
  }
}

TEST_CASE("config: errors name the file and the field", "[model][config]") {
  ScratchDir dir;
  auto load_with = [&](const json& j) {
    write_file(dir / "config.json", j.dump());
    return error_of([&] { load_model_config(dir.path); });
  };
  json j = tiny_config_json("Qwen2ForCausalLM");
  j["architectures"] = {"MistralForCausalLM"};
  std::string e = load_with(j);
  CHECK_THAT(e, Contains(dir / "config.json") && Contains("architectures") && Contains("MistralForCausalLM"));

  j = tiny_config_json("Qwen2ForCausalLM");
  j.erase("hidden_size");
  CHECK_THAT(load_with(j), Contains(dir / "config.json") && Contains("'hidden_size' is missing"));

  j = tiny_config_json("Qwen2ForCausalLM");
  j.erase("architectures");
  CHECK_THAT(load_with(j), Contains("'architectures' is missing"));

  j = tiny_config_json("Qwen2ForCausalLM");
  j["num_attention_heads"] = "six";
  CHECK_THAT(load_with(j), Contains("'num_attention_heads' must be an integer"));

  j = tiny_config_json("Qwen2ForCausalLM");
  j["num_key_value_heads"] = 4;
  CHECK_THAT(load_with(j), Contains("multiple of 'num_key_value_heads'"));

  j = tiny_config_json("LlamaForCausalLM");
  j["rope_scaling"] = {{"rope_type", "yarn"}, {"factor", 4.0}};
  CHECK_THAT(load_with(j), Contains("rope_scaling.rope_type") && Contains("yarn"));

  j = tiny_config_json("LlamaForCausalLM");
  j["rope_scaling"].erase("low_freq_factor");
  CHECK_THAT(load_with(j), Contains("rope_scaling.low_freq_factor"));

  j = tiny_config_json("Qwen2ForCausalLM");
  j["hidden_act"] = "gelu";
  CHECK_THAT(load_with(j), Contains("hidden_act") && Contains("gelu"));

  write_file(dir / "config.json", "{\"a\": " + std::string(100000, '[') + std::string(100000, ']') + "}");
  CHECK_THAT(error_of([&] { load_model_config(dir.path); }),
             Contains("config.json") && Contains("JSON nested deeper than 512"));
  write_file(dir / "config.json", "{ not json");
  CHECK_THAT(error_of([&] { load_model_config(dir.path); }), Contains("not valid JSON"));
  CHECK_THAT(error_of([&] { load_model_config(dir / "absent"); }), Contains("cannot open"));
}

TEST_CASE("config: parameter counts match the published models", "[model][config]") {
  // Qwen2.5-0.5B (tied, qkv bias) and Llama-3.2-1B (tied, GQA 32/8): the figures HF reports.
  json qwen = {{"architectures", {"Qwen2ForCausalLM"}},
               {"vocab_size", 151936},
               {"hidden_size", 896},
               {"intermediate_size", 4864},
               {"num_hidden_layers", 24},
               {"num_attention_heads", 14},
               {"num_key_value_heads", 2},
               {"tie_word_embeddings", true}};
  CHECK(parameter_count(parse_model_config(qwen, "qwen2.5-0.5b")) == 494032768);
  json llama = {{"architectures", {"LlamaForCausalLM"}},
                {"vocab_size", 128256},
                {"hidden_size", 2048},
                {"intermediate_size", 8192},
                {"num_hidden_layers", 16},
                {"num_attention_heads", 32},
                {"num_key_value_heads", 8},
                {"head_dim", 64},
                {"tie_word_embeddings", true}};
  CHECK(parameter_count(parse_model_config(llama, "llama-3.2-1b")) == 1235814400);
}

TEST_CASE("safetensors: every dtype round-trips bit for bit", "[model][safetensors]") {
  ScratchDir dir;
  std::vector<NamedTensor> tensors = {
      {"f32", at::randn({3, 5})},
      {"f32_transposed", at::randn({4, 3}).t()},  // non-contiguous input
      {"bf16", at::randn({7}).to(at::kBFloat16)},
      {"f16", at::randn({2, 3, 1}).to(at::kHalf)},
      {"f64", at::randn({3}).to(at::kDouble)},
      {"i64", at::arange(11, at::kLong)},
      {"i32", at::arange(5, at::kInt)},
      {"u8", at::arange(9, at::kByte)},
      {"bool", at::arange(6, at::kLong).remainder(2).to(at::kBool)},
      {"scalar", at::randn({})},
      {"empty", at::zeros({0, 3})},
  };
  write_safetensors(dir / "a.safetensors", tensors, {{"note", "test"}});
  SafetensorsFile file(dir / "a.safetensors");
  CHECK(file.metadata().at("format") == "pt");
  CHECK(file.metadata().at("note") == "test");
  REQUIRE(file.entries().size() == tensors.size());
  for (const auto& [name, t] : tensors) {
    INFO(name);
    at::Tensor back = file.tensor(name);
    CHECK(back.scalar_type() == t.scalar_type());
    CHECK(back.sizes() == t.sizes());
    CHECK(at::equal(back, t.contiguous()));
    CHECK(reinterpret_cast<uintptr_t>(back.data_ptr()) % back.element_size() == 0);
  }
  // The data section is a tight packing of the tensors, nothing more.
  uint64_t data = 0;
  for (const auto& [name, t] : tensors) data += uint64_t(t.numel() * t.element_size());
  struct stat st {};
  REQUIRE(::stat((dir / "a.safetensors").c_str(), &st) == 0);
  uint64_t header = 0;
  std::string bytes = read_file(dir / "a.safetensors");
  for (int i = 7; i >= 0; --i) header = (header << 8) | uint8_t(bytes[size_t(i)]);
  CHECK(header % 8 == 0);
  CHECK(uint64_t(st.st_size) == 8 + header + data);
  // Views outlive the file object (they keep the mapping).
  at::Tensor kept;
  {
    SafetensorsFile f2(dir / "a.safetensors");
    kept = f2.tensor("i64");
  }
  CHECK(at::equal(kept, at::arange(11, at::kLong)));
}

TEST_CASE("safetensors: sharded writing and reading through the index", "[model][safetensors]") {
  ScratchDir dir;
  std::vector<NamedTensor> tensors;
  for (int i = 0; i < 5; ++i) tensors.emplace_back("t" + std::to_string(i), at::randn({10, 10}));  // 400 bytes each
  auto written = write_safetensors_sharded(dir.path, tensors, 900);
  CHECK(written == std::vector<std::string>{"model-00001-of-00003.safetensors", "model-00002-of-00003.safetensors",
                                            "model-00003-of-00003.safetensors", "model.safetensors.index.json"});
  json index = json::parse(read_file(dir / "model.safetensors.index.json"));
  CHECK(index["metadata"]["total_size"] == 2000);
  CHECK(index["weight_map"].size() == 5);
  SafetensorsStore store(dir.path);
  CHECK(store.files().size() == 3);
  for (const auto& [name, t] : tensors) CHECK(at::equal(store.tensor(name), t));
  CHECK_THAT(error_of([&] { store.tensor("nope"); }), Contains("'nope' is missing"));

  // Rewriting unsharded replaces the shards (no stale files left to confuse a loader).
  written = write_safetensors_sharded(dir.path, tensors, 1 << 20);
  CHECK(written == std::vector<std::string>{"model.safetensors"});
  CHECK_FALSE(file_exists(dir / "model-00001-of-00003.safetensors"));
  CHECK_FALSE(file_exists(dir / "model.safetensors.index.json"));
  CHECK(SafetensorsStore(dir.path).names().size() == 5);

  // An index naming a tensor its shard lacks.
  write_safetensors_sharded(dir.path, tensors, 900);
  index["weight_map"]["ghost"] = "model-00001-of-00003.safetensors";
  write_file(dir / "model.safetensors.index.json", index.dump());
  CHECK_THAT(error_of([&] { SafetensorsStore s(dir.path); }),
             Contains("'ghost'") && Contains("missing from this shard"));
}

TEST_CASE("safetensors: truncated files and bad headers fail naming the file", "[model][safetensors]") {
  ScratchDir dir;
  const std::string path = dir / "x.safetensors";
  write_safetensors(path, {{"weight", at::randn({4, 4})}, {"bias", at::randn({4})}});
  const std::string good = read_file(path);
  auto open_error = [&](const std::string& bytes) {
    write_file(path, bytes);
    return error_of([&] { SafetensorsFile f(path); });
  };
  CHECK_THAT(open_error(""), Contains(path) && Contains("truncated"));
  CHECK_THAT(open_error(good.substr(0, 5)), Contains("truncated"));
  CHECK_THAT(open_error(good.substr(0, 20)), Contains("truncated") && Contains("header needs"));
  CHECK_THAT(open_error(good.substr(0, good.size() - 1)), Contains("truncated") && Contains("tensor '"));

  CHECK_THAT(open_error(raw_safetensors("{not json}   ", "")), Contains(path) && Contains("bad safetensors header"));
  CHECK_THAT(open_error(raw_safetensors("{\"x\":" + std::string(100000, '[') + std::string(100000, ']') + "}", "")),
             Contains(path) && Contains("JSON nested deeper than 512 levels"));
  CHECK_THAT(open_error(raw_safetensors("[1, 2]", "")), Contains("not a JSON object"));
  std::string huge(8, '\xff');
  CHECK_THAT(open_error(huge + "{}"), Contains("implausible"));
  CHECK_THAT(open_error(raw_safetensors(R"({"w": {"dtype": "F32", "shape": [2], "data_offsets": [0, 4]}})",
                                        std::string(8, '\0'))),
             Contains("tensor 'w'") && Contains("needs 8"));
  CHECK_THAT(open_error(raw_safetensors(R"({"w": {"dtype": "F8_E4M3", "shape": [2], "data_offsets": [0, 2]}})",
                                        std::string(2, '\0'))),
             Contains("tensor 'w'") && Contains("unsupported dtype 'F8_E4M3'"));
  CHECK_THAT(open_error(raw_safetensors(R"({"w": {"dtype": "F32", "shape": [-1], "data_offsets": [0, 4]}})",
                                        std::string(4, '\0'))),
             Contains("tensor 'w'") && Contains("shape"));
  CHECK_THAT(open_error(raw_safetensors(R"({"w": {"dtype": "F32", "shape": [1]}})", std::string(4, '\0'))),
             Contains("tensor 'w'") && Contains("data_offsets"));
  CHECK_THAT(open_error(raw_safetensors(R"({"w": {"dtype": "F32", "shape": [1], "data_offsets": [4, 0]}})",
                                        std::string(4, '\0'))),
             Contains("backwards"));
  // A valid hand-made file with an unpadded header and a misaligned tensor still reads right.
  std::string data(12, '\0');
  float value = 1.5f;
  std::memcpy(&data[2], &value, 4);
  write_file(path, raw_safetensors(R"({"p": {"dtype": "U8", "shape": [2], "data_offsets": [0, 2]},)"
                                   R"( "w": {"dtype": "F32", "shape": [1], "data_offsets": [2, 6]}})",
                                   data));
  SafetensorsFile odd(path);
  CHECK(odd.tensor("w").item<float>() == 1.5f);
}

TEST_CASE("checkpoint: init is seeded and save -> load is bit-exact", "[model][checkpoint]") {
  for (const char* arch : {"Qwen2ForCausalLM", "Qwen3ForCausalLM", "LlamaForCausalLM", "Qwen2ForTokenClassification",
                           "Qwen3ForSequenceClassification"}) {
    INFO(arch);
    ScratchDir dir;
    ModelConfig config = tiny_config(arch);
    DecoderLM a(config), same(config), other(config);
    a.init_weights(7);
    same.init_weights(7);
    other.init_weights(8);
    bool any_differs = false;
    for (size_t i = 0; i < a.named_parameters().size(); ++i) {
      CHECK(at::equal(a.named_parameters()[i].second, same.named_parameters()[i].second));
      any_differs |= !at::equal(a.named_parameters()[i].second, other.named_parameters()[i].second);
    }
    CHECK(any_differs);

    ScratchDir src;
    write_file(src / "tokenizer.json", R"({"model": {}})");
    write_file(src / "tokenizer_config.json", R"({"eos_token": "x"})");
    SaveOptions opts;
    opts.source_dir = src.path;
    auto written = save_pretrained(a, dir.path, opts);
    for (const char* f :
         {"config.json", "model.safetensors", "generation_config.json", "tokenizer.json", "tokenizer_config.json"})
      CHECK(file_exists(dir / f));
    CHECK(read_file(dir / "tokenizer.json") == R"({"model": {}})");
    json generation = json::parse(read_file(dir / "generation_config.json"));
    CHECK(generation["eos_token_id"] == 2);

    SafetensorsStore store(dir.path);
    std::vector<std::string> names;
    for (const auto& [name, p] : a.named_parameters()) names.push_back(name);
    std::sort(names.begin(), names.end());
    CHECK(store.names() == names);  // exactly the HF names; a tied lm_head is not written
    DecoderLM b = load_pretrained(dir.path);
    CHECK(b.config().architecture == arch);
    for (size_t i = 0; i < a.named_parameters().size(); ++i) {
      INFO(a.named_parameters()[i].first);
      CHECK(at::equal(a.named_parameters()[i].second, b.named_parameters()[i].second));
    }
    if (config.tie_word_embeddings && config.head == ModelHead::kCausalLM)
      CHECK(b.parameter("lm_head.weight").is_same(b.parameter("model.embed_tokens.weight")));
  }
}

TEST_CASE("checkpoint: bf16 and sharded saves load back exactly", "[model][checkpoint]") {
  ScratchDir dir;
  ModelConfig config = tiny_config("LlamaForCausalLM");
  DecoderLM fp32(config);
  fp32.init_weights(3);
  SaveOptions opts;
  opts.dtype = at::kBFloat16;
  opts.max_shard_bytes = 4096;
  auto written = save_pretrained(fp32, dir.path, opts);
  CHECK(file_exists(dir / "model.safetensors.index.json"));
  CHECK(std::count_if(written.begin(), written.end(), [](const std::string& f) { return f.rfind("model-", 0) == 0; }) >
        2);
  ModelConfig saved = load_model_config(dir.path);
  CHECK(saved.torch_dtype == "bfloat16");
  ModelOptions bf16;
  bf16.dtype = at::kBFloat16;
  DecoderLM b = load_pretrained(dir.path, bf16);
  for (size_t i = 0; i < fp32.named_parameters().size(); ++i)
    CHECK(at::equal(fp32.named_parameters()[i].second.to(at::kBFloat16), b.named_parameters()[i].second));
  // And bf16 -> bf16 again, unsharded: identical bytes per tensor.
  ScratchDir again;
  save_pretrained(b, again.path);
  SafetensorsStore s1(dir.path), s2(again.path);
  for (const std::string& name : s1.names()) CHECK(at::equal(s1.tensor(name), s2.tensor(name)));
}

TEST_CASE("checkpoint: a missing or mis-shaped tensor fails naming it", "[model][checkpoint]") {
  ScratchDir dir;
  ModelConfig config = tiny_config("Qwen2ForCausalLM");
  DecoderLM model(config);
  model.init_weights(1);
  std::vector<NamedTensor> tensors(model.named_parameters().begin(), model.named_parameters().end());
  const std::string victim = "model.layers.1.self_attn.k_proj.bias";

  std::vector<NamedTensor> missing;
  for (const auto& t : tensors)
    if (t.first != victim) missing.push_back(t);
  write_safetensors(dir / "model.safetensors", missing);
  DecoderLM target(config);
  std::string e = error_of([&] { load_weights(target, dir.path); });
  CHECK_THAT(e, Contains("'" + victim + "' is missing") && Contains(dir.path) && Contains("[8]"));

  std::vector<NamedTensor> misshaped = tensors;
  for (auto& t : misshaped)
    if (t.first == "model.layers.0.mlp.up_proj.weight") t.second = at::zeros({40, 23});
  write_safetensors(dir / "model.safetensors", misshaped);
  e = error_of([&] { load_weights(target, dir.path); });
  CHECK_THAT(e, Contains("'model.layers.0.mlp.up_proj.weight'") && Contains("[40, 23]") && Contains("[40, 24]") &&
                    Contains(dir / "model.safetensors"));

  // A critic starting from an actor checkpoint: the score head may be missing, lm_head is extra.
  write_safetensors(dir / "model.safetensors", tensors);
  DecoderLM critic(tiny_config("Qwen2ForTokenClassification"));
  CHECK_THAT(error_of([&] { load_weights(critic, dir.path); }), Contains("'score.weight' is missing"));
  LoadOptions lenient;
  lenient.allow_missing_prefixes = {"score."};
  LoadReport report = load_weights(critic, dir.path, lenient);
  CHECK(report.missing == std::vector<std::string>{"score.weight", "score.bias"});
  CHECK(report.unexpected == std::vector<std::string>{"lm_head.weight"});
  CHECK(at::equal(critic.parameter("model.layers.0.self_attn.q_proj.weight"),
                  model.parameter("model.layers.0.self_attn.q_proj.weight")));
}
