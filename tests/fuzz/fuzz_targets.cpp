// The fuzz targets: every parser that reads a file a user gives (fuzz_driver.hpp). Each reads
// its input through the same entry point a run uses and goes on to use what it parsed (resolve
// and validate a config, tokenize a dataset, encode with a tokenizer, read every tensor).
#include "fuzz_driver.hpp"

#include <verlpp/tasks/arith_task.hpp>
#include <verlpp/config/config.hpp>
#include <verlpp/config/config_yaml.hpp>
#include <verlpp/controller/dataset.hpp>
#include <verlpp/config/run_settings.hpp>
#include <verlpp/data/parquet.hpp>
#include <verlpp/model/chat_template.hpp>
#include <verlpp/model/decoder.hpp>
#include <verlpp/model/model_config.hpp>
#include <verlpp/model/safetensors.hpp>
#include <verlpp/model/tokenizer.hpp>

#include <ATen/ops/arange.h>

#include <fstream>
#include <sstream>

namespace verlpp::fuzz {
namespace {

using json = nlohmann::json;

std::string source_file(const std::string& relative) {
  std::ifstream in(std::string(VERLPP_SOURCE_DIR) + "/" + relative, std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

// The bytes of a file the driver wrote (reading it as the parsers do is not what is tested here).
std::string source_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

const std::string kTiny = std::string(VERLPP_SOURCE_DIR) + "/examples/tiny";

const std::vector<std::string> kJsonTokens = {"{", "}", "[", "]", ":", ",", "\"", "\\", "${", "}}", "\"a\":"};

std::vector<std::string> with(std::vector<std::string> base, const std::vector<std::string>& more) {
  base.insert(base.end(), more.begin(), more.end());
  return base;
}

Target config_target() {
  Target t;
  t.name = "config";
  t.file_name = "run.json";
  t.seeds = [] {
    json small = {{"data", {{"train_batch_size", 8}, {"max_prompt_length", 16}}},
                  {"actor_rollout_ref",
                   {{"rollout", {{"n", 4}, {"tensor_model_parallel_size", 1}}},
                    {"actor", {{"ppo_mini_batch_size", 4}, {"ppo_micro_batch_size_per_gpu", 2}}}}},
                  {"trainer", {{"total_training_steps", "${data.train_batch_size}"}}}};
    return std::vector<std::string>{source_file("examples/arith/grpo_tiny.json"),
                                    source_file("examples/gsm8k/grpo_qwen2.5_0.5b.json"),
                                    source_file("examples/gsm8k/ppo_qwen2.5_0.5b.json"), small.dump()};
  };
  t.run_one = [](const std::string& folder) {
    config::Config c = config::Config::from_file(folder + "/run.json");
    c.resolve();
    config::parse_run_settings(c, 1, 1);
  };
  t.dictionary = with(kJsonTokens, {"\"data\"", "\"trainer\"", "\"actor_rollout_ref\"", "\"rollout\"", "\"n\"",
                                    "\"algorithm\"", "\"adv_estimator\"", "\"verlpp\"", "${trainer.default_local_dir}",
                                    "\"train_batch_size\"", "\"critic\"", "\"enable\""});
  return t;
}

Target dataset_target() {
  Target t;
  t.name = "dataset";
  t.file_name = "train.jsonl";
  t.seeds = [] {
    tasks::ArithTaskOptions task;
    task.sft_count = task.train_count = task.val_count = 3;
    std::string rows;
    for (const json& row : tasks::make_arith_splits(task).train) rows += row.dump() + "\n";
    json plain = {{"data_source", "gsm8k"},
                  {"prompt", "What is 2+2?"},
                  {"reward_model", {{"style", "rule"}, {"ground_truth", "4"}}},
                  {"extra_info", {{"index", 0}}}};
    return std::vector<std::string>{rows, plain.dump() + "\n\n" + plain.dump() + "\n"};
  };
  t.run_one = [](const std::string& folder) {
    static const model::Tokenizer tokenizer = model::Tokenizer::from_file(kTiny + "/tokenizer.json");
    static const model::ChatTemplate chat = model::ChatTemplate::from_config_file(kTiny + "/tokenizer_config.json");
    controller::DatasetOptions options;
    options.max_prompt_length = 64;
    controller::PromptDataset::load({folder + "/train.jsonl"}, tokenizer, chat, options);
  };
  t.dictionary = with(kJsonTokens, {"\"prompt\"", "\"role\"", "\"content\"", "\"user\"", "\"data_source\"",
                                    "\"reward_model\"", "\"ground_truth\"", "\n", "<|im_start|>", "<|im_end|>"});
  return t;
}

Target tokenizer_target() {
  Target t;
  t.name = "tokenizer";
  t.file_name = "tokenizer.json";
  t.seeds = [] { return std::vector<std::string>{source_file("examples/tiny/tokenizer.json")}; };
  t.run_one = [](const std::string& folder) {
    model::Tokenizer tokenizer = model::Tokenizer::from_file(folder + "/tokenizer.json");
    const auto ids = tokenizer.encode("37+58= <|im_start|>user\n héllo 12345", true);
    tokenizer.decode(ids, /*skip_special_tokens=*/false);
    tokenizer.decode(ids, /*skip_special_tokens=*/true);
  };
  t.dictionary = with(kJsonTokens, {"\"model\"", "\"vocab\"", "\"merges\"", "\"added_tokens\"", "\"normalizer\"",
                                    "\"pre_tokenizer\"", "\"post_processor\"", "\"decoder\"", "\"type\"", "\"BPE\"",
                                    "\"ByteLevel\"", "\"Sequence\"", "\"TemplateProcessing\"", "\"special\"", "\"id\"",
                                    "\"Split\"", "\"pattern\"", "\"Regex\"", "\"NFC\""});
  return t;
}

Target safetensors_target() {
  Target t;
  t.name = "safetensors";
  t.file_name = "model.safetensors";
  t.seeds = [] {
    char folder_template[] = "/tmp/verlpp-fuzz-seed-XXXXXX";
    const std::string path = std::string(::mkdtemp(folder_template)) + "/seed.safetensors";
    model::write_safetensors(path,
                             {{"a.weight", at::arange(12, at::kFloat).reshape({3, 4})},
                              {"b.bias", at::arange(5, at::kFloat).to(at::kBFloat16)},
                              {"c.ids", at::arange(3, at::kLong)},
                              {"d.half", at::arange(6, at::kFloat).to(at::kHalf).reshape({2, 3})}},
                             {{"note", "seed"}});
    std::ifstream in(path, std::ios::binary);
    std::ostringstream bytes;
    bytes << in.rdbuf();
    std::remove(path.c_str());
    return std::vector<std::string>{bytes.str()};
  };
  t.run_one = [](const std::string& folder) {
    model::SafetensorsFile file(folder + "/model.safetensors");
    for (const model::SafetensorsEntry& e : file.entries()) file.tensor(e.name).sum();
  };
  t.dictionary = with(kJsonTokens, {"\"dtype\"", "\"shape\"", "\"data_offsets\"", "\"F32\"", "\"BF16\"", "\"I64\"",
                                    "\"F16\"", "\"__metadata__\"", std::string("\0\0\0\0\0\0\0\0", 8)});
  return t;
}

Target model_config_target() {
  Target t;
  t.name = "model_config";
  t.file_name = "config.json";
  t.seeds = [] {
    json qwen2 = json::parse(source_file("examples/tiny/config.json"));
    json llama = qwen2, qwen3 = qwen2;
    llama["architectures"] = {"LlamaForCausalLM"};
    llama["model_type"] = "llama";
    llama["rope_scaling"] = {{"rope_type", "llama3"},
                             {"factor", 8.0},
                             {"low_freq_factor", 1.0},
                             {"high_freq_factor", 4.0},
                             {"original_max_position_embeddings", 256}};
    qwen3["architectures"] = {"Qwen3ForCausalLM"};
    qwen3["model_type"] = "qwen3";
    qwen3["head_dim"] = 32;
    return std::vector<std::string>{qwen2.dump(2), llama.dump(), qwen3.dump()};
  };
  t.run_one = [](const std::string& folder) { model::parameter_count(model::load_model_config(folder)); };
  t.dictionary =
      with(kJsonTokens, {"\"num_hidden_layers\"", "\"hidden_size\"", "\"vocab_size\"", "\"rope_scaling\"",
                         "\"head_dim\"", "\"num_key_value_heads\"", "\"architectures\"", "\"eos_token_id\"",
                         "\"torch_dtype\"", "\"tie_word_embeddings\"", "\"max_position_embeddings\"", "\"id2label\""});
  return t;
}

// Parquet files as arrow-rs writes them (tests/data/parquet_fixtures): the footer's Thrift, page
// headers, levels, dictionary indices, the DELTA encodings and three codecs, then each row written
// out as JSON (which fails on text that is not UTF-8).
Target parquet_target() {
  Target t;
  t.name = "parquet";
  t.file_name = "data.parquet";
  t.seeds = [] {
    std::vector<std::string> seeds;
    for (const char* name : {"letters.parquet", "verl_default.parquet", "verl_zstd_plain_v2.parquet",
                             "verl_uncompressed_dict_v1.parquet", "verl_gzip_plain_v1.parquet"})
      seeds.push_back(source_file(std::string("tests/data/parquet_fixtures/files/") + name));
    return seeds;
  };
  t.run_one = [](const std::string& folder) {
    data::read_parquet_info(folder + "/data.parquet");
    for (const json& row : data::read_parquet(folder + "/data.parquet")) row.dump();
  };
  // Thrift compact field headers (i32, i64, binary, list, struct; stop), RLE run headers, magic.
  t.dictionary = {"PAR1",
                  std::string("\0", 1),
                  "\x15",
                  "\x16",
                  "\x18",
                  "\x19",
                  "\x1c",
                  "\x26",
                  "\x2c",
                  std::string("\x15\x00", 2),
                  "\x15\x04",
                  "\x15\x06",
                  "\x03",
                  "\x7f",
                  "\xff\xff\xff\x7f",
                  "\x80\x80\x80\x80\x10"};
  return t;
}

Target config_yaml_target() {
  Target t;
  t.name = "config_yaml";
  t.file_name = "run.yaml";
  t.seeds = [] {
    const std::string valid_run =
        "data:\n  train_batch_size: 8\n  max_prompt_length: 16\nactor_rollout_ref:\n  rollout: {n: 4, "
        "tensor_model_parallel_size: 1}\n"
        "  actor:\n    ppo_mini_batch_size: 4\n    ppo_micro_batch_size_per_gpu: 2\n    optim: {lr: 1e-6}\n";
    return std::vector<std::string>{
        "hydra:\n  searchpath: [file://verl/trainer/config]\ndefaults:\n  - ppo_trainer\n  - _self_\n" + valid_run,
        // Free-form YAML under a section verlpp accepts with no effect (vLLM's engine arguments).
        "data:\n  train_batch_size: 8\n  max_prompt_length: 16\nactor_rollout_ref:\n  rollout:\n    n: 4\n    "
        "tensor_model_parallel_size: 1\n"
        "    engine_kwargs:\n      vllm:\n        base: &b {x: 1, y: 0x1F}\n"
        "        merged: {<<: *b, y: 1:30}\n        list: &l [yes, ~, .inf, 0755, 1_000, 'q', \"d\"]\n"
        "        copy: *l\n        ref: ${oc.select:data.max_prompt_length,1}\n        rel: ${.merged.x}\n"
        "        text: |\n          block\n        folded: >\n          a\n          b\n"
        "  actor:\n    ppo_mini_batch_size: 4\n    ppo_micro_batch_size_per_gpu: 2\n    optim: {lr: 1e-6}\n"
        "  model:\n    use_remove_padding: True\n"};
  };
  t.run_one = [](const std::string& folder) {
    config::yaml_to_json(source_text(folder + "/run.yaml"), "run.yaml");
    config::Config c = config::Config::from_file(folder + "/run.yaml");
    c.resolve();
    config::parse_run_settings(c, 1, 1);
  };
  t.dictionary = {":",    ": ",        "- ",     "\n  ",        "[",         "]",      "{",
                  "}",    ",",         "&a ",    "*a",          "<<: ",      "!!str ", "!!int ",
                  "'",    "\"",        "|\n",    ">\n",         "~",         "null",   "yes",
                  "1e-6", ".inf",      "0x1F",   "1:30",        "---\n",     "? ",     "${oc.select:",
                  "${.",  "defaults:", "_self_", "ppo_trainer", "_target_: "};
  return t;
}

// One override per line, applied to the defaults in order, then resolved and validated.
Target override_target() {
  Target t;
  t.name = "override";
  t.file_name = "overrides.txt";
  t.seeds = [] {
    return std::vector<std::string>{
        "data.train_batch_size=8\nactor_rollout_ref.actor.ppo_mini_batch_size=4\n"
        "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=2\nactor_rollout_ref.rollout.n=2\n"
        "algorithm.adv_estimator=grpo\nactor_rollout_ref.model.use_remove_padding=True\n"
        "actor_rollout_ref.actor.optim.lr=1e-6\ntrainer.logger=console\n",
        "data.train_batch_size=8\nactor_rollout_ref.actor.ppo_mini_batch_size=4\n"
        "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=2\nactor_rollout_ref.rollout.n=2\n"
        "data.train_files=['/d/a.parquet','/d/b.parquet']\n+actor_rollout_ref.model.override_config.x={a: [1, 2.5, "
        "null], b: \"s,t\"}\n++trainer.project_name=p\n~actor_rollout_ref.model.override_config.x\n"
        "trainer.experiment_name=${trainer.project_name}_${oc.select:data.seed,0}\n"};
  };
  t.run_one = [](const std::string& folder) {
    config::Config c = config::Config::defaults();
    std::istringstream lines(source_text(folder + "/overrides.txt"));
    for (std::string line; std::getline(lines, line);) c.apply_override(line);
    c.resolve();
    config::parse_run_settings(c, 1, 1);
  };
  t.dictionary = {
      "=", "+",    "++",   "~",    "[",  "]",   "{",     "}",       ",",   ":", "'",  "\"",           "\\",  "${",
      "}", "null", "True", "1e-6", ".5", "inf", "1_000", "choice(", "a/b", "@", ".0", "${oc.select:", "${.", "\\,"};
  return t;
}

}  // namespace

std::vector<Target> all_targets() {
  return {config_target(),       dataset_target(),     tokenizer_target(), safetensors_target(),
          model_config_target(), config_yaml_target(), override_target(),  parquet_target()};
}

}  // namespace verlpp::fuzz
