// The `verlpp` command's subcommands; each file registers one with CLI11 and runs it.
#pragma once

#include <CLI/CLI.hpp>

namespace verlpp::apps {

// `verlpp plugins`: the table of loaded and rejected plugins.
void register_plugins_command(CLI::App& app);
// `verlpp demo`: a round trip of data through every loaded plugin.
void register_demo_command(CLI::App& app);
// `verlpp model info|logits|save`: inspect, run and save Hugging Face decoder checkpoints.
void register_model_command(CLI::App& app);
// `verlpp tokenize --tokenizer PATH [--file F]`: token ids of JSON strings, one array per line.
void register_tokenize_command(CLI::App& app);
// `verlpp data head FILE [--n N]`: the first rows of a JSONL or parquet dataset as JSON lines.
void register_data_command(CLI::App& app);
// `verlpp config --print [CONFIG.json] [key=value ...]`: the fully resolved configuration.
void register_config_command(CLI::App& app);

// `verlpp generate --model DIR --prompts F.jsonl [...]`: sample completions with the rollout engine.
void register_generate_command(CLI::App& app);
// `verlpp train [CONFIG.json] [key=value ...]`: RL training; no config = the embedded demo.
void register_train_command(CLI::App& app);
// `verlpp plan [CONFIG.json] [key=value ...] [--nproc N]`: a run's memory per rank and stage.
void register_plan_command(CLI::App& app);
// `verlpp train-rm CONFIG [key=value ...]`: reward-model training on preference pairs.
void register_train_rm_command(CLI::App& app);

}  // namespace verlpp::apps
